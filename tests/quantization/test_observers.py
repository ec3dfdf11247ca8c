"""Observers against independent numpy/torch statistics."""

import math

import numpy as np
import pytest
import torch

from hbir.quantization import (
    FixedScaleObserver,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    PerChannelMinMaxObserver,
    qint8,
    qint16,
)


def _batches(count=5, seed=0, growth=1.0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(256, 64, generator=g) * growth**i for i in range(count)]


def test_min_max_keeps_running_extremes():
    obs = MinMaxObserver()
    batches = _batches()
    for b in batches:
        obs(b)
    everything = torch.cat(batches)
    assert obs.min_val.item() == everything.min().item()
    assert obs.max_val.item() == everything.max().item()
    scale, zero_point = obs.calculate_qparams()
    absmax = max(-everything.min().item(), everything.max().item())
    assert scale.item() == np.float32(absmax) / np.float32(127.5)
    assert zero_point.tolist() == [0]


def test_moving_average_follows_the_ema_formula():
    obs = MovingAverageMinMaxObserver(averaging_constant=0.1)
    lo = hi = None
    for b in _batches(growth=1.5):
        obs(b)
        b64 = b.double()
        if lo is None:
            lo, hi = b64.min().item(), b64.max().item()
        else:
            lo += 0.1 * (b64.min().item() - lo)
            hi += 0.1 * (b64.max().item() - hi)
    assert obs.min_val.item() == pytest.approx(lo, rel=1e-6)
    assert obs.max_val.item() == pytest.approx(hi, rel=1e-6)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_per_channel_min_max_per_slice(axis):
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(axis))
    obs = PerChannelMinMaxObserver(ch_axis=axis)
    obs(x * 100)  # the default tracks the current tensor, so this one is forgotten
    obs(x)
    other = tuple(d for d in range(3) if d != axis)
    assert torch.equal(obs.min_val, x.amin(dim=other))
    assert torch.equal(obs.max_val, x.amax(dim=other))
    scale, _ = obs.calculate_qparams()
    absmax = torch.maximum(-x.amin(dim=other), x.amax(dim=other)).numpy()
    assert np.array_equal(scale.numpy(), absmax / np.float32(127.5))


def test_per_channel_running_mode_keeps_extremes():
    obs = PerChannelMinMaxObserver(ch_axis=0, averaging_constant=None)
    a, b = torch.randn(3, 4), torch.randn(3, 4) * 5
    obs(a)
    obs(b)
    assert torch.equal(obs.max_val, torch.maximum(a.amax(1), b.amax(1)))


def test_histogram_percentile_matches_numpy_quantile():
    obs = HistogramObserver(bins=2048, percentile=0.999)
    batches = _batches(count=6, growth=1.3)  # growing range: bins merge several times
    for b in batches:
        obs(b)
    magnitudes = torch.cat(batches).abs().flatten().numpy().astype(np.float64)
    assert obs.histogram.sum().item() == magnitudes.size
    bin_width = obs.upper.item() / obs.bins
    # The clip is the upper edge of the bin holding the sample of rank ceil(p * n).
    rank = math.ceil(0.999 * magnitudes.size)
    sample = np.sort(magnitudes)[rank - 1]
    assert sample - 1e-6 <= obs.absmax().item() <= sample + bin_width + 1e-6
    assert abs(obs.absmax().item() - np.quantile(magnitudes, 0.999)) < 0.01 * sample
    assert obs.upper.item() >= magnitudes.max()


def test_histogram_full_percentile_is_the_max():
    obs = HistogramObserver(percentile=1.0)
    x = torch.tensor([0.0, 0.5, -3.0, 1.0])
    obs(x)
    assert obs.absmax().item() == 3.0
    assert obs.min_val.item() == -3.0 and obs.max_val.item() == 1.0


def test_fixed_scale_ignores_data():
    obs = FixedScaleObserver(scale=1 / 128.0, dtype=qint8)
    obs(torch.randn(10) * 100)
    scale, _ = obs.calculate_qparams()
    assert scale.item() == 1 / 128.0
    assert obs.min_val.item() == -1.0 and obs.max_val.item() == 127 / 128


@pytest.mark.parametrize("dtype", [qint8, qint16])
def test_pot_scale_is_smallest_power_of_two_covering_the_range(dtype):
    for absmax in (0.3, 1.0, 5.7, 100.0):
        plain, pot = MinMaxObserver(dtype), MinMaxObserver(dtype, pot=True)
        for obs in (plain, pot):
            obs(torch.tensor([-absmax, absmax / 2]))
        s = plain.calculate_qparams()[0].item()
        p = pot.calculate_qparams()[0].item()
        assert math.log2(p) == round(math.log2(p))
        assert s <= p < 2 * s


def test_state_dict_restores_sizes_a_fresh_observer_has_not_seen():
    src = HistogramObserver(bins=8)
    src(torch.randn(50))
    dst = HistogramObserver(bins=8)
    dst.load_state_dict(src.state_dict())
    assert torch.equal(dst.histogram, src.histogram) and dst.upper == src.upper
    per_channel = PerChannelMinMaxObserver()
    per_channel(torch.randn(3, 2))
    fresh = PerChannelMinMaxObserver()
    fresh.load_state_dict(per_channel.state_dict())
    assert torch.equal(fresh.max_val, per_channel.max_val)


def test_invalid_arguments_are_rejected():
    with pytest.raises(ValueError, match="ch_axis"):
        PerChannelMinMaxObserver(ch_axis=-1)
    with pytest.raises(ValueError, match="bins"):
        HistogramObserver(bins=7)
    with pytest.raises(ValueError, match="positive"):
        FixedScaleObserver(scale=0.0)


# ---------------------------------------------------------------- MSE, Clip


def _numpy_best_clip(x: np.ndarray, bits: int, steps: int) -> float:
    """The MSE search in plain numpy: candidates absmax*k/steps, float32 scale
    absmax/((qmax-qmin)/2), half-to-even codes saturated, least mean error."""
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    x = x.astype(np.float64).ravel()
    peak = np.abs(x).max()
    best, best_err = None, np.inf
    for k in range(1, steps + 1):
        clip = peak * k / steps
        scale = np.float64(np.float32(np.float32(clip) / np.float32((qmax - qmin) / 2)))
        err = np.mean((np.clip(np.rint(x / scale), qmin, qmax) * scale - x) ** 2)
        if err < best_err:
            best, best_err = clip, err
    return best


@pytest.mark.parametrize("dtype", [qint8, qint16])
def test_mse_observer_picks_the_least_error_range(dtype):
    from hbir.quantization import MSEObserver

    g = torch.Generator().manual_seed(3)
    # heavy tails: the least-error range clips the outliers
    batches = [torch.randn(4096, generator=g) ** 3 for _ in range(3)]
    obs = MSEObserver(dtype=dtype, steps=64)
    for b in batches:
        obs(b)
    clips = [_numpy_best_clip(b.numpy(), dtype.bits, 64) for b in batches]
    assert float(obs.absmax()) == pytest.approx(np.mean(clips), rel=1e-6)
    if dtype == qint8:
        assert np.mean(clips) < 0.9 * max(float(b.abs().max()) for b in batches)
    scale, _ = obs.calculate_qparams()
    qmax = dtype.max
    expected = np.float32(np.float32(np.mean(clips)) / np.float32(qmax + 0.5))
    assert scale.item() == pytest.approx(float(expected), rel=1e-6)


def test_mse_observer_refuses_bad_steps():
    from hbir.quantization import MSEObserver

    with pytest.raises(ValueError, match="steps must be a positive integer"):
        MSEObserver(steps=0)


def test_clip_observer_bounds_the_running_range():
    from hbir.quantization import ClipObserver

    batches = _batches(3)
    obs = ClipObserver(xmin=-2.0, xmax=1.5)
    for b in batches:
        obs(b)
    everything = torch.cat(batches).numpy()
    absmax = max(-max(everything.min(), -2.0), min(everything.max(), 1.5))
    assert float(obs.absmax()) == pytest.approx(absmax)
    scale, _ = obs.calculate_qparams()
    assert scale.item() == pytest.approx(np.float32(absmax) / np.float32(127.5))
    # a range inside the bounds is kept as observed
    small = ClipObserver(xmin=-100.0, xmax=100.0)
    small(batches[0])
    assert float(small.absmax()) == pytest.approx(float(batches[0].abs().max()))


def test_clip_observer_refuses_a_range_without_zero():
    from hbir.quantization import ClipObserver

    with pytest.raises(ValueError, match="xmin <= 0 <= xmax"):
        ClipObserver(xmin=0.5, xmax=1.0)


def test_histogram_reset_scale_recomputes_from_the_gathered_histogram():
    from hbir.quantization import FakeQuantize

    g = torch.Generator().manual_seed(5)
    data = torch.randn(20000, generator=g) ** 3
    model = torch.nn.Sequential(FakeQuantize(HistogramObserver, qint8))
    model[0].enable_fake_quant(False)
    model(data)
    # the same histogram with another percentile, gathered afresh
    fresh = FakeQuantize(HistogramObserver, qint16, percentile=0.999)
    fresh.enable_fake_quant(False)
    fresh(data)
    count = HistogramObserver.reset_scale(
        model, method="percentile", method_kwargs={"percentile": 0.999}, dtype=qint16
    )
    assert count == 1
    assert model[0].dtype == qint16 and model[0].quant_max == 32767
    assert torch.equal(model[0].scale, fresh.scale)
    # "max" keeps the whole range: the largest magnitude seen
    HistogramObserver.reset_scale(model, method="max")
    expected = np.float32(data.abs().max().item()) / np.float32(32767.5)
    assert model[0].scale.item() == pytest.approx(float(expected), rel=1e-6)
    with pytest.raises(ValueError, match="method must be one of"):
        HistogramObserver.reset_scale(model, method="kl")
