"""The exact integer Winograd F(2x2, 3x3) path against the int64 reference conv."""

import numpy as np
import pytest
import torch

from hbir.runtime import integer_ops, kernels, winograd
from hbir.runtime.requantizer import loops

pytestmark = pytest.mark.skipif(loops() is None, reason="needs the compiled loops")

RNG = np.random.default_rng(11)


def _codes(shape, dtype, low=None, high=None):
    info = np.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return RNG.integers(low, high, shape, endpoint=True).astype(dtype)


def _channels_last(x):
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize(
    "x_shape, w_shape, pads, x_dtype",
    [
        ((1, 16, 8, 8), (16, 16, 3, 3), (1, 1, 1, 1), np.int8),
        ((2, 24, 9, 7), (40, 24, 3, 3), (1, 1, 1, 1), np.int8),  # odd sizes, batch
        ((1, 8, 11, 6), (8, 8, 3, 3), (0, 1, 2, 0), np.int8),  # uneven padding
        ((1, 12, 5, 5), (20, 12, 3, 3), (0, 0, 0, 0), np.uint8),  # no padding, u8
        ((1, 32, 3, 3), (9, 32, 3, 3), (2, 2, 2, 2), np.int8),  # padding past a tile
    ],
)
def test_winograd_sums_equal_the_direct_conv(x_shape, w_shape, pads, x_dtype, layout):
    x = _codes(x_shape, x_dtype)
    if layout == "channels_last":
        x = _channels_last(x)
    w = _codes(w_shape, np.int8)
    ref = integer_ops.numpy_conv2d(x, w, (1, 1), pads, (1, 1), 1)
    ww = winograd.pack(w, x_dtype)
    assert ww is not None and ww.takes(x, (1, 1), pads, (1, 1))
    got = winograd.sums(x, ww, pads, np.int32)
    np.testing.assert_array_equal(got, ref)
    # the conv engine takes it on the float engines; where torch's int8 gemm
    # is the fast one (VNNI), that one keeps it
    packed = kernels.pack_conv2d(w, x_dtype, 1)
    assert (packed.winograd is not None) == (packed.method != "int_mm")
    got = kernels.conv2d_sums(x, packed, (1, 1), pads, (1, 1))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref)


def test_sums_past_float32_split_into_exact_chunks():
    """Codes near the extremes, 256 channels: one float32 Winograd pass would
    pass 2**24 and round (checked here on the same transform); the input
    channels split into chunks each within it, and the sums are exact."""
    w = _codes((16, 256, 3, 3), np.int8, 100, 127)
    ww = winograd.pack(w, np.int8)
    assert ww is not None and ww.chunks > 1
    whole = winograd.WinogradWeight(
        ww.u.reshape(ww.chunks, 16, 16, -1).permute(1, 2, 0, 3).reshape(16, 16, -1),
        1,
        np.dtype(np.int8),
    )
    x = np.where(_codes((1, 256, 6, 6), np.int8) >= 0, 127, -128).astype(np.int8)
    ref = integer_ops.numpy_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    got = winograd.sums(x, ww, (1, 1, 1, 1), np.int64)
    np.testing.assert_array_equal(got, ref)
    x_max = np.full((1, 256, 6, 6), 127, np.int8)
    ref_max = integer_ops.numpy_conv2d(x_max, w, (1, 1), (0, 0, 0, 0), (1, 1), 1)
    np.testing.assert_array_equal(
        winograd.sums(x_max, ww, (0, 0, 0, 0), np.int64), ref_max
    )
    rounded = winograd.sums(x_max, whole, (0, 0, 0, 0), np.int64)
    assert not np.array_equal(rounded, ref_max)  # one pass rounds: why it splits


def test_the_transform_takes_only_what_it_computes_exactly():
    w = _codes((16, 16, 3, 3), np.int8)
    assert winograd.pack(w, np.int16) is None  # 16-bit codes: bound too wide
    assert winograd.pack(_codes((16, 16, 5, 5), np.int8), np.int8) is None
    assert winograd.pack(_codes((4, 16, 3, 3), np.int8), np.int8) is None  # thin
    ww = winograd.pack(w, np.int8)
    x = _codes((1, 16, 6, 6), np.int8)
    pads = (1, 1, 1, 1)
    assert ww.takes(x, (1, 1), pads, (1, 1))
    assert not ww.takes(x, (2, 2), pads, (1, 1))
    assert not ww.takes(x, (1, 1), pads, (2, 2))
    assert not ww.takes(x.view(np.uint8), (1, 1), pads, (1, 1))  # proven for int8
    assert not ww.takes(x[:, :, :1, :1], (1, 1), (0, 0, 0, 0), (1, 1))  # empty
    # the calls it does not take go to the direct engines, exactly
    packed = kernels.pack_conv2d(w, np.int8, 1)
    for stride, dilation in (((2, 2), (1, 1)), ((1, 1), (2, 2))):
        np.testing.assert_array_equal(
            kernels.conv2d_sums(x, packed, stride, pads, dilation),
            integer_ops.numpy_conv2d(x, w, stride, pads, dilation, 1),
        )


def test_the_weight_transform_is_twice_g_on_each_side():
    """``u`` plane (a, b) is ``(2G) g (2G)^T``, written out by hand for one
    filter: the corners are 4 g, plane (1, 1) the sum of the 9 taps."""
    g = _codes((8, 8, 3, 3), np.int8)
    u = winograd.pack(g, np.int8).u.reshape(4, 4, 8, 8)
    g64 = torch.from_numpy(g.astype(np.int64))
    assert torch.equal(u[0, 0].long(), 4 * g64[:, :, 0, 0])
    assert torch.equal(u[3, 3].long(), 4 * g64[:, :, 2, 2])
    assert torch.equal(u[1, 1].long(), g64.sum((2, 3)))


def test_random_convs_equal_the_reference_whichever_engine_takes_them():
    """80 seeded random convs (channels, sizes, padding 0-2 per side, batch,
    int8 / uint8, random, extreme and one-signed codes, channels-last or not):
    the transform and ``conv2d_sums`` equal the int64 reference; most of them
    are the transform's to take."""
    rng = np.random.default_rng(2026)
    taken = 0
    for _ in range(80):
        dtype = (np.int8, np.uint8)[rng.integers(2)]
        info = np.iinfo(dtype)
        c, o = (int(v) for v in rng.integers(8, 40, 2))
        n, h, w = int(rng.integers(1, 4)), *(int(v) for v in rng.integers(1, 12, 2))
        pads = tuple(int(v) for v in rng.integers(0, 3, 4))
        if min(h + pads[0] + pads[2], w + pads[1] + pads[3]) < 3:
            continue
        x = rng.integers(info.min, int(info.max) + 1, (n, c, h, w)).astype(dtype)
        if rng.integers(2):  # every code at an extreme
            x = np.where(x >= (info.min + int(info.max)) // 2, info.max, info.min)
            x = x.astype(dtype)
        if rng.integers(2):
            x = _channels_last(x)
        w8 = rng.integers(-128, 128, (o, c, 3, 3)).astype(np.int8)
        if rng.integers(3) == 0:  # one-signed weights near the extreme
            w8 = rng.integers(100, 128, (o, c, 3, 3)).astype(np.int8)
        ref = integer_ops.numpy_conv2d(x, w8, (1, 1), pads, (1, 1), 1)
        ww = winograd.pack(w8, dtype)
        if ww is not None and ww.takes(x, (1, 1), pads, (1, 1)):
            taken += 1
            np.testing.assert_array_equal(winograd.sums(x, ww, pads, np.int32), ref)
        packed = kernels.pack_conv2d(w8, dtype, 1)  # (whichever engine takes it)
        got = kernels.conv2d_sums(x, packed, (1, 1), pads, (1, 1))
        np.testing.assert_array_equal(got, ref)
    assert taken > 40
