"""convert-pool: average pool, global average pool, mean and sum to integer form.

global_avg_pool2d / reduce_mean / reduce_sum: an exact si32 sum of the codes
(``hbir.reduce_sum``) and one requantization by ``s_in / (n * s_out)``: the
division by the element count and the rescale are one rounding.

avg_pool2d (window counts may differ at the borders): the codes are shifted left
onto a fine grid (``x * 2**F`` in si32, exact), the integer ``hbir.avg_pool2d``
divides each window sum once (half to even, error at most 2**-F input LSB), and
one requantization by ``s_in * 2**-F / s_out`` ends it.

Before::

    %m = hbir.reduce_mean %x {dims = array<i64: 1>} : tensor<2x8xf32> ->
        tensor<2xf32>
    %q = qnt.quantize %m {scales = array<f32: 0.25>, ...} : ... -> tensor<2xsi8>

After (``%x`` dequantized from ``%xq`` at 0.5)::

    %0 = hbir.reduce_sum %xq {dims = array<i64: 1>} : tensor<2x8xsi8> ->
        tensor<2xsi32>
    %q = qnt.requantize %0 {multiplier = array<i64: 1073741824>, shift =
        array<i64: 32>} : tensor<2xsi32> -> tensor<2xsi8>

Ops whose input is not dequantized codes or whose result is not quantized stay
float.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class ConvertPoolPass(ModulePass):
    """Lower quantized pools and means: exact sums, one requantization."""

    name = "convert-pool"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from hbir.passes.convert_pool_impl import ConvertPoolPassImpl

        ConvertPoolPassImpl().apply(ctx, op)
