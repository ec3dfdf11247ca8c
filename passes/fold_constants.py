"""fold-constants: data movement and casts of constants become constants.

A parameter used through a reshape (``gamma.reshape(1, -1, 1, 1)``), a transpose,
a slice or a float cast is imported as that op on an ``hbir.constant``; folded, it is
a constant of the final shape and type, which convert quantizes like any weight
instead of leaving a float CPU op. The values are moved, not recomputed: a reshape,
transpose or slice is exact, and a float cast rounds half to even as torch does.
The original constant stays if something else reads it (``cleanup`` removes it
otherwise).

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
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float32Type,
    Float64Type,
    ModuleOp,
)
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from hbir.dialects import hbir
from hbir.dialects.hbir import dense_array, numpy_dtype, tensor_type

_FOLDABLE = (hbir.ReshapeOp, hbir.TransposeOp, hbir.SliceOp, hbir.CastOp)


def _moved(op, x: np.ndarray) -> np.ndarray | None:
    """The op's result on the constant ``x``, or None if it does not fold."""
    if isinstance(op, hbir.ReshapeOp):
        return x.reshape(hbir.shape_of(op.output))
    if isinstance(op, hbir.TransposeOp):
        return x.transpose(op.perm.get_values())
    if isinstance(op, hbir.SliceOp):
        index = tuple(
            slice(b, e, s)
            for b, e, s in zip(
                op.begin.get_values(),
                op.end.get_values(),
                op.step.get_values(),
                strict=True,
            )
        )
        return x[index]
    floats = (Float32Type, Float64Type)
    source = tensor_type(op.input).element_type
    target = tensor_type(op.output).element_type
    if isinstance(source, floats) and isinstance(target, floats):
        return x.astype(numpy_dtype(target))
    return None


class FoldConstantMove(RewritePattern):
    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, _FOLDABLE):
            return
        source = op.operands[0].owner
        if not isinstance(source, hbir.ConstantOp):
            return
        y = _moved(op, dense_array(source.value))
        if y is None:
            return
        data = BytesAttr(np.ascontiguousarray(y).tobytes())
        constant = hbir.ConstantOp(DenseIntOrFPElementsAttr(op.output.type, data))
        constant.location = op.location
        rewriter.replace(op, constant)


@dataclass(frozen=True)
class FoldConstantsPass(ModulePass):
    """Fold reshapes, transposes, slices and float casts of constants."""

    name = "fold-constants"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FoldConstantMove()).rewrite_module(op)
