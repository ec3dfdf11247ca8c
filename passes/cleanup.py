"""cleanup: remove dead ops and no-op data movement.

Before::

    %a = hbir.reshape %x : tensor<2x8xf32> -> tensor<16xf32>
    %b = hbir.reshape %a : tensor<16xf32> -> tensor<4x4xf32>
    %c = hbir.transpose %b {perm = array<i64: 1, 0>} :
        tensor<4x4xf32> -> tensor<4x4xf32>
    %d = hbir.transpose %c {perm = array<i64: 1, 0>} :
        tensor<4x4xf32> -> tensor<4x4xf32>
    %e = hbir.cast %d : tensor<4x4xf32> -> tensor<4x4xf32>
    %unused = hbir.relu %x : tensor<2x8xf32>
    func.return %e : tensor<4x4xf32>

After::

    %b = hbir.reshape %x : tensor<2x8xf32> -> tensor<4x4xf32>
    func.return %b : tensor<4x4xf32>

Ops with side effects and block arguments are never touched; results keep their
locations.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from hbir.dialects import hbir


class ForwardNoOp(RewritePattern):
    """A reshape, transpose or cast whose result type equals its input type."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: hbir.ReshapeOp | hbir.CastOp, rewriter: PatternRewriter
    ) -> None:
        if op.input.type == op.output.type:
            rewriter.replace(op, [], [op.input])


class FoldTranspose(RewritePattern):
    """An identity permutation disappears; two transposes compose into one."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: hbir.TransposeOp, rewriter: PatternRewriter
    ) -> None:
        perm = list(op.perm.get_values())
        if perm == sorted(perm):
            rewriter.replace(op, [], [op.input])
            return
        producer = op.input.owner
        if isinstance(producer, hbir.TransposeOp):
            inner = list(producer.perm.get_values())
            composed = hbir.TransposeOp(producer.input, [inner[p] for p in perm])
            composed.location = op.location
            rewriter.replace(op, composed)


class FoldReshapeChain(RewritePattern):
    """reshape(reshape(x)) is one reshape of x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hbir.ReshapeOp, rewriter: PatternRewriter) -> None:
        producer = op.input.owner
        if isinstance(producer, hbir.ReshapeOp):
            folded = hbir.ReshapeOp(producer.input, hbir.shape_of(op.output))
            folded.location = op.location
            rewriter.replace(op, folded)


@dataclass(frozen=True)
class CleanupPass(ModulePass):
    """Remove dead pure ops, identity reshapes/transposes/casts, fold chains."""

    name = "cleanup"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [ForwardNoOp(), FoldTranspose(), FoldReshapeChain()], dce_enabled=True
            ),
        ).rewrite_module(op)
