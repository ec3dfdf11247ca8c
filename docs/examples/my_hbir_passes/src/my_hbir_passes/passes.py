"""merge-double-relu: relu(relu(x)) is relu(x).

Before::

    %a = hbir.relu %x : tensor<4xf32>
    %b = hbir.relu %a : tensor<4xf32>

After::

    %a = hbir.relu %x : tensor<4xf32>
"""

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
from hbir.passes import register_pass


class MergeDoubleRelu(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hbir.ReluOp, rewriter: PatternRewriter) -> None:
        if isinstance(op.input.owner, hbir.ReluOp):
            rewriter.replace(op, [], [op.input])


@register_pass  # lets `hbir-opt --load-plugin my_hbir_passes.passes` find it too
@dataclass(frozen=True)
class MergeDoubleReluPass(ModulePass):
    """Replace relu(relu(x)) by relu(x)."""

    name = "merge-double-relu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([MergeDoubleRelu()], dce_enabled=True)
        ).rewrite_module(op)
