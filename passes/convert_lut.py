"""convert-lut: nonlinear ops with a table configuration -> ``hbir.lut``.

A LUT-ready op (``hbir.sigmoid``, ``hbir.exp``, ... carrying ``num_tables`` and
its input / output scale and bits, as export writes it) on dequantized codes of
its input grid becomes ``hbir.lut`` on those codes, with the very table
``pre_export`` evaluates: ``numerics.build_lut`` of the same configuration and
the model's rounding mode. int8 input: the 256 direct entries; int16 input: the
segmented table's ``LutTable.to_arrays`` fields. The result is dequantized at the
output scale, so the fake quantization after it folds away.

Before::

    %x = qnt.dequantize %xq {scales = array<f32: 0.0625>, ...} : tensor<4xsi8> ->
        tensor<4xf32>
    %y = hbir.sigmoid %x {num_tables = 24 : i64, in_scale = 6.25e-02 : f64,
        in_bits = 8 : i64, out_scale = 3.90625e-03 : f64, out_bits = 8 : i64} :
        tensor<4xf32>

After::

    %0 = hbir.lut %xq {table = dense<[...]> : tensor<256xsi8>} : tensor<4xsi8> ->
        tensor<4xsi8>
    %y = qnt.dequantize %0 {scales = array<f32: 0.00390625>, ...} :
        tensor<4xsi8> -> tensor<4xf32>

Ops without a table configuration, or whose input grid differs from the
configuration's, stay float.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    ModuleOp,
)
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import tensor_type
from hbir.errors import HbirOpError
from hbir.passes import fixed_point as fp
from hbir.runtime import numerics


class LutBuildError(HbirOpError):
    """A table configuration that verifies but builds no table (a scale that is
    zero or infinite in float32)."""


class LowerLut(RewritePattern):
    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, hbir.FloatUnaryOp) or fp.is_cpu(op):
            return
        config = op.lut_config()
        codes = fp.codes_of(op.input)
        if config is None or codes is None or not codes.per_tensor:
            return
        if codes.bits != config.in_bits:
            return
        if codes.scales[0] != np.float32(config.in_scale):
            return
        try:
            table = numerics.build_lut(
                op.table_name(),
                config.in_scale,
                config.in_bits,
                config.out_scale,
                config.out_bits,
                config.num_tables,
                fp.rounding_of(op),
            )
        except ValueError as e:  # a configuration with no table (e.g. scale 0)
            raise LutBuildError(op, fp.where(op), f"has no lookup table: {e}") from None
        lut = hbir.LutOp.from_table(codes.codes, table)
        element = tensor_type(op.output).element_type
        dq = qnt.DequantizeOp(lut.output, [config.out_scale], None, None, element)
        lut.location = dq.location = op.location
        rewriter.replace(op, [lut, dq])


@dataclass(frozen=True)
class ConvertLutPass(ModulePass):
    """Replace LUT-ready nonlinear ops by hbir.lut with pre_export's tables."""

    name = "convert-lut"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LowerLut(), apply_recursively=False).rewrite_module(op)
