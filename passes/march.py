"""What each NPU march can run: one table, read by check-march and hbir.convert.

Limits follow the reference toolchain's published J6E / J6M constraints
(``reference-toolchain.md`` §5.3): int8 / int16 operands, gemm input and weight
not both int16, kernels up to 31, channels and gemm dims up to 8192, strides up
to 256, dilations up to 18.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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


class March(StrEnum):
    """The march names as an enum, ``hbir.March``: ``March.nash_e`` as hbdk4
    spells it, ``March.NASH_E`` as horizon_plugin_pytorch does. A member is the
    string itself (``March.nash_e == "nash-e"``), so it goes wherever a march
    string does."""

    nash_e = "nash-e"
    nash_m = "nash-m"
    NASH_E = "nash-e"
    NASH_M = "nash-m"


MARCHES: dict[str, MarchLimits] = {
    March.nash_e.value: MarchLimits("nash-e", (8, 16), False, 31, 8192, 8192, 256, 18),
    March.nash_m.value: MarchLimits("nash-m", (8, 16), False, 31, 8192, 8192, 256, 18),
}


class UnknownMarchError(ValueError):
    """A march name that is not in ``MARCHES``."""


def get_march(name: str) -> MarchLimits:
    if not isinstance(name, str) or name not in MARCHES:
        raise UnknownMarchError(
            f"unknown march '{name}': expected one of {', '.join(MARCHES)}"
        )
    return MARCHES[name]
