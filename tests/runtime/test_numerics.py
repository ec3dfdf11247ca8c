"""runtime/numerics.py against torch and against exact rational arithmetic."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from hbir.runtime import numerics

HALF = Fraction(1, 2)


def exact_round(value: Fraction, mode: str) -> int:
    """The rounding definitions, on exact rationals (Python's round is half-even)."""
    return round(value) if mode == numerics.HALF_EVEN else math.floor(value + HALF)


# ------------------------------------------------------------------ ranges


def test_qrange_and_saturate():
    assert numerics.qrange(8) == (-128, 127)
    assert numerics.qrange(8, narrow_range=True) == (-127, 127)
    assert numerics.qrange(16) == (-(2**15), 2**15 - 1)
    x = np.array([-(2**40), -129, -128, 0, 127, 128, 2**40])
    np.testing.assert_array_equal(
        numerics.saturate(x, 8), [-128, -128, -128, 0, 127, 127, 127]
    )
    with pytest.raises(ValueError, match="bits"):
        numerics.qrange(1)


# ------------------------------------------------------------------ rounding


def test_round_float_half_even_vs_half_up():
    ties = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], np.float32)
    expect_even = [round(Fraction(float(v))) for v in ties]
    expect_up = [math.floor(Fraction(float(v)) + HALF) for v in ties]
    assert expect_even != expect_up
    np.testing.assert_array_equal(numerics.round_float(ties), expect_even)
    np.testing.assert_array_equal(
        numerics.round_float(ties, numerics.HALF_UP), expect_up
    )
    assert numerics.round_float(ties).dtype == np.float32
    with pytest.raises(ValueError, match="rounding mode"):
        numerics.round_float(ties, "nearest")


def test_round_float_matches_fraction_on_random_values():
    rng = np.random.default_rng(1)
    v = (rng.standard_normal(2000) * 100).astype(np.float32)
    v[:500] = rng.integers(-1000, 1000, 500) + np.float32(0.5)
    for mode in (numerics.HALF_EVEN, numerics.HALF_UP):
        expect = [exact_round(Fraction(float(a)), mode) for a in v]
        np.testing.assert_array_equal(numerics.round_float(v, mode), expect)


def _shift_cases(rng):
    """(x, n) pairs: random values, and exact ties x = k * 2**n + 2**(n-1), both signs."""
    n = rng.integers(0, 41, 6000)
    x = rng.integers(-(2**40), 2**40, 6000)
    tie_n = rng.integers(1, 41, 3000)
    k = rng.integers(-(2**20), 2**20, 3000)
    ties = k * (1 << tie_n) + (1 << (tie_n - 1))
    return np.concatenate([x, ties, -ties]), np.concatenate([n, tie_n, tie_n])


@pytest.mark.parametrize("mode", [numerics.HALF_EVEN, numerics.HALF_UP])
def test_shift_round_matches_fraction(mode):
    x, n = _shift_cases(np.random.default_rng(2))
    got = numerics.shift_round(x, n, mode)
    expect = [
        exact_round(Fraction(int(a), 2 ** int(b)), mode)
        for a, b in zip(x, n, strict=True)
    ]
    np.testing.assert_array_equal(got, expect)


def test_shift_round_zero_and_left_shifts():
    x = np.array([-7, -1, 0, 3, 2**20])
    np.testing.assert_array_equal(numerics.shift_round(x, 0), x)
    np.testing.assert_array_equal(numerics.shift_round(x, -3), x * 8)
    np.testing.assert_array_equal(
        numerics.shift_round(x, np.array([0, 1, 2, -1, 3])),
        [-7, round(Fraction(-1, 2)), 0, 6, 2**17],
    )


@pytest.mark.parametrize("mode", [numerics.HALF_EVEN, numerics.HALF_UP])
def test_divide_round_matches_fraction(mode):
    rng = np.random.default_rng(3)
    den = rng.integers(1, 60, 20000)
    num = rng.integers(-(2**40), 2**40, 20000)
    # exact ties: num = k * den + den / 2 for even den
    even = den[:5000] * 2
    num_ties = rng.integers(-1000, 1000, 5000) * even + even // 2
    num, den = np.concatenate([num, num_ties]), np.concatenate([den, even])
    got = numerics.divide_round(num, den, mode)
    expect = [
        exact_round(Fraction(int(a), int(b)), mode)
        for a, b in zip(num, den, strict=True)
    ]
    np.testing.assert_array_equal(got, expect)
    assert got.dtype == np.int64


def test_divide_round_rejects_zero_divisor():
    with pytest.raises(ValueError, match="positive"):
        numerics.divide_round(np.array([1]), 0)


# ------------------------------------------------------------------ quantization vs torch


PER_TENSOR = [
    # scale, zero point, qmin, qmax
    (0.0234, 0, -128, 127),
    (2.0**-4, 3, -128, 127),  # power of two: x * (1/s) is exact, so ties are exact
    (0.1, 128, 0, 255),
    (1e-3, -7, -(2**15), 2**15 - 1),
]


def _values_with_ties(rng, scale, zp, qmin, qmax, n=1_000_000):
    """1M floats over the range and beyond, 20% of them at (k + 0.5) * scale."""
    s = np.float32(scale)
    x = (rng.standard_normal(n) * float(s) * (qmax - qmin) / 4).astype(np.float32)
    k = rng.integers(qmin - zp - 4, qmax - zp + 4, n // 5)
    x[: n // 5] = ((k + 0.5) * float(s)).astype(np.float32)
    return x


@pytest.mark.parametrize("scale, zp, qmin, qmax", PER_TENSOR)
def test_fake_quant_matches_torch_per_tensor(scale, zp, qmin, qmax):
    rng = np.random.default_rng(4)
    x = _values_with_ties(rng, scale, zp, qmin, qmax)
    s = np.float32(scale)
    ref = torch.fake_quantize_per_tensor_affine(
        torch.from_numpy(x), float(s), zp, qmin, qmax
    ).numpy()
    got = numerics.fake_quant(x, s, zp, qmin, qmax)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ref)
    if scale == 2.0**-4:  # the tie inputs really are ties, and go to even codes
        v = x[:200_000] * np.float32(1 / s)
        assert np.all(v - np.floor(v) == 0.5)
        q = numerics.quantize(x[:200_000], s, zp, -(2**20), 2**20)
        assert np.all((q - zp) % 2 == 0)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_fake_quant_matches_torch_per_channel(axis):
    rng = np.random.default_rng(6)
    shape = [8, 16, 4, 8]
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    channels = shape[axis]
    scales = rng.uniform(0.005, 0.1, channels).astype(np.float32)
    zps = rng.integers(-10, 10, channels)
    # put exact-ish ties on channel 0
    sl = [slice(None)] * 4
    sl[axis] = 0
    ties = rng.integers(-100, 100, x[tuple(sl)].shape) + 0.5
    x[tuple(sl)] = (ties * float(scales[0])).astype(np.float32)
    ref = torch.fake_quantize_per_channel_affine(
        torch.from_numpy(x),
        torch.from_numpy(scales),
        torch.from_numpy(zps.astype(np.int32)),
        axis % 4,
        -128,
        127,
    ).numpy()
    got = numerics.fake_quant(x, scales, zps, -128, 127, axis=axis)
    np.testing.assert_array_equal(got, ref)


def test_quantize_half_up_matches_fraction():
    rng = np.random.default_rng(7)
    s = np.float32(2.0**-3)
    x = ((rng.integers(-200, 200, 5000) + 0.5) * float(s)).astype(np.float32)
    x[:2000] = rng.standard_normal(2000).astype(np.float32) * 8
    q = numerics.quantize(x, s, 2, -128, 127, mode=numerics.HALF_UP)
    expect = [
        min(max(exact_round(Fraction(float(v)) * 8, numerics.HALF_UP) + 2, -128), 127)
        for v in x
    ]
    np.testing.assert_array_equal(q, expect)


def test_dequantize_is_float32_product():
    q = np.array([-128, -1, 0, 5, 127])
    got = numerics.dequantize(q, np.float32(0.1), 3)
    expect = [np.float32(np.float32(v - 3) * np.float32(0.1)) for v in q]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expect)


# ------------------------------------------------------------------ scales


@pytest.mark.parametrize("bits, narrow", [(8, False), (8, True), (16, False)])
def test_scale_from_min_max_recovers_float32_scales(bits, narrow):
    rng = np.random.default_rng(8)
    qmin, qmax = numerics.qrange(bits, narrow)
    scales = (10.0 ** rng.uniform(-6, 2, 5000)).astype(np.float32)
    zps = rng.integers(qmin, qmax + 1, 5000)
    zps[:1000] = 0  # symmetric, as export writes it
    lo = scales.astype(np.float64) * (qmin - zps)
    hi = scales.astype(np.float64) * (qmax - zps)
    got_scale, got_zp = numerics.scale_from_min_max(lo, hi, bits, narrow)
    assert got_scale.dtype == np.float32
    np.testing.assert_array_equal(got_scale, scales)
    np.testing.assert_array_equal(got_zp, zps)


def test_const_fake_quant_equals_fake_quant_of_recovered_scale():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(10000) * 10).astype(np.float32)
    s = np.float32(0.1)
    got = numerics.const_fake_quant(x, -128 * 0.1, 127 * 0.1, 8)
    ref = torch.fake_quantize_per_tensor_affine(
        torch.from_numpy(x), float(s), 0, -128, 127
    )
    np.testing.assert_array_equal(got, ref.numpy())


def test_scale_from_absmax_and_pot_scale():
    s = numerics.scale_from_absmax(np.array([12.7, 0.0]), 8)
    np.testing.assert_array_equal(
        s, [np.float32(12.7) / np.float32(127.5), np.finfo(np.float32).eps]
    )
    got = numerics.pot_scale(np.array([0.3, 0.25, 1e-3]))
    np.testing.assert_array_equal(got, [0.5, 0.25, 2.0**-9])


# ------------------------------------------------------------------ requantization


def test_quantize_multiplier_accuracy():
    rng = np.random.default_rng(10)
    reals = 10.0 ** rng.uniform(-12, 9, 3000)
    for real in [*reals, 0.25, 1.0, 2.0**-40, 3.0]:
        m, s = numerics.quantize_multiplier(float(real))
        assert 2**30 <= m < 2**31
        err = abs(Fraction(m, 1) / Fraction(2) ** s - Fraction(float(real)))
        assert err <= Fraction(float(real)) / 2**31
    assert numerics.quantize_multiplier(0.25) == (2**30, 32)  # powers of two: exact
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="positive and finite"):
            numerics.quantize_multiplier(bad)


@pytest.mark.parametrize("mode", [numerics.HALF_EVEN, numerics.HALF_UP])
def test_requantize_matches_fraction(mode):
    rng = np.random.default_rng(11)
    acc = rng.integers(-(2**31), 2**31, 6000)
    acc[:4] = [2**31 - 1, -(2**31), 0, -1]
    multipliers = rng.integers(2**30, 2**31, 6000)
    shifts = rng.integers(25, 45, 6000)
    # ties: multiplier 2**30 and shift 31 halve acc, odd acc is an exact tie
    multipliers[-2000:], shifts[-2000:] = 2**30, 31
    acc[-2000:] = rng.integers(-120, 120, 2000) * 2 + 1
    zp = -3
    got = numerics.requantize(
        acc, multipliers, shifts, zp, -128, 127, axis=0, mode=mode
    )
    expect = [
        min(
            max(exact_round(Fraction(int(a) * int(m), 2 ** int(s)), mode) + zp, -128),
            127,
        )
        for a, m, s in zip(acc, multipliers, shifts, strict=True)
    ]
    np.testing.assert_array_equal(got, expect)
    assert len(set(got[-2000:].tolist())) > 100  # the ties were not all clamped away


def test_requantize_per_channel_broadcasts_along_axis():
    acc = np.arange(-12, 12).reshape(2, 3, 4) * 500
    m = np.array([2**30, 3 * 2**29, 2**30 + 12345])
    s = np.array([36, 37, 38])
    got = numerics.requantize(acc, m, s, 0, -128, 127, axis=1)
    for c in range(3):
        expect = [
            round(Fraction(int(a) * int(m[c]), 2 ** int(s[c])))
            for a in acc[:, c].ravel()
        ]
        np.testing.assert_array_equal(got[:, c].ravel(), np.clip(expect, -128, 127))
    assert got.min() > -128 and got.max() < 127  # nothing was clamped


# ------------------------------------------------------------------ colour (BT.601)


def _rgb_grid(step=3):
    v = np.arange(0, 256, step)
    return np.meshgrid(v, v, v, indexing="ij")


def _bt601_float(r, g, b):
    """The real-valued definition: Y = .299 R + .587 G + .114 B, Cb, Cr around 128."""
    r, g, b = (p.astype(np.float64) for p in (r, g, b))
    y = 0.299 * r + 0.587 * g + 0.114 * b
    return y, (b - y) / 1.772, (r - y) / 1.402


def test_bt601_full_forward_matches_float_formula():
    r, g, b = _rgb_grid()
    y, cb, cr = _bt601_float(r, g, b)
    got = numerics.rgb_to_yuv_bt601_full(r, g, b)
    for plane, ref in zip(got, (y, cb + 128, cr + 128), strict=True):
        assert np.abs(plane - np.clip(ref, 0, 255)).max() < 0.51
    # the JPEG anchors: white, black, pure red
    assert tuple(map(int, numerics.rgb_to_yuv_bt601_full(255, 255, 255))) == (
        255,
        128,
        128,
    )
    assert tuple(map(int, numerics.rgb_to_yuv_bt601_full(0, 0, 0))) == (0, 128, 128)
    red = numerics.rgb_to_yuv_bt601_full(255, 0, 0)
    assert tuple(map(int, red)) == (
        round(0.299 * 255),
        round(128 - 0.168736 * 255),
        255,
    )


def test_bt601_full_inverse_matches_float_formula():
    y, u, v = _rgb_grid()
    cb, cr = u - 128.0, v - 128.0
    ref = (y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb)
    for plane, r in zip(numerics.yuv_to_rgb_bt601_full(y, u, v), ref, strict=True):
        assert np.abs(plane - np.clip(r, 0, 255)).max() < 0.51


def test_bt601_video_matches_float_formula():
    r, g, b = _rgb_grid()
    y, cb, cr = _bt601_float(r, g, b)
    ref = (16 + y * 219 / 255, 128 + cb * 224 / 255, 128 + cr * 224 / 255)
    for plane, f in zip(numerics.rgb_to_yuv_bt601_video(r, g, b), ref, strict=True):
        assert np.abs(plane - f).max() < 1.0  # Q8 coefficients
    assert tuple(map(int, numerics.rgb_to_yuv_bt601_video(255, 255, 255))) == (
        235,
        128,
        128,
    )
    assert tuple(map(int, numerics.rgb_to_yuv_bt601_video(0, 0, 0))) == (16, 128, 128)
    yy, u, v = _rgb_grid()
    c, d, e = (yy - 16) * 255 / 219, (u - 128) * 255 / 224, (v - 128) * 255 / 224
    ref = (c + 1.402 * e, c - 0.344136 * d - 0.714136 * e, c + 1.772 * d)
    for plane, f in zip(numerics.yuv_to_rgb_bt601_video(yy, u, v), ref, strict=True):
        assert np.abs(plane - np.clip(f, 0, 255)).max() < 1.0


@pytest.mark.parametrize("kind, tolerance", [("full", 1), ("video", 3)])
def test_bt601_round_trip(kind, tolerance):
    """RGB -> YUV -> RGB; measured maxima over all colours: 1 (Q16), 3 (Q8)."""
    forward = getattr(numerics, f"rgb_to_yuv_bt601_{kind}")
    inverse = getattr(numerics, f"yuv_to_rgb_bt601_{kind}")
    rgb = _rgb_grid(step=2)
    back = inverse(*forward(*rgb))
    errors = [np.abs(a - b) for a, b in zip(back, rgb, strict=True)]
    assert max(e.max() for e in errors) == tolerance
    assert all(p.dtype == np.int64 and p.min() >= 0 and p.max() <= 255 for p in back)


# ---------------------------------------------------------------- half-up, float64


def test_half_up_does_not_round_in_the_addition():
    # floor(v + 0.5) in float32 turns 0.49999997 into 1 and 2**23 + 1 into 2**23 + 2.
    v = np.array([0.49999997, 8388609.0, -0.5, 2.5, -2.5, 1.5], np.float32)
    got = numerics.round_float(v, numerics.HALF_UP)
    want = [math.floor(Fraction(float(x)) + Fraction(1, 2)) for x in v]
    assert got.tolist() == want


def test_float64_fake_quant_stays_float64_and_exact_for_32_bit_codes():
    scale = np.float32(2.0**-10)
    codes = np.array([2**24 + 1, -(2**30) + 3, 12345678], np.int64)
    x = codes.astype(np.float64) * float(scale)
    y = numerics.fake_quant(x, scale, 0, -(2**31), 2**31 - 1)
    assert y.dtype == np.float64
    assert np.array_equal(y, x)  # on-grid values come back exactly


def test_bias_scale_is_the_float32_product_torch_computes():
    rng = np.random.default_rng(3)
    s_in = np.float32(rng.uniform(1e-3, 1e-1))
    s_w = rng.uniform(1e-4, 1e-2, 64).astype(np.float32)
    got = numerics.bias_scale(s_in, s_w)
    torch_product = (torch.tensor([s_in]) * torch.from_numpy(s_w)).numpy()
    # Two float32 factors multiply exactly in float64; one rounding to float32.
    rounded_once = (np.float64(s_in) * s_w.astype(np.float64)).astype(np.float32)
    assert got.dtype == np.float32
    assert np.array_equal(got, torch_product)
    assert np.array_equal(got, rounded_once)
    assert numerics.bias_scale(0.5, [0.25]).tolist() == [0.125]


def test_bilinear_taps_match_torch_where_its_weights_are_dyadic():
    """Scale 2 (weights 1/4, 3/4): the NPU's integer weights are torch's exactly;
    an integer resize of codes equals 2**14 times the float one."""
    import torch
    import torch.nn.functional as F

    q = np.random.default_rng(0).integers(-128, 128, (1, 2, 5, 7))
    x = torch.from_numpy(q.astype(np.float64))
    want = F.interpolate(x, scale_factor=2.0, mode="bilinear").numpy()
    taps = [numerics.bilinear_taps(n, 2 * n, False, 2.0) for n in (5, 7)]
    got = numerics.resize_weighted(q.astype(np.float64), *taps)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    acc = numerics.resize_weighted(q.astype(np.int64), *taps)
    np.testing.assert_array_equal(acc, got * 2 ** (2 * numerics.BILINEAR_BITS))
    index, weight = numerics.bilinear_taps(5, 10, False, 2.0)
    assert list(weight[:4, 1]) == [0, 32, 96, 32] and list(index[-1]) == [4, 4]


def test_bicubic_taps_match_torch_where_its_weights_are_dyadic():
    """Halving (source fraction 1/2: weights -3/32, 19/32, 19/32, -3/32) and
    align_corners at (in - 1) / (out - 1) = 1/2 (fractions 0 and 1/2): the NPU's
    integer weights are torch's cubic convolution weights exactly, the borders
    clamped as torch clamps them; the integer sum is 2**14 times the float one."""
    import torch
    import torch.nn.functional as F

    q = np.random.default_rng(1).integers(-128, 128, (1, 2, 8, 6))
    x = torch.from_numpy(q.astype(np.float64))
    for how, out, corners, scale in (
        ({"scale_factor": 0.5}, (4, 3), False, 0.5),
        ({"size": (15, 11), "align_corners": True}, (15, 11), True, None),
    ):
        want = F.interpolate(x, mode="bicubic", **how).numpy()
        taps = [
            numerics.resize_taps("bicubic", n, m, corners, scale)
            for n, m in zip(q.shape[2:], out, strict=True)
        ]
        got = numerics.resize_weighted(q.astype(np.float64), *taps)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        acc = numerics.resize_weighted(q.astype(np.int64), *taps)
        np.testing.assert_array_equal(acc, got * 2 ** (2 * numerics.BILINEAR_BITS))
    index, weight = numerics.bicubic_taps(8, 4, False, 0.5)
    assert list(weight[0]) == [-12, 76, 76, -12] and list(index[0]) == [0, 0, 1, 2]
    assert list(index[-1]) == [5, 6, 7, 7]


@pytest.mark.parametrize("corners", [False, True])
def test_bicubic_weights_are_torchs_rounded_to_the_weight_grid(corners):
    """At any scale each row of weights sums to one and is within half a weight
    step of torch's cubic convolution weight (the nearer middle neighbour may
    take one more step, what rounding left): the interpolation of codes stays
    within that bound of torch's float64 bicubic."""
    import torch
    import torch.nn.functional as F

    one = 1 << numerics.BILINEAR_BITS
    q = np.random.default_rng(2).integers(-128, 128, (1, 1, 9, 7))
    for out in ((5, 4), (13, 17), (20, 3)):
        taps = [
            numerics.resize_taps("bicubic", n, m, corners, None)
            for n, m in zip(q.shape[2:], out, strict=True)
        ]
        for _, weight in taps:
            assert (weight.sum(1) == one).all()
        want = F.interpolate(
            torch.from_numpy(q.astype(np.float64)),
            out,
            mode="bicubic",
            align_corners=corners,
        ).numpy()
        got = numerics.resize_weighted(q.astype(np.float64), *taps)
        # per dim: 4 weights off by at most 1.5 steps together with the rest
        # (|w| sums to at most 176 steps); two dims, codes below 128
        step = 2.0 / one
        bound = 128 * (step * 176 / one + step * 176 / one + step * step)
        assert np.abs(got - want).max() <= bound


def test_requantize_multipliers_match_the_scalar_split_and_the_real_factor():
    """The vectorised per-channel split equals quantize_multiplier element by
    element (with the shift capped at 62 by dropping low multiplier bits) and is
    within 2**-31 (relative) of the real factor, checked in exact rationals."""
    from fractions import Fraction

    rng = np.random.default_rng(0)
    real = np.concatenate(
        [np.exp(rng.uniform(-50, 20, 2000)), [0.0, 1.0, 0.5, 2.0**31, 3.0, 1e-25]]
    )
    ms, ss = numerics.requantize_multipliers(real)
    for r, m, s in zip(real, ms, ss, strict=True):
        if r == 0:
            assert (m, s) == (0, 0)
            continue
        m_ref, s_ref = numerics.quantize_multiplier(float(r))
        while s_ref > 62:
            m_ref, s_ref = m_ref >> 1, s_ref - 1
        assert (m, s) == (m_ref, s_ref)
        if s < 62:
            approx = Fraction(int(m)) / Fraction(2) ** int(s)
            error = abs(approx / Fraction(float(r)) - 1)
            assert error <= Fraction(1, 2**31)
    with pytest.raises(ValueError, match="finite"):
        numerics.requantize_multipliers([1.0, float("nan")])


def test_a_left_shift_saturates_instead_of_wrapping():
    """multiplier 2**31 - 1 with shift -31 (the widest legal left shift) on si32
    codes: the exact products are far beyond int32, so the result saturates; int64
    arithmetic without the bound wrapped to -2**31 (issue 16)."""
    acc = np.array([2**31 - 1, 3, -5, 0])
    got = numerics.requantize(acc, 2**31 - 1, -31, 0, -(2**31), 2**31 - 1)
    want = [max(-(2**31), min(2**31 - 1, int(a) * (2**31 - 1) * 2**31)) for a in acc]
    assert got.tolist() == want
    with pytest.raises(ValueError, match="at most 31"):
        numerics.shift_round(np.array([1]), -32)


# ------------------------------------------------------------------ average pooling

POOLS = [
    # kernel, stride, padding, ceil_mode, count_include_pad
    ((2, 2), (2, 2), (0, 0), False, True),
    ((3, 3), (2, 2), (1, 1), True, False),
    ((3, 3), (2, 2), (1, 1), True, True),
    ((3, 2), (1, 2), (1, 0), False, False),
    ((5, 5), (3, 3), (2, 2), True, True),
]


@pytest.mark.parametrize(("kernel", "stride", "padding", "ceil", "include"), POOLS)
def test_average_pool_is_torchs_average_rounded_half_to_even(
    kernel, stride, padding, ceil, include
):
    # torch's float64 average S / c is exact at ties (k + 1/2 is representable)
    # and at least 1 / (2c) away from one otherwise, so rounding it half to even
    # is the exact rounding of the window average.
    rng = np.random.default_rng(0)
    q = rng.integers(-128, 128, (2, 3, 11, 9))
    avg = torch.nn.functional.avg_pool2d(
        torch.from_numpy(q).double(), kernel, stride, padding, ceil, include
    ).numpy()
    got = numerics.average_pool(q, kernel, stride, padding, include, avg.shape[2:])
    np.testing.assert_array_equal(got, np.round(avg))  # numpy rounds half to even
    if kernel[0] * kernel[1] % 2 == 0:  # even windows: exact ties are exercised
        assert np.any(avg - np.floor(avg) == 0.5)


def test_avg_pool_counts_match_torch_on_a_ones_image():
    ones = torch.ones(1, 1, 7, 8, dtype=torch.float64)
    for kernel, stride, padding, ceil, include in POOLS:
        sums = torch.nn.functional.avg_pool2d(
            ones, kernel, stride, padding, ceil, include, divisor_override=1
        )
        avg = torch.nn.functional.avg_pool2d(
            ones, kernel, stride, padding, ceil, include
        )
        counts = numerics.avg_pool_counts(
            (7, 8), sums.shape[2:], kernel, stride, padding, include
        )
        np.testing.assert_array_equal(counts, np.rint((sums / avg)[0, 0].numpy()))


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "include"),
    [(k, s, p, i) for k, s, p, ceil, i in POOLS if not ceil]
    + [((3, 3), (1, 1), (1, 1), False)],
)
@pytest.mark.parametrize("tiles", [2, 3, 5])
def test_average_pool_row_tiles_with_their_own_padding_join_to_the_whole(
    kernel, stride, padding, include, tiles
):
    """Output rows [r0, r1) from input rows [lo, hi) (the halo) with the tile's
    own (top, left, bottom, right) padding: what npu-tile gives a padded
    average pool. The tiles, joined, are the whole pool, counts included."""
    rng = np.random.default_rng(1)
    q = rng.integers(-128, 128, (2, 3, 13, 9))
    out_hw = torch.nn.functional.avg_pool2d(
        torch.zeros(1, 1, 13, 9), kernel, stride, padding
    ).shape[2:]
    whole = numerics.average_pool(q, kernel, stride, padding, include, out_hw)
    (kh, _), (sh, _), (t, lf) = kernel, stride, padding
    step = -(-out_hw[0] // tiles)
    parts = []
    for r0 in range(0, out_hw[0], step):
        r1 = min(r0 + step, out_hw[0])
        start, end = r0 * sh - t, (r1 - 1) * sh - t + kh
        lo, hi = max(start, 0), min(end, 13)
        own = (lo - start, lf, end - hi, lf)
        parts.append(
            numerics.average_pool(
                q[:, :, lo:hi], kernel, stride, own, include, (r1 - r0, out_hw[1])
            )
        )
    np.testing.assert_array_equal(np.concatenate(parts, axis=2), whole)


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("kernel", [(2, 2), (3, 3), (7, 7), (1, 64)])
def test_avg_pool_fine_grid_keeps_the_extreme_window_sum_in_32_bits(bits, kernel):
    window = kernel[0] * kernel[1]
    fine = numerics.avg_pool_fine_bits(bits, window)
    lo, hi = numerics.qrange(bits)
    # Every code at the extreme, shifted onto the fine grid, summed over a window.
    q = np.full((1, 1) + kernel, lo, np.int64) << fine
    total = int(q.sum())
    assert -(2**31) <= total and int(np.full(window, hi).sum()) << fine < 2**31
    assert fine <= numerics.AVG_POOL_FINE_BITS[bits]
    if fine < numerics.AVG_POOL_FINE_BITS[bits]:  # one more bit would overflow
        assert window * (lo << (fine + 1)) < -(2**31)
    got = numerics.average_pool(q, kernel, kernel, (0, 0), True, (1, 1))
    assert int(got[0, 0, 0, 0]) == lo << fine  # the average is exact


def test_an_avg_pool_window_with_no_32_bit_fine_grid_is_refused():
    assert numerics.avg_pool_fine_bits(8, 2**24) == 0
    assert numerics.avg_pool_fine_bits(8, 2**24 + 1) is None
    assert numerics.avg_pool_fine_bits(16, 2**16 + 1) is None


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_is_torch_s_with_the_npu_s_weights(align_corners, padding, mode):
    """On float64 values ``grid_sample_sum`` is torch's grid_sample but for the
    weights on the 2**-7 grid: nearest exactly, bilinear within half a weight step
    of each of the four neighbours; on int64 codes it is the same sum times
    2**14, exactly."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 5, 7, generator=g, dtype=torch.float64)
    grid = torch.rand(2, 4, 6, 2, generator=g, dtype=torch.float64) * 2.6 - 1.3
    want = F.grid_sample(
        x, grid, mode=mode, padding_mode=padding, align_corners=align_corners
    ).numpy()
    got = numerics.grid_sample_sum(
        x.numpy(), grid.numpy(), align_corners, padding, mode
    )
    if mode == "nearest":
        np.testing.assert_array_equal(got, want)
    else:
        step = 0.5 / (1 << numerics.BILINEAR_BITS)
        bound = 4 * step * float(x.abs().max())
        assert 0 < float(np.abs(got - want).max()) <= bound
    codes = np.round(x.numpy() * 64).astype(np.int64)
    sums = numerics.grid_sample_sum(codes, grid.numpy(), align_corners, padding, mode)
    values = numerics.grid_sample_sum(
        codes / 64.0, grid.numpy(), align_corners, padding, mode
    )
    np.testing.assert_array_equal(sums, np.round(values * 64 * 2**14).astype(np.int64))
