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

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class ExpandFakeQuantPass(ModulePass):
    """Split fake quantizations into quantize + dequantize; fold constant ones."""

    name = "expand-fake-quant"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from hbir.passes.expand_fake_quant_impl import ExpandFakeQuantPassImpl

        ExpandFakeQuantPassImpl().apply(ctx, op)
