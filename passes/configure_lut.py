"""configure-lut: give each LUT-ready op the grids of the fake quantizations around it.

Export imports a nonlinear op with the number of tables its torch module asks for
(``num_tables``). This pass adds the table's input and output grids, exactly as the
module's ``table_config`` reads them in torch (``pre_export``): the input grid is the
nearest ``qnt.const_fake_quant`` up the op's input, through ops that only move values
(the op table's ``move`` family: reshape, transpose, slice...); the output grid is the
fake quantization of the op's result. Both must be per tensor with a zero point of
0; otherwise the op keeps its float function, as in torch. A grid that is neither 8
nor 16 bits has no table: that is an error.

Before::

    %1 = qnt.const_fake_quant %0 {min = [-8.0], max = [7.9375], bits = 8 : i64,
        narrowRange = false} : tensor<4xf32>
    %2 = hbir.sigmoid %1 {num_tables = 162 : i64} : tensor<4xf32>
    %3 = qnt.const_fake_quant %2 {min = [-1.0], max = [0.9921875], bits = 8 : i64,
        narrowRange = false} : tensor<4xf32>

After::

    %2 = hbir.sigmoid %1 {num_tables = 162 : i64, in_scale = 6.250000e-02 : f64,
        in_bits = 8 : i64, out_scale = 7.812500e-03 : f64, out_bits = 8 : i64} :
        tensor<4xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass

from hbir.dialects import hbir, qnt
from hbir.errors import HbirError
from hbir.passes import fixed_point as fp
from hbir.runtime import numerics


class LutConfigError(HbirError):
    """A LUT-ready op between fake quantizations that no table can evaluate."""


def _grid(fq: qnt.ConstFakeQuantOp | None) -> tuple[float, int] | None:
    """(scale, bits) of a per-tensor, zero-point-0 fake quantization, else None."""
    if fq is None or fq.axis is not None:
        return None
    (lo,), (hi,) = fq.min.get_values(), fq.max.get_values()
    bits = fq.bits.value.data
    qmin, qmax = numerics.qrange(bits, bool(fq.narrowRange.value.data))
    scale = hi / qmax  # exact: export stores the float64 products s * qmax
    if scale <= 0 or lo != scale * qmin:
        return None
    return scale, bits


def input_fake_quant(value: SSAValue) -> qnt.ConstFakeQuantOp | None:
    """The fake quantization that defines ``value``'s grid, through value moves."""
    owner = value.owner
    while fp.keeps_grid(owner) and owner.operands:
        owner = owner.operands[0].owner
    return owner if isinstance(owner, qnt.ConstFakeQuantOp) else None


def output_fake_quant(op: hbir.FloatUnaryOp) -> qnt.ConstFakeQuantOp | None:
    users = (use.operation for use in op.output.uses)
    return next((u for u in users if isinstance(u, qnt.ConstFakeQuantOp)), None)


def table_config(op: hbir.FloatUnaryOp) -> numerics.LutConfig | None:
    """The table the fake quantizations around ``op`` define, or None."""
    grids = _grid(input_fake_quant(op.input)), _grid(output_fake_quant(op))
    if None in grids:
        return None
    (in_scale, in_bits), (out_scale, out_bits) = grids
    for side, bits in (("input", in_bits), ("output", out_bits)):
        if bits not in (8, 16):
            raise LutConfigError(
                f"{fp.where(op)}: error: '{op.name}' op {side} grid has {bits} bits; "
                "lookup tables take 8 or 16"
            )
    return numerics.LutConfig(
        op.num_tables.value.data, in_scale, in_bits, out_scale, out_bits
    )


@dataclass(frozen=True)
class ConfigureLutPass(ModulePass):
    """Give LUT-ready ops the input and output grids of their fake quantizations."""

    name = "configure-lut"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in op.walk():
            if not isinstance(inner, hbir.FloatUnaryOp) or inner.num_tables is None:
                continue
            if inner.lut_config() is not None:
                continue
            config = table_config(inner)
            if config is not None:
                inner.set_lut_config(config)
