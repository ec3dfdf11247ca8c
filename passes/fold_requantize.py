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

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class FoldRequantizePass(ModulePass):
    """quantize(dequantize(q)) -> one integer requantization (or nothing)."""

    name = "fold-requantize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from hbir.passes.fold_requantize_impl import FoldRequantizePassImpl

        FoldRequantizePassImpl().apply(ctx, op)
