"""sink-dequantize: move dequantization past ops that only move or select codes.

``op(dequantize(q))`` becomes ``dequantize(op(q))`` for reshape, transpose, slice,
split, zero padding, max pool, reduce max, nearest resize and concat of one grid
(dequantization is monotone, so max selects the same element); a float-to-float
cast folds into the dequantize's result type (exact for codes up to 16 bits). A
quantize of a concat is pushed into the concat's inputs (quantization is
elementwise), so each input is requantized to the output grid by
``fold-requantize``. Selection runs on codes too (they are ordered as their
values): top-k (values dequantized, indices as they are), argmax / argmin,
max pool indices, gather, index_select, a write into a zero canvas
(``index_copy``) or into zeros at max pool indices (``max_unpool2d``), comparisons
(codes of one grid, integer thresholds for a constant, both scales for two grids)
and ``select`` (a quantize pushed into its two values); a quantize of indices cast
to float at scale 1 is an integer cast. Every rewrite computes the same numbers.

Before::

    %d = qnt.dequantize %q {scales = array<f32: 0.5>, zeros = array<i64: 0>} :
        tensor<2x8xsi8> -> tensor<2x8xf32>
    %r = hbir.reshape %d : tensor<2x8xf32> -> tensor<16xf32>

After::

    %0 = hbir.reshape %q : tensor<2x8xsi8> -> tensor<16xsi8>
    %r = qnt.dequantize %0 {scales = array<f32: 0.5>, zeros = array<i64: 0>} :
        tensor<16xsi8> -> tensor<16xf32>

Per-channel dequantizations move only through transposes and shape-preserving
reshapes; ops marked for the CPU (``hbir.device = "cpu"``) are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import shape_of, tensor_type
from hbir.passes import fixed_point as fp
from hbir.runtime import selection

# Ops whose integer form moves or selects codes: op class -> rebuild(op, codes).
_MOVERS = {
    hbir.ReshapeOp: lambda op, q: hbir.ReshapeOp(q, shape_of(op.output)),
    hbir.TransposeOp: lambda op, q: hbir.TransposeOp(q, op.perm.get_values()),
    hbir.FlipOp: lambda op, q: hbir.FlipOp(q, op.dims.get_values()),
    hbir.SliceOp: lambda op, q: hbir.SliceOp(
        q, op.begin.get_values(), op.end.get_values(), op.step.get_values()
    ),
    hbir.PadOp: lambda op, q: hbir.PadOp(
        q, op.low.get_values(), op.high.get_values(), 0.0
    ),
    hbir.MaxPool2dOp: lambda op, q: hbir.MaxPool2dOp(
        q,
        op.kernel.get_values(),
        op.stride.get_values(),
        op.padding.get_values(),
        op.dilation.get_values(),
        op.ceil_mode.value.data,
    ),
    hbir.ReduceMaxOp: lambda op, q: hbir.ReduceMaxOp(
        q, op.dims.get_values(), op.keepdim.value.data
    ),
    hbir.ReduceMinOp: lambda op, q: hbir.ReduceMinOp(
        q, op.dims.get_values(), op.keepdim.value.data
    ),
    hbir.Resize2dOp: lambda op, q: hbir.Resize2dOp(
        q,
        op.size.get_values(),
        "nearest",
        False,
        None if op.scale is None else op.scale.get_values(),
    ),
    hbir.MaxUnpool2dOp: lambda op, q: hbir.MaxUnpool2dOp(
        q, op.indices, op.size.get_values()
    ),
    hbir.GatherOp: lambda op, q: hbir.GatherOp(q, op.index, op.dim.value.data),
    hbir.IndexSelectOp: lambda op, q: hbir.IndexSelectOp(
        q, op.index, op.dim.value.data
    ),
}


def _movable(op: Operation, codes: fp.Codes) -> bool:
    if fp.is_cpu(op) or not fp.keeps_grid(op):
        return False
    if codes.per_tensor:
        return True
    if isinstance(op, hbir.TransposeOp):
        return True
    return isinstance(op, hbir.ReshapeOp) and shape_of(op.input) == shape_of(op.output)


def _axis_after(op: Operation, axis: int | None) -> int | None:
    if axis is None or not isinstance(op, hbir.TransposeOp):
        return axis
    return list(op.perm.get_values()).index(axis)


def _dequantize(op: Operation, codes: fp.Codes, value, axis) -> qnt.DequantizeOp:
    element = tensor_type(op.results[0]).element_type
    dq = qnt.DequantizeOp(value, codes.scales, None, axis, element)
    dq.location = op.location
    return dq


class SinkThroughMover(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        rebuild = _MOVERS.get(type(op))
        if rebuild is None:
            return
        codes = fp.codes_of(op.operands[0])
        if codes is None or not _movable(op, codes):
            return
        moved = rebuild(op, codes.codes)
        moved.location = op.location
        dq = _dequantize(op, codes, moved.results[0], _axis_after(op, codes.axis))
        rewriter.replace(op, [moved, dq])


class SinkThroughSplit(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hbir.SplitOp, rewriter: PatternRewriter) -> None:
        codes = fp.codes_of(op.input)
        if codes is None or not codes.per_tensor or fp.is_cpu(op):
            return
        split = hbir.SplitOp(codes.codes, op.sizes.get_values(), op.dim.value.data)
        split.location = op.location
        dqs = [_dequantize(op, codes, r, None) for r in split.results]
        rewriter.replace(op, [split, *dqs], [d.output for d in dqs])


class SinkThroughTopk(RewritePattern):
    """topk(dequantize(q)) -> (dequantize(values of topk(q)), its indices): codes
    are ordered as their values (one positive scale), equal ones as equal."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hbir.TopkOp, rewriter: PatternRewriter) -> None:
        codes = fp.codes_of(op.input)
        if codes is None or not codes.per_tensor or fp.is_cpu(op):
            return
        topk = hbir.TopkOp(
            codes.codes, op.k.value.data, op.dim.value.data, op.largest.value.data
        )
        topk.location = op.location
        dq = _dequantize(op, codes, topk.values, None)
        rewriter.replace(op, [topk, dq], [dq.output, topk.indices])


class SinkThroughIndexCopy(RewritePattern):
    """index_copy(canvas, idx, dequantize(q)) -> dequantize(index_copy(canvas
    codes, idx, q)) for a constant canvas on q's grid (a zero canvas)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: hbir.IndexCopyOp, rewriter: PatternRewriter
    ) -> None:
        codes = fp.codes_of(op.source)
        values = fp.float_constant(op.input)
        if codes is None or not codes.per_tensor or fp.is_cpu(op) or values is None:
            return
        on_grid = values / codes.scales[0]
        lo, hi = -(1 << (codes.bits - 1)), (1 << (codes.bits - 1)) - 1
        if not np.all(
            (on_grid == np.round(on_grid)) & (on_grid >= lo) & (on_grid <= hi)
        ):
            return
        constant = fp.int_constant(on_grid, codes.bits)
        constant.location = op.input.owner.location
        new = hbir.IndexCopyOp(
            constant.output, op.index, codes.codes, op.dim.value.data
        )
        new.location = op.location
        rewriter.replace(op, [constant, new, _dequantize(op, codes, new.output, None)])


_FLIPPED = {"gt": "lt", "ge": "le", "lt": "gt", "le": "ge", "eq": "eq", "ne": "ne"}


class CompareOnCodes(RewritePattern):
    """A comparison of quantized values -> of their codes: as they are on one
    grid, against integer thresholds for a constant (``compare_thresholds``),
    with both scales (``fl32(q * s)``) on two grids."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hbir.CompareOp, rewriter: PatternRewriter) -> None:
        if fp.is_cpu(op) or not hbir.is_float(op.lhs.type):
            return
        kind, lhs, rhs = op.kind.data, op.lhs, op.rhs
        if fp.codes_of(lhs) is None:  # a constant first: flip the comparison
            kind, lhs, rhs = _FLIPPED[kind], rhs, lhs
        a, b = fp.codes_of(lhs), fp.codes_of(rhs)
        if a is None or not a.per_tensor:
            return
        new: list[Operation] = []
        if b is not None:
            if not b.per_tensor:
                return
            same = a.scales[0] == b.scales[0] and a.bits == b.bits
            scales = None if same else (float(a.scales[0]), float(b.scales[0]))
            compare = hbir.CompareOp(a.codes, b.codes, kind, scales)
        else:
            values = fp.float_constant(rhs)
            if values is None:
                return
            kind, t = selection.compare_thresholds(kind, values, a.scales[0], a.bits)
            threshold = fp.int_constant(t, 32)
            threshold.location = op.location
            new.append(threshold)
            compare = hbir.CompareOp(a.codes, threshold.output, kind)
        compare.location = op.location
        rewriter.replace(op, [*new, compare])


class SelectCodes(RewritePattern):
    """select(mask, dequantize(qa), dequantize(qb)) on one grid -> dequantize(
    select(mask, qa, qb))."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hbir.SelectOp, rewriter: PatternRewriter) -> None:
        a, b = fp.codes_of(op.lhs), fp.codes_of(op.rhs)
        if a is None or b is None or fp.is_cpu(op):
            return
        if not (a.per_tensor and b.per_tensor) or a.scales[0] != b.scales[0]:
            return
        if tensor_type(a.codes).element_type != tensor_type(b.codes).element_type:
            return
        select = hbir.SelectOp(op.mask, a.codes, b.codes)
        select.location = op.location
        rewriter.replace(op, [select, _dequantize(op, a, select.output, None)])


class QuantizeIntoSelect(RewritePattern):
    """quantize(select(mask, a, b)) -> select(mask, quantize(a), quantize(b)): each
    value onto the output grid (a requantization of codes, as the QAT module
    rescales them), then a selection of codes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: qnt.QuantizeOp, rewriter: PatternRewriter) -> None:
        select = op.input.owner
        if not isinstance(select, hbir.SelectOp) or fp.is_cpu(select):
            return
        if len(list(select.output.uses)) != 1 or op.axis is not None:
            return
        element = tensor_type(op.output).element_type
        quantized = []
        for v in (select.lhs, select.rhs):
            q = qnt.QuantizeOp(
                v,
                element,
                op.scales.get_values(),
                op.zeros.get_values(),
                None,
                op.narrowRange.value.data,
                op.rounding.data,
            )
            q.location = op.location
            quantized.append(q)
        new = hbir.SelectOp(select.mask, *(q.output for q in quantized))
        new.location = select.location
        rewriter.replace(op, [*quantized, new])
        rewriter.erase(select)


class QuantizeIndices(RewritePattern):
    """quantize(cast(indices to float)) on the grid of scale 1 -> the indices
    cast to the codes' type (saturating: the fake quant's clamp)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: qnt.QuantizeOp, rewriter: PatternRewriter) -> None:
        cast = op.input.owner
        if not isinstance(cast, hbir.CastOp) or not hbir.is_int(cast.input.type):
            return
        if list(op.scales.get_values()) != [1.0] or any(op.zeros.get_values()):
            return
        element = tensor_type(op.output).element_type
        codes = hbir.CastOp(cast.input, element)
        codes.location = op.location
        rewriter.replace(op, codes)


class SelectOnCodes(RewritePattern):
    """argmax / argmin of dequantize(q) -> of q (the same index)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: hbir.ArgExtremeOp, rewriter: PatternRewriter
    ) -> None:
        codes = fp.codes_of(op.input)
        if codes is None or not codes.per_tensor or fp.is_cpu(op):
            return
        new = type(op)(codes.codes, op.dim.value.data, op.keepdim.value.data)
        new.location = op.location
        rewriter.replace(op, new)


class PoolIndicesOnCodes(RewritePattern):
    """max_pool2d_indices of dequantize(q) -> of q (the same positions: each
    channel's codes are ordered as its values, per channel or per tensor)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: hbir.MaxPool2dIndicesOp, rewriter: PatternRewriter
    ) -> None:
        codes = fp.codes_of(op.input)
        if codes is None or fp.is_cpu(op):
            return
        if not (codes.per_tensor or codes.axis == 1):
            return
        new = hbir.MaxPool2dIndicesOp(
            codes.codes,
            op.kernel.get_values(),
            op.stride.get_values(),
            op.padding.get_values(),
            op.dilation.get_values(),
            op.ceil_mode.value.data,
        )
        new.location = op.location
        rewriter.replace(op, new)


class SinkThroughConcat(RewritePattern):
    """concat of one grid -> dequantize(concat of codes)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hbir.ConcatOp, rewriter: PatternRewriter) -> None:
        if fp.is_cpu(op):
            return
        inputs = [fp.codes_of(v) for v in op.inputs]
        if any(c is None or not c.per_tensor for c in inputs):
            return
        first = inputs[0]
        if any(
            c.scales[0] != first.scales[0]
            or tensor_type(c.codes).element_type
            != tensor_type(first.codes).element_type
            for c in inputs
        ):
            return
        concat = hbir.ConcatOp([c.codes for c in inputs], op.dim.value.data)
        concat.location = op.location
        rewriter.replace(op, [concat, _dequantize(op, first, concat.output, None)])


class QuantizeIntoConcat(RewritePattern):
    """quantize(concat(xs)) -> concat(quantize(x) for x in xs)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: qnt.QuantizeOp, rewriter: PatternRewriter) -> None:
        concat = op.input.owner
        if not isinstance(concat, hbir.ConcatOp) or fp.is_cpu(concat):
            return
        if len(list(concat.output.uses)) != 1:
            return
        element = tensor_type(op.output).element_type
        quantized = []
        for v in concat.inputs:
            q = qnt.QuantizeOp(
                v,
                element,
                op.scales.get_values(),
                op.zeros.get_values(),
                None if op.axis is None else op.axis.value.data,
                op.narrowRange.value.data,
                op.rounding.data,
            )
            q.location = op.location
            quantized.append(q)
        new = hbir.ConcatOp([q.output for q in quantized], concat.dim.value.data)
        new.location = concat.location
        rewriter.replace(op, [*quantized, new])
        rewriter.erase(concat)


class FoldCastIntoDequantize(RewritePattern):
    """cast(dequantize(q)) to float32 or float64 -> dequantize(q) of the cast type.

    Not a cast to f16 / bf16: that rounds the float32 value (an fp16 op's input,
    the FakeCast of the float16 qconfig), which a dequantize does not."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hbir.CastOp, rewriter: PatternRewriter) -> None:
        codes = fp.codes_of(op.input)
        if codes is None or codes.bits > 16 or fp.is_cpu(op):
            return
        out = tensor_type(op.output)
        if not isinstance(out, TensorType) or not hbir.is_float(out):
            return
        if out.element_type.bitwidth < 32:
            return
        rewriter.replace(op, _dequantize(op, codes, codes.codes, codes.axis))


PATTERNS = (
    SinkThroughMover(),
    SinkThroughSplit(),
    SinkThroughTopk(),
    SinkThroughIndexCopy(),
    QuantizeIndices(),
    CompareOnCodes(),
    SelectCodes(),
    QuantizeIntoSelect(),
    SelectOnCodes(),
    PoolIndicesOnCodes(),
    SinkThroughConcat(),
    QuantizeIntoConcat(),
    FoldCastIntoDequantize(),
)


@dataclass(frozen=True)
class SinkDequantizePass(ModulePass):
    """Move dequantize past data movement, max and concat; exact."""

    name = "sink-dequantize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier(list(PATTERNS), dce_enabled=True)
        ).rewrite_module(op)
