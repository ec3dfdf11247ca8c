"""What each NPU march can run: one table, read by check-march and hbir.convert.

Limits follow the reference toolchain's published J6E / J6M constraints
(``reference-toolchain.md`` §5.3): int8 / int16 operands, gemm input and weight
not both int16, kernels up to 31, channels and gemm dims up to 8192, strides up
to 256, dilations up to 18.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class March:
    name: str
    operand_bits: tuple[int, ...]  # integer widths the NPU ops take
    gemm_both_int16: bool  # may input and weight both be int16?
    max_kernel: int
    max_channels: int
    max_gemm_dim: int
    max_stride: int
    max_dilation: int


MARCHES: dict[str, March] = {
    "nash-e": March("nash-e", (8, 16), False, 31, 8192, 8192, 256, 18),
    "nash-m": March("nash-m", (8, 16), False, 31, 8192, 8192, 256, 18),
}


class UnknownMarchError(ValueError):
    """A march name that is not in ``MARCHES``."""


def get_march(name: str) -> March:
    if name not in MARCHES:
        raise UnknownMarchError(
            f"unknown march '{name}': expected one of {', '.join(MARCHES)}"
        )
    return MARCHES[name]
