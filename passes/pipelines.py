"""Named phases: the flat pass lists that take a model from one stage to the next.

``hbir-opt --compile-to=<phase>`` runs every phase up to and including that one,
verifying the module after each. Later issues fill the lists; an empty phase only
verifies.
"""

from __future__ import annotations

PHASES: dict[str, list[str]] = {
    "export": [],
    "convert": ["convert{march=nash-e}"],
    "compile": [],
}


def pipeline_up_to(phase: str) -> list[tuple[str, list[str]]]:
    """``[(phase, pass specs), ...]`` from the first phase through ``phase``."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase '{phase}': expected one of {list(PHASES)}")
    names = list(PHASES)
    return [(p, PHASES[p]) for p in names[: names.index(phase) + 1]]
