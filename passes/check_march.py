"""check-march: mark the quantized ops a march cannot run as CPU (float) islands.

For every op on dequantized codes, the limits of ``passes/march.py`` are checked;
an op that breaks one gets ``hbir.device = "cpu"`` and ``hbir.cpu_reason``, and the
lowering passes leave it float between its dequantize and quantize.

Before::

    %y = hbir.conv2d %x, %w : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> ...

with ``%x`` and ``%w`` both dequantized from si16, after (nash-e)::

    %y = hbir.conv2d %x, %w {hbir.device = "cpu", hbir.cpu_reason = "input and
        weight cannot both be int16 on nash-e"} : ...

Ops within the limits are not touched. An unknown march is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class CheckMarchPass(ModulePass):
    """Mark ops the march cannot run (hbir.device = "cpu", with the reason)."""

    name = "check-march"

    march: str = "nash-e"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from hbir.passes.check_march_impl import CheckMarchPassImpl

        CheckMarchPassImpl(self.march).apply(ctx, op)
