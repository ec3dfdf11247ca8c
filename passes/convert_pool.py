"""convert-pool: average pool, global average pool, mean, sum and NPU bilinear
resize to integer form.

global_avg_pool2d / reduce_mean / reduce_sum: an exact si32 sum of the codes
(``hbir.reduce_sum``) and one requantization by ``s_in / (n * s_out)``: the
division by the element count and the rescale are one rounding.

avg_pool2d (window counts may differ at the borders): the codes are shifted left
onto a fine grid (``x * 2**F`` in si32, exact; F as large as keeps every window
sum within the 32-bit accumulator, ``numerics.avg_pool_fine_bits``: 22 for an int8
2x2 window, 20 for 3x3), the integer ``hbir.avg_pool2d`` divides each window sum
once (half to even, error at most 2**-F input LSB), and one requantization by
``s_in * 2**-F / s_out`` ends it. A window too large for any fine grid stays
float.

Before::

    %m = hbir.reduce_mean %x {dims = array<i64: 1>} : tensor<2x8xf32> ->
        tensor<2xf32>
    %q = qnt.quantize %m {scales = array<f32: 0.25>, ...} : ... -> tensor<2xsi8>

After (``%x`` dequantized from ``%xq`` at 0.5)::

    %0 = hbir.reduce_sum %xq {dims = array<i64: 1>} : tensor<2x8xsi8> ->
        tensor<2xsi32>
    %q = qnt.requantize %0 {multiplier = array<i64: 1073741824>, shift =
        array<i64: 32>} : tensor<2xsi32> -> tensor<2xsi8>

resize2d with the NPU's bilinear or bicubic weights (``weight_bits``): the exact si32
weighted sum of the codes (units of ``2**-(2 * weight_bits)``) and one
requantization by ``s_in * 2**-(2 * weight_bits) / s_out``.

Ops whose input is not dequantized codes or whose result is not quantized stay
float.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import shape_of, si
from hbir.passes import fixed_point as fp
from hbir.runtime import numerics, op_table


def _reduction(op: Operation) -> tuple[list[int], bool, int] | None:
    """(dims, keepdim, element count) of a sum-like op."""
    shape = shape_of(op.input)
    if isinstance(op, hbir.GlobalAvgPool2dOp):
        return [2, 3], True, shape[2] * shape[3]
    dims = [d % len(shape) for d in op.dims.get_values()]
    if not dims:
        return None
    count = int(np.prod([shape[d] for d in dims]))
    divisor = 1 if isinstance(op, hbir.ReduceSumOp) else count
    return dims, bool(op.keepdim.value.data), divisor


_POOLS = hbir.ops_lowered_as(op_table.POOL)


def _exact_mean(codes, dims, keepdim, out, shift: int, rounding: str):
    """``sum(codes << shift) / n`` with the model's rounding, in output codes."""
    fine = qnt.RequantizeOp(codes, si(32), [1], [-shift], rounding=rounding)
    mean = hbir.ReduceMeanOp(fine.output, dims, keepdim, out)
    mean.rounding = StringAttr(rounding)
    return [fine, mean]


class LowerPool(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        npu_resize = isinstance(op, hbir.Resize2dOp) and op.weight_bits is not None
        if not (isinstance(op, _POOLS) or npu_resize) or fp.is_cpu(op):
            return
        if not hbir.is_float(op.results[0].type):
            return
        codes = fp.codes_of(op.input)
        if codes is None or not codes.per_tensor or codes.bits not in (8, 16):
            return
        rounding = fp.rounding_of(op)
        consumer = fp.consumer_of(op.results[0], rounding)
        if consumer is None:
            return
        s_in = np.float64(codes.scales[0])
        if isinstance(op, hbir.AvgPool2dOp):
            kernel = op.kernel.get_values()
            fine_bits = numerics.avg_pool_fine_bits(codes.bits, kernel[0] * kernel[1])
            if fine_bits is None:  # no fine grid keeps the window sums in 32 bits
                return
            new, acc, real = self._avg_pool(op, codes, fine_bits, s_in, rounding)
            real = real * consumer.inv_scale
        elif isinstance(op, hbir.GridSampleOp):
            grid = fp.codes_of(op.grid)
            if grid is None or not grid.per_tensor or grid.bits not in (8, 16):
                return
            sample = hbir.GridSampleOp(
                codes.codes,
                grid.codes,
                op.mode.data,
                op.padding_mode.data,
                bool(op.align_corners.value.data),
                float(grid.scales[0]),
                si(32),
            )
            new, acc = [sample], sample.output
            real = s_in * 2.0 ** (-2 * numerics.BILINEAR_BITS) * consumer.inv_scale
        elif npu_resize:
            out = hbir.with_shape(op.results[0], shape_of(op.results[0]), si(32))
            resize = hbir.Resize2dOp(
                codes.codes,
                op.size.get_values(),
                op.mode.data,
                op.align_corners.value.data,
                None if op.scale is None else op.scale.get_values(),
                op.weight_bits.value.data,
                si(32),
            )
            new, acc = [resize], resize.output
            real = s_in * 2.0 ** (-2 * op.weight_bits.value.data) * consumer.inv_scale
        else:
            dims, keepdim, divisor = _reduction(op)
            out = hbir.with_shape(op.results[0], shape_of(op.results[0]), si(32))
            shift = numerics.exact_mean_shift(
                s_in * consumer.inv_scale, divisor, codes.bits
            )
            if shift is not None:
                new = _exact_mean(codes.codes, dims, keepdim, out, shift, rounding)
                acc, real = new[-1].results[0], np.float64(1.0)
            else:
                total = hbir.ReduceSumOp(codes.codes, dims, keepdim, out)
                new, acc = [total], total.output
                real = s_in / divisor * consumer.inv_scale
        real = np.array([real])
        tail = fp.finish(acc, real, consumer, rounding, fp.fuses_requantize(op))
        fp.replace_quantized(rewriter, op, consumer, new + tail, tail[-1].results[0])

    @staticmethod
    def _avg_pool(op: hbir.AvgPool2dOp, codes: fp.Codes, bits: int, s_in, rounding):
        fine = qnt.RequantizeOp(codes.codes, si(32), [1], [-bits], rounding=rounding)
        pool = hbir.AvgPool2dOp(
            fine.output,
            op.kernel.get_values(),
            op.stride.get_values(),
            op.padding.get_values(),
            op.ceil_mode.value.data,
            op.count_include_pad.value.data,
        )
        return [fine, pool], pool.output, s_in * 2.0**-bits


@dataclass(frozen=True)
class ConvertPoolPass(ModulePass):
    """Lower quantized pools and means: exact sums, one requantization."""

    name = "convert-pool"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LowerPool(), apply_recursively=False).rewrite_module(op)
