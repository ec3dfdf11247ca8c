"""Implementation of the ``convert`` pass (passes/convert.py),
imported when the pass runs so that ``hbir-opt --help`` stays light."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from hbir.passes.check_march_impl import CheckMarchPassImpl as CheckMarchPass
from hbir.passes.convert_elementwise_impl import (
    ConvertElementwisePassImpl as ConvertElementwisePass,
)
from hbir.passes.convert_gemm_impl import ConvertGemmPassImpl as ConvertGemmPass
from hbir.passes.convert_lut_impl import ConvertLutPassImpl as ConvertLutPass
from hbir.passes.convert_pool_impl import ConvertPoolPassImpl as ConvertPoolPass
from hbir.passes.expand_fake_quant_impl import (
    ExpandFakeQuantPassImpl as ExpandFakeQuantPass,
)
from hbir.passes.fold_requantize_impl import (
    FoldRequantizePassImpl as FoldRequantizePass,
)
from hbir.passes.march import get_march
from hbir.passes.sink_dequantize_impl import (
    SinkDequantizePassImpl as SinkDequantizePass,
)


def sub_passes(march: str) -> list[ModulePass]:
    return [
        ExpandFakeQuantPass(),
        CheckMarchPass(march),
        SinkDequantizePass(),
        ConvertGemmPass(),
        ConvertElementwisePass(),
        ConvertPoolPass(),
        ConvertLutPass(),
        SinkDequantizePass(),
        FoldRequantizePass(),
    ]


@dataclass(frozen=True)
class ConvertPassImpl(ModulePass):
    """Convert fake-quant HBIR to fixed point for a march (the convert phase)."""

    name = "convert"

    march: str = "nash-e"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        get_march(self.march)
        for sub in sub_passes(self.march):
            sub.apply(ctx, op)
        op.attributes["hbir.march"] = StringAttr(self.march)
