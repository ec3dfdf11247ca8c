"""Implementation of the ``fold-requantize`` pass (passes/fold_requantize.py),
imported when the pass runs so that ``hbir-opt --help`` stays light."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
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
from xdsl.rewriter import InsertPoint

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import tensor_type
from hbir.passes import fixed_point as fp


class FoldRequantize(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: qnt.QuantizeOp, rewriter: PatternRewriter) -> None:
        value = op.input
        while isinstance(value.owner, hbir.ReluOp | hbir.ClipOp):
            if len(list(value.uses)) != 1 or fp.is_cpu(value.owner):
                return
            value = value.owner.input
        codes = fp.codes_of(value)
        if codes is None or not codes.per_tensor or codes.bits > 32:
            return
        rounding = fp.rounding_of(op)
        consumer = fp.consumer_of(value, rounding)
        if consumer is None or consumer.quantize is not op:
            # The dequantized value has other users: fold only a direct, plain
            # quantize (a zero point, per-channel scales or a narrow range cannot
            # become one requantize).
            if op.input is not value or not fp.is_plain_quantize(op):
                return
            consumer = fp.Consumer(op, [], None)
        same_scale = np.float32(codes.scales[0]) == np.float32(consumer.scale)
        real = 1.0 if same_scale else np.float64(codes.scales[0]) * consumer.inv_scale
        same_type = tensor_type(codes.codes).element_type == consumer.element
        if real == 1.0 and consumer.clip is None and same_type:
            rewriter.replace_all_uses_with(op.output, codes.codes)
        else:
            new = fp.finish(
                codes.codes,
                np.array([real]),
                consumer,
                rounding,
                fp.fuses_requantize(op),
            )
            for n in new:
                n.location = op.location
                rewriter.insert(n, InsertPoint.before(op))
            rewriter.replace_all_uses_with(op.output, new[-1].results[0])
        rewriter.erase(op)
        for chained in reversed(consumer.chain):
            rewriter.erase(chained)


@dataclass(frozen=True)
class FoldRequantizePassImpl(ModulePass):
    """quantize(dequantize(q)) -> one integer requantization (or nothing)."""

    name = "fold-requantize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FoldRequantize()], dce_enabled=True)
        ).rewrite_module(op)
