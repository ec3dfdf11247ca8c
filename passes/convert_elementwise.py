"""convert-elementwise: quantized add / sub / mul to integer form.

add / sub: each operand is rescaled onto one power-of-two grid ``2**e`` in si32
(``round(a * s_a / 2**e)``), the si32 values are added, and the sum is requantized
once to the output grid. ``e`` is the coarsest grid on which every operand scale
is an integer multiple (then the rescale is exact: always for power-of-two scales),
or, when that grid would overflow int32, the finest grid with 2 bits of headroom
(then each operand is off by at most ``2**(e-1)``, below ``2**-21`` of an int8
output LSB for int8 operands). A float constant operand (an epsilon, a layer-norm
bias) is quantized onto that grid. So the result differs from fake quantization
only where the exact sum lies within that error of a rounding tie: at most 1 LSB.

mul: the integer product of the widened codes in si32 (exact: at most 2**30),
requantized once by ``s_a * s_b / s_y``. A float constant factor becomes codes
``round(c / s_c)`` with ``s_c = max|c| / 2**14`` (a scalar is exact).

Before::

    %z = hbir.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %q = qnt.quantize %z {scales = array<f32: 0.5>, ...} : ... -> tensor<4xsi8>

After (``%a``, ``%b`` dequantized from ``%aq`` at 0.25 and ``%bq`` at 0.125)::

    %0 = qnt.requantize %aq {multiplier = array<i64: 1073741824>, shift =
        array<i64: 29>} : tensor<4xsi8> -> tensor<4xsi32>
    %1 = hbir.cast %bq : tensor<4xsi8> -> tensor<4xsi32>
    %2 = hbir.add %0, %1 : (tensor<4xsi32>, tensor<4xsi32>) -> tensor<4xsi32>
    %q = qnt.requantize %2 {multiplier = array<i64: 1073741824>, shift =
        array<i64: 32>} : tensor<4xsi32> -> tensor<4xsi8>

A product that is not quantized becomes ``dequantize`` of the si32 product at
``fl32(s_a * s_b)``. Anything else (float operands, per-channel scales along an
axis that does not broadcast) stays float.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class ConvertElementwisePass(ModulePass):
    """Lower quantized add / sub / mul: common grid or product, one requantize."""

    name = "convert-elementwise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from hbir.passes.convert_elementwise_impl import ConvertElementwisePassImpl

        ConvertElementwisePassImpl().apply(ctx, op)
