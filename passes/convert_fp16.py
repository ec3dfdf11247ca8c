"""convert-fp16: the fp16 ops of the float16 qconfig become ops on ``f16`` values.

In ``qat.bc`` an fp16 op is its float op between roundings to binary16 (each
``FakeCast`` exported as a cast to ``f16`` and back). Here the op takes the ``f16``
values and gives an ``f16`` result: it computes its float32 kernel on the exactly
widened inputs and rounds once to binary16 (half to even, overflow to inf), the
very numbers of ``qat.bc`` (docs/convert.md, fp16). A transpose or reshape of a
widened ``f16`` value moves the ``f16`` value instead (exact). A float32 constant
operand (a layer norm's weight, a Python number) stays float32, as in ``qat.bc``.

Before::

    %x = hbir.cast %h : tensor<4xf16> -> tensor<4xf32>
    %s = hbir.sigmoid %x : tensor<4xf32>
    %y = hbir.cast %s : tensor<4xf32> -> tensor<4xf16>

After::

    %y = hbir.sigmoid %h : tensor<4xf16>

The ops are the op table's ``FP16_OPS``; an op reading anything else than ``f16``
values and constants stays as it is (float32 between the casts, still exact).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float16Type, Float32Type, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from hbir.dialects import hbir
from hbir.runtime import op_table

FP16_OPS = tuple(
    cls
    for cls in hbir.HBIR.operations
    if cls.name in {op_table.BY_OP[op].hbir for op in op_table.FP16_OPS}
)
_MOVES = (hbir.TransposeOp, hbir.ReshapeOp)


def _element(value: SSAValue):
    t = value.type
    return t.element_type if isinstance(t, TensorType) else None


def _widened(value: SSAValue) -> SSAValue | None:
    """The ``f16`` value that ``value`` widens to float32 (exactly), or None."""
    cast = value.owner
    if not isinstance(cast, hbir.CastOp):
        return None
    if not isinstance(_element(cast.input), Float16Type):
        return None
    if not isinstance(_element(value), Float32Type):
        return None
    return cast.input


def _with_element(value: SSAValue, element) -> TensorType:
    return TensorType(element, value.type.get_shape())


def _rebuilt(op: Operation, operands, result_type) -> Operation:
    """``op`` with other operands and result type (properties, attributes and
    location kept)."""
    new = type(op).create(
        operands=list(operands),
        result_types=[result_type],
        properties=dict(op.properties),
        attributes=dict(op.attributes),
    )
    new.location = op.location
    return new


class MoveF16(RewritePattern):
    """transpose / reshape of a widened f16 value -> of the f16 value, widened."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, _MOVES):
            return
        h = _widened(op.operands[0])
        if h is None:
            return
        moved = _rebuilt(op, [h], _with_element(op.results[0], Float16Type()))
        wide = hbir.CastOp(moved.results[0], Float32Type())
        wide.location = op.location
        rewriter.replace(op, [moved, wide])


class Fp16Op(RewritePattern):
    """cast(op(widened f16 values), f16) -> op on the f16 values, f16 result."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, FP16_OPS) or len(op.results) != 1:
            return
        result = op.results[0]
        uses = list(result.uses)
        if not isinstance(_element(result), Float32Type) or len(uses) != 1:
            return
        rounding = uses[0].operation
        if not isinstance(rounding, hbir.CastOp) or not isinstance(
            _element(rounding.output), Float16Type
        ):
            return
        operands, widened = [], 0
        for v in op.operands:
            h = _widened(v)
            if h is not None:
                operands.append(h)
                widened += 1
            elif isinstance(v.owner, hbir.ConstantOp):
                operands.append(v)
            else:
                return
        if not widened:
            return
        fp16 = _rebuilt(op, operands, rounding.output.type)
        rewriter.replace(rounding, fp16)
        rewriter.erase(op)


@dataclass(frozen=True)
class ConvertFp16Pass(ModulePass):
    """fp16 ops on f16 values (the float16 qconfig, a march with fp16)."""

    name = "convert-fp16"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([MoveF16(), Fp16Op()], dce_enabled=True)
        ).rewrite_module(op)
