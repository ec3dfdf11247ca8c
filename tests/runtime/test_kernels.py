"""runtime/kernels.py and runtime/requantizer.py: every fast kernel equals the
numerics reference bit for bit.

References: ``integer_ops`` with its numpy int64 engines, ``numerics.requantize``,
``numerics.gemm_output`` and ``numerics.fake_quant``, on random and edge-case data
(extreme codes, one-signed data that breaks float32 sums, ties, extreme
multipliers and shifts, groups, dilation, stride, asymmetric padding).
"""

import functools

import numpy as np
import pytest
import torch

from hbir.runtime import integer_ops, kernels, numerics, requantizer

torch.set_num_threads(1)

RNG = np.random.default_rng(0)


def codes(shape, dtype, kind="random"):
    info = np.iinfo(dtype)
    if kind == "max":  # every code at the extreme: the largest sums
        return np.full(shape, info.min if info.min < 0 else info.max, dtype)
    if kind == "positive":  # one-signed: float32 sums go wrong past 2**24
        return RNG.integers(info.max * 3 // 4, info.max, shape, endpoint=True).astype(
            dtype
        )
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


CONVS = [
    # x shape, w shape, stride, padding (t, l, b, r), dilation, groups, x dtype, w dtype
    ((1, 3, 20, 20), (16, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, np.int8, np.int8),
    ((2, 8, 9, 11), (24, 8, 3, 3), (1, 2), (1, 0, 2, 1), (2, 1), 1, np.int8, np.int8),
    ((1, 12, 8, 8), (12, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 12, np.int8, np.int8),
    ((1, 12, 8, 8), (6, 4, 3, 3), (2, 1), (0, 1, 0, 1), (1, 2), 3, np.int8, np.int8),
    ((1, 5, 6, 6), (3, 5, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, np.int8, np.int8),
    ((1, 4, 7, 7), (9, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.int16, np.int8),
    ((1, 4, 7, 7), (9, 4, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, np.int16, np.int16),
    ((1, 3, 6, 6), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.uint8, np.int8),
    ((1, 260, 4, 4), (8, 260, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.int8, np.int8),
    # depthwise (the compiled loop), uneven padding, dilation, u8; a channel
    # multiplier of 2 (grouped, not depthwise)
    ((2, 16, 9, 11), (16, 1, 3, 3), (2, 1), (1, 0, 2, 1), (2, 1), 16, np.int8, np.int8),
    ((1, 8, 7, 7), (8, 1, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 8, np.uint8, np.int8),
    ((1, 8, 7, 9), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8, np.uint8, np.int8),
    ((1, 8, 7, 7), (16, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8, np.int8, np.int8),
    # a strided 1x1 conv of int16 codes (the float engines' gemm of the pixels)
    ((1, 6, 5, 5), (4, 6, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1, np.int16, np.int8),
    # depthwise 1x1 (a per-channel scale: layer norm's affine), strided too
    ((1, 12, 5, 5), (12, 1, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 12, np.int16, np.int8),
    ((2, 6, 7, 5), (6, 1, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 6, np.int8, np.int16),
    ((1, 4, 3, 3), (4, 1, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 4, np.int32, np.int32),
]


@pytest.mark.parametrize("kind", ["random", "max", "positive"])
@pytest.mark.parametrize("case", CONVS)
def test_conv2d_equals_the_int64_reference(case, kind):
    xs, ws, stride, pads, dilation, groups, xd, wd = case
    x, w = codes(xs, xd, kind), codes(ws, wd, kind)
    bias = RNG.integers(-(2**31), 2**31 - 1, ws[0], endpoint=True)
    ref = integer_ops.conv2d(x, w, bias, stride, pads, dilation, groups)
    got = kernels.conv2d(x, w, bias, stride, pads, dilation, groups)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("kind", ["random", "max", "positive"])
@pytest.mark.parametrize("case", CONVS)
def test_prepared_conv2d_equals_the_int64_reference(case, kind, layout, monkeypatch):
    """A prepared (``reused``) conv: oneDNN's int8 conv for every size here
    (uneven padding written into its input, sums past 2**24 checked on the
    result) but small depthwise ones."""
    monkeypatch.setattr(kernels, "ONEDNN_MIN_MACS", 0)
    xs, ws, stride, pads, dilation, groups, xd, wd = case
    x, w = codes(xs, xd, kind), codes(ws, wd, kind)
    if layout == "channels_last":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    packed = kernels.pack_conv2d(w, xd, groups, reused=True)
    got = kernels.conv2d_sums(x, packed, stride, pads, dilation)
    ref = integer_ops.numpy_conv2d(x, w, stride, pads, dilation, groups)
    np.testing.assert_array_equal(got, ref)
    onednn = xd in (np.int8, np.uint8) and wd == np.int8 and kernels._onednn_exact()
    if packed.depthwise is not None and kernels.loops() is not None:
        onednn = False  # small depthwise convs: the compiled loop
    if onednn and kind != "max":  # (all-extreme sums may pass 2**24: fallback)
        assert packed.onednn  # its path ran


def test_pointwise_conv_of_channels_last_codes_is_one_gemm():
    x = codes((2, 16, 9, 7), np.int8)
    x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    w = codes((24, 16, 1, 1), np.int8)
    packed = kernels.pack_conv2d(w, np.int8, 1)
    got = kernels.conv2d_sums(x, packed, (2, 2), (0, 0, 0, 0), (1, 1))
    ref = integer_ops.numpy_conv2d(x, w, (2, 2), (0, 0, 0, 0), (1, 1), 1)
    np.testing.assert_array_equal(got, ref)
    assert got.strides[1] == got.itemsize  # channels last, as the gemm wrote it


def test_a_bound_1x1_conv_reads_its_buffer_anew_on_every_run():
    """``bound_sums`` of a channels-last buffer: each run sums the bytes there
    now, equal to ``conv2d_sums`` (raw floats and int32), and two bound convs
    sharing the thread's scratch each give their own sums when read in turn.
    uint8 codes: the float32 engine on every CPU (int8 ones take torch's int8
    gemm where that is fast)."""
    buf = np.ascontiguousarray(codes((2, 7, 5, 16), np.uint8)).transpose(0, 3, 1, 2)
    w1, w2 = codes((24, 16, 1, 1), np.int8), codes((8, 16, 1, 1), np.int8)
    p1, p2 = (kernels.pack_conv2d(w, np.uint8, 1, reused=True) for w in (w1, w2))
    assert p1.method == p2.method == "float32"
    zero = (0, 0, 0, 0)
    raw = kernels.bound_sums(buf, p1, (1, 1), zero, (1, 1), raw=True)
    ints = kernels.bound_sums(buf, p2, (1, 1), zero, (1, 1))
    assert not isinstance(raw, functools.partial)  # (the bound form, not the call)
    for _ in range(2):
        buf[...] = codes(buf.shape, np.uint8)  # new bytes in the same buffer
        got = raw()
        assert got.dtype == np.float32 and got.strides[1] == 4  # channels last
        ref = integer_ops.numpy_conv2d(buf, w1, (1, 1), zero, (1, 1), 1)
        np.testing.assert_array_equal(got, ref)
        got2 = ints()
        assert got2.dtype == np.int32
        ref2 = integer_ops.numpy_conv2d(buf, w2, (1, 1), zero, (1, 1), 1)
        np.testing.assert_array_equal(got2, ref2)
    # a larger conv grows the scratch; the first conv then views the new one
    big = np.ascontiguousarray(codes((1, 30, 30, 16), np.uint8)).transpose(0, 3, 1, 2)
    larger = kernels.bound_sums(big, p1, (1, 1), zero, (1, 1), raw=True)
    np.testing.assert_array_equal(
        larger(), integer_ops.numpy_conv2d(big, w1, (1, 1), zero, (1, 1), 1)
    )
    np.testing.assert_array_equal(
        raw(), integer_ops.numpy_conv2d(buf, w1, (1, 1), zero, (1, 1), 1)
    )
    # a batch whose samples lie apart (the simulator's arena rows)
    rows = np.zeros((3, 2 * 7 * 5 * 16), np.uint8)
    apart = rows[:, : 7 * 5 * 16].reshape(3, 7, 5, 16).transpose(0, 3, 1, 2)
    apart[...] = codes(apart.shape, np.uint8)
    spread = kernels.bound_sums(apart, p1, (1, 1), zero, (1, 1), raw=True)
    assert not isinstance(spread, functools.partial)
    np.testing.assert_array_equal(
        spread(), integer_ops.numpy_conv2d(apart, w1, (1, 1), zero, (1, 1), 1)
    )
    # a strided conv, or a 3x3 one: the plain call, bound to its arguments
    assert isinstance(
        kernels.bound_sums(buf, p1, (2, 2), zero, (1, 1)), functools.partial
    )


def test_depthwise_convs_of_8_bit_codes_take_the_compiled_loop():
    w = codes((16, 1, 3, 3), np.int8, "max")
    assert kernels.pack_conv2d(w, np.int8, 16).depthwise.shape == (3, 3, 16)
    assert kernels.pack_conv2d(w, np.uint8, 16).depthwise is not None
    assert kernels.pack_conv2d(w, np.int16, 16).depthwise is None
    assert kernels.pack_conv2d(w[:8], np.int8, 4).depthwise is None  # multiplier 2
    x = np.ascontiguousarray(codes((1, 9, 9, 16), np.int8).transpose(0, 3, 1, 2))
    got = kernels.conv2d_sums(
        x, kernels.pack_conv2d(w, np.int8, 16), (1, 1), (1, 1, 1, 1), (1, 1)
    )
    if kernels.loops() is not None:  # (HBIR_JIT=0: the float32 engine)
        assert got.dtype == np.int32 and got.strides[1] == 4  # channels last
    ref = integer_ops.numpy_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 16)
    np.testing.assert_array_equal(got, ref)
    # above DEPTHWISE_LOOP_MAX_MACS (144 channels of 30x30): oneDNN's
    w = codes((144, 1, 3, 3), np.int8)
    x = np.ascontiguousarray(codes((1, 30, 30, 144), np.int8).transpose(0, 3, 1, 2))
    packed = kernels.pack_conv2d(w, np.int8, 144, reused=True)
    got = kernels.conv2d_sums(x, packed, (1, 1), (1, 1, 1, 1), (1, 1))
    ref = integer_ops.numpy_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 144)
    np.testing.assert_array_equal(got, ref)
    if kernels._onednn_exact():  # (a machine without it: the float32 engine)
        assert packed.onednn  # its path ran


def test_conv2d_methods_follow_the_bounds():
    """int8 -> _int_mm where it is fast, else float32; grouped int8 -> float32;
    int16 x int16 at K=36 -> float64; a sum that could pass 2**53 -> the int64
    reference engine."""
    w8 = codes((4, 4, 3, 3), np.int8, "max")
    fast = "int_mm" if kernels.int_mm_fast() else "float32"
    assert kernels.pack_conv2d(w8, np.int8, 1).method == fast
    assert kernels.pack_conv2d(w8, np.int8, 2).method == "float32"
    w16 = codes((4, 4, 3, 3), np.int16, "max")
    assert kernels.pack_conv2d(w16, np.int16, 1).method == "float64"
    w32 = np.full((1, 4, 3, 3), -(2**31), np.int32)
    assert kernels.pack_conv2d(w32, np.int32, 1).method == "int64"


def test_int_mm_is_chosen_by_its_measured_speed(monkeypatch):
    """Without VNNI torch's _int_mm is a scalar loop: the int8 sums then take
    the float32 engine (exact by the same bound), and the numbers stay."""
    w8 = codes((8, 16), np.int8)
    x = codes((5, 16), np.int8)
    ref = integer_ops.numpy_matmul(x, w8.T)
    for fast, method in ((True, "int_mm"), (False, "float32")):
        monkeypatch.setattr(kernels, "int_mm_fast", lambda fast=fast: fast)
        packed = kernels.pack_linear(w8, np.int8)
        assert packed.method == method
        np.testing.assert_array_equal(kernels.linear_sums(x, packed), ref)


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_code_table_equals_apply_lut_on_every_code(dtype):
    """A LUT of 8- or 16-bit codes as the list of every code's result: one
    lookup, equal to the segment arithmetic on every code and layout."""
    bits = np.dtype(dtype).itemsize * 8
    table = numerics.build_lut("exp", 2.0**-8 * 256 / 2**bits, bits, 2.0**-12, 16)
    codes_ = np.arange(-(2 ** (bits - 1)), 2 ** (bits - 1), dtype=np.int64)
    ref = numerics.apply_lut(table, codes_).astype(np.int16)
    lookup = kernels.CodeTable.of(table, dtype, np.int16)
    got = lookup(codes_.astype(dtype))
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, ref)
    x = codes((2, 3, 5), dtype).transpose(2, 0, 1)  # a strided view
    np.testing.assert_array_equal(
        lookup(x), numerics.apply_lut(table, x.astype(np.int64)).astype(np.int16)
    )
    assert kernels.CodeTable.of(table, np.int32, np.int16) is None


def test_one_signed_sums_past_float32_are_exact():
    """K = 1536 of codes near 127: the sums pass 2**24, so float32 accumulation
    is off by 1-2 here; the kernels pick an exact engine."""
    x = codes((1, 1536, 2, 2), np.int8, "positive")
    w = codes((16, 1536, 1, 1), np.int8, "positive")
    ref = integer_ops.conv2d(x, w, None, (1, 1), (0, 0), (1, 1), 1)
    got = kernels.conv2d(x, w, None, (1, 1), (0, 0), (1, 1), 1)
    assert ref.max() > 2**24
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("kind", ["random", "max", "positive"])
@pytest.mark.parametrize(
    "xs, o, xd, wd",
    [
        ((3, 5, 40), 24, np.int8, np.int8),
        ((1, 1, 7), 3, np.int8, np.int8),
        ((4, 2048), 17, np.int8, np.int8),
        ((2, 33), 10, np.int16, np.int8),
        ((2, 33), 10, np.int16, np.int16),
    ],
)
def test_linear_equals_the_int64_reference(xs, o, xd, wd, kind):
    x, w = codes(xs, xd, kind), codes((o, xs[-1]), wd, kind)
    bias = RNG.integers(-(2**31), 2**31 - 1, o, endpoint=True)
    ref = integer_ops.linear(x, w, bias)
    np.testing.assert_array_equal(kernels.linear(x, w, bias), ref)
    np.testing.assert_array_equal(
        kernels.linear(x, w, bias, bits=16), ref.clip(-(2**15), 2**15 - 1)
    )


@pytest.mark.parametrize("kind", ["random", "max", "positive"])
@pytest.mark.parametrize(
    "a_shape, b_shape, dtype",
    [
        ((2, 3, 5, 64), (2, 3, 64, 6), np.int8),
        ((20, 2048), (2048, 24), np.int8),
        ((2, 4, 1500), (2, 1500, 3), np.int8),
        ((3, 9, 40), (40, 8), np.int16),
    ],
)
def test_matmul_equals_the_int64_reference(a_shape, b_shape, dtype, kind):
    a, b = codes(a_shape, dtype, kind), codes(b_shape, dtype, kind)
    np.testing.assert_array_equal(kernels.matmul(a, b), integer_ops.matmul(a, b))


def test_matmul_of_rows_of_small_magnitude_sums_in_float32_exactly():
    """int16 rows that add up to about 2**15 (attention probabilities): the
    widths alone allow sums past 2**24, these rows do not (float32: int32
    sums); one row of large codes keeps the exact wide path. Both equal the
    int64 reference."""
    probs = RNG.dirichlet(np.ones(197), (3, 197))
    a = np.floor(probs * 32767).astype(np.int16)  # each row sums <= 32767
    b = codes((3, 197, 64), np.int8, "max")  # every code -128: the worst case
    got = kernels.matmul_sums(a, b)
    np.testing.assert_array_equal(got, integer_ops.numpy_matmul(a, b))
    if kernels.loops() is not None:
        assert got.dtype == np.int32  # (the float32 gemm summed them)
    a[1, 5] = 32767  # one row's magnitudes now pass the float32 bound
    wide = kernels.matmul_sums(a, b)
    assert wide.dtype == np.int64
    np.testing.assert_array_equal(wide, integer_ops.numpy_matmul(a, b))


def test_int8_matmul_refuses_what_it_cannot_do_exactly():
    with pytest.raises(ValueError, match="int8"):
        kernels.int8_matmul(np.zeros((2, 2), np.int16), np.zeros((2, 2), np.int8))
    with pytest.raises(ValueError, match="overflow"):
        kernels.int8_matmul(
            np.zeros((1, 2**17), np.int8), np.zeros((2**17, 1), np.int8)
        )


# ------------------------------------------------------------------ requantize

MODES = numerics.ROUNDING_MODES


def ties(shape, shift):
    """Accumulators whose quotient by 2**shift is exactly k + 1/2, both signs."""
    k = RNG.integers(-1000, 1000, shape)
    return (2 * k + 1) << (shift - 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32])
@pytest.mark.parametrize(
    "multiplier, shift",
    [
        ([1 << 30], [31]),  # 0.5: every odd accumulator is a tie
        ([2**31 - 1], [62]),  # the largest multiplier, the largest shift
        ([1], [-31]),  # the largest left shift: saturates
        ([3], [-4]),
        ([1073741824], [30]),  # exactly 1: no rounding at all
        ([5], [0]),
        ([0, 1 << 30, 2**31 - 1, 7], [0, 1, 35, 0]),  # per channel, s = 0 mixed in
        ([1234567, 2**30 + 1, 99, 2**31 - 1], [3, 40, -2, 31]),  # mixed directions
    ],
)
def test_requantize_equals_numerics(multiplier, shift, dtype, mode):
    acc = np.concatenate(
        [codes((2, 4, 3, 5), dtype, "random"), codes((1, 4, 3, 5), dtype, "max")]
    )
    if max(shift) > 0 and np.dtype(dtype).itemsize == 4:
        acc[0, :, :, :2] = ties((4, 3, 2), min(s for s in shift if s > 0) or 1)
    axis = 1 if len(multiplier) > 1 else None
    for lo, hi, zero in [(-128, 127, 0), (-(2**31), 2**31 - 1, 0), (0, 127, -3)]:
        ref = numerics.requantize(acc, multiplier, shift, zero, lo, hi, axis, mode)
        got = requantizer.requantize(
            acc, multiplier, shift, zero, lo, hi, axis, mode, np.int64
        )
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("mode", MODES)
def test_requantize_of_int64_input_takes_the_reference(mode):
    acc = np.array([2**40 + 3, -(2**45) - 1, 7], np.int64)
    ref = numerics.requantize(acc, [2**30], [20], 0, -(2**31), 2**31 - 1, None, mode)
    got = requantizer.requantize(acc, [2**30], [20], 0, -(2**31), 2**31 - 1, None, mode)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "fine, with_bias", [(0, False), (0, True), (5, True), (16, True)]
)
def test_fused_gemm_output_equals_gemm_output(fine, with_bias, mode):
    channels = 6
    acc_bound = (2**31 - 1 - 2**20) >> fine
    acc = RNG.integers(-acc_bound, acc_bound, (2, channels, 4, 4), endpoint=True)
    acc[0, :, 0, 0] = acc_bound
    real = RNG.uniform(1e-6, 2.0, channels) * 2.0**-fine
    real[0] = 2.0 ** -(fine + 1)  # a factor of exactly 1/2: ties
    m, s = numerics.requantize_multipliers(real)
    bias = RNG.integers(-(2**20), 2**20, channels) if with_bias else None
    req = numerics.GemmRequant(m, s, bias, fine)
    ref = numerics.gemm_output(acc, req, -128, 127, 1, mode)
    fused = requantizer.fused_gemm_output(
        req, acc_bound, -128, 127, ndim=4, axis=1, mode=mode
    )
    assert fused is not None
    np.testing.assert_array_equal(fused(acc, np.int64), ref)


def test_fused_gemm_output_declines_when_a_step_may_saturate():
    req = numerics.GemmRequant(np.array([2**30]), np.array([31]), np.array([5]), 4)
    assert (
        requantizer.fused_gemm_output(
            req, 2**28, -128, 127, ndim=2, axis=1, mode="half_even"
        )
        is None
    )


# ------------------------------------------------------------------ fake quant


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bits, zero", [(8, 0), (8, -7), (16, 0)])
def test_fake_quantizer_equals_numerics(bits, zero, mode):
    qmin, qmax = numerics.qrange(bits)
    scale = np.array([0.013, 0.25, 3e-5], np.float32)
    x = RNG.normal(0, 2, (2, 3, 5, 5)).astype(np.float32)
    x[0, 1, 0, :3] = [np.inf, -np.inf, 1e30]
    x[0, 0, 1] = (np.arange(5) + 0.5) * scale[0]  # ties
    x[1, 0, 0] = -0.1 * scale[0]  # rounds to -0.0; the reference gives 0.0
    zp = np.full(3, zero)
    for axis, s, z in [(1, scale, zp), (None, scale[:1], zp[:1])]:
        with np.errstate(invalid="ignore"):  # the reference's half-up on inf
            ref = numerics.fake_quant(x, s, z, qmin, qmax, axis, mode)
        got = kernels.FakeQuantizer(s, z, qmin, qmax, axis, x.ndim, mode)(x)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


def test_fake_quantizer_maps_nan_like_the_reference():
    x = np.array([np.nan, 1.0, -2.0], np.float32)
    ref = numerics.fake_quant(x, np.float32(0.1), 0, -128, 127)
    got = kernels.FakeQuantizer(np.float32(0.1), 0, -128, 127, None, 1, "half_even")(x)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(
    "kernel, stride, padding, dilation, ceil_mode",
    [
        ((3, 3), (2, 2), (1, 1), (1, 1), False),
        ((2, 2), (2, 2), (0, 0), (1, 1), True),
        ((3, 2), (1, 2), (1, 0), (2, 1), True),
        ((1, 1), (1, 1), (0, 0), (1, 1), False),
    ],
)
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.float32])
def test_max_pool2d_equals_integer_ops(
    kernel, stride, padding, dilation, ceil_mode, dtype
):
    if dtype == np.float32:
        x = RNG.normal(size=(2, 3, 9, 7)).astype(dtype)
    else:
        x = codes((2, 3, 9, 7), dtype)
        x[0, 0] = np.iinfo(dtype).min  # padding must never win
    window = (kernel, stride, padding, dilation, ceil_mode)
    ref = integer_ops.max_pool2d(x, *window)
    got = kernels.max_pool2d(x, *window)
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got, ref)


def _window(m: int, s: int, off: int, zero: int, lo: int, hi: int) -> np.ndarray:
    """Every accumulator whose requantized value is within 3 steps of [lo, hi]."""
    a_lo = -((off + (zero << s) - (lo - 3) * 2**s) // m)
    a_hi = ((hi + 3) * 2**s - off - (zero << s)) // m
    return np.arange(a_lo, a_hi + 1, dtype=np.int64)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(6))
def test_nearest_form_equals_numerics_on_every_accumulator_that_matters(seed, mode):
    """The certified float64 path (products of more than 53 bits) against the int64 reference on every
    accumulator near the output range, its extremes, and random ones."""
    rng = np.random.default_rng(seed)
    taken = 0
    for _ in range(8):
        # a fused multiplier (31 bits times a power of two) and shift, as in
        # ResNet's convs: the exact float form needs s < 45
        m = int(rng.integers(2**38, 2**39))
        s = int(rng.integers(46, 49))
        off = int(rng.integers(-(2**46), 2**46))
        zero = int(rng.choice([0, -3, 5]))
        bound = 2**22  # so that |acc m + off| < 2**62: no int64 fallback
        r = requantizer.Requantizer(
            [m], [s], zero, -128, 127, ndim=1, axis=None, mode=mode,
            acc_bound=bound, offset=[off],
        )  # fmt: skip
        taken += r.path == "nearest"
        acc = np.concatenate(
            [
                _window(m, s, off, zero, -128, 127),
                rng.integers(-bound, bound, 10_000, endpoint=True),
                [-bound, bound, 0],
            ]
        )
        p = acc * m + off  # |acc m| < 2**62: exact in int64
        ref = np.clip(numerics.shift_round(p, s, mode) + zero, -128, 127)
        np.testing.assert_array_equal(r(acc.astype(np.int32), np.int8), ref)
    assert taken >= 6  # the fast path is what this tests


@pytest.mark.parametrize("near", [0, 1, -2])
def test_nearest_form_refuses_a_tie_inside_the_output_range(near):
    """A channel with an accumulator at (or within the float error of) a
    rounding tie in range must keep the exact int64 path; the naive float form
    rounds that tie wrongly under half-up (the control)."""
    m, s, acc0 = 2**39 - 1, 50, 29_000  # acc0 * m / 2**s ~ 14.2
    half = 1 << (s - 1)
    off = half + near - (acc0 * m) % (1 << s)  # acc0 m + off = 2**(s-1) + near
    r = requantizer.Requantizer(
        [m], [s], 0, -128, 127, ndim=1, axis=None, mode="half_up",
        acc_bound=2**22, offset=[off],
    )  # fmt: skip
    assert r.path == "right"
    acc = np.array([acc0 - 1, acc0, acc0 + 1], np.int64)
    ref = numerics.shift_round(acc * m + off, s, "half_up")
    np.testing.assert_array_equal(r(acc.astype(np.int32), np.int64), ref)
    if near == 0:  # control: float64's nearest rounding gets this tie wrong
        naive = np.rint(acc0 * (m * 2.0**-s) + off / 2**s)
        assert naive != ref[1]


def test_a_remembered_proof_gives_what_a_new_proof_gives():
    """The nearest form's proof is remembered per parameter set (compiling a
    model and loading its model.hbm prepare the same requantizers): a second
    requantizer of the same parameters takes the same path, refused or
    proved, with arrays of its own."""
    m, s, acc0 = 2**39 - 1, 50, 29_000
    tie = (1 << (s - 1)) - (acc0 * m) % (1 << s)  # acc0 m + off: a tie in range
    cases = [  # (multipliers, shift, offsets, path)
        ([m, m - 2], s, [tie, tie], "right"),
        ([2**31 - 1, 2**31 - 3], 48, None, "nearest"),  # 56-bit products
    ]
    acc = np.repeat(np.arange(-(2**22), 2**22, 4099, dtype=np.int64)[:, None], 2, 1)
    for mult, shift, off, path in cases:
        layout = dict(ndim=2, axis=1, mode="half_up", acc_bound=2**22, offset=off)
        made = [
            requantizer.Requantizer(mult, [shift] * 2, 0, -128, 127, **layout)
            for _ in range(2)
        ]
        assert [r.path for r in made] == [path, path]
        p = acc * np.array(mult) + (0 if off is None else np.array(off))
        want = np.clip(numerics.shift_round(p, shift, "half_up"), -128, 127)
        for r in made:
            np.testing.assert_array_equal(r(acc.astype(np.int32), np.int8), want)
    a, b = made  # the nearest ones
    assert np.array_equal(a.m_f, b.m_f) and not np.shares_memory(a.m_f, b.m_f)


@pytest.mark.parametrize(
    "multiplier, shift, path",
    [
        ([1 << 30], [31], "float"),  # exact in float64: fewer passes
        ([7, 9], [3, 0], "float"),
        ([1 << 30], [45], "right"),  # ties in range: int64
        ([2**31 - 1], [62], "right"),
        ([2**31 - 1], [48], "nearest"),  # 56-bit products, no tie near: float64
        ([1 << 30], [30], "integer"),
        ([1], [-6], "left"),
        ([5, 5], [2, -2], "reference"),  # mixed directions: the reference itself
    ],
)
def test_requantizer_takes_the_fast_path_where_it_is_exact(multiplier, shift, path):
    """An int32 accumulator takes the int64 fast paths; only what they cannot do
    exactly falls back (so the equality tests above test the fast paths)."""
    r = requantizer.Requantizer(
        multiplier,
        shift,
        0,
        -128,
        127,
        ndim=2,
        axis=1,
        mode="half_even",
        acc_bound=2**31,
    )
    assert r.path == path


# ------------------------------------------------------------------ pair tables


@pytest.mark.parametrize("dtypes", [(np.int8, np.int8), (np.uint8, np.int8)])
def test_pair_table_equals_its_function_on_broadcasts_and_layouts(dtypes):
    def fn(a, b):
        return np.clip(a.astype(np.int32) * 3 - b, -128, 127).astype(np.int8)

    table = kernels.PairTable(fn, [np.dtype(d) for d in dtypes])
    a, b = codes((2, 4, 5, 6), dtypes[0]), codes((2, 4, 5, 6), dtypes[1])
    channels_last = np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for x, y in [
        (a, b),
        (channels_last, b),
        (a, b[:, :, :1, :1]),  # one operand broadcast
        (a[:1, :, :1], b),  # the first operand broadcast
    ]:
        got, ref = table(x, y), fn(x, y)
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("mode", [numerics.HALF_EVEN, numerics.HALF_UP])
@pytest.mark.parametrize("bits", [(8, 8, 8), (16, 8, 16), (8, 16, 8)])
def test_fixed_point_gemm_with_the_prepared_output_equals_the_reference(bits, mode):
    """The QAT fixed-point forward's compiled requantization
    (``requantizer.prepared_gemm_output``) gives ``gemm_output``'s numbers:
    per-channel weights, a bias, extreme and random codes, and again from its
    cache."""
    x_bits, w_bits, out_bits = bits
    channels, k = 6, 40
    grids = numerics.Grids(
        (0.02,), (x_bits,), 0.05, out_bits,
        tuple(RNG.uniform(1e-3, 1e-2, channels)), w_bits,
    )  # fmt: skip
    w_scales = np.asarray(grids.w_scales, np.float32).reshape(-1, 1)
    w = codes((channels, k), np.int8 if w_bits == 8 else np.int16) * w_scales
    bias = RNG.uniform(-2, 2, channels)

    def gemm(a, b):
        return a.astype(np.float64) @ b.astype(np.float64).T

    for kind in ("random", "max", "positive"):
        xq = codes((3, k), np.int8 if x_bits == 8 else np.int16, kind)
        x = xq * np.float32(grids.x_scale)
        args = dict(bias=bias, terms=k, axis=-1, w_axis=0, mode=mode)
        want = numerics.fixed_point_gemm(grids, x, w, gemm, **args)
        for _ in range(2):  # built, then from the cache
            got = numerics.fixed_point_gemm(
                grids, x, w, gemm, output=requantizer.prepared_gemm_output, **args
            )
            assert got.dtype == want.dtype == np.float32
            np.testing.assert_array_equal(got, want)
    # (the compiled form ran: a prepared requantizer, not the fallback)
    assert any(r is not None for r in requantizer._PREPARED_OUTPUTS.values())


def test_a_conv_past_float32_splits_its_input_channels_exactly():
    """K = 256 * 9 codes near 127: the sums pass 2**24, where one float32 conv
    rounds them (checked here); the conv splits its input channels into the
    fewest chunks whose sums float32 holds exactly (4 of 64 channels) and its
    sums equal the int64 reference, as integers and as raw floats, with even
    and uneven padding, int8 and uint8 inputs, in a batch."""
    rng = np.random.default_rng(3)
    w = rng.integers(100, 128, (8, 256, 3, 3)).astype(np.int8)
    x = rng.integers(100, 128, (2, 256, 9, 9)).astype(np.int8)
    packed = kernels.pack_conv2d(w, np.int8, 1)
    assert (packed.method, packed.chunks) == ("float32_split", 4)
    plain = torch.nn.functional.conv2d(
        torch.from_numpy(x).float(), torch.from_numpy(w).float(), None, 1, 1
    ).numpy()
    ref = integer_ops.numpy_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert not np.array_equal(plain.astype(np.int64), ref)  # float32 alone rounds
    for pads in ((1, 1, 1, 1), (0, 1, 2, 1)):
        ref = integer_ops.numpy_conv2d(x, w, (2, 1), pads, (1, 1), 1)
        got = kernels.conv2d_sums(x, packed, (2, 1), pads, (1, 1))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, ref)
        raw = kernels.conv2d_sums(x, packed, (2, 1), pads, (1, 1), raw=True)
        assert raw.dtype == np.float64
        np.testing.assert_array_equal(raw, ref)
    xu = rng.integers(200, 256, (1, 256, 6, 6)).astype(np.uint8)
    packed_u = kernels.pack_conv2d(w, np.uint8, 1)
    assert packed_u.method == "float32_split" and packed_u.chunks >= 4
    np.testing.assert_array_equal(
        kernels.conv2d_sums(xu, packed_u, (1, 1), (0, 0, 0, 0), (1, 1)),
        integer_ops.numpy_conv2d(xu, w, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    )
    # a bound no split within MAX_FLOAT32_CHUNKS meets: the float64 engine
    w16 = codes((2, 4, 3, 3), np.int16, "max")
    assert kernels.pack_conv2d(w16, np.int16, 1).method == "float64"


@pytest.mark.parametrize("mode", [numerics.HALF_EVEN, numerics.HALF_UP])
@pytest.mark.parametrize("bits", [(8, 8, 8), (16, 8, 16), (8, 16, 8), (8, 8, 16)])
def test_fixed_point_rescales_and_binaries_with_the_prepared_requantizer(bits, mode):
    """The QAT fixed-point forward's rescales, clips and add / sub / mul / max
    by the compiled requantizer (``requantizer.prepared_requantize``) give the
    int64 reference's numbers: scale ratios with exact ties (3/8, 1/2, 2),
    random ones, extreme and random codes, a float constant operand, and again
    from the cache."""
    a_bits, b_bits, out_bits = bits
    fast = {"requant": requantizer.prepared_requantize}
    scales = [(0.03, 0.08, 0.08), (0.05, 0.1, 0.025), (0.0371, 0.0113, 0.0529)]
    for s_a, s_b, s_out in scales:
        grids = numerics.Grids((s_a, s_b), (a_bits, b_bits), s_out, out_bits)
        for kind in ("random", "max", "positive"):
            qa = codes((4, 33), np.int8 if a_bits == 8 else np.int16, kind)
            qb = codes((4, 33), np.int8 if b_bits == 8 else np.int16, "random")
            a, b = qa * np.float32(s_a), qb * np.float32(s_b)
            for _ in range(2):  # built, then from the cache
                for index, x in ((0, a), (1, b)):
                    want = numerics.fixed_point_rescale(grids, x, index, mode=mode)
                    got = numerics.fixed_point_rescale(
                        grids, x, index, mode=mode, **fast
                    )
                    assert got.dtype == want.dtype == np.float32
                    np.testing.assert_array_equal(got, want)
                want = numerics.fixed_point_clip(grids, a, 0.0, 1.5, mode)
                got = numerics.fixed_point_clip(grids, a, 0.0, 1.5, mode, **fast)
                np.testing.assert_array_equal(got, want)
                for op in ("add", "sub", "mul", "maximum"):
                    want = numerics.fixed_point_binary(op, grids, a, b, mode)
                    got = numerics.fixed_point_binary(op, grids, a, b, mode, **fast)
                    assert got.dtype == want.dtype
                    np.testing.assert_array_equal(got, want)
        constant = numerics.Grids((s_a, 0.0), (a_bits, 0), s_out, out_bits)
        c = np.float32(0.37)
        want = numerics.fixed_point_binary("add", constant, a, c, mode)
        got = numerics.fixed_point_binary("add", constant, a, c, mode, **fast)
        np.testing.assert_array_equal(got, want)
    assert requantizer._PREPARED_REQUANTIZERS  # (the compiled form ran)


@pytest.mark.parametrize("mode", [numerics.HALF_EVEN, numerics.HALF_UP])
def test_fixed_point_gemm_past_float32_sums_float32_slices_exactly(mode):
    """A linear of 2,048 terms of codes near 127 (sums past 2**24): with
    ``split`` its sum runs as float32 gemms of input slices that each stay
    below 2**24 (checked: float32 operands, two slices), and the result equals
    the float64 gemm's and the int64 reference's."""
    k, channels = 2048, 5
    grids = numerics.Grids((0.02,), (8,), 0.5, 8, (0.01,), 8)
    wq = RNG.integers(100, 128, (channels, k)).astype(np.int8)
    xq = RNG.integers(100, 128, (3, k)).astype(np.int8)
    x, w = xq * np.float32(0.02), wq * np.float32(0.01)
    calls = []

    def gemm(a, b):
        calls.append((a.dtype, a.shape[-1]))
        return a.astype(np.float64) @ b.astype(np.float64).T

    args = dict(bias=None, terms=k, axis=-1, w_axis=None, mode=mode)
    want = numerics.fixed_point_gemm(grids, x, w, gemm, **args)
    assert calls == [(np.float64, k)]  # one float64 gemm
    calls.clear()
    got = numerics.fixed_point_gemm(grids, x, w, gemm, split=(-1, 1), **args)
    assert calls == [(np.float32, k // 2)] * 2  # 127 * 1024 * 127 < 2**24
    np.testing.assert_array_equal(got, want)
    exact = xq.astype(np.int64) @ wq.astype(np.int64).T  # the int64 sums
    req = numerics.gemm_requantization(
        0.02, np.float32([0.01]), 0.5, terms=k, x_bits=8, w_bits=8,
        bias=None, channels=channels, mode=mode,
    )  # fmt: skip
    codes = numerics.gemm_output(exact, req, -128, 127, -1, mode)
    np.testing.assert_array_equal(got, numerics.dequantize(codes, 0.5, 0))


def _float_form_reference(m, s, off, reach):
    """The float form's parameters channel by channel in Python integers (None:
    not exact in float64)."""
    a0, m_f, c_f = [], [], []
    for mc, sc, oc in zip(m.tolist(), s.tolist(), off.tolist(), strict=True):
        a = 0 if mc == 0 else (2 * -oc + mc) // (2 * mc)  # round(-oc / mc)
        c = a * mc + oc
        if (reach << sc) + 2 * mc >= 2**52 or abs(a) >= 2**52 or abs(c) >= 2**52:
            return None
        a0.append(float(a))
        m_f.append(mc * 2.0**-sc)
        c_f.append(c * 2.0**-sc)
    return a0, m_f, c_f


def test_the_float_form_is_the_per_channel_reference():
    """The exact float64 form's parameters, computed for all channels at once,
    against the same computation channel by channel in Python integers: random
    channels, zero multipliers, offsets far from zero, shifts up to and past the
    edge of exactness; the same refusals and the same floats."""
    rng = np.random.default_rng(5)
    refused = 0
    for trial in range(400):
        n = int(rng.choice([1, 3, 64]))
        s = rng.integers(0, 54 if trial % 4 == 0 else 40, n)
        m = rng.integers(0, 2**31, n) >> rng.integers(0, 31, n)
        m[rng.random(n) < 0.05] = 0
        off = rng.integers(-(2**62), 2**62, n) >> rng.integers(0, 62, n)
        lo, hi = (-128, 127) if trial % 2 else (-(2**31), 2**31 - 1)
        r = requantizer.Requantizer(
            [1], [1], 0, lo, hi, ndim=1, axis=None, mode="half_even", acc_bound=1
        )
        got = r._float_form(m, s, off)
        want = _float_form_reference(m, s, off, max(abs(lo), abs(hi)) + 2)
        refused += want is None
        if want is None:
            assert got is None
        else:
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, np.array(w))
    assert 40 < refused < 360  # both answers are exercised
    # an offset near -2**63, where a * m wraps in int64 but c does not
    m, s, off = np.array([2**40]), np.array([2]), np.array([-(2**63 - 2**39)])
    r = requantizer.Requantizer(
        [1], [1], 0, -128, 127, ndim=1, axis=None, mode="half_even", acc_bound=1
    )
    got = r._float_form(m, s, off)
    want = _float_form_reference(m, s, off, 130)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, np.array(w))


def test_table_coefficients_past_the_int64_headroom_are_refused_at_the_edge():
    """A segmented table's accumulator bound ``|offset| + |slope| (width - 1) +
    16 |octave_step|`` must stay below 2**62: one coefficient set just below is
    accepted and one just above refused, the bound decided in exact integers
    where float64 is too close to call."""
    import dataclasses

    table = numerics.build_lut("sigmoid", 2**-12, 16, 1 / 127, 8, num_tables=6)
    end = int(table.starts[0]) + (1 << 16)  # the 16-bit input's codes
    widths = np.append(table.starts[1:], end) - table.starts
    limit = numerics._INT64_HEADROOM
    slope = (limit // 2) // int(widths.max())
    for extra, refused in ((-1, False), (0, False), (1, True), (2, True)):
        # every accumulator bound is at most the widest segment's; that one is
        # set to limit - 1 + extra exactly
        i = int(np.argmax(widths))
        slopes = np.zeros_like(table.slopes)
        slopes[i] = slope
        offsets = np.zeros_like(table.offsets)
        offsets[i] = limit - 1 + extra - slope * (int(widths[i]) - 1)
        make = functools.partial(
            dataclasses.replace, table, slopes=slopes, offsets=offsets
        )
        if refused:
            with pytest.raises(ValueError, match="overflow int64"):
                make()
        else:
            make()
