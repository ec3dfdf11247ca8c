"""The reference's ``compile`` keywords: accepted where they mean something to
the march model, refused by name where they do not.

hbdk4's ``compile`` takes ``core_num``, ``balance``, ``input_no_padding``,
``output_no_padding``, ``cache_mode`` / ``cache_path``, ``max_l2m_size``,
``max_time_per_fc``, ``advice``, ``hbdk3_compatible_mode`` and ``enable_hpc``
(reference notes, hbdk4 4.1.17 / 4.9.7 and the j6-hbdk-compile driver). Each has
one rule below: what hbir does with it, or why a value is refused (a
``CompileOptionError`` naming the keyword, never a ``TypeError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hbir.errors import HbirValueError

CACHE_MODES = ("disable", "enable", "force_overwrite")


class CompileOptionError(HbirValueError):
    """A compile keyword hbir does not know, or a value the march model lacks."""


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _core_num(value, npu) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return "a positive number of cores"
    if value > npu.cores:
        return f"{npu.name} has {npu.cores} BPU core{'s' * (npu.cores > 1)}"
    return None


def _balance(value, npu) -> str | None:
    if not _number(value) or not 0 <= value <= 100:
        return "0 (least DDR traffic) .. 100 (least latency)"
    if value != 100:
        return "hbir's schedule is latency-first (balance=100): others not modelled"
    return None


def _bool(value, npu) -> str | None:
    # model.hbm's inputs and outputs are dense arrays (feed takes and gives
    # them unpadded): both settings hold
    return None if isinstance(value, bool) else "True or False"


def _cache_mode(value, npu) -> str | None:
    if value not in CACHE_MODES:
        return f"one of {', '.join(CACHE_MODES)}"
    if value != "disable":
        return (
            "hbir keeps no compile cache ('disable' only): save model.hbm and "
            "hbir.load it"
        )
    return None


def _cache_path(value, npu) -> str | None:
    return None if isinstance(value, str) else "a folder path (str)"


def _max_l2m_size(value, npu) -> str | None:
    if value in (None, 0):
        return None
    return f"{npu.name}'s model has no L2M (only its on-chip SRAM): 0 / None only"


def _max_time(value, npu) -> str | None:
    # hbir's compile has no time-bounded search: any budget is met
    return None if _number(value) and value >= 0 else "seconds >= 0"


def _advice(value, npu) -> str | None:
    if _number(value) and value == 0:
        return None
    return "0.0 only: per-op cost advice is hbir.hbm_perf's report"


def _off(what: str) -> Callable[[Any, Any], str | None]:
    def rule(value, npu) -> str | None:
        return None if value is False else f"False only: {what.format(npu.name)}"

    return rule


RULES: dict[str, Callable[[Any, Any], str | None]] = {
    "core_num": _core_num,
    "balance": _balance,
    "input_no_padding": _bool,
    "output_no_padding": _bool,
    "cache_mode": _cache_mode,
    "cache_path": _cache_path,
    "max_l2m_size": _max_l2m_size,
    "max_time_per_fc": _max_time,
    "advice": _advice,
    "hbdk3_compatible_mode": _off("hbir writes no hbdk3 format"),
    "enable_hpc": _off("{} has no HPC mode"),
}


def check(options: dict[str, Any], march: str) -> None:
    """Refuse any keyword without a rule, or a value its rule refuses."""
    from hbir.passes.march import get_npu

    npu = get_npu(march)
    for name, value in options.items():
        rule = RULES.get(name)
        if rule is None:
            raise CompileOptionError(
                f"hbir.compile: unknown keyword '{name}'; the reference's keywords "
                f"hbir takes: {', '.join(RULES)}"
            )
        why = rule(value, npu)
        if why is not None:
            raise CompileOptionError(f"hbir.compile: {name}={value!r}: {why}")
