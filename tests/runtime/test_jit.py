"""runtime/jit_kernels.py: the compiled one-pass loops equal both the numpy forms
they replace and the numerics reference, bit for bit.

Every case runs twice, compiled and with ``loops()`` switched off (the numpy
forms, which a machine without numba or with ``HBIR_JIT=0`` runs), on layouts
(NCHW, channels-last, strided views), per-tensor and per-channel parameters,
every output width, ties, saturation, NaN and infinities.
"""

import numpy as np
import pytest
import torch

from hbir.runtime import integer_ops, kernels, numerics, requantizer

torch.set_num_threads(1)

RNG = np.random.default_rng(7)
MODES = numerics.ROUNDING_MODES


@pytest.fixture
def numpy_forms(monkeypatch):
    """Run the block with the compiled loops switched off."""

    def switch():
        monkeypatch.setattr(requantizer, "loops", lambda: None)
        monkeypatch.setattr(kernels, "loops", lambda: None)

    return switch


def test_numba_is_there_and_can_be_switched_off(monkeypatch):
    monkeypatch.delenv("HBIR_JIT", raising=False)
    assert requantizer.loops.__wrapped__() is not None  # a dependency
    monkeypatch.setenv("HBIR_JIT", "0")
    assert requantizer.loops.__wrapped__() is None


def layouts(x: np.ndarray):
    """``x`` as NCHW, channels-last and a strided view (same values)."""
    last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    wide = np.zeros(x.shape[:3] + (2 * x.shape[3],), x.dtype)
    wide[..., ::2] = x
    return [x, last, wide[..., ::2]]


# ------------------------------------------------------------------ requantization

REQUANTIZERS = [
    # multiplier, shift, offset, zero, path
    ([1 << 30], [31], None, 0, "float"),  # 0.5: every odd accumulator a tie
    ([7, 9, 11], [3, 0, 5], None, -3, "float"),
    ([1 << 30], [45], None, 0, "right"),  # ties in range: int64
    ([2**31 - 1, 2**30 + 1, 12345], [62, 40, 20], [5, -7, 1 << 19], 2, "right"),
    ([2**31 - 1], [48], None, 0, "nearest"),
    ([2**31 - 1, 1518500250, 1999999999], [47, 48, 49], [9, -3, 0], 0, "nearest"),
]


def tie_accumulators(m: int, s: int, off: int, count: int, bound: int) -> list[int]:
    """Accumulators ``a`` (``|a| <= bound``) with ``(a m + off) / 2**s`` exactly
    half-way between two integers, where there are any."""
    t = (m & -m).bit_length() - 1
    if s < 1 or t >= s or ((1 << (s - 1)) - off) % (1 << t):
        return []
    half = (1 << (s - 1)) - off
    period = 1 << (s - t)
    first = ((half >> t) * pow(m >> t, -1, period)) % period
    steps = RNG.integers(-bound // period - 1, bound // period + 1, count)
    return [a for a in (first + int(k) * period for k in steps) if abs(a) <= bound]


def accumulators(shape, multiplier, shift, offset, bound: int) -> np.ndarray:
    """Random sums, small ones, each channel's exact ties, both extremes."""
    acc = RNG.integers(-bound, bound, shape, endpoint=True).astype(np.int64)
    acc[0, :, 0] = RNG.integers(-200, 200, acc.shape[1:2] + acc.shape[3:])
    offset = offset or [0] * len(multiplier)
    for c, (m, s, off) in enumerate(zip(multiplier, shift, offset, strict=True)):
        ties = tie_accumulators(m, s, off, shape[3], bound)
        acc[0, c, 1, : len(ties)] = ties
    acc[0, 0, 2, :2] = [-bound, bound]  # saturation both ways
    return acc


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("out_dtype", [np.int8, np.uint8, np.int16, np.int32])
@pytest.mark.parametrize("case", REQUANTIZERS, ids=lambda c: c[-1] + str(len(c[0])))
def test_requantizer_compiled_equals_numpy_and_numerics(
    case, out_dtype, mode, numpy_forms
):
    multiplier, shift, offset, zero, path = case
    info = np.iinfo(out_dtype)
    lo, hi = max(int(info.min), -(2**31)), min(int(info.max), 2**31 - 1)
    axis = 1 if len(multiplier) > 1 else None
    bound = 2**31 - 1 - (0 if offset is None else max(map(abs, offset)))
    acc = accumulators((2, len(multiplier), 5, 6), multiplier, shift, offset, bound)

    def make():
        return requantizer.Requantizer(
            multiplier, shift, zero, lo, hi, ndim=4, axis=axis, mode=mode,
            acc_bound=bound, offset=offset,
        )  # fmt: skip

    r = make()
    if out_dtype != np.int32:  # (a 32-bit range leaves the float forms)
        assert r.path == path
    off = 0 if offset is None else np.asarray(offset).reshape(1, -1, 1, 1)
    m = np.asarray(multiplier).reshape(1, -1, 1, 1) if axis else multiplier[0]
    ref = numerics.requantize(  # offset folded: (acc m + off) = (acc + off/m) m
        acc * m + off, [1] * len(multiplier), shift, zero, lo, hi, axis, mode
    ).astype(out_dtype)
    sums = [a.astype(np.int32) for a in layouts(acc)]
    compiled = [r(a, out_dtype) for a in sums]
    numpy_forms()
    slow = make()
    for a, got in zip(sums, compiled, strict=True):
        assert got.dtype == out_dtype
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(slow(a, out_dtype), ref)


@pytest.mark.parametrize(
    "out_dtype",
    [np.int8, np.uint8, np.int16, np.int32, np.int64, np.float32, np.float64],
)
def test_nearest_rounds_half_to_even_and_clamps_in_every_width(out_dtype):
    # The nearest loops round integer results of up to 32 bits by adding
    # 1.5 * 2**52: every half-integer, both sides of every bound, huge values
    # and the largest float64 against np.rint and np.clip, in every width.
    from hbir.runtime import jit_kernels

    if np.dtype(out_dtype).kind == "f":  # (a fake quantization's codes)
        lo, hi = -1000.0, 3000.0
    else:
        info = np.iinfo(out_dtype)
        lo, hi = float(max(info.min, -(2**62))), float(min(info.max, 2**62))
    v = np.concatenate(
        [
            np.arange(-600, 600) / 2,
            np.array([lo, hi]) + np.arange(-8, 9)[:, None] / 4,
            [2.0**52 + 1, -(2.0**53), 1e300, -1e300, np.finfo(np.float64).max],
        ],
        axis=None,
    )
    v = np.concatenate([v, RNG.uniform(-(2.0**40), 2.0**40, 500)])
    want = np.clip(np.rint(v), lo, hi).astype(out_dtype)
    ones, zeros = np.ones(1), np.zeros(1)
    got = np.empty(v.size, out_dtype)
    jit_kernels.nearest_inner(v, (1, 1, v.size), ones, zeros, lo, hi, got)
    np.testing.assert_array_equal(got, want)
    rows = np.empty((v.size, 1), out_dtype)
    jit_kernels.nearest_last(v[:, None], ones, zeros, lo, hi, rows)
    np.testing.assert_array_equal(rows[:, 0], want)


def channels_last_sums(shape):
    """A conv epilogue's requantizer (31-bit multipliers, shift 48: the nearest
    form) and float32 sums of NCHW ``shape`` in channels-last memory, as oneDNN
    returns them."""
    n, c, h, w = shape
    r = requantizer.Requantizer(
        [2**31 - 1] * c, [48] * c, 0, -128, 127, ndim=4, axis=1,
        mode=numerics.HALF_EVEN, acc_bound=2**24 - 1,
    )  # fmt: skip
    acc = RNG.integers(-(2**24) + 1, 2**24, (n, h, w, c)).astype(np.float32)
    return r, acc.transpose(0, 3, 1, 2)


def test_float32_sums_take_the_compiled_nearest_path():
    """oneDNN's sums arrive as float32 channels-last: the compiled loop reads them
    as they are and keeps their memory order."""
    r, acc = channels_last_sums((1, 4, 7, 7))
    assert r.path == "nearest"
    got = r(acc, np.int8)
    ref = numerics.requantize(
        acc.astype(np.int64), [2**31 - 1], [48], 0, -128, 127, None, numerics.HALF_EVEN
    )
    assert got.strides[1] == 1  # channels-last kept
    np.testing.assert_array_equal(got, ref)


# ------------------------------------------------------------------ quantize


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("float_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize(
    "out_dtype, qmin, qmax",
    [(np.int8, -128, 127), (np.uint8, 0, 255), (np.int16, -32768, 32767)],
)
def test_quantizer_equals_numerics(
    out_dtype, qmin, qmax, per_channel, float_dtype, mode, numpy_forms
):
    scales = RNG.random(5) * 0.1 + 1e-3 if per_channel else np.array([0.013])
    zeros = RNG.integers(-3, 4, 5) if per_channel else np.array([3])
    axis = 1 if per_channel else None
    x = (RNG.standard_normal((2, 5, 7, 9)) * 3).astype(float_dtype)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    s0 = np.float32(scales[0])
    x[1, 0, 1, :4] = np.array([0.5, -0.5, 2.5, -3.5]) * s0  # ties (in float32)
    x[1, 0, 2, :2] = [1e30, -1e30]  # saturation

    def make():
        return kernels.Quantizer(scales, zeros, qmin, qmax, axis, mode, out_dtype)

    q = make()
    compiled = [q(v) for v in layouts(x)]
    numpy_forms()
    slow = make()
    for v, got in zip(layouts(x), compiled, strict=True):
        with np.errstate(all="ignore"):
            ref = numerics.quantize(v, scales, zeros, qmin, qmax, axis, mode)
            ref = ref.astype(out_dtype)
            np.testing.assert_array_equal(slow(v), ref)
        assert got.dtype == out_dtype
        np.testing.assert_array_equal(got, ref)


# ------------------------------------------------------------------ max pool


@pytest.mark.parametrize(
    "kernel, stride, padding, dilation, ceil_mode",
    [
        ((3, 3), (2, 2), (1, 1), (1, 1), False),
        ((2, 2), (2, 2), (0, 0), (1, 1), True),
        ((3, 2), (1, 2), (1, 0, 2, 1), (2, 1), True),  # uneven padding
        ((3, 3), (3, 3), (2, 2), (1, 1), True),  # windows of padding only at the edge
    ],
)
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_max_pool_compiled_equals_integer_ops(
    kernel, stride, padding, dilation, ceil_mode, dtype, numpy_forms
):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (2, 3, 9, 7), endpoint=True).astype(dtype)
    x[0, 0] = info.min  # padding must never win
    window = (kernel, stride, padding, dilation, ceil_mode)
    ref = integer_ops.max_pool2d(x, *window)
    compiled = [kernels.max_pool2d(v, *window) for v in layouts(x)]
    numpy_forms()
    for v, got in zip(layouts(x), compiled, strict=True):
        assert got.dtype == dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(kernels.max_pool2d(v, *window), ref)


# ------------------------------------------------------------------ pair tables


@pytest.mark.parametrize("dtypes", [(np.int8, np.int8), (np.uint8, np.int8)])
def test_pair_lookup_compiled_equals_numpy(dtypes, numpy_forms):
    def fn(a, b):
        return np.clip(a.astype(np.int32) * 3 - b, -128, 127).astype(np.int8)

    table = kernels.PairTable(fn, [np.dtype(d) for d in dtypes])
    grids = [np.arange(np.iinfo(d).min, np.iinfo(d).max + 1).astype(d) for d in dtypes]
    a, b = np.meshgrid(*grids, indexing="ij")  # every pair of codes
    a, b = a.reshape(4, 64, 16, 16), b.reshape(4, 64, 16, 16)
    pairs = list(zip(layouts(a), layouts(b), strict=True))
    compiled = [table(x, y) for x, y in pairs]
    numpy_forms()
    for (x, y), got in zip(pairs, compiled, strict=True):
        np.testing.assert_array_equal(got, fn(x, y))
        np.testing.assert_array_equal(table(x, y), fn(x, y))


def test_pair_lookup_writes_into_the_callers_buffer():
    table = kernels.PairTable(np.subtract, [np.dtype(np.int8)] * 2)
    a, b = layouts(RNG.integers(-128, 128, (2, 4, 5, 6)).astype(np.int8))[:2]
    for into in layouts(np.zeros(a.shape, table.table.dtype)):
        assert table(a, b, into) is into
        np.testing.assert_array_equal(into, np.subtract(a, b))


def test_float32_range_check_finds_the_sums_that_may_have_rounded():
    y = np.zeros((1, 4, 5, 5), np.float32)
    assert not kernels._reaches(y)
    y[0, 3, 4, 4] = -(2.0**24)
    assert kernels._reaches(y) and kernels._reaches(y.transpose(0, 2, 3, 1))


def test_requantizer_writes_into_the_callers_buffer():
    """``into`` of the sums' memory order is written by the compiled pass itself;
    any other layout still receives the same numbers."""
    r, acc = channels_last_sums((1, 4, 5, 6))
    ref = r(acc, np.int8)
    same = np.zeros((1, 5, 6, 4), np.int8).transpose(0, 3, 1, 2)
    other = np.zeros((1, 4, 5, 6), np.int8)  # NCHW memory
    for into in (same, other):
        got = r(acc, np.int8, into)
        assert got is into
        np.testing.assert_array_equal(into, ref)
    if requantizer.loops() is not None:  # (HBIR_JIT=0: numpy, then a copy)
        assert r._writes_into(acc, same) and not r._writes_into(acc, other)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64])
@pytest.mark.parametrize("clip", [(-128, 127), (0, 127), (-5, 100)])
def test_a_post_process_that_only_clamps_equals_the_int64_clamp(clip, dtype):
    """(The simulator's pool / rescale without requantization: clamped in the
    codes' own dtype, written into the result's buffer.)"""
    from hbir.runtime import npu_kernels
    from hbir.runtime.hbm_opcodes import NONE

    f = dict(
        clip=clip, pre_shift=NONE, multiplier=None, shift=None, rounding="half_even"
    )
    f.update(acc_bits=32, axis=1)
    info = np.iinfo(dtype)
    lo, hi = max(int(info.min), -(2**20)), min(int(info.max), 2**20)
    acc = RNG.integers(lo, hi, (2, 3, 4, 5), endpoint=True).astype(dtype)
    ref = np.clip(acc.astype(np.int64), *clip).astype(np.int8)
    np.testing.assert_array_equal(npu_kernels.post_process(f, acc, np.int8), ref)
    into = np.zeros(acc.shape, np.int8)
    assert npu_kernels.post_process(f, acc, np.int8, into=into) is into
    np.testing.assert_array_equal(into, ref)


# ------------------------------------------------------------------ data movement


@pytest.mark.parametrize(
    "shape, perm",
    [
        ((1, 3, 9, 10), (0, 2, 3, 1)),  # NCHW -> NHWC of 3 channels: x's order
        ((1, 5, 7, 40), (0, 3, 1, 2)),  # NHWC -> NCHW
        ((2, 3, 4, 5), (3, 1, 0, 2)),
        ((6, 17), (1, 0)),  # fewer than 4 dims
        ((4, 5, 6), (2, 0, 1)),
        ((1, 4, 6, 32), (0, 1, 2, 3)),  # same order: numpy's copy
    ],
)
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.float32])
def test_copy_into_equals_numpy_copy(shape, perm, dtype, numpy_forms):
    src = RNG.integers(-100, 100, shape).astype(dtype)
    view = src.transpose(perm)
    results = []
    for switch in (lambda: None, numpy_forms):
        switch()
        into = np.full(view.shape, 7, dtype)
        assert kernels.copy_into(view, into) is into
        results.append(into)
    want = np.ascontiguousarray(view)
    assert all(np.array_equal(r, want) for r in results)
    strided = np.zeros(view.shape[:-1] + (2 * view.shape[-1],), dtype)[..., ::2]
    kernels.copy_into(view, strided)  # into a strided destination
    assert np.array_equal(strided, want)


def _tie_band_brute_force(rows) -> bool:
    """``_hits_tie_band``'s question asked of every accumulator, in Python ints."""
    for a_lo, width, half, band, off, t, s, odd in rows:
        m = odd << t
        for acc in range(a_lo, a_lo + width + 1):
            r = (acc * m + off - half) % (1 << s)
            if r <= band or r >= (1 << s) - band:
                return True
    return False


def test_the_tie_band_question_compiled_equals_numpy_and_brute_force(numpy_forms):
    """The nearest form's proof (does an accumulator of a channel's window hit
    its rounding-tie band?) compiled, in numpy and by trying every accumulator:
    random channels, odd and even multipliers, bands of several widths, sets
    with and without a hit."""
    rng = np.random.default_rng(11)
    sets = []
    for _ in range(300):
        rows = []
        for _ in range(int(rng.integers(1, 5))):
            band = int(rng.choice([0, 1, 3, 40]))
            bound = int(rng.integers(1, 400))
            # about even odds of a hit: 2**s near the window times the band
            s = max(2, int(np.log2((2 * bound + 1) * (2 * band + 1))) + 2)
            s += int(rng.integers(-1, 2))
            if 2 * band + 1 >= 1 << s:
                continue
            t = int(rng.choice([0, 0, 1, 3]))
            m = int(rng.integers(1, 2**20)) | 1
            m <<= t
            off = int(rng.integers(-(2**40), 2**40))
            lo, hi = sorted(int(v) for v in rng.integers(-(2**45), 2**45, 2))
            row = requantizer._tie_congruence(m, s, off, band, lo, hi, bound)
            if row is not None:
                rows.append(row)
        if rows:
            sets.append(rows)
    compiled = [requantizer._hits_tie_band(rows) for rows in sets]
    numpy_forms()
    in_numpy = [requantizer._hits_tie_band(rows) for rows in sets]
    brute = [_tie_band_brute_force(rows) for rows in sets]
    assert compiled == brute
    assert in_numpy == brute
    assert 0.2 < np.mean(brute) < 0.8, "both answers are exercised"
