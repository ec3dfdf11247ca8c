"""What each NPU march can run: one table, read by check-march and hbir.convert.

Per march (``MARCHES``): the integer widths its ops take, whether a gemm may read
two int16 operands, the IEEE float widths it computes in, the BPU units it has,
and the gemm limits. Each fact is cited where it is set; what the public sources
do not give is marked (assumed). ``lacks`` says why a march lacks an op or a
dtype (check-march refuses the op, naming it and the march); the limits mark an
op for the CPU instead (``passes/check_march.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum

from hbir.errors import HbirValueError

# The BPU's compute units as Horizon's J6B deployment guide lists them: TAE
# (gemm / conv), AAE (pool, resize, warp), DTE (layout), VAE (vector: LUT,
# elementwise), VPU (SIMT: quantize / dequantize and float fallback on J6E/M),
# SPU (RISC-V scalar: TopK).
UNITS = ("tae", "aae", "dte", "vae", "vpu", "spu")

# hbir ops the reference toolchain runs on a unit that hbir's NPU model does not
# have (hbir's npu.topk runs on its VAE): TopK on the SPU (Horizon's J6B
# deployment guide). Every other hbir op runs on a TAE / AAE / DTE / VAE unit or
# the CPU, which every J6 march has; quantize / dequantize at the model's edges
# run on the CPU in hbir's model.hbm, so a march without a VPU loses none of them.
OP_UNITS: dict[str, str] = {"hbir.topk": "spu"}


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
    units: tuple[str, ...] = UNITS  # the BPU's units (``UNITS``)
    source: str = ""  # the public source of the facts that differ per march

    def lacks(self, op_name: str, float_types: set[str]) -> str | None:
        """Why this march cannot run ``op_name`` on values of ``float_types``
        (element type names other than f32 / f64, e.g. "f16", "bf16"), or None."""
        unit = OP_UNITS.get(op_name)
        if unit is not None and unit not in self.units:
            return (
                f"is not supported on {self.name}: it runs on the "
                f"{unit.upper()}, which {self.name} lacks ({self.source})"
            )
        have = [f"f{b}" for b in self.float_bits]
        for t in sorted(float_types - set(have)):
            ints = "/".join(f"int{b}" for b in self.operand_bits)
            floats = "".join(f" and fp{b}" for b in self.float_bits)
            return (
                f"reads or makes {t}, which {self.name} lacks: it computes in "
                f"{ints}{floats} only ({self.source})"
            )
        return None


class March(StrEnum):
    """The march names as an enum, ``hbir.March``: ``March.nash_e`` as hbdk4
    spells it, ``March.NASH_E`` as horizon_plugin_pytorch does. A member is the
    string itself (``March.nash_e == "nash-e"``), so it goes wherever a march
    string does. ``March.get("nash-e")`` and ``.series`` as hbdk4's."""

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

    @classmethod
    def get(cls, name: str) -> March:
        """The member named ``name`` ("nash-e"); an unknown name is refused."""
        return cls(get_march(str(name)).name)

    @property
    def series(self) -> str:
        """The march family, as hbdk4's ``March.series``: "nash" for every J6."""
        return "nash"


_J6EM = "Horizon's J6E/M operator constraints and J6 deployment guide"
_J6HP = "Horizon's J6H/P deployment guide"
_J6B = "Horizon's J6B deployment guide"

# Limits (kernel 31, channels and gemm dims 8192, stride 256, dilation 18) are
# J6E's published constraints; on the other marches they are assumed the same.
_LIMITS = (31, 8192, 8192, 256, 18)

MARCHES: dict[str, MarchLimits] = {
    # J6E / J6M: int8 / int16, "input and weight cannot both be int16", no fp16
    # (full int8 / int16; the J6E constraint tables).
    March.nash_e.value: MarchLimits("nash-e", (8, 16), False, *_LIMITS, source=_J6EM),
    March.nash_m.value: MarchLimits("nash-m", (8, 16), False, *_LIMITS, source=_J6EM),
    # J6P / J6H: int8 + int16 + fp16 mixed precision, gemms with both operands
    # int16 ("GEMM 类算子双 int16").
    March.nash_p.value: MarchLimits(
        "nash-p", (8, 16), True, *_LIMITS, float_bits=(16,), source=_J6HP
    ),
    March.nash_h.value: MarchLimits(
        "nash-h", (8, 16), True, *_LIMITS, float_bits=(16,), source=_J6HP
    ),
    # J6B (nash-b, and its -lite / -plus (QNX) variants): BPU units TAE, AAE, DTE,
    # VAE and APM, no VPU and no SPU. Its TAE can write fp16 / fp32 outputs, but
    # with no VPU it computes no fp16 elsewhere: no fp16 here (hbir models no
    # float TAE output). int8 / int16, not both int16 in a gemm: (assumed) as
    # J6E, the J6B constraint tables not being public.
    **{
        name: MarchLimits(
            name,
            (8, 16),
            False,
            *_LIMITS,
            units=("tae", "aae", "dte", "vae"),
            source=_J6B,
        )
        for name in ("nash-b", "nash-b-lite", "nash-b-plus")
    },
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
#   one BPU core each; nash-p (J6P) 560 TOPS over 4 cores, nash-h (J6H) 420 over
#   3, nash-b (J6B) 18 TOPS on one core (Horizon's J6 toolchain documentation,
#   the J6B and J6H/P deployment guides; hbdk4's per-march core counts); the
#   units are ``UNITS``; the TAE post-process takes a si32 bias and a 32-bit
#   accumulator (its documented quantInfo fields, int32 conv outputs).
# * ASSUMED (not public; chosen to be plausible and labelled as such): the clock,
#   the SRAM (L1M) size, DDR bandwidth, the vector width, the channel alignment,
#   the int16 MAC rate, and that a chip's TOPS divide evenly over its cores. The
#   compiler only uses them for tiling, memory planning and the cycle estimate;
#   numerics never depend on them.


@dataclass(frozen=True)
class NpuModel:
    """The NPU of one march, as data (``get_npu``). Fields marked (assumed) are
    our estimates, not published figures."""

    name: str
    int8_tops: float  # public: dense int8 peak of the chip (all its cores)
    clock_mhz: int  # (assumed)
    sram_bytes: int  # (assumed) on-chip working memory one tile must fit in
    ddr_gbps: float  # (assumed) DDR bandwidth, GB/s
    vector_bytes: int  # (assumed) VAE width: bytes per cycle
    channel_align: int  # (assumed) channels are stored padded to a multiple
    acc_bits: int  # TAE accumulator and post-process width (si32)
    int16_rate: float  # (assumed) int16 x int8 MACs per int8 MAC
    cores: int = 1  # public: BPU cores (nash-p 4, nash-h 3, the others 1)

    @property
    def macs_per_cycle_int8(self) -> int:
        """int8 MACs per cycle of one core: TOPS / cores / (2 ops per MAC * clock)."""
        tops = self.int8_tops / self.cores
        return round(tops * 1e12 / (2 * self.clock_mhz * 1e6))

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
    # nash-p (J6P): 560 TOPS over 4 cores; nash-h (J6H): 420 TOPS over 3 cores
    # (Horizon's J6H/P deployment guide): 140 TOPS a core. SRAM a core as
    # nash-e's, DDR 102.4 GB/s (both assumed).
    March.nash_p.value: NpuModel(
        "nash-p", 560.0, 1000, 1 << 20, 102.4, 256, 16, 32, 0.25, cores=4
    ),
    March.nash_h.value: NpuModel(
        "nash-h", 420.0, 1000, 1 << 20, 102.4, 256, 16, 32, 0.25, cores=3
    ),
    # nash-b (J6B): 18 TOPS, one core (Horizon's J6B deployment guide); the -lite
    # and -plus (QNX) variants: the family's 18 TOPS and one core (hbdk4's core
    # counts; their own TOPS are not public: assumed). SRAM 512 KiB and DDR
    # 25.6 GB/s (assumed: a smaller part).
    **{
        name: NpuModel(name, 18.0, 1000, 1 << 19, 25.6, 256, 16, 32, 0.25)
        for name in ("nash-b", "nash-b-lite", "nash-b-plus")
    },
}


def get_npu(name: str) -> NpuModel:
    return NPUS[get_march(name).name]


def get_all_bpu_march_names() -> list[str]:
    """Every march name, as hbdk4's ``hbdk4.march.get_all_bpu_march_names()``."""
    return list(MARCHES)


def get_march_num_cores(march: str) -> int:
    """The BPU cores of ``march``, as hbdk4's ``get_march_num_cores``."""
    return get_npu(str(march)).cores


def accumulator_fits(terms: int, x_bits: int, w_bits: int, acc_bits: int = 32) -> bool:
    """Whether a ``terms``-long sum of ``x_bits`` x ``w_bits`` code products always
    fits the march's accumulator (worst case, both operands at their extremes)."""
    worst = terms * (1 << (x_bits - 1)) * (1 << (w_bits - 1))
    return worst <= (1 << (acc_bits - 1)) - 1
