"""Is the data normalised as the model was calibrated? The first user-side cause.

Every stage can agree bit for bit while the data itself is wrong: frames in
0..255 fed to a model calibrated on 0..1, or ImageNet normalisation forgotten.
The input ``QuantStub``'s calibrated range is the model's record of what its
inputs looked like. Over the stream, per input, :class:`InputCheck` counts the
values outside that range and the span the data takes of it, for the data as
given and for each common normalisation (``NORMALISATIONS``). The data is
called misnormalised when more than ``CLIPPED`` of its values are clipped and
it spans more than ``WIDE`` times the range, or when it spans less than
``NARROW`` of it; a normalisation fits when it leaves at most ``CLIPPED``
clipped and spans between ``NARROW`` and ``WIDE`` of the range (the closest
span to 1 is named). Calibration data itself spans about 1 and clips nothing,
so a model evaluated on data like it reports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CLIPPED = 0.01  # share of values outside the calibrated range
WIDE = 1.5  # data span over the calibrated span
NARROW = 0.1
_MEAN = np.array([0.485, 0.456, 0.406], np.float64)  # ImageNet, RGB
_STD = np.array([0.229, 0.224, 0.225], np.float64)


def _imagenet(x: np.ndarray, scale: float) -> np.ndarray | None:
    if x.ndim != 4 or x.shape[1] != 3:
        return None
    return (x / scale - _MEAN.reshape(1, 3, 1, 1)) / _STD.reshape(1, 3, 1, 1)


NORMALISATIONS = (
    ("x / 255", lambda x: x / 255.0),
    ("x / 127.5 - 1", lambda x: x / 127.5 - 1.0),
    ("x * 255", lambda x: x * 255.0),
    ("(x + 1) / 2", lambda x: (x + 1.0) / 2.0),
    ("2 x - 1", lambda x: 2.0 * x - 1.0),
    ("ImageNet mean / std of x / 255", lambda x: _imagenet(x, 255.0)),
    ("ImageNet mean / std of x", lambda x: _imagenet(x, 1.0)),
)


@dataclass
class _Stats:
    """Running count of clipped values and the data's extremes."""

    lo: float
    hi: float
    count: int = 0
    clipped: int = 0
    low: float = float("inf")
    high: float = float("-inf")

    def add(self, x: np.ndarray) -> None:
        self.count += x.size
        self.clipped += int(np.count_nonzero((x < self.lo) | (x > self.hi)))
        if x.size:
            self.low, self.high = (
                min(self.low, float(x.min())),
                max(self.high, float(x.max())),
            )

    @property
    def share(self) -> float:
        return self.clipped / self.count if self.count else 0.0

    @property
    def span(self) -> float:
        return (self.high - self.low) / (self.hi - self.lo) if self.count else 0.0


@dataclass
class InputRange:
    """One model input and the calibrated range of the fake quant it enters."""

    position: int
    name: str  # the placeholder's name
    key: tuple[str, int]  # the QuantStub's origin
    lo: float
    hi: float


def input_ranges(gm) -> list[InputRange]:
    """Each placeholder of a prepared model whose first user is a module with an
    output fake quant (the QuantStub), with that fake quant's range (half an
    LSB beyond its extreme codes)."""
    from hbir.profiler.origin import torch_keys
    from hbir.quantization.fake_quantize import FakeQuantize

    modules = dict(gm.named_modules())
    keys = torch_keys(gm)
    found = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for position, node in enumerate(placeholders):
        for user in node.users:
            module = modules.get(user.target)
            fq = getattr(module, "activation_post_process", None)
            if user.op != "call_module" or not isinstance(fq, FakeQuantize):
                continue
            if getattr(module, "op", None) != "quantize":  # an embedding's table
                break
            scale = fq.scale.detach().double().reshape(-1).numpy()
            zero = fq.zero_point.detach().double().reshape(-1).numpy()
            if scale.size != 1 or user not in keys:
                break
            s, z = float(scale[0]), float(zero[0])
            lo = (fq.quant_min - z - 0.5) * s
            hi = (fq.quant_max - z + 0.5) * s
            found.append(InputRange(position, node.name, keys[user], lo, hi))
            break
    return found


@dataclass
class InputCheck:
    """The data against the calibrated input ranges, over a stream."""

    ranges: list[InputRange]
    given: dict[int, _Stats] = field(default_factory=dict)
    tried: dict[tuple[int, str], _Stats] = field(default_factory=dict)

    def add(self, inputs: tuple) -> None:
        for r in self.ranges:
            if r.position >= len(inputs):
                continue
            x = inputs[r.position]
            x = x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)
            if not np.issubdtype(x.dtype, np.floating):  # ids: not normalised
                continue
            x = x.astype(np.float64)
            self.given.setdefault(r.position, _Stats(r.lo, r.hi)).add(x)
            for label, fn in NORMALISATIONS:
                y = fn(x)
                if y is not None:
                    stats = self.tried.setdefault(
                        (r.position, label), _Stats(r.lo, r.hi)
                    )
                    stats.add(y)

    def problem(self) -> tuple[InputRange, str] | None:
        """The first input whose data does not look like its calibration, and
        the sentence that says so (with the normalisation that fits, if one)."""
        for r in self.ranges:
            stats = self.given.get(r.position)
            if stats is None or not stats.count:
                continue
            wide = stats.share > CLIPPED and stats.span > WIDE
            narrow = stats.span < NARROW
            if not (wide or narrow):
                continue
            fits = [
                (abs(np.log(t.span)), label, t)
                for (position, label), t in self.tried.items()
                if position == r.position
                and t.share <= CLIPPED
                and NARROW <= t.span <= WIDE
            ]
            what = (
                f"{100 * stats.share:.1f}% of its values fall outside"
                if wide
                else f"it spans {100 * stats.span:.1f}% of"
            )
            text = (
                f"input '{r.name}': {what} the range its QuantStub was calibrated "
                f"on [{r.lo:.4g}, {r.hi:.4g}] (the data spans [{stats.low:.4g}, "
                f"{stats.high:.4g}])"
            )
            if fits:
                _, label, t = min(fits)
                text += (
                    f"; as {label} it would fit ({100 * t.share:.1f}% outside, "
                    f"{t.span:.2f} of the range): normalise the data as for "
                    "calibration and training"
                )
            else:
                text += (
                    "; no common normalisation fits: check the preprocessing against "
                    "the calibration data"
                )
            return r, text
        return None
