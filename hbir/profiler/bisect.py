"""Automatic float-fallback bisection: the smallest float region that restores a metric.

Segmented float fallback by hand (``docs/bc-editor.md``) is: remove the fake
quants of a window of ``qat.bc`` IDs, convert, measure, halve the window. This
does it: split the window of every fake quant in two and descend into the half
whose fallback is closer to the reference, down to one fake quant; then take the
smallest window tried that restores the metric and shrink each end one fake
quant at a time while it stays restored. The result is the
bc_editor config that reproduces the region.

A window is evaluated by ``evaluate(edited_qat_bc) -> outputs`` (default:
``hbir.convert`` to ``march`` and run); the metric compares those outputs with
``reference`` (outputs of the model to recover, e.g. ``qat.pt`` or ``qat.bc``)
on every batch, and the worst batch counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hbir.errors import HbirError
from hbir.profiler import metrics


class BisectError(HbirError):
    """A bisection that cannot start: no fake quant, or nothing restores the metric."""


@dataclass
class Bisection:
    start: int  # first fake-quant ID of the window (qat.bc's get_asm numbering)
    end: int  # last one, included
    ids: list[int]  # the fake quants removed
    value: float  # the metric with the window in float
    baseline_value: float  # the metric with nothing in float
    evaluations: int
    float_ops: list[tuple[int, str, str]]  # (ID, op name, torch origin) made float

    @property
    def config(self) -> dict:
        """The bc_editor config that makes this window float."""
        entry = [self.start, self.end] if self.start != self.end else self.start
        return {"remove_fake_quant": [entry]}

    def text(self) -> str:
        return (
            f"float fallback of %{self.start}..%{self.end} ({len(self.ids)} fake "
            f"quants) brings the metric from {self.baseline_value:.6g} to "
            f"{self.value:.6g} ({self.evaluations} evaluations)\n"
            + "".join(f"  %{n} '{name}' <- {o}\n" for n, name, o in self.float_ops)
            + f"bc_editor config: {json.dumps(self.config)}"
        )


def bisect_float_fallback(
    qat_bc,
    data: Sequence[tuple],
    reference: Sequence[Sequence[np.ndarray]],
    threshold: float,
    metric: str = "Atol",
    march: str = "nash-e",
    evaluate: Callable | None = None,
) -> Bisection:
    """The smallest window of fake-quant IDs whose float fallback brings ``metric``
    (worst over ``data`` and outputs, against ``reference``) within ``threshold``.
    """
    from hbir.bc_editor import remove_fake_quant
    from hbir.dialects import qnt
    from hbir.dialects.op_ids import op_ids

    metric = metrics.canonical(metric)
    fn = metrics.FUNCTIONS[metric]
    larger_worse = metrics.LARGER_IS_WORSE[metric]
    function = qat_bc["forward"]
    fq = [
        n
        for n, op in op_ids(function.op).items()
        if isinstance(op, qnt.ConstFakeQuantOp)
    ]
    if not fq:
        raise BisectError(
            "bisect: the model has no qnt.const_fake_quant (a float model)"
        )
    if evaluate is None:
        evaluate = _convert_and_run(march)
    batches = [tuple(b) if isinstance(b, tuple | list) else (b,) for b in data]
    count = 0

    def measure(ids: list[int]) -> float:
        nonlocal count
        count += 1
        model = remove_fake_quant(qat_bc, ids) if ids else qat_bc
        worst = None
        for inputs, ref in zip(batches, reference, strict=True):
            for x, y in zip(ref, evaluate(model, inputs), strict=True):
                v = fn(np.asarray(x), np.asarray(y))
                if worst is None or metrics.worse(metric, v, worst):
                    worst = v
        return worst

    def ok(value: float) -> bool:
        return value <= threshold if larger_worse else value >= threshold

    base_value = measure([])
    if ok(base_value):
        raise BisectError(
            f"bisect: {metric} is already {base_value:.6g}, within {threshold:g}: "
            "nothing to restore"
        )
    # Bisection: of the two halves, descend into the one closer to the reference.
    # A float region adds its own float-vs-fixed-point difference, so the whole
    # model in float need not be within the threshold; the half holding the
    # fault is the better one.
    tried: list[tuple[int, int, float]] = []
    lo, hi = 0, len(fq) - 1
    while hi > lo:
        mid = (lo + hi) // 2
        halves = [(lo, mid), (mid + 1, hi)]
        values = [measure(fq[a : b + 1]) for a, b in halves]
        tried += [(a, b, v) for (a, b), v in zip(halves, values, strict=True)]
        best = min(range(2), key=lambda i: _badness(metric, values[i]))
        lo, hi = halves[best]
    restoring = [(b - a, a, b, v) for a, b, v in tried if ok(v)]
    if not restoring:
        # The float regions' own difference hid the fault from the halving:
        # try each torch call's fake quants alone (one window per origin).
        for a, b in _origin_windows(function.op, fq):
            v = measure(fq[a : b + 1])
            tried.append((a, b, v))
            if ok(v):
                restoring.append((b - a, a, b, v))
                break
    if not restoring:
        best = min(tried, key=lambda t: _badness(metric, t[2]), default=None)
        raise BisectError(
            f"bisect: no window restores {metric} within {threshold:g} (best "
            f"{best[2]:.6g} with %{fq[best[0]]}..%{fq[best[1]]}; the model "
            f"gives {base_value:.6g})"
            if best
            else f"bisect: {metric} cannot be restored"
        )
    _, lo, hi, value = min(restoring)
    # Shrink: drop fake quants from either end while the metric stays restored.
    for step in ("lo", "hi"):
        while hi > lo:
            trial = (lo + 1, hi) if step == "lo" else (lo, hi - 1)
            v = measure(fq[trial[0] : trial[1] + 1])
            if not ok(v):
                break
            (lo, hi), value = trial, v
    ids = fq[lo : hi + 1]
    return Bisection(
        fq[lo], fq[hi], ids, value, base_value, count, _float_ops(function.op, ids)
    )


def _float_ops(func_op, ids: list[int]) -> list[tuple[int, str, str]]:
    """The ops next to the removed fake quants (their producers and users)."""
    from hbir.dialects import qnt
    from hbir.dialects.op_ids import op_ids
    from hbir.profiler.origin import origin_of

    ops = op_ids(func_op)
    numbers = {op: n for n, op in ops.items()}
    found = {}
    for n in ids:
        fq = ops[n]
        near = [use.operation for use in fq.results[0].uses]
        near.append(fq.operands[0].owner)
        for op in near:
            if op in numbers and not isinstance(op, qnt.ConstFakeQuantOp):
                origin = origin_of(op)
                found[numbers[op]] = (numbers[op], op.name, str(origin or ""))
    return [found[k] for k in sorted(found)]


def _origin_windows(func_op, fq: list[int]) -> list[tuple[int, int]]:
    """Per torch call, in order, the span of indices into ``fq`` of its fake quants."""
    from hbir.dialects.op_ids import op_ids
    from hbir.profiler.origin import origin_of

    ops = op_ids(func_op)
    spans: dict = {}
    for i, n in enumerate(fq):
        origin = origin_of(ops[n])
        key = origin.key if origin is not None else ("", n)
        a, b = spans.get(key, (i, i))
        spans[key] = (min(a, i), max(b, i))
    return list(spans.values())


def _badness(metric: str, value: float) -> float:
    return value if metrics.LARGER_IS_WORSE[metric] else -value


def _convert_and_run(march: str) -> Callable:
    def run(model, inputs):
        from hbir.conversion import convert
        from hbir.profiler.stages import Stage

        return Stage("candidate", convert(model, march)).record(inputs).outputs

    return run


def hbir_outputs(model, inputs) -> list[np.ndarray]:
    """Outputs of an HBIR model on one batch (an ``evaluate`` without convert)."""
    from hbir.profiler.stages import Stage

    return Stage("candidate", model).record(inputs).outputs


def reference_outputs(model, data: Sequence[tuple]) -> list[list[np.ndarray]]:
    """Outputs of ``model`` (a prepared torch model or an HBIR model) per batch."""
    from hbir.profiler.stages import Stage

    stage = Stage("reference", model)
    if stage.kind == "torch":
        import torch

        from hbir.profiler.origin import _flatten

        with torch.no_grad():
            return [
                [t.detach().float().numpy() for t in _flatten(model(*b))] for b in data
            ]
    return [stage.record(b).outputs for b in data]
