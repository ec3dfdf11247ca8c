"""fold-requantize: ``quantize(relu/clip*(dequantize(q)))`` -> ``requantize(q)``.

The last lowering step: a quantization of a dequantized value becomes one integer
rescale ``round(q * s_in * fl32(1/s_out))`` (``numerics.quantize_multiplier`` on
that float64 product of the float32 scales, as quantization multiplies by
``fl32(1/s)``; one rounding with the model's rounding mode), with a relu or clip on
the way folded into the requantization's ``clip``; a rescale between equal scales
with nothing to clip and the same type is no op at all.
Dead dequantizations disappear.

Before::

    %d = qnt.dequantize %q {scales = array<f32: 0.25>, zeros = array<i64: 0>} :
        tensor<4xsi8> -> tensor<4xf32>
    %r = hbir.relu %d : tensor<4xf32>
    %y = qnt.quantize %r {scales = array<f32: 0.5>, zeros = array<i64: 0>} :
        tensor<4xf32> -> tensor<4xsi8>

After::

    %y = qnt.requantize %q {multiplier = array<i64: 1073741824>, shift =
        array<i64: 31>, zero = 0 : i64, clip = array<i64: 0, 127>} :
        tensor<4xsi8> -> tensor<4xsi8>

Per-channel or zero-point quantizations are left alone.
"""

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
from hbir.runtime import numerics


class FoldRequantize(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: qnt.QuantizeOp, rewriter: PatternRewriter) -> None:
        value, first = op.input, None
        while isinstance(value.owner, hbir.ReluOp | hbir.ClipOp):
            if len(list(value.uses)) != 1 or fp.is_cpu(value.owner):
                return
            first = value.owner
            value = value.owner.input
        codes = fp.codes_of(value)
        if codes is None or not codes.per_tensor or codes.bits > 32:
            return
        rounding = fp.rounding_of(op)
        consumer = fp.consumer_of(value, rounding)
        if (consumer is None or consumer.quantize is not op) and first is not None:
            # the dequantized value feeds other ops too (two relus of one value):
            # this quantize's own relu / clip chain folds all the same
            consumer = fp.consumer_through(first, rounding)
        if consumer is None or consumer.quantize is not op:
            # The dequantized value has other users: fold only a direct, plain
            # quantize (a zero point, per-channel scales or a narrow range cannot
            # become one requantize).
            if op.input is not value or not fp.is_plain_quantize(op):
                return
            consumer = fp.Consumer(op, [], None)
        real = numerics.rescale_factor(codes.scales[0], consumer.scale)
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
class FoldRequantizePass(ModulePass):
    """quantize(dequantize(q)) -> one integer requantization (or nothing)."""

    name = "fold-requantize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FoldRequantize()], dce_enabled=True)
        ).rewrite_module(op)
