"""Per-layer comparison of two records, aggregated over a stream of batches.

``LayerDiff`` keeps, per torch call, what the reports need and nothing per
element: the worst metrics, min / max / mean of both sides and a fixed-size
histogram of the differences, so memory does not grow with the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hbir.profiler import metrics
from hbir.profiler.origin import Layer, Record, key_text

HIST_BINS = 21  # signed differences in LSB, clipped to [-10, 10]


@dataclass
class LayerDiff:
    key: tuple[str, int]
    base_op_type: str
    analy_op_type: str
    shape: str
    quant_dtype: str
    qscale: float | None
    op_id: int | None = None
    source: str = ""
    cosine: float = 1.0
    l1: float = 0.0
    atol: float = 0.0
    base_min: float = float("inf")
    analy_min: float = float("inf")
    base_max: float = float("-inf")
    analy_max: float = float("-inf")
    base_sum: float = 0.0
    analy_sum: float = 0.0
    count: int = 0
    batches: int = 0
    hist: np.ndarray = field(default_factory=lambda: np.zeros(HIST_BINS, np.int64))
    mismatch: bool = False
    instruction: int | None = None  # a compiled model's: the instruction's index

    @property
    def name(self) -> str:
        return key_text(self.key)

    @property
    def lsb(self) -> float | None:
        """``max_qscale_diff``: Atol in LSB of the layer's grid."""
        return self.atol / self.qscale if self.qscale else None

    def add(self, a: Layer, b: Layer) -> None:
        x, y = a.value, b.value
        if x.shape != y.shape:
            self.mismatch = True
            return
        self.batches += 1
        self.cosine = min(self.cosine, metrics.cosine(x, y))
        l1 = metrics.l1(x, y)
        self.l1 = max(self.l1, l1)
        self.atol = max(self.atol, metrics.atol(x, y))
        for side, v in (("base", x), ("analy", y)):
            if v.size:
                setattr(self, f"{side}_min", min(getattr(self, f"{side}_min"), v.min()))
                setattr(self, f"{side}_max", max(getattr(self, f"{side}_max"), v.max()))
                setattr(self, f"{side}_sum", getattr(self, f"{side}_sum") + v.sum())
        self.count += x.size
        scale = self.qscale or 1.0
        d = np.clip(np.rint((y.astype(np.float64) - x) / scale), -10, 10)
        self.hist += np.bincount((d + 10).astype(np.int64).ravel(), minlength=21)

    def row(self) -> dict:
        """The reference's ``compare_per_layer`` columns, in order."""
        mean = (lambda s: s / self.count) if self.count else (lambda s: None)
        ok = not self.mismatch
        return {
            "mod_name": self.name,
            "base_op_type": self.base_op_type,
            "analy_op_type": self.analy_op_type,
            "shape": self.shape if ok else "mismatch shape",
            "quant_dtype": self.quant_dtype,
            "qscale": self.qscale,
            "Cosine": self.cosine if ok else None,
            "L1": self.l1 if ok else None,
            "Atol": self.atol if ok else None,
            "max_qscale_diff": self.lsb if ok else None,
            "base_model_min": float(self.base_min),
            "analy_model_min": float(self.analy_min),
            "base_model_max": float(self.base_max),
            "analy_model_max": float(self.analy_max),
            "base_model_mean": mean(float(self.base_sum)),
            "analy_model_mean": mean(float(self.analy_sum)),
        }


@dataclass
class Comparison:
    """Per-layer differences of one stage pair, in the analysis' execution order."""

    layers: dict[tuple[str, int], LayerDiff] = field(default_factory=dict)
    only_baseline: dict[tuple[str, int], str] = field(default_factory=dict)
    only_analysis: dict[tuple[str, int], Layer] = field(default_factory=dict)
    output_atol: list[float] = field(default_factory=list)
    output_metrics: list[dict[str, float]] = field(default_factory=list)
    batches: int = 0

    def add(self, a: Record, b: Record, grids=None) -> None:
        self.batches += 1
        for key, lb in b.layers.items():
            la = a.layers.get(key)
            if la is None:
                self.only_analysis.setdefault(key, lb)
                continue
            diff = self.layers.get(key)
            if diff is None:
                qscale = lb.qscale if lb.qscale is not None else la.qscale
                if qscale is None and grids is not None and key in grids:
                    qscale = grids[key].qscale
                diff = LayerDiff(
                    key,
                    la.op_type,
                    lb.op_type,
                    str(tuple(lb.value.shape)),
                    lb.quant_dtype or la.quant_dtype,
                    qscale,
                    lb.op_id if lb.op_id is not None else la.op_id,
                    (lb.origin or la.origin).source if (lb.origin or la.origin) else "",
                    instruction=lb.instruction,
                )
                self.layers[key] = diff
            diff.add(la, lb)
        for key, la in a.layers.items():
            if key not in b.layers:
                self.only_baseline.setdefault(key, la.op_type)
        for i, (x, y) in enumerate(zip(a.outputs, b.outputs, strict=False)):
            values = {n: metrics.FUNCTIONS[n](x, y) for n in metrics.NAMES}
            if i >= len(self.output_metrics):
                self.output_metrics.append(values)
                self.output_atol.append(values["Atol"])
            else:
                for n, v in values.items():
                    if metrics.worse(n, v, self.output_metrics[i][n]):
                        self.output_metrics[i][n] = v
                self.output_atol[i] = self.output_metrics[i]["Atol"]
