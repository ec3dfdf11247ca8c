"""What each NPU march can run: one table, read by check-march and hbir.convert.

Limits follow the reference toolchain's published J6E / J6M constraints: int8 /
int16 operands, gemm input and weight not both int16, kernels up to 31, channels
and gemm dims up to 8192, strides up to 256, dilations up to 18.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum

from hbir.errors import HbirValueError


@dataclass(frozen=True)
class MarchLimits:
    name: str
    operand_bits: tuple[int, ...]  # integer widths the NPU ops take
    gemm_both_int16: bool  # may input and weight both be int16?
    max_kernel: int
    max_channels: int
    max_gemm_dim: int
    max_stride: int
    max_dilation: int
    float_bits: tuple[int, ...] = ()  # IEEE float widths the NPU computes in (fp16)


class March(StrEnum):
    """The march names as an enum, ``hbir.March``: ``March.nash_e`` as hbdk4
    spells it, ``March.NASH_E`` as horizon_plugin_pytorch does. A member is the
    string itself (``March.nash_e == "nash-e"``), so it goes wherever a march
    string does."""

    nash_e = "nash-e"
    nash_m = "nash-m"
    nash_p = "nash-p"
    nash_h = "nash-h"
    nash_b = "nash-b"
    nash_b_lite = "nash-b-lite"
    nash_b_plus = "nash-b-plus"
    NASH_E = "nash-e"
    NASH_M = "nash-m"
    NASH_P = "nash-p"
    NASH_H = "nash-h"
    NASH_B = "nash-b"
    NASH_B_LITE = "nash-b-lite"
    NASH_B_PLUS = "nash-b-plus"


MARCHES: dict[str, MarchLimits] = {
    March.nash_e.value: MarchLimits("nash-e", (8, 16), False, 31, 8192, 8192, 256, 18),
    March.nash_m.value: MarchLimits("nash-m", (8, 16), False, 31, 8192, 8192, 256, 18),
    # J6P / J6H: int8 + int16 + fp16 mixed precision, gemms with both operands
    # int16 (Horizon's J6H/P deployment guide).
    March.nash_p.value: MarchLimits(
        "nash-p", (8, 16), True, 31, 8192, 8192, 256, 18, float_bits=(16,)
    ),
    March.nash_h.value: MarchLimits(
        "nash-h", (8, 16), True, 31, 8192, 8192, 256, 18, float_bits=(16,)
    ),
    March.nash_b.value: MarchLimits("nash-b", (8, 16), False, 31, 8192, 8192, 256, 18),
    March.nash_b_lite.value: MarchLimits(
        "nash-b-lite", (8, 16), False, 31, 8192, 8192, 256, 18
    ),
    March.nash_b_plus.value: MarchLimits(
        "nash-b-plus", (8, 16), False, 31, 8192, 8192, 256, 18
    ),
}


class UnknownMarchError(HbirValueError):
    """A march name that is not in ``MARCHES``."""


def get_march(name: str) -> MarchLimits:
    if not isinstance(name, str) or name not in MARCHES:
        raise UnknownMarchError(
            f"unknown march '{name}': expected one of {', '.join(MARCHES)}"
        )
    return MARCHES[name]


# ----------------------------------------------------------------- the NPU model
#
# What the backend (the compile passes, and the simulator's cost model) needs to
# know about the NPU. Sources:
#
# * public: nash-e (J6E) is an 80 TOPS int8 part and nash-m (J6M) a 128 TOPS one,
#   one BPU core each (Horizon's J6 toolchain documentation and deployment
#   guides); the units are TAE (gemm / conv), AAE (pool, resize, warp), DTE
#   (layout / data movement), VAE (vector: elementwise, LUT, reductions), VPU
#   (SIMT; quantize / dequantize on J6E/M), SPU (scalar), as that documentation
#   lists them; the TAE post-process takes a si32 bias and a 32-bit accumulator
#   (its documented quantInfo fields, int32 conv outputs); int16 x int16 gemms
#   are not supported on J6E/M (a published constraint, already in MarchLimits).
# * ASSUMED (not public; chosen to be plausible and labelled as such): the clock,
#   the SRAM (L1M) size, DDR bandwidth, the vector width, the channel alignment,
#   and the int16 MAC rate. The compiler only uses them for tiling, memory
#   planning and the cycle estimate; numerics never depend on them.


@dataclass(frozen=True)
class NpuModel:
    """The NPU of one march, as data (``get_npu``). Fields marked (assumed) are
    our estimates, not published figures."""

    name: str
    int8_tops: float  # public: dense int8 peak
    clock_mhz: int  # (assumed)
    sram_bytes: int  # (assumed) on-chip working memory one tile must fit in
    ddr_gbps: float  # (assumed) DDR bandwidth, GB/s
    vector_bytes: int  # (assumed) VAE width: bytes per cycle
    channel_align: int  # (assumed) channels are stored padded to a multiple
    acc_bits: int  # TAE accumulator and post-process width (si32)
    int16_rate: float  # (assumed) int16 x int8 MACs per int8 MAC
    cores: int = 1  # public: BPU cores (nash-e, nash-m: one each)

    @property
    def macs_per_cycle_int8(self) -> int:
        """int8 MACs per cycle: TOPS / (2 ops per MAC * clock)."""
        return round(self.int8_tops * 1e12 / (2 * self.clock_mhz * 1e6))

    @property
    def macs_per_cycle_int16(self) -> int:
        return round(self.macs_per_cycle_int8 * self.int16_rate)

    @property
    def ddr_bytes_per_cycle(self) -> float:
        return self.ddr_gbps * 1e9 / (self.clock_mhz * 1e6)

    def unit_of(self, op_name: str) -> str:
        """The unit an npu op runs on: its opcode's (``_units``); cpu else."""
        return _units().get(op_name, "cpu")


@functools.cache
def _units() -> dict[str, str]:
    """npu op -> unit, from each opcode's spec (``runtime/hbm_opcodes.py``: the
    one place an instruction's unit is stated); views are the DTE's. (Read when
    first asked: the spec loads numpy, which the command lines' ``--help`` does
    not.)"""
    from hbir.runtime.hbm_opcodes import OPCODES

    return {
        f"npu.{opcode.name}": "dte" if opcode.unit == "view" else opcode.unit
        for opcode in OPCODES
    }


NPUS: dict[str, NpuModel] = {
    March.nash_e.value: NpuModel(
        "nash-e", 80.0, 1000, 1 << 20, 51.2, 256, 16, 32, 0.25
    ),
    # nash-m: the public 128 TOPS; the rest as nash-e, except a larger DDR
    # interface (assumed).
    March.nash_m.value: NpuModel(
        "nash-m", 128.0, 1000, 1 << 20, 68.0, 256, 16, 32, 0.25
    ),
    # nash-p (J6P): 560 TOPS over 4 cores; nash-h (J6H): 420 TOPS over 3 cores;
    # nash-b (J6B): 18 TOPS, one core (the J6 deployment guides). The rest as
    # nash-e (assumed).
    March.nash_p.value: NpuModel(
        "nash-p", 560.0, 1000, 1 << 20, 102.4, 256, 16, 32, 0.25, cores=4
    ),
    March.nash_h.value: NpuModel(
        "nash-h", 420.0, 1000, 1 << 20, 102.4, 256, 16, 32, 0.25, cores=3
    ),
    March.nash_b.value: NpuModel(
        "nash-b", 18.0, 1000, 1 << 20, 25.6, 256, 16, 32, 0.25
    ),
    March.nash_b_lite.value: NpuModel(
        "nash-b-lite", 18.0, 1000, 1 << 20, 25.6, 256, 16, 32, 0.25
    ),
    March.nash_b_plus.value: NpuModel(
        "nash-b-plus", 18.0, 1000, 1 << 20, 25.6, 256, 16, 32, 0.25
    ),
}


def get_npu(name: str) -> NpuModel:
    return NPUS[get_march(name).name]


def accumulator_fits(terms: int, x_bits: int, w_bits: int, acc_bits: int = 32) -> bool:
    """Whether a ``terms``-long sum of ``x_bits`` x ``w_bits`` code products always
    fits the march's accumulator (worst case, both operands at their extremes)."""
    worst = terms * (1 << (x_bits - 1)) * (1 << (w_bits - 1))
    return worst <= (1 << (acc_bits - 1)) - 1
