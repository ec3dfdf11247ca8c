"""fold-constants: an hbir op whose operands are all constants becomes constants.

A parameter used through a reshape (``gamma.reshape(1, -1, 1, 1)``), a positional
encoding computed from sizes and then projected by a conv, a mask made from
constants: each is imported as ops on ``hbir.constant`` and folded here into the
constant it computes, which convert quantizes like any weight instead of leaving
float CPU ops. The values are computed by the interpreter's own kernel for the op,
so the folded model computes exactly what the unfolded one did. Quantization ops
(``qnt.*``: a weight's fake quantization must stay visible to convert) and lookup
tables configured for the model's rounding mode are not folded. The original
constants stay if something else reads them (``cleanup`` removes them otherwise).

Before::

    %g = hbir.constant dense<[1.0, 2.0]> : tensor<2xf32>
    %r = hbir.reshape %g : tensor<2xf32> -> tensor<1x2x1x1xf32>

After::

    %r = hbir.constant dense<[[[[1.0]], [[2.0]]]]> : tensor<1x2x1x1xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from hbir.dialects import hbir
from hbir.dialects.hbir import dense_array
from hbir.errors import HbirError
from hbir.passes import fixed_point as fp


class FoldError(HbirError):
    """An op on constants that cannot be evaluated (e.g. a hostile table)."""


def _foldable(op: Operation) -> bool:
    if op.dialect_name() != "hbir" or isinstance(op, hbir.ConstantOp):
        return False
    if isinstance(op, hbir.FloatUnaryOp) and op.lut_config() is not None:
        return False  # its table depends on the model's rounding mode
    if not op.operands or op.regions:
        return False
    return all(isinstance(v.owner, hbir.ConstantOp) for v in op.operands)


class FoldConstantOp(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not _foldable(op):
            return
        from hbir.runtime.interpreter import KERNELS  # torch: only when folding

        kernel = KERNELS.get(type(op))
        if kernel is None:
            return
        inputs = [dense_array(v.owner.value) for v in op.operands]
        try:
            results = kernel(op, *inputs)
        except (ValueError, ArithmeticError, IndexError) as e:  # a bad attribute
            raise FoldError(
                f"{fp.where(op)}: error: '{op.name}' op cannot be evaluated: {e}"
            ) from None
        constants = []
        for value, y in zip(op.results, results, strict=True):
            data = BytesAttr(np.ascontiguousarray(y).tobytes())
            constant = hbir.ConstantOp(DenseIntOrFPElementsAttr(value.type, data))
            constant.location = op.location
            constants.append(constant)
        # one constant per result (a split of a constant has several)
        rewriter.replace(op, constants, [c.output for c in constants])


@dataclass(frozen=True)
class FoldConstantsPass(ModulePass):
    """Fold hbir ops on constants into the constants they compute."""

    name = "fold-constants"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FoldConstantOp()).rewrite_module(op)
