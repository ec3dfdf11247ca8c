"""convert-elementwise: quantized add / sub / maximum / minimum / mul to integer form.

add / sub: each operand is rescaled onto one power-of-two grid ``2**e`` in si32
(``round(a * s_a / 2**e)``), the si32 values are added, and the sum is requantized
once to the output grid. ``e`` is the coarsest grid on which every operand scale
is an integer multiple (then the rescale is exact: always for power-of-two scales),
or, when that grid would overflow int32, the finest grid with 2 bits of headroom
(then each operand is off by at most ``2**(e-1)``, below ``2**-21`` of an int8
output LSB for int8 operands). A float constant operand (an epsilon, a layer-norm
bias) is quantized onto that grid. So the result differs from fake quantization
only where the exact sum lies within that error of a rounding tie: at most 1 LSB.
maximum / minimum: the same grid, the larger / smaller si32 term, requantized once
(exact where the rescale is: requantization is monotonic).

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
from xdsl.rewriter import InsertPoint

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import shape_of, si, tensor_type
from hbir.passes import fixed_point as fp
from hbir.runtime import numerics


def _out_axis(codes: fp.Codes, out_rank: int) -> int | None:
    if codes.per_tensor:
        return None
    return codes.axis + out_rank - len(shape_of(codes.codes))


@dataclass
class _Operand:
    codes: fp.Codes | None
    constant: np.ndarray | None


def _operand(value: SSAValue) -> _Operand | None:
    codes = fp.codes_of(value)
    if codes is not None and codes.bits <= 32:
        return _Operand(codes, None)
    values = fp.float_constant(value)
    return None if values is None else _Operand(None, values)


def _channel_axes_ok(operands: list[_Operand], out_rank: int) -> bool:
    axes = {
        _out_axis(o.codes, out_rank)
        for o in operands
        if o.codes is not None and not o.codes.per_tensor
    }
    return len(axes) <= 1


def _magnitude_bits(c: fp.Codes) -> int:
    """A bound ``|codes| <= 2**b``: from the values of a constant, from the operand
    widths of an integer product, else from the element type."""
    owner = c.codes.owner
    if isinstance(owner, hbir.ConstantOp):
        values = hbir.dense_array(owner.value).astype(np.int64)
        return int(np.max(np.abs(values), initial=1)).bit_length()
    if isinstance(owner, hbir.MulOp) and all(
        isinstance(v.owner, hbir.CastOp) for v in owner.operands
    ):
        widths = [
            tensor_type(v.owner.input).element_type.width.data for v in owner.operands
        ]
        return sum(w - 1 for w in widths)
    return c.bits - 1


def grid_exponent(operands: list[_Operand]) -> int:
    """The power-of-two grid 2**e that add / sub accumulate on (see module doc)."""
    coded = [o.codes for o in operands if o.codes is not None]
    absmax = sum(
        float(np.max(np.abs(o.constant), initial=0.0))
        for o in operands
        if o.constant is not None
    )
    return numerics.add_grid_exponent(
        [c.scales for c in coded], [_magnitude_bits(c) for c in coded], absmax
    )


def _on_grid(
    o: _Operand, e: int, out_rank: int, rounding: str
) -> tuple[list[Operation], SSAValue]:
    """An operand as si32 values on the grid 2**e."""
    if o.constant is not None:
        const = fp.int_constant(
            numerics.constant_on_add_grid(o.constant, e, rounding), 32
        )
        return [const], const.output
    c = o.codes
    real = c.scales.astype(np.float64) * 2.0**-e
    if np.all(real == 1.0):
        if c.bits == 32:
            return [], c.codes
        cast = fp.widen(c.codes)
        return [cast], cast.output
    req = fp.requantize(c.codes, real, si(32), rounding, c.axis)
    return [req], req.output


# computed on one add grid: the sum, difference, larger or smaller of the terms
_ADD_GRID_OPS = hbir.AddOp | hbir.SubOp | hbir.MaximumOp | hbir.MinimumOp


class LowerAddSub(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, _ADD_GRID_OPS) or fp.is_cpu(op):
            return
        if not hbir.is_float(op.output.type):
            return
        operands = [_operand(op.lhs), _operand(op.rhs)]
        if any(o is None for o in operands) or all(o.codes is None for o in operands):
            return
        out_rank = len(shape_of(op.output))
        if not _channel_axes_ok(operands, out_rank):
            return
        rounding = fp.rounding_of(op)
        consumer = fp.consumer_of(op.output, rounding)
        e = grid_exponent(operands)
        new: list[Operation] = []
        values = []
        for o in operands:
            ops, v = _on_grid(o, e, out_rank, rounding)
            new += ops
            values.append(v)
        result_type = hbir.with_shape(op.output, shape_of(op.output), si(32))
        total = type(op)(values[0], values[1], result_type)
        new.append(total)
        self._finish(rewriter, op, consumer, new, total.output, 2.0**e, rounding)

    @staticmethod
    def _finish(rewriter, op, consumer, new, acc, acc_scale, rounding, axis=None):
        if consumer is not None:
            real = np.array([acc_scale * consumer.inv_scale])
            tail = fp.finish(acc, real, consumer, rounding, fp.fuses_requantize(op))
            fp.replace_quantized(
                rewriter, op, consumer, new + tail, tail[-1].results[0]
            )
            return
        # Not quantized: the exact si32 result on its grid, dequantized.
        element = tensor_type(op.results[0]).element_type
        scales = np.atleast_1d(np.asarray(acc_scale, np.float32))
        if scales.size > 1 and axis is None:
            axis = len(shape_of(op.results[0])) - 1
        if not np.all(np.isfinite(scales)) or np.any(scales <= 0):
            return
        dq = qnt.DequantizeOp(acc, scales, None, axis, element)
        for n in new:
            n.location = op.location
            rewriter.insert(n, InsertPoint.before(op))
        dq.location = op.location
        rewriter.replace(op, dq)


def _constant_codes(values: np.ndarray) -> fp.Codes | None:
    """A float constant factor as si16 codes (``numerics.constant_factor``); None
    if all zero."""
    factor = numerics.constant_factor(values)
    if factor is None:
        return None
    codes, scale = factor
    const = fp.int_constant(codes, 16)
    return fp.Codes(const.output, np.array([scale], np.float32), None, 16)


class LowerMul(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, hbir.MulOp) or fp.is_cpu(op):
            return
        if not hbir.is_float(op.output.type):
            return
        operands = [_operand(op.lhs), _operand(op.rhs)]
        if any(o is None for o in operands) or all(o.codes is None for o in operands):
            return
        new: list[Operation] = []
        codes = []
        for o in operands:
            c = o.codes
            if c is None:
                c = _constant_codes(o.constant)
                if c is None:
                    return
                new.append(c.codes.owner)
            if c.bits > 16:
                return
            codes.append(c)
        out_rank = len(shape_of(op.output))
        axes = [_out_axis(c, out_rank) for c in codes]
        if all(a is not None for a in axes):
            return
        axis = next((a for a in axes if a is not None), None)
        scale = codes[0].scales.astype(np.float64) * codes[1].scales.astype(np.float64)
        widened = [fp.widen(c.codes) for c in codes]
        new += widened
        result_type = hbir.with_shape(op.output, shape_of(op.output), si(32))
        product = hbir.MulOp(widened[0].output, widened[1].output, result_type)
        new.append(product)
        rounding = fp.rounding_of(op)
        consumer = fp.consumer_of(op.output, rounding)
        if consumer is not None:
            real = scale * consumer.inv_scale
            tail = fp.finish(
                product.output, real, consumer, rounding, fp.fuses_requantize(op), axis
            )
            fp.replace_quantized(
                rewriter, op, consumer, new + tail, tail[-1].results[0]
            )
            return
        LowerAddSub._finish(
            rewriter, op, None, new, product.output, scale, rounding, axis
        )


@dataclass(frozen=True)
class ConvertElementwisePass(ModulePass):
    """Lower quantized add / sub / mul: common grid or product, one requantize."""

    name = "convert-elementwise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LowerMul(), apply_recursively=False).rewrite_module(op)
        PatternRewriteWalker(LowerAddSub(), apply_recursively=False).rewrite_module(op)
