"""convert-gemm: conv2d / conv_transpose2d / linear / matmul to integer form.

``quantize(relu/clip*(gemm(dequantize(x), dequantize(w), bias)))`` becomes an
integer gemm (si8/si16 operands, exact si32 accumulator, si32 bias) and one
requantization: ``y = clamp(round(acc * s_x * s_w[c] * fl32(1/s_y)), lo, hi)`` with
the multiplier from ``numerics.quantize_multiplier`` of that float64 product and one
rounding (the model's mode).

Bias: a dequantized int32 bias at exactly ``fl32(s_x) * fl32(s_w[c])`` (consistency
level 2) is the gemm's si32 bias operand, exact. A float bias (the default level,
where fake quantization adds it in float) is quantized on a grid ``2**F`` times
finer than the accumulator, ``F`` as large as int32 headroom allows (up to 16):
the accumulator is shifted left by ``F`` (exact), the bias codes are added, and
the requantization divides by ``2**F`` in the same single rounding. Rounding the
bias to the accumulator grid itself would put up to half an accumulator LSB of
error before the final rounding (about 0.04 % of outputs off by 1 LSB per layer,
compounding through a network); the finer grid divides that by ``2**F``.
Without requantize fusion (consistency level 0) every bias takes this separate
add.

Before::

    %x = qnt.dequantize %xq {scales = array<f32: 0.5>, ...} : ... -> tensor<1x4xf32>
    %w = qnt.dequantize %wq {scales = array<f32: 0.25, 0.125>, ..., axis = 0 : i64}
    %y = hbir.linear %x, %w bias(%b) : (...) -> tensor<1x2xf32>
    %r = hbir.relu %y : tensor<1x2xf32>
    %q = qnt.quantize %r {scales = array<f32: 0.0625>, ...} : ... -> tensor<1x2xsi8>

After::

    %0 = hbir.constant dense<[...]> : tensor<2xsi32>
    %1 = hbir.linear %xq, %wq bias(%0) : (...) -> tensor<1x2xsi32>
    %q = qnt.requantize %1 {multiplier = array<i64: 1073741824, 1073741824>,
        shift = array<i64: 29, 30>, axis = 1 : i64, clip = array<i64: 0, 127>} :
        tensor<1x2xsi32> -> tensor<1x2xsi8>

A gemm whose operands are not dequantized codes, whose result is not quantized,
or that check-march marked for the CPU stays float.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class ConvertGemmPass(ModulePass):
    """Lower quantized conv / linear / matmul to integer ops + requantize."""

    name = "convert-gemm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from hbir.passes.convert_gemm_impl import ConvertGemmPassImpl

        ConvertGemmPassImpl().apply(ctx, op)
