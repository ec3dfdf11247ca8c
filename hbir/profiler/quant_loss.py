"""Quantization loss in qat.pt itself: the float model against qat.pt, measured.

Every stage after qat.pt can be within its contract while qat.pt itself is
already far from the float model: a layer whose activation spans a wide range
with important small values (one outlier channel sets a per-tensor int8 scale
the other channels vanish under), or a calibration range clipped below what the
data reaches. :class:`FloatCheck` runs the float model next to qat.pt on every
batch and keeps the worst batch by output cosine (float outputs only; integer
outputs such as indices are not a distance). When the worst batch is below
``COSINE_TOLERANCE`` it measures, on that batch, on copies of qat.pt:

1. each fake quant made float alone (one-layer-at-a-time float fallback): the
   fake quants whose fallback recovers the most are the sensitive layers;
2. for the ``CANDIDATES`` most sensitive activation fake quants, the two
   mechanical remedies (``REMEDIES``): the layer in int16 (its observed range on
   the finer grid), and its scale widened to cover the largest ``|x|`` the data
   reaches there (the float model's value on every batch).

The best measured remedy names the cause: "quantization loss: int8 too
coarse" (int16 recovers it), "quantization loss: clipped calibration range" (a
wider range does), else "quantization loss" with the sensitive layers and the
figures, for a person (QAT, a model change). The float model is the user's
(``float_model``) or qat.pt with every fake quant off (its own weights: what
the reference's sensitivity compares against).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hbir.profiler import metrics

# A qat.pt whose outputs are this close to the float model's (cosine, worst
# batch and output) is taken as a good quantization: the zoo's int8 models reach
# 0.998 and more.
COSINE_TOLERANCE = 0.99
CANDIDATES = 3  # sensitive activation fake quants whose remedies are measured
INT16_CAUSE = "quantization loss: int8 too coarse"
RANGE_CAUSE = "quantization loss: clipped calibration range"
LOSS_CAUSE = "quantization loss"
CAUSES = (INT16_CAUSE, RANGE_CAUSE, LOSS_CAUSE)


@dataclass
class Remedy:
    """One mechanical remedy at one fake quant, measured on the worst batch."""

    kind: str  # "int16" | "range"
    fake_quant: str  # module path of the FakeQuantize
    cosine: float  # output cosine against the float model with the remedy
    change: str  # what it changes, in words

    @property
    def cause(self) -> str:
        return INT16_CAUSE if self.kind == "int16" else RANGE_CAUSE


@dataclass
class QuantLoss:
    """qat.pt against the float model over the data, and what was measured."""

    cosine: float  # worst output cosine over the batches
    batch: int  # its index
    tolerance: float
    # (fake quant path, output cosine with it alone float), most recovering first
    sensitive: list[tuple[str, float]] = field(default_factory=list)
    remedies: list[Remedy] = field(default_factory=list)
    # the largest |x| entering each activation fake quant in the float model
    ranges: dict[str, float] = field(default_factory=dict, repr=False)

    @property
    def within(self) -> bool:
        return self.cosine >= self.tolerance

    @property
    def concentrated(self) -> bool:
        """One fake quant made float recovers at least half the gap: the loss
        has a place (a loss spread thin over the model, or data-dependent
        selections such as a top-k that flip, has none to name)."""
        if not self.sensitive:
            return False
        return self.sensitive[0][1] - self.cosine >= 0.5 * (1 - self.cosine)

    @property
    def found(self) -> bool:
        """Beyond the tolerance with a layer to name: a doctor finding."""
        return not self.within and (self.best is not None or self.concentrated)

    @property
    def fake_quant(self) -> str | None:
        """The fake quant the finding names: the best remedy's, else the most
        sensitive."""
        if self.best is not None:
            return self.best.fake_quant
        return self.sensitive[0][0] if self.sensitive else None

    @property
    def best(self) -> Remedy | None:
        """The remedy with the best cosine, when it is within the tolerance
        (a wider range before int16 on a tie: it keeps int8)."""
        ranked = sorted(
            self.remedies, key=lambda r: (-r.cosine, r.kind != "range", r.fake_quant)
        )
        return ranked[0] if ranked and ranked[0].cosine >= self.tolerance else None

    @property
    def cause(self) -> str:
        best = self.best
        return best.cause if best is not None else LOSS_CAUSE

    def detail(self) -> str:
        text = (
            f"qat.pt's outputs have cosine {self.cosine:.6g} with the float model's "
            f"on batch {self.batch} (tolerance {self.tolerance:g})"
        )
        if self.sensitive:
            shown = ", ".join(f"{p} {c:.6g}" for p, c in self.sensitive[:CANDIDATES])
            text += f"; with one fake quant float, the cosine is: {shown}"
        if self.remedies:
            text += "; measured: " + ", ".join(
                f"{r.change}: {r.cosine:.6g}" for r in self.remedies
            )
        best = self.best
        if best is not None:
            return text + f"; so {_advice(best)}"
        return text + (
            "; neither int16 nor a wider calibration range at one layer recovers it:"
            " train with QAT or change the sensitive layers"
        )


def _advice(r: Remedy) -> str:
    owner = r.fake_quant.rsplit(".", 1)[0]
    if r.kind == "int16":
        return (
            f"quantize {owner} in int16 (QconfigSetter(module_name="
            f"{{{owner!r}: qint16}}) at prepare)"
        )
    return (
        f"calibrate {owner} on data reaching its range (or widen its observer: "
        "MinMaxObserver over the data, no percentile clipping)"
    )


class FloatCheck:
    """The float model next to qat.pt, batch by batch (see the module)."""

    def __init__(self, qat_model, float_model=None, tolerance=COSINE_TOLERANCE):
        self.qat = qat_model
        self.float_off = float_copy(qat_model)
        self.float_model = float_model
        self.tolerance = tolerance
        self.worst: tuple[float, int, tuple] | None = None
        self.count = 0
        self.ranges: dict[str, float] = {}
        self._hooks = [
            m.register_forward_pre_hook(self._ranger(name))
            for name, m in _fake_quants(self.float_off).items()
            if _is_activation(name)
        ]

    def _ranger(self, name: str) -> Callable:
        def hook(module, args):
            x = args[0]
            if x.is_floating_point() and x.numel():
                peak = float(x.detach().abs().max())
                self.ranges[name] = max(self.ranges.get(name, 0.0), peak)

        return hook

    def add(self, inputs: tuple) -> None:
        reference = _run(self.float_off, inputs)
        if self.float_model is not None:
            reference = _run(self.float_model, inputs)
        c = _cosine(reference, _run(self.qat, inputs))
        if self.worst is None or c < self.worst[0]:
            self.worst = (c, self.count, inputs)
        self.count += 1

    def result(self, measure: bool = True) -> QuantLoss | None:
        """The loss, with the sensitive layers and the measured remedies when it
        is beyond the tolerance (and ``measure``); None with no batch."""
        for h in self._hooks:
            h.remove()
        if self.worst is None:
            return None
        cosine, batch, inputs = self.worst
        loss = QuantLoss(cosine, batch, self.tolerance, ranges=dict(self.ranges))
        if loss.within or not measure:
            return loss
        reference = _run(self.float_model or self.float_off, inputs)

        def cosine_of(model) -> float:
            return _cosine(reference, _run(model, inputs))

        # toggled on a copy: the user's qat.pt is never touched, even briefly
        loss.sensitive = sensitive(copy.deepcopy(self.qat), cosine_of)
        candidates = [p for p, _ in loss.sensitive if _is_activation(p)]
        for path in candidates[:CANDIDATES]:
            for kind, apply in REMEDIES.items():
                model = copy.deepcopy(self.qat)
                change = apply(model, path, loss.ranges)
                if change is not None:
                    loss.remedies.append(Remedy(kind, path, cosine_of(model), change))
        return loss


def sensitive(qat_model, measure: Callable) -> list[tuple[str, float]]:
    """Each fake quant of ``qat_model`` turned off alone: (path, ``measure`` of
    the model), best recovered first (ties in execution order)."""
    found = []
    for index, (path, fq) in enumerate(_fake_quants(qat_model).items()):
        if not bool(fq.fake_quant_enabled[0]):
            continue
        fq.enable_fake_quant(False)
        try:
            found.append((path, measure(qat_model), index))
        finally:
            fq.enable_fake_quant(True)
    found.sort(key=lambda t: (-t[1], t[2]))
    return [(p, c) for p, c, _ in found]


def to_int16(model, path: str, ranges=None) -> str | None:
    """The fake quant at ``path`` in int16, its scale from its observer's range
    on the int16 grid (in place); None when it is int16 already."""
    from hbir.quantization.dtypes import qint16

    fq = model.get_submodule(path)
    if fq.dtype.bits >= 16:
        return None
    before = float(fq.scale.reshape(-1)[0])
    fq.dtype = fq.activation_post_process.dtype = qint16
    fq.quant_min, fq.quant_max = qint16.min, qint16.max
    fq._update_qparams()
    after = float(fq.scale.reshape(-1)[0])
    return f"{path} in int16 (scale {before:.6g} -> {after:.6g})"


def widen_range(model, path: str, ranges: dict[str, float]) -> str | None:
    """The scale of the fake quant at ``path`` widened to cover the largest
    ``|x|`` the data reaches there (in place); None when it covers it already."""
    import torch

    from hbir.runtime import numerics

    fq = model.get_submodule(path)
    peak = ranges.get(path)
    if peak is None or fq.scale.numel() != 1:
        return None
    scale = float(fq.scale[0])
    covered = scale * fq.quant_max
    if peak <= covered * (1 + 1e-6):
        return None
    wide = numerics.scale_from_absmax(np.float32(peak), fq.dtype.bits)
    if fq.pot:
        wide = numerics.pot_scale(wide)
    fq.scale.copy_(torch.tensor([float(wide)], dtype=torch.float32))
    return (
        f"{path} range {covered:.6g} -> {peak:.6g} (the data's max |x|; scale "
        f"{scale:.6g} -> {float(wide):.6g})"
    )


REMEDIES = {"int16": to_int16, "range": widen_range}


def apply(model, remedy: Remedy, ranges: dict[str, float]) -> str | None:
    """``remedy`` applied to ``model`` (in place: give a copy)."""
    return REMEDIES[remedy.kind](model, remedy.fake_quant, ranges)


def float_copy(qat_model):
    """A copy of ``qat_model`` with every fake quant off and no observer: the
    float model its weights compute."""
    model = copy.deepcopy(qat_model)
    for fq in _fake_quants(model).values():
        fq.enable_fake_quant(False)
        fq.enable_observer(False)
    return model


def _fake_quants(model) -> dict:
    from hbir.quantization.fake_quantize import FakeQuantize

    return {n: m for n, m in model.named_modules() if isinstance(m, FakeQuantize)}


def _is_activation(path: str) -> bool:
    """An activation (output or input) fake quant, not a weight's."""
    return not path.endswith("weight_fake_quant")


def _run(model, inputs: tuple) -> list[np.ndarray]:
    import torch

    from hbir.profiler.origin import _flatten

    with torch.no_grad():
        out = model(*inputs)
    return [t.detach().numpy() for t in _flatten(out) if isinstance(t, torch.Tensor)]


def _cosine(reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    """The worst cosine over the float outputs (integer outputs are skipped)."""
    from hbir.profiler.stages import StageError

    shapes = [np.shape(x) for x in reference], [np.shape(y) for y in outputs]
    if shapes[0] != shapes[1]:
        raise StageError(
            f"the float model's outputs (shapes {shapes[0]}) are not qat.pt's "
            f"({shapes[1]}): give the float model qat.pt was prepared from"
        )
    values = [
        metrics.cosine(x, y)
        for x, y in zip(reference, outputs, strict=True)
        if np.issubdtype(np.asarray(x).dtype, np.floating)
    ]
    return min(values, default=1.0)
