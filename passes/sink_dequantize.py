"""sink-dequantize: move dequantization past ops that only move or select codes.

``op(dequantize(q))`` becomes ``dequantize(op(q))`` for reshape, transpose, slice,
split, zero padding, max pool, reduce max, nearest resize and concat of one grid
(dequantization is monotone, so max selects the same element); a float-to-float
cast folds into the dequantize's result type (exact for codes up to 16 bits). A
quantize of a concat is pushed into the concat's inputs (quantization is
elementwise), so each input is requantized to the output grid by
``fold-requantize``. Every rewrite computes the same numbers.

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

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class SinkDequantizePass(ModulePass):
    """Move dequantize past data movement, max and concat; exact."""

    name = "sink-dequantize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from hbir.passes.sink_dequantize_impl import SinkDequantizePassImpl

        SinkDequantizePassImpl().apply(ctx, op)
