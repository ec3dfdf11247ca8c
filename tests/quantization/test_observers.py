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
