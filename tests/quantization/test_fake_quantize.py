"""Fake quantization is torch's, bit for bit, and numerics.fake_quant's, forward and grad.

Test vectors: 1M values per scale, half random (spanning beyond the clamp range) and
half constructed ties ``(k + 0.5) * s``; the count of exact ties
``fl32(x * fl32(1 / s)) == k + 0.5`` is asserted so the tie coverage is real.
"""

import importlib
import warnings

import numpy as np
import pytest
import torch

from hbir.quantization import (
    FakeQuantize,
    MinMaxObserver,
    PerChannelMinMaxObserver,
    fake_quantize,
    qint8,
    qint16,
    set_round_mode,
)
from hbir.runtime import numerics, requantizer

fq_module = importlib.import_module("hbir.quantization.fake_quantize")

N = 1_000_000
SCALES = [0.0123, 2.0**-4, 0.00784, 0.02]


@pytest.fixture(autouse=True)
def _reset_round_mode():
    yield
    set_round_mode("half_even")


def _values(scale: float, qmax: int, seed: int = 0, n: int = N) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    random = torch.randn(n // 2, generator=g) * (qmax * scale * 0.7)
    k = torch.randint(-qmax - 20, qmax + 20, (n // 2,), generator=g).float()
    ties = ((k + 0.5) * scale).float()
    return torch.cat([random, ties])


def _exact_ties(x: np.ndarray, scale) -> int:
    v = (x * (np.float32(1) / np.float32(scale))).astype(np.float32)
    return int(np.count_nonzero(v - np.floor(v) == 0.5))


def _mask(x: np.ndarray, scale, qmin, qmax, mode, axis=None) -> np.ndarray:
    """Where the straight-through gradient passes: the unclamped code is in range."""
    s = np.asarray(scale, np.float32)
    if axis is not None:
        s = s.reshape([-1 if i == axis else 1 for i in range(x.ndim)])
    v = (x * (np.float32(1) / s).astype(np.float32)).astype(np.float32)
    q = numerics.round_float(v, mode)
    return (q >= qmin) & (q <= qmax)


@pytest.mark.parametrize("dtype", [qint8, qint16])
@pytest.mark.parametrize("scale", SCALES)
def test_per_tensor_half_even_bit_exact_forward_and_grad(scale, dtype):
    qmin, qmax = dtype.min, dtype.max
    x = _values(scale, qmax)
    assert _exact_ties(x.numpy(), scale) > N // 10
    s = torch.tensor([scale], dtype=torch.float32)
    zp = torch.zeros(1, dtype=torch.long)

    xa = x.clone().requires_grad_()
    ours = fake_quantize(xa, s, zp, qmin, qmax)
    xb = x.clone().requires_grad_()
    ref = torch.fake_quantize_per_tensor_affine(xb, s, zp.int(), qmin, qmax)
    assert torch.equal(ours, ref)
    expected = numerics.fake_quant(x.numpy(), s.numpy(), 0, qmin, qmax)
    assert np.array_equal(ours.detach().numpy(), expected)

    grad = torch.randn(N, generator=torch.Generator().manual_seed(1))
    ours.backward(grad)
    ref.backward(grad)
    assert torch.equal(xa.grad, xb.grad)
    mask = _mask(x.numpy(), scale, qmin, qmax, "half_even")
    assert 0 < mask.sum() < N
    assert np.array_equal(xa.grad.numpy(), np.where(mask, grad.numpy(), 0))


@pytest.mark.parametrize("zero_point", [0, 5, -3])
@pytest.mark.parametrize("dtype", [qint8, qint16])
@pytest.mark.parametrize("scale", SCALES)
def test_per_tensor_without_gradient_is_torchs_kernel_bit_for_bit(
    scale, dtype, zero_point
):
    """Without a gradient the forward is one compiled pass; it equals torch's
    kernel on ties, values past the range, infinities, NaN and -0.0, in NCHW
    and channels-last memory (the result keeps the input's strides)."""
    qmin, qmax = dtype.min, dtype.max
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e30])
    x = torch.cat([_values(scale, qmax), specials, -specials])
    s = torch.tensor([scale], dtype=torch.float32)
    zp = torch.tensor([zero_point], dtype=torch.int32)
    ref = torch.fake_quantize_per_tensor_affine(x, s, zp, qmin, qmax)
    with torch.no_grad():
        ours = fake_quantize(x, s, zp, qmin, qmax)
    assert torch.equal(ours.view(torch.int32), ref.view(torch.int32))  # bits
    if requantizer.loops() is not None:  # (the compiled pass is what ran)
        assert fq_module._compiled_per_tensor(x, s, zp, qmin, qmax) is not None
    image = x[: 4 * 16 * 32 * 32].reshape(4, 16, 32, 32)
    last = image.contiguous(memory_format=torch.channels_last)
    got = fake_quantize(last, s, zp, qmin, qmax)  # (no grad: plain tensor)
    assert got.is_contiguous(memory_format=torch.channels_last)
    want = torch.fake_quantize_per_tensor_affine(image, s, zp, qmin, qmax)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_per_channel_half_even_bit_exact_forward_and_grad():
    scales = torch.tensor(SCALES + [0.5, 2.0**-7, 0.0311, 1e-3], dtype=torch.float32)
    channels = len(scales)
    x = torch.stack(
        [_values(float(s), 127, seed=i, n=N // channels) for i, s in enumerate(scales)]
    )
    x = x.T.contiguous()  # channels on axis 1
    ties = sum(_exact_ties(x[:, c].numpy(), float(s)) for c, s in enumerate(scales))
    assert x.numel() == N and ties > N // 10
    zp = torch.zeros(channels, dtype=torch.long)

    xa = x.clone().requires_grad_()
    ours = fake_quantize(xa, scales, zp, -128, 127, ch_axis=1)
    xb = x.clone().requires_grad_()
    ref = torch.fake_quantize_per_channel_affine(xb, scales, zp.int(), 1, -128, 127)
    assert torch.equal(ours, ref)
    expected = numerics.fake_quant(
        x.numpy(), scales.numpy(), zp.numpy(), -128, 127, axis=1
    )
    assert np.array_equal(ours.detach().numpy(), expected)

    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    ours.backward(grad)
    ref.backward(grad)
    assert torch.equal(xa.grad, xb.grad)
    mask = _mask(x.numpy(), scales.numpy(), -128, 127, "half_even", axis=1)
    assert np.array_equal(xa.grad.numpy(), np.where(mask, grad.numpy(), 0))


@pytest.mark.parametrize("scale", SCALES)
def test_half_up_mode_matches_numerics_forward_and_grad(scale):
    set_round_mode("half_up")
    x = _values(scale, 127)
    s = torch.tensor([scale], dtype=torch.float32)
    xa = x.clone().requires_grad_()
    ours = fake_quantize(xa, s, torch.zeros(1, dtype=torch.long), -128, 127)
    expected = numerics.fake_quant(x.numpy(), s.numpy(), 0, -128, 127, mode="half_up")
    assert np.array_equal(ours.detach().numpy(), expected)
    # Ties differ from torch's half-to-even rounding, so the modes really differ.
    half_even = torch.fake_quantize_per_tensor_affine(
        x, s, torch.zeros(1, dtype=torch.int32), -128, 127
    )
    assert not torch.equal(ours.detach(), half_even)

    grad = torch.randn(N, generator=torch.Generator().manual_seed(3))
    ours.backward(grad)
    mask = _mask(x.numpy(), scale, -128, 127, "half_up")
    assert np.array_equal(xa.grad.numpy(), np.where(mask, grad.numpy(), 0))


def test_half_up_per_channel_matches_numerics():
    set_round_mode("half_up")
    scales = torch.tensor([0.0123, 2.0**-4, 0.02], dtype=torch.float32)
    x = torch.stack(
        [_values(float(s), 127, seed=i, n=50_000) for i, s in enumerate(scales)]
    )
    ours = fake_quantize(
        x, scales, torch.zeros(3, dtype=torch.long), -128, 127, ch_axis=0
    )
    expected = numerics.fake_quant(
        x.numpy(), scales.numpy(), 0, -128, 127, axis=0, mode="half_up"
    )
    assert np.array_equal(ours.numpy(), expected)


def test_ties_round_to_even_by_default_and_up_in_legacy_mode():
    s = torch.tensor([0.25])
    zp = torch.zeros(1, dtype=torch.long)
    ties = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]) * 0.25
    even = fake_quantize(ties, s, zp, -128, 127) / 0.25
    assert even.tolist() == [-2, -2, 0, 0, 2, 2]
    set_round_mode("half_up")
    up = fake_quantize(ties, s, zp, -128, 127) / 0.25
    assert up.tolist() == [-2, -1, 0, 1, 2, 3]


def test_round_mode_rejects_unknown_names():
    with pytest.raises(ValueError, match="half_even"):
        set_round_mode("nearest")


# ----------------------------------------------------------------- the module


def test_scale_is_absmax_over_half_the_code_range():
    for dtype in (qint8, qint16):
        fq = FakeQuantize(MinMaxObserver, dtype)
        x = torch.tensor([-3.0, 0.5, 2.0])
        fq(x)
        expected = np.float32(3.0) / np.float32((dtype.max - dtype.min) / 2)
        assert fq.scale.item() == expected
        assert fq.zero_point.item() == 0


def test_per_channel_weight_scales_follow_each_channel():
    fq = FakeQuantize(PerChannelMinMaxObserver, qint8, channel_len=3, ch_axis=0)
    w = torch.tensor([[1.0, -2.0], [0.25, 0.1], [-8.0, 4.0]])
    out = fq(w)
    assert torch.equal(fq.scale, torch.tensor([2.0, 0.25, 8.0]) / 127.5)
    assert fq.ch_axis == 0 and fq.qscheme == torch.per_channel_symmetric
    assert torch.equal(
        out,
        torch.fake_quantize_per_channel_affine(
            w, fq.scale, torch.zeros(3, dtype=torch.int32), 0, -128, 127
        ),
    )


def test_flags_select_observe_and_quantize():
    fq = FakeQuantize(MinMaxObserver, qint8)
    x = torch.linspace(-1, 1, 101)
    fq.enable_fake_quant(False)
    assert torch.equal(fq(x), x)  # observed only
    scale = fq.scale.clone()
    fq.enable_fake_quant(True).enable_observer(False)
    y = fq(x * 10)  # frozen scale: values beyond the old range saturate
    assert torch.equal(fq.scale, scale)
    assert y.max().item() == pytest.approx(127 * scale.item())


def test_repr_shows_the_fake_quant_fields_and_observer_range():
    fq = FakeQuantize(MinMaxObserver, qint16)
    fq(torch.tensor([-1.0, 2.0]))
    text = repr(fq)
    for field in (
        "fake_quant_enabled=tensor([1], dtype=torch.uint8)",
        "observer_enabled=tensor([1], dtype=torch.uint8)",
        "quant_min=-32768",
        "quant_max=32767",
        "dtype=qint16",
        "qscheme=torch.per_tensor_symmetric",
        "ch_axis=-1",
        f"scale={fq.scale!r}",
        "zero_point=tensor([0])",
        "MinMaxObserver(min_val=tensor(-1.), max_val=tensor(2.))",
    ):
        assert field in text, field


def test_state_dict_round_trip_restores_per_channel_scales():
    src = FakeQuantize(PerChannelMinMaxObserver, qint8, channel_len=4, ch_axis=0)
    src(torch.randn(4, 9))
    dst = FakeQuantize(PerChannelMinMaxObserver, qint8, channel_len=4, ch_axis=0)
    dst.load_state_dict(src.state_dict())
    assert torch.equal(dst.scale, src.scale)
    assert torch.equal(
        dst.activation_post_process.max_val, src.activation_post_process.max_val
    )


def test_version_1_checkpoint_switches_to_legacy_rounding():
    from hbir.quantization import is_legacy_round

    fq = FakeQuantize(MinMaxObserver, qint8)
    state = fq.state_dict()
    state._metadata[""]["version"] = 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        FakeQuantize(MinMaxObserver, qint8).load_state_dict(state)
    assert is_legacy_round()
    assert any("half-up" in str(w.message) for w in caught)


def test_float64_inputs_are_fake_quantized_in_float64():
    x = torch.tensor([2.0**30 + 3.0, -5.0], dtype=torch.float64)
    out = fake_quantize(
        x, torch.tensor([1.0]), torch.zeros(1, dtype=torch.long), -(2**31), 2**31 - 1
    )
    assert out.dtype == torch.float64
    assert out.tolist() == x.tolist()  # float32 could not hold 2**30 + 3
    # It picks the same codes as torch's float64 kernel (which then dequantizes in
    # float32, hence the comparison of codes).
    v = _values(0.0123, 32767).double() + torch.rand(N, dtype=torch.float64) * 1e-9
    s, zp = torch.tensor([0.0123]), torch.zeros(1, dtype=torch.long)
    ref = torch.fake_quantize_per_tensor_affine(v, s, zp.int(), -32768, 32767)
    ours = fake_quantize(v, s, zp, -32768, 32767)
    assert torch.equal(torch.round(ours / s.double()), torch.round(ref / s.double()))


def test_reset_dtype_recomputes_the_scale_from_the_observed_range():
    from hbir.quantization import MinMaxObserver, qint8, qint16

    x = torch.linspace(-3.0, 2.0, 101)
    fq = FakeQuantize(MinMaxObserver, qint8)
    fq(x)
    assert fq.scale.item() == np.float32(np.float32(3.0) / np.float32(127.5))
    fq.reset_dtype(qint16, update_scale=False)
    assert fq.quant_max == 32767 and fq.activation_post_process.dtype == qint16
    assert fq.scale.item() == np.float32(np.float32(3.0) / np.float32(127.5))
    fq.reset_dtype(qint16)
    assert fq.scale.item() == np.float32(np.float32(3.0) / np.float32(32767.5))
