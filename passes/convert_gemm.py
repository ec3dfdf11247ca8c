"""convert-gemm: conv2d / conv_transpose2d / linear / matmul to integer form.

``quantize(relu/clip*(gemm(dequantize(x), dequantize(w), bias)))`` becomes an
integer gemm (si8/si16 operands, exact si32 accumulator, si32 bias) and one
requantization: ``y = clamp(round(acc * s_x * s_w[c] * fl32(1/s_y)), lo, hi)`` with
the multiplier from ``numerics.quantize_multiplier`` of that float64 product and one
rounding (the model's mode).

Bias: a dequantized int32 bias on the grid ``numerics.bias_scale(s_x, s_w)``
(consistency level 2), when that grid is exactly ``s_x * s_w[c]``, is the gemm's
si32 bias operand, exact. A float bias (the default level, where fake quantization
adds it in float) is quantized on a grid ``2**F`` times finer than the accumulator,
``F`` as large as int32 headroom allows (up to 16): the accumulator is shifted left
by ``F`` (exact), the bias codes are added, and the requantization divides by
``2**F`` in the same single rounding. Rounding the bias to the accumulator grid
itself would put up to half an accumulator LSB of error before the final rounding
(about 0.04 % of outputs off by 1 LSB per layer, compounding through a network);
the finer grid divides that by ``2**F``. Without requantize fusion (consistency
level 0) every bias takes this separate add.

Accumulator: every sum must fit the march's 32-bit accumulator for any input.
Where the operand widths and the reduction length allow a larger sum (int16 x
int8 beyond 511 terms), the wider operand's codes are first divided by ``2**s``
(``numerics.gemm_operand_shifts``, a ``qnt.requantize`` with multiplier 1 and shift
``s``) and the accumulator's grid grows by ``2**s``; the fixed-point forward of
QAT (``numerics.fixed_point_gemm``) computes the same, so nothing saturates and
qat.bc and quantized.bc stay bit-identical.

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

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
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


def _operands(op: Operation) -> tuple[SSAValue, SSAValue, SSAValue | None]:
    if isinstance(op, hbir.MatmulOp):
        return op.lhs, op.rhs, None
    return op.input, op.weight, op.bias


def _out_channels(op: Operation) -> tuple[int, int]:
    """(output channel axis, count) of the accumulator."""
    out = shape_of(op.results[0])
    axis = 1 if isinstance(op, hbir.Conv2dOp | hbir.ConvTranspose2dOp) else len(out) - 1
    return axis, out[axis]


def weight_scales(op: Operation, w: fp.Codes) -> np.ndarray | None:
    """s_w per output channel (or one value), None if the axis does not fit."""
    if w.per_tensor:
        return w.scales
    if isinstance(op, hbir.Conv2dOp | hbir.LinearOp) and w.axis == 0:
        return w.scales
    if isinstance(op, hbir.ConvTranspose2dOp) and w.axis == 1:
        _, channels = _out_channels(op)
        return np.resize(w.scales, channels)  # channel g*C/g + j uses s_w[j]
    if isinstance(op, hbir.MatmulOp) and w.axis == len(shape_of(w.codes)) - 1:
        return w.scales
    return None


def bias_operand(
    bias: SSAValue | None,
    s_x: np.float32,
    s_w: np.ndarray,
    channels: int,
    shifted: bool = False,
) -> dict | None:
    """The bias as ``gemm_requantization`` takes it: ``{"bias": real values}`` or
    ``{"bias_codes": exact int32 codes}``; ``{}`` without a bias, None when the
    bias is neither a float constant nor dequantized constant codes.

    A dequantized int32 bias on the grid exact QAT uses (consistency level 2,
    ``numerics.bias_scale``) is exact when that float32 grid is the accumulator's
    exact scale ``s_x * s_w[c]`` and the operands are not ``shifted``
    (``numerics.gemm_operand_shifts``: the accumulator then has a coarser grid).
    """
    if bias is None:
        return {}
    codes = fp.codes_of(bias)
    if codes is None:
        values = fp.float_constant(bias)
        return None if values is None else {"bias": values}
    if not isinstance(codes.codes.owner, hbir.ConstantOp):
        return None
    ints = hbir.dense_array(codes.codes.owner.value).astype(np.int64)
    scales = np.broadcast_to(codes.scales.astype(np.float64), (channels,))
    grid = np.broadcast_to(numerics.bias_scale(s_x, s_w), (channels,))
    acc_scale = np.float64(s_x) * np.broadcast_to(s_w.astype(np.float64), (channels,))
    if (
        not shifted
        and codes.bits == 32
        and np.array_equal(scales, grid)
        and np.array_equal(grid, acc_scale)
    ):
        return {"bias_codes": ints}
    return {"bias": ints.astype(np.float64) * scales}


def reduction_terms(op: Operation, x_shape, w_shape) -> int:
    """How many products each accumulator sums."""
    if isinstance(op, hbir.ConvTranspose2dOp):
        return w_shape[0] // op.groups.value.data * w_shape[2] * w_shape[3]
    if isinstance(op, hbir.MatmulOp):
        return x_shape[-1]
    return int(np.prod(w_shape[1:]))


def _integer_op(op: Operation, x: SSAValue, w: SSAValue, b: SSAValue | None):
    if isinstance(op, hbir.Conv2dOp):
        return hbir.Conv2dOp(
            x,
            w,
            b,
            op.stride.get_values(),
            op.padding.get_values(),
            op.dilation.get_values(),
            op.groups.value.data,
        )
    if isinstance(op, hbir.ConvTranspose2dOp):
        return hbir.ConvTranspose2dOp(
            x,
            w,
            b,
            op.stride.get_values(),
            op.padding.get_values(),
            op.output_padding.get_values(),
            op.dilation.get_values(),
            op.groups.value.data,
        )
    if isinstance(op, hbir.LinearOp):
        return hbir.LinearOp(x, w, b)
    return hbir.MatmulOp(x, w)


GEMMS = hbir.ops_lowered_as(op_table.GEMM)


class LowerGemm(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, GEMMS) or fp.is_cpu(op):
            return
        if not hbir.is_float(op.results[0].type):
            return
        x_in, w_in, bias = _operands(op)
        x, w = fp.codes_of(x_in), fp.codes_of(w_in)
        if x is None or w is None or not x.per_tensor:
            return
        if x.bits not in (8, 16) or w.bits not in (8, 16):
            return
        s_w = weight_scales(op, w)
        rounding = fp.rounding_of(op)
        consumer = fp.consumer_of(op.results[0], rounding)
        if s_w is None or consumer is None:
            return
        axis, channels = _out_channels(op)
        terms = reduction_terms(op, shape_of(x.codes), shape_of(w.codes))
        try:
            shifts = numerics.gemm_operand_shifts(terms, x.bits, w.bits)
        except ValueError as e:
            raise fp.FixedPointError(
                op, fp.where(op), f"has no integer form: {e}"
            ) from None
        b = bias_operand(bias, x.scales[0], s_w, channels, shifted=any(shifts))
        if b is None:
            return
        req = numerics.gemm_requantization(
            x.scales[0],
            s_w,
            consumer.scale,
            terms=terms,
            x_bits=x.bits,
            w_bits=w.bits,
            channels=channels,
            mode=rounding,
            **b,
        )
        fuse = fp.fuses_requantize(op)
        new: list[Operation] = []
        b_value = None
        if req.fused_bias and fuse:
            new.append(fp.int_constant(req.bias, 32))
            b_value = new[-1].output
        x_codes, w_codes = x.codes, w.codes
        if req.x_shift:
            new.append(self._shift(x_codes, x.bits, req.x_shift, rounding))
            x_codes = new[-1].output
        if req.w_shift:
            new.append(self._shift(w_codes, w.bits, req.w_shift, rounding))
            w_codes = new[-1].output
        gemm = _integer_op(op, x_codes, w_codes, b_value)
        new.append(gemm)
        acc = gemm.results[0]
        if req.bias is not None and b_value is None:
            # The bias on a finer grid, added after the gemm (see module doc).
            new += self._add_bias(acc, req.bias, req.fine, axis, rounding)
            acc = new[-1].results[0]
        tail = fp.finish_with(
            acc, req.multiplier, req.shift, consumer, rounding, fuse, axis
        )
        fp.replace_quantized(rewriter, op, consumer, new + tail, tail[-1].results[0])

    @staticmethod
    def _shift(codes: SSAValue, bits: int, n: int, rounding: str) -> Operation:
        """``round(codes / 2**n)``: an operand that would overflow the accumulator
        loses its low bits (``numerics.gemm_operand_shifts``)."""
        return qnt.RequantizeOp(codes, si(bits), [1], [n], rounding=rounding)

    @staticmethod
    def _add_bias(acc, codes, fine: int, axis: int, rounding: str) -> list[Operation]:
        ops: list[Operation] = []
        if fine:
            shifted = qnt.RequantizeOp(acc, si(32), [1], [-fine], rounding=rounding)
            ops.append(shifted)
            acc = shifted.output
        rank = len(shape_of(acc))
        const = fp.int_constant(
            np.asarray(codes).reshape([-1] + [1] * (rank - 1 - axis)), 32
        )
        ops += [const, hbir.AddOp(acc, const.output)]
        return ops


@dataclass(frozen=True)
class ConvertGemmPass(ModulePass):
    """Lower quantized conv / linear / matmul to integer ops + requantize."""

    name = "convert-gemm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LowerGemm(), apply_recursively=False).rewrite_module(op)
