"""Implementation of the ``expand-fake-quant`` pass (passes/expand_fake_quant.py),
imported when the pass runs so that ``hbir-opt --help`` stays light."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from hbir.dialects import qnt
from hbir.dialects.hbir import si, tensor_type
from hbir.passes import fixed_point as fp
from hbir.runtime import numerics

STORAGE_BITS = (8, 16, 32)


def parameters(op: qnt.ConstFakeQuantOp) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(float32 scales, int zero points, axis) of a fake quantization."""
    scale, zero = numerics.scale_from_min_max(
        np.asarray(op.min.get_values()),
        np.asarray(op.max.get_values()),
        op.bits.value.data,
        bool(op.narrowRange.value.data),
    )
    axis = None if op.axis is None else op.axis.value.data
    if axis is not None and axis < 0:
        axis += len(tensor_type(op.input).get_shape())
    return np.atleast_1d(scale), np.atleast_1d(zero), axis


class ExpandFakeQuant(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: qnt.ConstFakeQuantOp, rewriter: PatternRewriter
    ) -> None:
        bits = op.bits.value.data
        if bits not in STORAGE_BITS:
            return
        scales, zeros, axis = parameters(op)
        narrow = bool(op.narrowRange.value.data)
        rounding = fp.rounding_of(op)
        element = tensor_type(op.output).element_type
        values = fp.float_constant(op.input)
        if values is not None:
            qmin, qmax = numerics.qrange(bits, narrow)
            x = values.astype(np.float64 if str(element) == "f64" else np.float32)
            codes = numerics.quantize(x, scales, zeros, qmin, qmax, axis, rounding)
            first: qnt.QuantizeOp | fp.hbir.ConstantOp = fp.int_constant(codes, bits)
        else:
            first = qnt.QuantizeOp(
                op.input, si(bits), scales, zeros, axis, narrow, rounding
            )
        dq = qnt.DequantizeOp(first.results[0], scales, zeros, axis, element)
        first.location = dq.location = op.location
        rewriter.replace(op, [first, dq])


@dataclass(frozen=True)
class ExpandFakeQuantPassImpl(ModulePass):
    """Split fake quantizations into quantize + dequantize; fold constant ones."""

    name = "expand-fake-quant"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ExpandFakeQuant(), apply_recursively=False).rewrite_module(
            op
        )
