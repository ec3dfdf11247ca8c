"""The reference profiler's similarity metrics, on numpy arrays (float64 math).

Definitions as the reference toolchain's ``horizon_plugin_profiler`` computes them
in its ``_similarity.py``, ``x`` the baseline and ``y`` the analysis:

* Cosine: cosine similarity of the flattened tensors;
* MSE, L1: mean squared / mean absolute difference;
* KL: ``KLDivLoss(log_softmax(y), softmax(x))`` (mean over elements) along dim 1
  for tensors of more than 2 dims, else the last dim;
* SQNR: ``20 * log10(||x|| / ||x - y||)`` (inf when equal);
* Atol: ``max |x - y|``; Rtol: ``max |nan_to_num((x - y) / x)|``.

``ORDER`` says which way is worse: a larger value for the distances, a smaller
one for Cosine and SQNR (the reference sorts sensitivities that way).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hbir.errors import HbirValueError

NAMES = ("Cosine", "MSE", "L1", "KL", "SQNR", "Atol", "Rtol")
# True: larger is worse.
LARGER_IS_WORSE = {"Cosine": False, "SQNR": False} | dict.fromkeys(
    ("MSE", "L1", "KL", "Atol", "Rtol"), True
)


class MetricError(HbirValueError):
    """An unknown metric name."""


def _pair(x, y) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)


def cosine(x, y) -> float:
    x, y = _pair(x, y)
    x, y = x.ravel(), y.ravel()
    # torch.nn.CosineSimilarity: x.y / max(||x|| ||y||, eps)
    denom = max(float(np.linalg.norm(x) * np.linalg.norm(y)), 1e-8)
    return float(x @ y / denom)


def mse(x, y) -> float:
    x, y = _pair(x, y)
    return float(np.mean((x - y) ** 2))


def l1(x, y) -> float:
    x, y = _pair(x, y)
    return float(np.mean(np.abs(x - y)))


def _log_softmax(v: np.ndarray, axis: int) -> np.ndarray:
    v = v - v.max(axis=axis, keepdims=True)
    return v - np.log(np.exp(v).sum(axis=axis, keepdims=True))


def kl(x, y) -> float:
    x, y = _pair(x, y)
    axis = 1 if x.ndim > 2 else -1
    log_p = _log_softmax(x, axis)  # baseline (target)
    log_q = _log_softmax(y, axis)  # analysis (input)
    return float(np.mean(np.exp(log_p) * (log_p - log_q)))


def sqnr(x, y) -> float:
    x, y = _pair(x, y)
    noise = float(np.linalg.norm(x - y))
    if noise == 0.0:
        return float("inf")
    signal = float(np.linalg.norm(x))
    return float(20 * np.log10(signal / noise)) if signal else float("-inf")


def atol(x, y) -> float:
    x, y = _pair(x, y)
    return float(np.max(np.abs(x - y), initial=0.0))


def rtol(x, y) -> float:
    x, y = _pair(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.nan_to_num((x - y) / x)
    return float(np.max(np.abs(r), initial=0.0))


FUNCTIONS = {
    "Cosine": cosine,
    "MSE": mse,
    "L1": l1,
    "KL": kl,
    "SQNR": sqnr,
    "Atol": atol,
    "Rtol": rtol,
}


def metric(name: str):
    """The function for ``name`` (case-insensitive: the 3.x docs write "ATOL")."""
    for key, fn in FUNCTIONS.items():
        if key.lower() == name.lower():
            return fn
    raise MetricError(f"unknown metric {name!r}; known: {', '.join(NAMES)}")


def canonical(name: str) -> str:
    metric(name)
    return next(k for k in NAMES if k.lower() == name.lower())


def worse(name: str, a: float, b: float) -> bool:
    """Is ``a`` worse than ``b`` under metric ``name``?"""
    return a > b if LARGER_IS_WORSE[canonical(name)] else a < b


@dataclass(frozen=True)
class ElementDifference:
    """Where two same-shape arrays first differ (row-major), for messages that
    name the element and both values."""

    index: str  # "[3]", or "[1, 0, 2, 2]" for more dimensions
    value: object  # the first array's element there
    other: object  # the second's
    count: int  # elements that differ
    size: int


def first_difference(a: np.ndarray, b: np.ndarray) -> ElementDifference | None:
    """The first element where ``a`` and ``b`` (the same shape) differ, or None."""
    differ = np.argwhere(a != b)
    if not len(differ):
        return None
    at = tuple(int(v) for v in differ[0])
    index = f"[{at[0]}]" if len(at) == 1 else str(list(at))
    return ElementDifference(index, a[at].item(), b[at].item(), len(differ), a.size)
