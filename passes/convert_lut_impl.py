"""Implementation of the ``convert-lut`` pass (passes/convert_lut.py),
imported when the pass runs so that ``hbir-opt --help`` stays light."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    f32,
)
from xdsl.ir import Attribute
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import i64_attr, ints, si, tensor_type
from hbir.passes import fixed_point as fp
from hbir.runtime import numerics


def table_name(op: hbir.FloatUnaryOp) -> str:
    name = op.name.removeprefix("hbir.")
    if isinstance(op, hbir.GeluOp) and op.approximate.data == "tanh":
        return "gelu_tanh"
    return name


def lut_op(codes, table: numerics.LutTable) -> hbir.LutOp:
    """``hbir.lut`` holding ``table`` (direct entries or segment fields)."""
    out = si(table.out_bits)
    if table.kind == "direct":
        t = TensorType(out, [256])
        data = table.entries.astype(hbir.numpy_dtype(out)).tobytes()
        return hbir.LutOp(codes, DenseIntOrFPElementsAttr(t, BytesAttr(data)))
    arrays = table.to_arrays()
    props: dict[str, Attribute] = {
        "function": StringAttr(table.op),
        "kind": StringAttr(table.kind),
        "rounding": StringAttr(table.rounding),
        "in_scale": FloatAttr(table.in_scale, f32),
        "out_scale": FloatAttr(table.out_scale, f32),
    }
    for name in ("in_bits", "out_bits", "num_tables", "frac_bits"):
        props[name] = i64_attr(int(arrays[name]))
    for name in ("phase_mult", "phase_shift", "phase_bits", "octave_step"):
        props[name] = i64_attr(int(arrays[name]))
    for name in ("starts", "offsets", "slopes"):
        props[name] = ints([int(v) for v in arrays[name]])
    return hbir.LutOp(codes, segments=props, element_type=out)


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
        table = numerics.build_lut(
            table_name(op),
            config.in_scale,
            config.in_bits,
            config.out_scale,
            config.out_bits,
            config.num_tables,
            fp.rounding_of(op),
        )
        lut = lut_op(codes.codes, table)
        element = tensor_type(op.output).element_type
        dq = qnt.DequantizeOp(lut.output, [config.out_scale], None, None, element)
        lut.location = dq.location = op.location
        rewriter.replace(op, [lut, dq])


@dataclass(frozen=True)
class ConvertLutPassImpl(ModulePass):
    """Replace LUT-ready nonlinear ops by hbir.lut with pre_export's tables."""

    name = "convert-lut"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LowerLut(), apply_recursively=False).rewrite_module(op)
