"""Named phases: the flat pass lists that take a model from one stage to the next.

``hbir-opt --compile-to=<stop>`` runs every phase up to ``stop`` and verifies the
module once at the end (after each pass with ``--verify-each``: see
:func:`verify_each`). ``stop`` is a phase (run it whole) or a pass of a phase (run
that phase up to and including the pass). A phase with no passes yet is an error.

* ``export``: what follows the 1:1 import of the torch graph
  (``hbir.quantization.export`` runs it; ``export(..., stop_after="import")`` gives
  the import alone).
* ``convert``: ``qat.bc`` to fixed point (``quantized.bc``).
* ``compile``: ``quantized.bc`` to the ``npu`` dialect (``passes/npu_*.py``):
  lower, layout, fuse, tile, schedule, plan memory.

Passes that take ``march`` get it from the pipeline (``pipeline_up_to(stop,
march)``; ``hbir-opt --march``), so one march flows through every phase.
"""

from __future__ import annotations

import os

PHASES: dict[str, list[str]] = {
    "export": ["configure-lut", "fold-constants", "cleanup"],
    "convert": ["convert{march=nash-e}"],
    "compile": [
        "npu-lower{march=nash-e}",
        "npu-layout{march=nash-e}",
        "npu-fuse{march=nash-e}",
        "npu-tile{march=nash-e}",
        "npu-schedule{march=nash-e}",
        "npu-plan-memory{march=nash-e}",
    ],
}


# Set (to anything but "" or "0") to verify the module after every pass by
# default; the test suite sets it (tests/conftest.py), so every compile a test
# runs checks each pass's output.
VERIFY_EACH_ENV = "HBIR_VERIFY_EACH"


def verify_each(requested: bool | None = None) -> bool:
    """Whether to verify the module after every pass, not only once at the end.

    ``requested`` is the caller's choice (``--verify-each``, ``verify_each=``);
    None takes the default from the ``HBIR_VERIFY_EACH`` environment variable.
    Verifying after each pass names the pass that broke the IR; it costs about
    as much again as the passes themselves (docs/compile.md), so it is off
    outside the tests.
    """
    if requested is not None:
        return bool(requested)
    return os.environ.get(VERIFY_EACH_ENV, "") not in ("", "0")


def with_march(spec: str, march: str | None) -> str:
    """A pass spec with its ``march`` option set to ``march`` (None: unchanged)."""
    if march is None or "march=" not in spec:
        return spec
    import re

    return re.sub(r"march=[^ }]*", f"march={march}", spec)


def _pass_name(spec: str) -> str:
    return spec.split("{", 1)[0]


def stop_points() -> list[str]:
    """What ``--compile-to`` accepts: every phase, and every pass of a phase."""
    points = list(PHASES)
    for specs in PHASES.values():
        points += [_pass_name(s) for s in specs if _pass_name(s) not in points]
    return points


def pipeline_up_to(stop: str, march: str | None = None) -> list[tuple[str, list[str]]]:
    """``[(phase, pass specs), ...]`` from the first phase through ``stop``, with
    ``march`` (when given) passed to every pass that takes one."""
    return [
        (phase, [with_march(s, march) for s in specs])
        for phase, specs in _pipeline_up_to(stop)
    ]


def _pipeline_up_to(stop: str) -> list[tuple[str, list[str]]]:
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
