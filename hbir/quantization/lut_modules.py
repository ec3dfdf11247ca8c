"""LUT-ready QAT modules: nonlinear ops that deployment evaluates with lookup tables.

Each module sees an input that its producer already fake-quantized, computes the float
function (``function``), and fake-quantizes the result with its own
``activation_post_process``. The table that deployment builds is a function of the
input codes only, so the QAT forward and the table agree on every code up to the
table's approximation, which ``num_tables`` bounds: the number of interpolated
segments for int16 inputs (a positive multiple of 6, the table count of one hardware
LUT instruction; int8 inputs use an exact 256-entry table). The defaults are those of
the table builder in ``hbir.runtime.numerics`` (int8 outputs within 1 LSB, int16
outputs of smooth ops within 2 LSB).

Domain conventions, the same as the tables': log and rsqrt of ``x <= 0`` and the
reciprocal of 0 are evaluated at the smallest positive input code (``q = 1``, the
producer's scale), sqrt of ``x < 0`` is 0, exp saturates. Without a known input scale
a tiny floor stands in, which saturates the output. Every gradient stays finite.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from hbir.errors import HbirValueError
from hbir.quantization.dtypes import qint16
from hbir.quantization.fake_quantize import FakeQuantize
from hbir.quantization.observers import FixedScaleObserver
from hbir.quantization.qat_modules import QATModule
from hbir.quantization.qconfig import QConfig
from hbir.quantization.rounding import get_round_mode
from hbir.runtime import numerics, op_table
from hbir.runtime.numerics import LutConfig

# One definition of the defaults: the measured tables of runtime/numerics.py.
DEFAULT_NUM_TABLES = numerics.DEFAULT_NUM_TABLES

# Inputs below these count as 0 (quantized inputs never are: they are 0 or >= one
# scale). Without an input scale f(floor) saturates any int16 output; f'(floor) and
# f' above the floor are finite in float32.
_LOG_FLOOR = float(torch.finfo(torch.float32).tiny)
_RSQRT_FLOOR = 1e-20
_RECIPROCAL_FLOOR = 1e-18
_EXP_CEILING = 80.0


class LutModule(QATModule):
    """Base of the LUT-ready modules: ``activation_post_process(function(x))``."""

    op: ClassVar[str] = ""

    def __init__(self, qconfig: QConfig, num_tables: int | None = None) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.num_tables = (
            DEFAULT_NUM_TABLES[self.op] if num_tables is None else num_tables
        )

    @property
    def num_tables(self) -> int:
        return self._num_tables

    @num_tables.setter
    def num_tables(self, value: int) -> None:
        try:
            self._num_tables = numerics.check_num_tables(value)
        except ValueError as e:
            raise HbirValueError(f"{type(self).__name__}.{e}") from None

    def function(self, x: torch.Tensor) -> torch.Tensor:
        """The float function the table approximates."""
        raise NotImplementedError

    def _smallest_code(self, default: float):
        """The value of input code 1 (the producer's scale), else ``default``."""
        fake_quants = self.input_fake_quants()
        if fake_quants and fake_quants[0] is not None and fake_quants[0].ch_axis < 0:
            return fake_quants[0].scale
        return default

    # Set by ``pre_export``: compute the fixed-point table instead of the function.
    pre_exported: bool = False
    # After pre_export, False falls back to the float function (for diagnosis).
    quantized_forward: bool = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (x,) = self._quant_inputs(x)
        if self.pre_exported and self.quantized_forward:
            config = self.table_config()
            if config is not None:
                return self.activation_post_process(self._table_forward(x, config))
        return self.activation_post_process(self.function(x))

    def table_name(self) -> str:
        """The name of this op's table in ``numerics.LUT_FUNCTIONS``."""
        return op_table.table_name(op_table.BY_OP[self.op].hbir)

    def table_config(self) -> LutConfig | None:
        """The table the input and output fake quants define, if both are on.

        Needs per-tensor symmetric quantization on both sides; otherwise the module
        has no table and keeps its float function.
        """
        producers = self.input_fake_quants()
        fq_in = producers[0] if producers else None
        fq_out = self.activation_post_process
        for fq in (fq_in, fq_out):
            if fq is None or not bool(fq.fake_quant_enabled[0]):
                return None
            if fq.ch_axis >= 0 or int(fq.zero_point.abs().max()) != 0:
                return None
        return LutConfig(
            num_tables=self.num_tables,
            in_scale=float(fq_in.scale[0]),
            in_bits=fq_in.dtype.bits,
            out_scale=float(fq_out.scale[0]),
            out_bits=fq_out.dtype.bits,
        )

    def _table_forward(self, x: torch.Tensor, config: LutConfig) -> torch.Tensor:
        y = numerics.lut_forward(
            self.table_name(),
            x.detach().cpu().numpy(),
            config.in_scale,
            config.in_bits,
            config.out_scale,
            config.out_bits,
            config.num_tables,
            get_round_mode(),
        )
        return torch.from_numpy(np.asarray(y)).to(x.dtype)  # 0-d: a scalar

    def extra_repr(self) -> str:
        text = f"num_tables={self.num_tables}"
        if self.pre_exported:
            text += f", quantized_forward={self.quantized_forward}"
        return text


class Sigmoid(LutModule):
    op = "sigmoid"

    def function(self, x):
        return torch.sigmoid(x)


class Tanh(LutModule):
    op = "tanh"

    def function(self, x):
        return torch.tanh(x)


class Exp(LutModule):
    op = "exp"

    def function(self, x):
        return torch.exp(x.clamp(max=_EXP_CEILING))


class Log(LutModule):
    op = "log"

    def function(self, x):
        return torch.log(
            torch.where(x > _LOG_FLOOR, x, self._smallest_code(_LOG_FLOOR))
        )


class Sqrt(LutModule):
    op = "sqrt"

    def function(self, x):
        # sqrt(0) = 0 exactly, with a zero (not infinite) gradient there.
        positive = x > 0
        return torch.where(positive, torch.sqrt(torch.where(positive, x, 1.0)), 0.0)


class Rsqrt(LutModule):
    op = "rsqrt"

    def function(self, x):
        positive = torch.where(x > _RSQRT_FLOOR, x, self._smallest_code(_RSQRT_FLOOR))
        return torch.rsqrt(positive)


class Reciprocal(LutModule):
    op = "reciprocal"

    def function(self, x):
        floor = self._smallest_code(_RECIPROCAL_FLOOR)
        return torch.reciprocal(torch.where(x.abs() < _RECIPROCAL_FLOOR, floor, x))


class _Periodic(LutModule):
    """sin/cos; ``single_period`` reduces the input to [-pi, pi) before the table.

    The reduced angle goes through ``period_fake_quant``, a fixed-scale int16 fake
    quant covering [-pi, pi], so training sees the one-period table input deployment
    uses. Without it the table must cover the whole input range, which for wide
    inputs (positions, timestamps) costs precision; with it, re-calibrate.
    """

    def __init__(self, qconfig: QConfig, num_tables=None, single_period: bool = False):
        super().__init__(qconfig, num_tables)
        self.single_period = single_period
        self.period_fake_quant = FakeQuantize(
            FixedScaleObserver,
            qint16,
            scale=float(numerics.scale_from_absmax(np.float32(math.pi), qint16.bits)),
            pot=qconfig.activation.pot,
        )

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        """``x - 2 pi round(x / 2 pi)`` in float64 (floor carries no gradient)."""
        wide = x.double()
        turns = torch.floor(wide / (2 * math.pi) + 0.5)
        return self.period_fake_quant((wide - 2 * math.pi * turns).to(x.dtype))

    def function(self, x):
        return self.periodic(self.reduce(x) if self.single_period else x)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", single_period={self.single_period}"


class Sin(_Periodic):
    op = "sin"
    periodic = staticmethod(torch.sin)


class Cos(_Periodic):
    op = "cos"
    periodic = staticmethod(torch.cos)


class GELU(LutModule):
    op = "gelu"

    def __init__(self, qconfig: QConfig, num_tables=None, approximate: str = "none"):
        super().__init__(qconfig, num_tables)
        self.approximate = approximate

    def function(self, x):
        return F.gelu(x, approximate=self.approximate)

    def table_name(self) -> str:
        return op_table.table_name(op_table.BY_OP[self.op].hbir, self.approximate)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", approximate={self.approximate!r}"


class SiLU(LutModule):
    op = "silu"

    def function(self, x):
        return F.silu(x)


class Hardsigmoid(LutModule):
    op = "hardsigmoid"

    def function(self, x):
        return F.hardsigmoid(x)


class Hardswish(LutModule):
    op = "hardswish"

    def function(self, x):
        return F.hardswish(x)


class ParametricLutModule(LutModule):
    """A table op with one float parameter (``numerics.LUT_PARAMETERS``: its torch
    name and default); one table per value."""

    def __init__(self, qconfig: QConfig, num_tables=None, value: float | None = None):
        super().__init__(qconfig, num_tables)
        name, default = numerics.LUT_PARAMETERS[self.op]
        self.value = default if value is None else float(value)
        try:
            numerics.split_table_key(self.table_name())
        except ValueError as e:
            raise HbirValueError(f"{type(self).__name__} {name}={value}: {e}") from None

    def table_name(self) -> str:
        return numerics.table_key(super().table_name(), self.value)

    def extra_repr(self) -> str:
        name = numerics.LUT_PARAMETERS[self.op][0]
        return super().extra_repr() + f", {name}={self.value}"


class LeakyReLU(ParametricLutModule):
    op = "leaky_relu"

    def function(self, x):
        return F.leaky_relu(x, self.value)


class ELU(ParametricLutModule):
    op = "elu"

    def function(self, x):
        return F.elu(x, self.value)


class CELU(ParametricLutModule):
    op = "celu"

    def function(self, x):
        return F.celu(x, self.value)


class Softplus(ParametricLutModule):
    op = "softplus"

    def function(self, x):
        return F.softplus(x, self.value)


class SELU(LutModule):
    op = "selu"

    def function(self, x):
        return F.selu(x)


class Mish(LutModule):
    op = "mish"

    def function(self, x):
        return F.mish(x)


class Erf(LutModule):
    op = "erf"

    def function(self, x):
        return torch.erf(x)


class LogSigmoid(LutModule):
    op = "logsigmoid"

    def function(self, x):
        return F.logsigmoid(x)


class Softsign(LutModule):
    op = "softsign"

    def function(self, x):
        return F.softsign(x)


class Tanhshrink(LutModule):
    op = "tanhshrink"

    def function(self, x):
        return F.tanhshrink(x)


# op name -> its module (the op table's test checks that every LUT op has one)
LUT_MODULES: dict[str, type[LutModule]] = {
    cls.op: cls
    for cls in (Sigmoid, Tanh, Exp, Log, Sqrt, Rsqrt, Reciprocal, Sin, Cos)
    + (GELU, SiLU, Hardsigmoid, Hardswish)
    + (LeakyReLU, ELU, CELU, Softplus, SELU, Mish, Erf, LogSigmoid, Softsign)
    + (Tanhshrink,)
}
