"""Observers: record the range of a tensor and turn it into a symmetric scale.

Every observer keeps ``min_val`` / ``max_val`` buffers and computes
``scale = absmax / ((qmax - qmin) / 2)`` with
``hbir.runtime.numerics.scale_from_absmax`` (float32, never below eps). With
``pot=True`` the scale is rounded up to a power of two (``numerics.pot_scale``), which
keeps the observed range representable. Zero points are always 0 (symmetric).

Per-tensor observers report ``ch_axis = -1``; per-channel observers a non-negative axis.

Under ``torch.distributed`` every step reduces its batch statistics over the ranks
first (``hbir.quantization.distributed``), so all ranks calibrate one set of scales
from everyone's data.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from hbir.quantization import distributed
from hbir.quantization.dtypes import QuantDType, qint8
from hbir.runtime import numerics


class ObserverBase(nn.Module):
    """Shared state and scale computation of all observers."""

    qscheme = torch.per_tensor_symmetric
    ch_axis = -1

    def __init__(self, dtype: QuantDType = qint8, pot: bool = False) -> None:
        super().__init__()
        self.dtype = dtype
        self.pot = pot
        self.register_buffer("min_val", torch.tensor(float("inf")))
        self.register_buffer("max_val", torch.tensor(float("-inf")))

    def has_data(self) -> bool:
        """True once the observer has seen a tensor (its range is defined)."""
        return self.min_val.numel() > 0 and bool((self.min_val <= self.max_val).all())

    def absmax(self) -> torch.Tensor:
        return torch.maximum(-self.min_val, self.max_val).clamp_min(0)

    def calculate_qparams(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(float32 scale, int64 zero point), both 1-D (one entry per channel)."""
        absmax = self.absmax().detach().cpu().numpy()
        scale = numerics.scale_from_absmax(absmax, self.dtype.bits)
        if self.pot:
            scale = numerics.pot_scale(scale)
        scale = torch.from_numpy(np.atleast_1d(scale).astype(np.float32))
        return scale, torch.zeros(scale.shape, dtype=torch.long)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Per-channel and histogram buffers are sized by the first tensor observed;
        # a checkpoint may carry sizes this fresh module has not seen yet.
        for name, buf in self._buffers.items():
            saved = state_dict.get(prefix + name)
            if buf is not None and saved is not None and saved.shape != buf.shape:
                buf.resize_(saved.shape)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        text = f"min_val={self.min_val!r}, max_val={self.max_val!r}"
        return text + (", pot=True" if self.pot else "")


class MinMaxObserver(ObserverBase):
    """Per-tensor min/max: running extremes, or an EMA with ``averaging_constant``.

    ``averaging_constant=None`` keeps the running min/max over everything seen (the
    classic calibration observer); a value ``c`` in (0, 1] updates
    ``min += c * (batch_min - min)`` after the first batch.
    """

    def __init__(
        self,
        dtype: QuantDType = qint8,
        pot: bool = False,
        averaging_constant: float | None = None,
    ) -> None:
        super().__init__(dtype, pot)
        if averaging_constant is not None and not 0 < averaging_constant <= 1:
            raise ValueError(
                f"averaging_constant must be in (0, 1], got {averaging_constant}"
            )
        self.averaging_constant = averaging_constant

    def _batch_min_max(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.numel() == 0:  # (a rank's empty share of a distributed step)
            return torch.tensor(float("inf")), torch.tensor(float("-inf"))
        return torch.aminmax(x)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sync = distributed.active()
        if x.numel() == 0 and not sync:
            return x
        batch_min, batch_max = self._batch_min_max(x.detach().float())
        if sync:  # the step's statistics over every rank's batch
            batch_min, batch_max, _ = distributed.reduce_extremes(
                batch_min, batch_max, [float(self.has_data())], type(self).__name__
            )
            if not bool((batch_min <= batch_max).all()):
                return x  # every rank's batch was empty
        c = self.averaging_constant
        if not self.has_data() or c == 1:
            self.min_val.resize_(batch_min.shape).copy_(batch_min)
            self.max_val.resize_(batch_max.shape).copy_(batch_max)
        elif c is None:
            torch.minimum(self.min_val, batch_min, out=self.min_val)
            torch.maximum(self.max_val, batch_max, out=self.max_val)
        else:
            self.min_val.add_(c * (batch_min - self.min_val))
            self.max_val.add_(c * (batch_max - self.max_val))
        return x


class MovingAverageMinMaxObserver(MinMaxObserver):
    """Per-tensor min/max as an exponential moving average (the usual QAT observer)."""

    def __init__(
        self,
        dtype: QuantDType = qint8,
        pot: bool = False,
        averaging_constant: float = 0.01,
    ) -> None:
        super().__init__(dtype, pot, averaging_constant)


class PerChannelMinMaxObserver(MinMaxObserver):
    """Min/max per slice along ``ch_axis`` (weights: output channels).

    The default ``averaging_constant=1.0`` tracks the current tensor, which is what a
    weight needs while it trains; ``None`` keeps running extremes.
    """

    qscheme = torch.per_channel_symmetric

    def __init__(
        self,
        ch_axis: int = 0,
        dtype: QuantDType = qint8,
        pot: bool = False,
        averaging_constant: float | None = 1.0,
    ) -> None:
        super().__init__(dtype, pot, averaging_constant)
        if ch_axis < 0:
            raise ValueError(f"per-channel ch_axis must be >= 0, got {ch_axis}")
        self.ch_axis = ch_axis
        self.min_val = torch.empty(0)
        self.max_val = torch.empty(0)

    def _batch_min_max(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        channels = x.shape[self.ch_axis]
        if x.numel() == 0:
            inf = torch.full((channels,), float("inf"))
            return inf, -inf
        rows = x.transpose(0, self.ch_axis).reshape(channels, -1)
        return torch.aminmax(rows, dim=1)


class HistogramObserver(ObserverBase):
    """Calibration observer that clips the range at a percentile of ``|x|``.

    Keeps a histogram of ``|x|`` over ``[0, upper]`` in ``bins`` bins. When a batch
    exceeds ``upper``, the range doubles and pairs of bins merge, which is exact. The
    clipping point is the upper edge of the bin where the cumulative share of values
    reaches ``percentile`` (a fraction, e.g. 0.99999), capped at the largest ``|x|``.
    """

    def __init__(
        self,
        dtype: QuantDType = qint8,
        pot: bool = False,
        bins: int = 2048,
        percentile: float = 0.99999,
    ) -> None:
        super().__init__(dtype, pot)
        if bins < 2 or bins % 2:
            raise ValueError(f"bins must be an even number >= 2, got {bins}")
        if not 0 < percentile <= 1:
            raise ValueError(f"percentile must be in (0, 1], got {percentile}")
        self.bins = bins
        self.percentile = percentile
        self.register_buffer("histogram", torch.zeros(bins, dtype=torch.float64))
        self.register_buffer("upper", torch.tensor(0.0, dtype=torch.float64))

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sync = distributed.active()
        if x.numel() == 0 and not sync:
            return x
        x = x.detach()
        magnitudes = x.abs().flatten().double()
        if x.numel():
            batch_min, batch_max = torch.aminmax(x.float())
            peak = magnitudes.max()
        else:
            batch_min, batch_max = (
                torch.tensor(float("inf")),
                torch.tensor(-float("inf")),
            )
            peak = torch.tensor(0.0, dtype=torch.float64)
        if sync:  # the range over every rank's batch; the same history everywhere
            low, high, _ = distributed.reduce_extremes(
                torch.stack([batch_min.double(), torch.tensor(math.inf).double()]),
                torch.stack([batch_max.double(), peak]),
                [float(self.has_data()), float(self.upper)],
                type(self).__name__,
            )
            batch_min, batch_max = low[0].float(), high[0].float()
            peak = high[1]
            if not bool(batch_min <= batch_max):
                return x  # every rank's batch was empty
        if not self.has_data():
            self.min_val.copy_(batch_min)
            self.max_val.copy_(batch_max)
        else:
            torch.minimum(self.min_val, batch_min, out=self.min_val)
            torch.maximum(self.max_val, batch_max, out=self.max_val)
        if self.upper == 0:
            # Everything seen so far was 0 and sits in bin 0 for any range.
            self.upper.copy_(peak)
        while peak > self.upper:
            merged = self.histogram.view(-1, 2).sum(1)
            self.histogram.zero_()
            self.histogram[: self.bins // 2] = merged
            self.upper.mul_(2)
        if self.upper > 0:
            batch = torch.histc(magnitudes, self.bins, 0, float(self.upper))
        else:
            batch = torch.zeros_like(self.histogram)
            batch[0] = magnitudes.numel()
        self.histogram += distributed.reduce_sum(batch) if sync else batch
        return x

    def absmax(self) -> torch.Tensor:
        total = self.histogram.sum()
        if total == 0 or self.upper == 0:
            return torch.zeros(())
        cdf = torch.cumsum(self.histogram, 0) / total
        index = int(
            torch.searchsorted(cdf, torch.tensor(self.percentile, dtype=cdf.dtype))
        )
        index = min(index, self.bins - 1)
        clip = (index + 1) * float(self.upper) / self.bins
        return torch.tensor(min(clip, float(super().absmax())), dtype=torch.float32)

    RESET_METHODS = ("percentile", "max")

    @classmethod
    def reset_scale(
        cls,
        model: nn.Module,
        method: str = "percentile",
        method_kwargs: dict | None = None,
        dtype: QuantDType | None = None,
    ) -> int:
        """Recompute the scale of every fake quant of ``model`` whose observer is a
        ``HistogramObserver``, from the histogram calibration already gathered:
        ``"percentile"`` clips at ``method_kwargs["percentile"]`` (a fraction,
        default 0.99999), ``"max"`` keeps the whole range. ``dtype`` (None: keep)
        also changes their dtype. Returns how many were reset; the model needs
        no calibration run again (the reference's ``reset_scale``)."""
        from hbir.quantization.fake_quantize import FakeQuantize

        kwargs = dict(method_kwargs or {})
        if method not in cls.RESET_METHODS:
            raise ValueError(
                f"reset_scale: method must be one of {cls.RESET_METHODS}, "
                f"got {method!r}"
            )
        percentile = 1.0 if method == "max" else kwargs.pop("percentile", 0.99999)
        if kwargs:
            raise ValueError(
                f"reset_scale: unknown method_kwargs {sorted(kwargs)} for {method!r}"
            )
        if not 0 < percentile <= 1:
            raise ValueError(f"percentile must be in (0, 1], got {percentile}")
        count = 0
        for fq in model.modules():
            observer = getattr(fq, "activation_post_process", None)
            if not isinstance(fq, FakeQuantize) or not isinstance(observer, cls):
                continue
            observer.percentile = percentile
            fq.reset_dtype(fq.dtype if dtype is None else dtype)
            count += 1
        return count


class MSEObserver(ObserverBase):
    """Calibration observer that picks, per batch, the clipping range with the
    least fake-quantization error.

    For each batch, ``steps`` candidate ranges ``absmax * k / steps``
    (``k = 1 .. steps``) are tried: each one's scale (as every observer computes
    it) fake-quantizes the batch (half to even, saturated), and the candidate
    with the smallest mean squared error against the batch wins (the smallest
    range on ties). The range used is the mean of the batches' winners.
    """

    def __init__(
        self, dtype: QuantDType = qint8, pot: bool = False, steps: int = 100
    ) -> None:
        super().__init__(dtype, pot)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be a positive integer, got {steps!r}")
        self.steps = steps
        self.register_buffer("clip_sum", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("batches", torch.tensor(0, dtype=torch.long))

    def best_clip(self, x: torch.Tensor) -> float:
        """The candidate range with the least fake-quantization MSE on ``x``."""
        x = x.detach().double().flatten()
        peak = float(x.abs().max())
        if peak == 0:
            return 0.0
        clips = peak * torch.arange(1, self.steps + 1, dtype=torch.float64) / self.steps
        scales = numerics.scale_from_absmax(clips.numpy(), self.dtype.bits)
        scales = torch.from_numpy(scales.astype(np.float64))
        q = torch.round(x[None, :] / scales[:, None])
        q = q.clamp(self.dtype.min, self.dtype.max) * scales[:, None]
        errors = ((q - x[None, :]) ** 2).mean(dim=1)
        return float(clips[int(torch.argmin(errors))])

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if distributed.active():
            raise distributed.ObserverStateError(
                "MSEObserver picks its range per batch and does not reduce over "
                "ranks: calibrate it on one process (or use HistogramObserver)"
            )
        if x.numel() == 0:
            return x
        batch_min, batch_max = torch.aminmax(x.detach().float())
        if not self.has_data():
            self.min_val.copy_(batch_min)
            self.max_val.copy_(batch_max)
        else:
            torch.minimum(self.min_val, batch_min, out=self.min_val)
            torch.maximum(self.max_val, batch_max, out=self.max_val)
        self.clip_sum += self.best_clip(x)
        self.batches += 1
        return x

    def absmax(self) -> torch.Tensor:
        if int(self.batches) == 0:
            return torch.zeros(())
        return (self.clip_sum / self.batches).float()


class ClipObserver(MinMaxObserver):
    """Min/max, bounded: the running extremes clipped to ``[xmin, xmax]`` (a
    range known to hold what matters, outliers beyond it saturate)."""

    def __init__(
        self,
        xmin: float = -1.0,
        xmax: float = 1.0,
        dtype: QuantDType = qint8,
        pot: bool = False,
    ) -> None:
        super().__init__(dtype, pot)
        if not xmin <= 0 <= xmax or xmin == xmax:
            raise ValueError(
                f"ClipObserver needs xmin <= 0 <= xmax, not both 0; got [{xmin}, "
                f"{xmax}]"
            )
        self.xmin, self.xmax = float(xmin), float(xmax)

    def absmax(self) -> torch.Tensor:
        low = self.min_val.clamp(min=self.xmin)
        high = self.max_val.clamp(max=self.xmax)
        return torch.maximum(-low, high).clamp_min(0)

    def extra_repr(self) -> str:
        return f"xmin={self.xmin}, xmax={self.xmax}, " + super().extra_repr()


class FixedScaleObserver(ObserverBase):
    """A constant scale (e.g. a known input range); observing changes nothing.

    ``min_val`` / ``max_val`` show the covered range ``scale * qmin .. scale * qmax``.
    """

    def __init__(
        self, scale: float, dtype: QuantDType = qint8, pot: bool = False
    ) -> None:
        super().__init__(dtype, pot)
        if not scale > 0:
            raise ValueError(f"fixed scale must be positive, got {scale}")
        self.scale = float(np.float32(scale))
        self.min_val.fill_(self.scale * dtype.min)
        self.max_val.fill_(self.scale * dtype.max)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def calculate_qparams(self) -> tuple[torch.Tensor, torch.Tensor]:
        scale = np.float32(self.scale)
        if self.pot:
            scale = numerics.pot_scale(scale)
        return torch.tensor([scale], dtype=torch.float32), torch.zeros(
            1, dtype=torch.long
        )

    def extra_repr(self) -> str:
        return f"scale={self.scale}, " + super().extra_repr()
