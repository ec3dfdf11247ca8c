"""Named phases: the flat pass lists that take a model from one stage to the next.

``hbir-opt --compile-to=<stop>`` runs every phase up to ``stop``, verifying the
module after each pass. ``stop`` is a phase (run it whole) or a pass of a phase (run
that phase up to and including the pass). A phase with no passes yet is an error.

* ``export``: what follows the 1:1 import of the torch graph
  (``hbir.quantization.export`` runs it; ``export(..., stop_after="import")`` gives
  the import alone).
* ``convert``: ``qat.bc`` to fixed point (``quantized.bc``).
* ``compile``: to the NPU (not built yet).
"""

from __future__ import annotations

PHASES: dict[str, list[str]] = {
    "export": ["configure-lut", "fold-constants", "cleanup"],
    "convert": ["convert{march=nash-e}"],
    "compile": [],
}


def _pass_name(spec: str) -> str:
    return spec.split("{", 1)[0]


def stop_points() -> list[str]:
    """What ``--compile-to`` accepts: every phase, and every pass of a phase."""
    points = list(PHASES)
    for specs in PHASES.values():
        points += [_pass_name(s) for s in specs if _pass_name(s) not in points]
    return points


def pipeline_up_to(stop: str) -> list[tuple[str, list[str]]]:
    """``[(phase, pass specs), ...]`` from the first phase through ``stop``."""
    if stop not in stop_points():
        raise ValueError(
            f"unknown phase or pass '{stop}': expected one of {stop_points()}"
        )
    pipeline: list[tuple[str, list[str]]] = []
    for phase, specs in PHASES.items():
        names = [_pass_name(s) for s in specs]
        if stop in names and stop != phase:
            return pipeline + [(phase, specs[: names.index(stop) + 1])]
        if not specs:
            raise ValueError(f"phase '{phase}' has no passes yet")
        pipeline.append((phase, specs))
        if phase == stop:
            return pipeline
    raise AssertionError("unreachable")
