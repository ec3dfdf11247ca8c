"""expand-fake-quant: ``qnt.const_fake_quant`` -> ``qnt.quantize`` + ``qnt.dequantize``.

The first step of convert. The integer parameters come from the fake quantization's
range (``numerics.scale_from_min_max``, exact for ranges export wrote). A fake
quantization of a float constant (weights, level-2 biases) is folded: the constant
becomes integer codes (per channel with ``axis``) followed by a dequantize. An
activation's fake quantization becomes a quantize and a dequantize, which compute
the same numbers; later passes lower the float ops between them.

Before::

    %w = hbir.constant dense<[[0.5, -0.25]]> : tensor<1x2xf32>
    %wq = qnt.const_fake_quant %w {min = array<f64: -0.5>, max = array<f64:
        0.49609375>, bits = 8 : i64, axis = 0 : i64} : tensor<1x2xf32>
    %y = qnt.const_fake_quant %x {min = array<f64: -1.0>, max = array<f64:
        0.9921875>, bits = 8 : i64} : tensor<4xf32>

After::

    %0 = hbir.constant dense<[[127, -64]]> : tensor<1x2xsi8>
    %wq = qnt.dequantize %0 {scales = array<f32: 0.00390625>, zeros = array<i64:
        0>, axis = 0 : i64} : tensor<1x2xsi8> -> tensor<1x2xf32>
    %1 = qnt.quantize %x {scales = array<f32: 0.0078125>, ...} :
        tensor<4xf32> -> tensor<4xsi8>
    %y = qnt.dequantize %1 {...} : tensor<4xsi8> -> tensor<4xf32>

Fake quantizations of 8, 16 or 32 bits are expanded; other widths (no storage
type) are left alone.
"""

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
        fp.check_scales(op, scales)
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
class ExpandFakeQuantPass(ModulePass):
    """Split fake quantizations into quantize + dequantize; fold constant ones."""

    name = "expand-fake-quant"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ExpandFakeQuant(), apply_recursively=False).rewrite_module(
            op
        )
