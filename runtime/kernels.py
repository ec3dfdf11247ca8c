"""Fast exact integer kernels on plain arrays: gemm, conv, requantization.

The interpreter's prepared plans (``runtime/plan.py``) call these, and so can the
NPU simulator: every function takes numpy arrays and Python numbers, never an
xDSL op. Each kernel computes exactly what its reference in
``runtime/integer_ops.py`` / ``runtime/numerics.py`` computes, bit for bit
(``tests/runtime/test_kernels.py`` checks it); only the way of getting there is
faster.

Exact sums
    int8 x int8 convs and gemms run on ``torch._int_mm`` (int32 accumulation,
    VNNI), exact while ``terms * 2**14 < 2**31``. Other widths (int16, uint8, grouped
    convs) use float32 torch kernels where every partial sum provably stays below
    2**24 (from the weight codes: ``max|x| * sum|w_c|``), float64 where it stays
    below 2**53, and numpy int64 (the reference engine) otherwise.

Requantization
    ``Requantizer`` computes ``numerics.requantize`` in a few int64 passes: the
    half-to-even rounding of ``p / 2**s`` is ``(p + 2**(s-1) - 1 + bit_s(p)) >> s``.
    Where the bounds allow (``Requantizer._float_form``) the same rounding runs in
    float64, exactly, in fewer passes. Where float64 cannot hold the product but
    no accumulator that matters lands near a rounding tie (``_nearest_form``
    proves it per channel by modular arithmetic), float64's own rounding to
    nearest gives the same integers in four passes. An optional per-channel
    ``offset`` folds a preceding bias add (and a left shift folded into the
    multiplier) into the same pass, valid when the caller has proved that none of
    the folded steps saturates (``fused_gemm_output``).

Weights are packed once (``pack_conv2d``, ``pack_linear``) and the packed form is
reused on every call.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from numpy.lib.stride_tricks import as_strided

from hbir.runtime import integer_ops, numerics

INT_MM_LIMIT = 2**31  # _int_mm accumulates in int32
FLOAT32_LIMIT = 2**24  # float32 holds every integer below this exactly
FLOAT64_LIMIT = 2**53


def magnitude(dtype) -> int:
    """The largest |code| of an integer dtype (128 for int8, 255 for uint8)."""
    info = np.iinfo(dtype)
    return max(-int(info.min), int(info.max))


def _method(x_dtype, w: np.ndarray, out_axis: int, int_mm_ok: bool) -> str:
    """How to sum ``x * w`` exactly: the fastest engine whose bound holds.

    The bound of any partial sum of output channel ``c`` is
    ``max|x| * sum_k |w[c, k]|``, whatever the summation order.
    """
    others = tuple(a for a in range(w.ndim) if a != out_axis % w.ndim)
    w_sum = int(np.max(np.sum(np.abs(w.astype(np.int64)), axis=others), initial=0))
    bound = magnitude(x_dtype) * w_sum
    if int_mm_ok and x_dtype == np.int8 and w.dtype == np.int8 and bound < INT_MM_LIMIT:
        return "int_mm"
    if bound < FLOAT32_LIMIT:
        return "float32"
    if bound < FLOAT64_LIMIT:
        return "float64"
    return "int64"


def _float_dtype(method: str) -> torch.dtype:
    return torch.float32 if method == "float32" else torch.float64


def _as_float(x: np.ndarray, method: str) -> torch.Tensor:
    return torch.from_numpy(x).to(_float_dtype(method))


def _exact(y: torch.Tensor) -> np.ndarray:
    """Integer-valued float sums as integers (they are exact): int32 below
    2**24 (the float32 bound), int64 otherwise."""
    return y.numpy().astype(np.int32 if y.dtype == torch.float32 else np.int64)


# ------------------------------------------------------------------ gemm


def int8_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-D int8 arrays, exact, int32 (``torch._int_mm``).

    Raises ``ValueError`` when an int32 accumulator could overflow.
    """
    if a.dtype != np.int8 or b.dtype != np.int8 or a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"int8_matmul takes 2-D int8 arrays, got {a.dtype} {b.dtype}")
    if a.shape[1] * 128 * 128 >= INT_MM_LIMIT:
        raise ValueError(f"a {a.shape[1]}-term int8 sum may overflow int32")
    return torch._int_mm(torch.from_numpy(a), torch.from_numpy(b)).numpy()


@dataclass(frozen=True)
class PackedLinear:
    """A linear layer's weight codes ``[O, K]``, packed for ``linear_sums``."""

    method: str
    weight: np.ndarray  # the codes as given
    packed: torch.Tensor  # int8 [K, O] for int_mm, float [O, K] otherwise


def pack_linear(w: np.ndarray, x_dtype) -> PackedLinear:
    """Pack ``w`` (``[O, K]`` codes) for inputs of ``x_dtype``."""
    method = _method(np.dtype(x_dtype), w, 0, int_mm_ok=True)
    if method == "int_mm":
        packed = torch.from_numpy(np.ascontiguousarray(w.T))
    elif method == "int64":
        packed = torch.from_numpy(w.astype(np.int64))
    else:
        packed = _as_float(w, method)
    return PackedLinear(method, w, packed)


def linear_sums(x: np.ndarray, p: PackedLinear) -> np.ndarray:
    """Exact ``x @ w.T`` over the last axis (int32 or int64 sums)."""
    if p.method == "int_mm":
        x2 = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
        y = torch._int_mm(torch.from_numpy(x2), p.packed).numpy()
        return y.reshape(*x.shape[:-1], y.shape[-1])
    if p.method == "int64":
        return integer_ops.numpy_matmul(x, p.weight.T)
    return _exact(F.linear(_as_float(x, p.method), p.packed))


def matmul_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact batched ``a @ b`` of two integer arrays (int32 or int64 sums)."""
    bound = a.shape[-1] * magnitude(a.dtype) * magnitude(b.dtype)
    if bound < FLOAT32_LIMIT:
        method = "float32"
    elif a.dtype == np.int8 and b.dtype == np.int8 and a.ndim == b.ndim == 2:
        return int8_matmul(np.ascontiguousarray(a), np.ascontiguousarray(b))
    elif bound < FLOAT64_LIMIT:
        method = "float64"
    else:
        return integer_ops.numpy_matmul(a, b)
    return _exact(torch.matmul(_as_float(a, method), _as_float(b, method)))


# ------------------------------------------------------------------ conv


@dataclass(frozen=True)
class PackedConv:
    """A conv's weight codes (OIHW), packed for ``conv2d_sums``."""

    method: str
    weight: np.ndarray  # the codes as given
    groups: int
    packed: torch.Tensor  # int8 [O, C*KH*KW] for int_mm, float OIHW otherwise
    # oneDNN's own packing per (stride, padding, dilation), made on first use
    # when the packed weight serves many calls (``reused``); None: not eligible
    onednn: dict | None = None
    channel_sum: int = 0  # the largest sum |w| of an output channel


def pack_conv2d(
    w: np.ndarray, x_dtype, groups: int, reused: bool = False
) -> PackedConv:
    """Pack ``w`` (OIHW codes) for inputs of ``x_dtype``; ``reused``: the packed
    weight will serve many calls (a prepared plan), so large int8 convs may use
    oneDNN (``_onednn_sums``), whose own weight packing costs about a call."""
    x_dtype = np.dtype(x_dtype)
    method = _method(x_dtype, w, 0, int_mm_ok=groups == 1)
    if method == "int_mm":
        packed = torch.from_numpy(np.ascontiguousarray(w.reshape(w.shape[0], -1)))
    elif method == "int64":
        packed = torch.from_numpy(w.astype(np.int64))
    else:
        packed = _as_float(w, method)
    channel_sum = _max_channel_sum(w)
    eligible = (
        reused
        and x_dtype in (np.dtype(np.int8), np.dtype(np.uint8))
        and w.dtype == np.int8
        and 255 * channel_sum < INT_MM_LIMIT  # oneDNN's u8 sums: int32
        and _onednn_exact()
    )
    onednn = {} if eligible else None
    return PackedConv(method, w, groups, packed, onednn, channel_sum)


def _max_channel_sum(w: np.ndarray) -> int:
    return int(np.max(np.sum(np.abs(w.reshape(w.shape[0], -1).astype(np.int64)), 1)))


@functools.cache
def _onednn_exact() -> bool:
    """Whether this torch has oneDNN's int8 conv and it sums exactly here.

    Checked once, on extreme codes: without VNNI, oneDNN may pair u8 x s8
    products in saturating int16 (or halve the weights to avoid it); either
    shows as a wrong sum, and then every conv stays on ``_int_mm``."""
    x = np.full((1, 8, 4, 4), 127, np.int8)
    w = np.full((4, 8, 3, 3), 127, np.int8)
    w[1], w[2] = -128, (np.arange(-36, 36) * 3).reshape(8, 3, 3)
    p = PackedConv("int_mm", w, 1, torch.from_numpy(w), {}, _max_channel_sum(w))
    try:
        y = _onednn_sums(x, p, (1, 1), (1, 1, 1, 1), (1, 1), min_macs=0)
    except (AttributeError, RuntimeError):
        return False
    exact = integer_ops.numpy_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    return y is not None and np.array_equal(y, exact)


# Below this many multiply-adds oneDNN's fixed cost (~80 µs a call here) loses
# to im2col + _int_mm; 1x1 convs (no im2col to save) stay on _int_mm too.
ONEDNN_MIN_MACS = 8_000_000


def _onednn_sums(x: np.ndarray, p: PackedConv, stride, pads, dilation, min_macs=None):
    """The conv sums through oneDNN's int8 conv, or None when this call is not
    worth it (or a sum reached 2**24).

    oneDNN sums u8 x s8 exactly in int32 and returns them as float32, exact
    below 2**24: guaranteed when ``128 * sum|w_c| < 2**24``, else checked on
    the result. int8 codes ``x`` become u8 codes ``x + 128`` with zero point
    128, which oneDNN subtracts exactly (also in the padding). The result is
    NCHW in channels-last memory."""
    t, lf, b, r = pads
    o, cg, kh, kw = p.weight.shape
    n, c, h, w = x.shape
    (sh, sw), (dh, dw) = stride, dilation
    oh = (h + t + b - dh * (kh - 1) - 1) // sh + 1
    ow = (w + lf + r - dw * (kw - 1) - 1) // sw + 1
    min_macs = ONEDNN_MIN_MACS if min_macs is None else min_macs
    if kh * kw == 1 or o * cg * kh * kw * n * oh * ow < min_macs:
        return None
    zero = 128 if x.dtype == np.int8 else 0
    # oneDNN pads alike on both sides: uneven padding (a tile's edge) is
    # written into the input copy, as the code of 0, and oneDNN pads nothing
    inside = (t, lf) == (b, r)
    geometry = (stride, (t, lf) if inside else (0, 0), dilation)
    packed = p.onednn.get(geometry)
    if packed is None:
        packed = p.onednn[geometry] = (
            torch.ops.onednn.qconv_prepack(
                torch.from_numpy(p.weight), torch.ones(o), 1.0, zero,
                list(stride), list(geometry[1]), list(dilation), p.groups, None,
            ),
            torch.ones(o),
            torch.zeros(o, dtype=torch.int64),
        )  # fmt: skip
    weight, w_scales, w_zeros = packed
    if inside:
        codes = np.empty((n, h, w, c), np.uint8)
        interior = codes
    else:
        codes = np.full((n, h + t + b, w + lf + r, c), zero, np.uint8)
        interior = codes[:, t : t + h, lf : lf + w]
    interior = interior.transpose(0, 3, 1, 2)  # NCHW view, channels last
    if zero:
        np.bitwise_xor(x.view(np.uint8), np.uint8(0x80), out=interior)  # x + 128
    else:
        interior[...] = x
    y = torch.ops.onednn.qconv2d_pointwise(
        torch.from_numpy(codes.transpose(0, 3, 1, 2)), 1.0, zero, weight,
        w_scales, w_zeros, None, list(stride), list(geometry[1]), list(dilation),
        p.groups, 1.0, 0, torch.float32, "none", [], "",
    )  # fmt: skip
    if magnitude(x.dtype) * p.channel_sum >= FLOAT32_LIMIT:
        lo, hi = torch.aminmax(y)
        if max(-float(lo), float(hi)) >= FLOAT32_LIMIT:
            return None  # a sum float32 may have rounded: the exact path instead
    return y.numpy()


def _pointwise_channels_last(x: np.ndarray, p: PackedConv, pads) -> bool:
    """A 1x1 conv without padding of a channels-last ``x``: one gemm of its
    (strided) pixels, no im2col, the result channels-last too."""
    return (
        p.weight.shape[2:] == (1, 1)
        and not any(pads)
        and x.ndim == 4
        and x.strides[1] == x.itemsize
        and x.shape[1] > 1
    )


def _im2col(x, kernel, stride, pads, dilation):
    """``[C*KH*KW, N*OH*OW]`` int8 patches of NCHW ``x`` (rows ordered c, i, j)."""
    t, lf, b, r = pads
    if t or lf or b or r:  # (np.pad costs ~30 µs of Python per call)
        n, c, h, w = x.shape
        padded = np.zeros((n, c, h + t + b, w + lf + r), x.dtype)
        padded[:, :, t : t + h, lf : lf + w] = x
        x = padded
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    sn, sc, sy, sx = x.strides
    view = as_strided(
        x, (c, kh, kw, n, oh, ow), (sc, sy * dh, sx * dw, sn, sy * sh, sx * sw)
    )
    return np.ascontiguousarray(view).reshape(c * kh * kw, n * oh * ow), (n, oh, ow)


def conv2d_sums(x: np.ndarray, p: PackedConv, stride, pads, dilation) -> np.ndarray:
    """Exact conv sums (NCHW int32 or int64, or float32 holding integers below
    2**24), no bias; ``pads`` is (t, l, b, r)."""
    stride, dilation = tuple(stride), tuple(dilation)
    pads = integer_ops.pads4(pads)
    if p.onednn is not None:
        y = _onednn_sums(x, p, stride, pads, dilation)
        if y is not None:
            return y
    if p.method == "int_mm" and _pointwise_channels_last(x, p, pads):
        (sh, sw), n = stride, x.shape[0]
        pixels = x[:, :, ::sh, ::sw].transpose(0, 2, 3, 1)  # NHWC view
        oh, ow = pixels.shape[1:3]
        cols = np.ascontiguousarray(pixels).reshape(-1, x.shape[1])
        y = torch._int_mm(torch.from_numpy(cols), p.packed.t()).numpy()
        return y.reshape(n, oh, ow, -1).transpose(0, 3, 1, 2)  # channels last
    if p.method == "int_mm":
        kernel = p.weight.shape[2:]
        cols, (n, oh, ow) = _im2col(x, kernel, stride, pads, dilation)
        # [O, N*OH*OW]: NCHW for N = 1 without a transpose ([P, O] runs the
        # gemm faster but needs one; the two measured the same end to end).
        y = torch._int_mm(p.packed, torch.from_numpy(cols)).numpy()
        return y.reshape(-1, n, oh, ow).transpose(1, 0, 2, 3)
    if p.method == "int64":
        return integer_ops.numpy_conv2d(x, p.weight, stride, pads, dilation, p.groups)
    t, lf, b, r = pads
    xt = _as_float(x, p.method)
    if (t, lf) != (b, r):
        xt = F.pad(xt, (lf, r, t, b))
        t = lf = 0
    y = F.conv2d(xt, p.packed, None, stride, (t, lf), dilation, p.groups)
    return _exact(y)


def conv2d(x, w, bias, stride, padding, dilation, groups, *, bits=32) -> np.ndarray:
    """``integer_ops.conv2d`` (exact sums + bias, saturated to ``bits``), fast."""
    sums = conv2d_sums(x, pack_conv2d(w, x.dtype, groups), stride, padding, dilation)
    return integer_ops.finish(sums, bias, 1, bits)


def linear(x, w, bias, *, bits=32) -> np.ndarray:
    """``integer_ops.linear``, fast."""
    return integer_ops.finish(linear_sums(x, pack_linear(w, x.dtype)), bias, -1, bits)


def matmul(a, b, *, bits=32) -> np.ndarray:
    """``integer_ops.matmul``, fast."""
    return integer_ops.finish(matmul_sums(a, b), None, -1, bits)


# ------------------------------------------------------------------ requantization


def _along(values, ndim: int, axis: int | None) -> np.ndarray:
    values = np.asarray(values, np.int64).reshape(-1)
    if axis is None or values.size == 1:
        return values.reshape(())
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)


class Requantizer:
    """``numerics.requantize`` for one op, its parameters prepared once.

    ``y = clamp(round((acc * multiplier + offset) / 2**shift) + zero, lo, hi)``
    with per-channel arrays along ``axis`` of an ``ndim``-dimensional input, and
    ``acc_bound`` the largest |acc| the caller can pass (by default the input
    dtype's). ``offset`` (int64 per channel) is the caller's folded bias. Where
    the fast form is not provably exact in int64 (mixed left and right shifts,
    products near 2**62), it computes ``numerics.requantize`` itself.
    """

    def __init__(
        self,
        multiplier,
        shift,
        zero: int,
        lo: int,
        hi: int,
        *,
        ndim: int,
        axis: int | None,
        mode: str,
        acc_bound: int,
        offset=None,
    ):
        if mode not in numerics.ROUNDING_MODES:
            raise ValueError(f"unknown rounding mode {mode!r}")
        self.params = dict(
            multiplier=multiplier, shift=shift, zero=zero, lo=lo, hi=hi, ndim=ndim
        )
        self.params.update(axis=axis, mode=mode, acc_bound=acc_bound, offset=offset)
        m = np.asarray(multiplier, np.int64).reshape(-1)
        s = np.asarray(shift, np.int64).reshape(-1)
        self.zero, self.lo, self.hi, self.mode = int(zero), int(lo), int(hi), mode
        self.reference = (m, s, axis)
        off = None if offset is None else np.asarray(offset, np.int64).reshape(-1)
        self.path = self._choose(m, s, off, acc_bound)
        one = m.size == s.size == 1 and (off is None or off.size == 1)
        self.per_tensor = one  # the same function of every element
        self.tables = {} if one and acc_bound <= 2**15 else None
        self.bound = acc_bound
        if self.path == "right" and np.any(s == 0):
            # p / 2**0 == 2p / 2**1: one rounding formula for every channel
            unshifted = s == 0
            m, s = np.where(unshifted, 2 * m, m), np.maximum(s, 1)
            off = None if off is None else np.where(unshifted, 2 * off, off)
        if self.path == "integer":
            m = m >> s  # multiplier / 2**shift is an integer: no rounding at all
        along = self._along = (ndim, None if m.size == s.size == 1 else axis)
        self.m = _along(m, *along)
        self.unit = bool(np.all(m == 1))
        self.offset = None if off is None else _along(off, ndim, axis)
        self.s = _along(s, *along)
        if self.path == "right":
            half = np.left_shift(np.int64(1), self.s - 1)
            self.bias = half - 1 if mode == numerics.HALF_EVEN else half
            exact = self._float_form(m, s, off)
            nearest = (
                None if exact else _nearest_form(m, s, off, zero, lo, hi, acc_bound)
            )
            if exact is not None:
                self.path = "float"
                along_f = (ndim, axis if exact[0].size > 1 else None)
                self.a0, self.m_f, self.c_f = (_along_float(a, *along_f) for a in exact)
            elif nearest is not None:
                self.path = "nearest"
                along_f = (ndim, axis if nearest[0].size > 1 else None)
                self.m_f, self.c_f = (_along_float(a, *along_f) for a in nearest)
                self.axis, self._torch = along_f[1], None
        if self.path == "left":
            left = -self.s
            self.s = left
            limit = np.left_shift(np.int64(1), 62 - left)
            self.limit = (
                None if acc_bound * int(np.max(m)) <= int(np.min(limit)) else limit
            )

    def _nearest_by_rows(self, acc: np.ndarray, out_dtype) -> np.ndarray:
        """The nearest path over a large 4-D value, a few rows (axis 2) at a
        time: the float64 temporaries of a block stay in the CPU's cache, where
        the whole tensor's would make every pass a trip to memory. torch keeps
        the operand's memory order (e.g. oneDNN's channels-last sums); its
        ``round`` is float64 rounding to nearest-even like ``np.rint``."""
        if self._torch is None:
            self._torch = tuple(
                torch.from_numpy(np.asarray(a)) for a in (self.m_f, self.c_f)
            )
        m_f, c_f = self._torch
        x = torch.from_numpy(acc)
        y = torch.empty_like(x, dtype=torch.from_numpy(np.empty(0, out_dtype)).dtype)
        rows = max(1, NEAREST_BLOCK // max(1, acc.size // acc.shape[2]))
        for r in range(0, acc.shape[2], rows):
            v = x[:, :, r : r + rows] * m_f
            v.add_(c_f).round_().clamp_(self.lo, self.hi)
            y[:, :, r : r + rows] = v
        return y.numpy()

    def clamped(self, lo: int, hi: int) -> Requantizer:
        """This requantization followed by a clamp to ``[lo, hi]``."""
        params = self.params | {"lo": max(self.lo, lo), "hi": min(self.hi, hi)}
        return Requantizer(**params)

    def factor(self) -> int | None:
        """``F`` when this computes ``clamp(acc * F, lo, hi)`` (one multiplier,
        zero point 0, no rounding, no offset), else None."""
        if self.zero or self.offset is not None or self.m.size != 1:
            return None
        if self.path == "integer" or (self.path == "left" and self.limit is None):
            shift = 0 if self.path == "integer" else int(self.s)
            return int(self.m) << shift
        return None

    def _float_form(self, m, s, off):
        """Per channel ``(a0, m / 2**s, (a0 m + off) / 2**s)`` as float64 when
        ``((acc - a0) * m + c) / 2**s`` is exact wherever it decides the result.

        With ``a0`` the integer nearest ``-off / m``, ``|c| <= m / 2``. An
        unsaturated result, and the first saturated one on either side, have
        ``|p| <= (R + 1) 2**s + m`` (``R`` the largest ``|bound - zero|``), so
        ``|(acc - a0) m| < 2**52`` there and every float64 step is exact; beyond,
        every step is monotone, so the result saturates as the exact one does.
        """
        reach = max(abs(self.lo - self.zero), abs(self.hi - self.zero)) + 2
        off = np.zeros(1, np.int64) if off is None else off
        n = max(m.size, s.size, off.size)
        a0, m_f, c_f = [], [], []
        channels = (np.broadcast_to(v, (n,)) for v in (m, s, off))
        for mc, sc, oc in zip(*channels, strict=True):
            mc, sc, oc = int(mc), int(sc), int(oc)
            a = 0 if mc == 0 else (2 * -oc + mc) // (2 * mc)  # round(-oc / mc)
            c = a * mc + oc
            if (reach << sc) + 2 * mc >= 2**52 or abs(a) >= 2**52 or abs(c) >= 2**52:
                return None
            a0.append(float(a))
            m_f.append(mc * 2.0**-sc)
            c_f.append(c * 2.0**-sc)
        return np.array(a0), np.array(m_f), np.array(c_f)

    @staticmethod
    def _choose(m, s, off, acc_bound: int) -> str:
        twice = np.where(s == 0, 2, 1)  # the s == 0 channels are doubled
        top = acc_bound * int(np.max(twice * m, initial=0))
        top += 0 if off is None else int(np.max(np.abs(twice * off), initial=0))
        if top >= 2**62:
            return "reference"
        if off is None and np.all(s >= 0) and np.all(m % (np.int64(1) << s) == 0):
            return "integer"
        if np.all(s >= 0):
            return "right"
        if off is None and np.all(s <= 0):
            return "left"
        return "reference"

    def __call__(self, acc: np.ndarray, out_dtype) -> np.ndarray:
        if self.tables is not None and acc.dtype.kind in "iu" and acc.itemsize <= 2:
            return self._by_table(acc, np.dtype(out_dtype))
        return self._compute(acc, out_dtype)

    def _by_table(self, acc: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
        """One requantization of 8- or 16-bit codes (one multiplier for all):
        a lookup in the table of every code's result, computed once by the
        same arithmetic."""
        table = self.tables.get((acc.dtype, out_dtype))
        if table is None:
            info = np.iinfo(acc.dtype)
            codes = np.arange(info.min, info.max + 1, dtype=np.int64)
            table = self._compute(np.clip(codes, -self.bound, self.bound), out_dtype)
            self.tables[acc.dtype, out_dtype] = table
        perm = memory_order(acc)
        flat = acc.transpose(perm)
        if acc.dtype.kind == "i":  # code - min: flip the sign bit
            unsigned = np.dtype(f"u{acc.itemsize}")
            flat = flat.view(unsigned) ^ unsigned.type(1 << (8 * acc.itemsize - 1))
        return np.take(table, flat).transpose(np.argsort(perm))

    def _compute(self, acc: np.ndarray, out_dtype) -> np.ndarray:
        if acc.dtype.kind == "f" and self.path not in ("nearest", "float"):
            acc = acc.astype(np.int64)  # integers (float32 sums of conv2d_sums)
        if self.path == "reference":
            m, s, axis = self.reference
            acc = np.asarray(acc, np.int64)
            if self.offset is not None:
                raise AssertionError("an offset requantizer must not fall back")
            y = numerics.requantize(
                acc, m, s, self.zero, self.lo, self.hi, axis, self.mode
            )
            return y.astype(out_dtype)
        if self.path == "nearest":
            if acc.ndim == 4 and acc.size >= NEAREST_BLOCK and self.axis != 2:
                return self._nearest_by_rows(acc, out_dtype)
            v = np.multiply(acc, self.m_f, dtype=np.float64)
            v += self.c_f
            np.rint(v, out=v)
            y = np.empty_like(v, out_dtype)  # in v's memory order
            np.clip(v, self.lo, self.hi, out=y, casting="unsafe")
            return y
        if self.path == "float":
            v = np.subtract(acc, self.a0, dtype=np.float64)
            v *= self.m_f
            v += self.c_f
            v = numerics.round_float(v, self.mode)
            if self.zero:
                v += self.zero
            y = np.empty(v.shape, out_dtype)
            np.clip(v, self.lo, self.hi, out=y, casting="unsafe")
            return y
        p = np.multiply(acc, self.m, dtype=np.int64)
        if self.offset is not None:
            p += self.offset
        if self.path == "right":
            if self.mode == numerics.HALF_EVEN:
                odd = p >> self.s
                odd &= 1
                odd += self.bias
                p += odd
            else:
                p += self.bias
            p >>= self.s
        elif self.path == "left":
            if self.limit is not None:
                np.clip(p, -self.limit, self.limit, out=p)
            p <<= self.s
        if self.zero:
            p += self.zero
        # clamp and narrow in one pass (every clamped value fits out_dtype)
        y = np.empty(p.shape, out_dtype)
        np.clip(p, self.lo, self.hi, out=y, casting="unsafe")
        return y


# Most requantizations of a 32-bit accumulator into 8 bits have 31-bit multipliers
# and shifts near 48: ``acc * m`` needs ~56 bits, beyond float64's 53, so the
# exact float form above does not apply and int64 needs eight passes. But an
# error far below one output step only matters for accumulators whose exact
# quotient lies within that error of a rounding tie, and those are few and
# computable: ``acc * m + off`` must hit a narrow band of residues modulo
# ``2**s``, a linear congruence with at most one solution class per residue.
NEAREST_CANDIDATES = 1 << 15  # residues checked per channel before giving up
NEAREST_BLOCK = 1 << 16  # elements per block of a large tensor (512 KiB of float64)


def _nearest_form(m, s, off, zero, lo, hi, acc_bound):
    """Per channel ``(m / 2**s, off / 2**s + zero)`` as float64 when
    ``clamp(rint(acc * mf + cf), lo, hi)`` equals
    ``clamp(round((acc m + off) / 2**s) + zero, lo, hi)`` for every integer
    ``|acc| <= acc_bound``, in any rounding mode; else None.

    With ``X = (acc m + off) / 2**s + zero``, float64 computes
    ``v = fl(fl(acc mf) + cf)`` with ``|v - X| <= E``. Outside the window
    ``X in [lo - 1.5, hi + 1.5]`` an error ``E < 1/2`` keeps ``rint(v)``
    beyond the same bound, so both saturate alike. Inside, ``rint(v) == round(X)``
    unless ``X`` lies within ``E`` of a half-integer (ties included), that is
    unless ``acc m + off`` is within ``E 2**s`` of ``2**(s-1)`` modulo ``2**s``;
    each such residue ``r`` is hit only by the accumulators
    ``acc = (r - off) / 2**t * inv(m / 2**t)  (mod 2**(s-t))`` (``2**t`` the
    power of two in ``m``), and none of them may lie in the window.
    """
    if acc_bound >= 2**52:
        return None  # acc itself would not convert to float64 exactly
    reach = max(abs(lo), abs(hi)) + 2
    n = max(m.size, s.size, 1 if off is None else off.size)
    off = np.zeros(n, np.int64) if off is None else off
    m_f, c_f = [], []
    for mc, sc, oc in zip(
        *(np.broadcast_to(v, (n,)) for v in (m, s, off)), strict=True
    ):
        mc, sc, oc = int(mc), int(sc), int(oc)
        if mc <= 0 or sc < 1 or (mc >> (mc & -mc).bit_length() - 1) >= 2**53:
            return None  # m / 2**s must be exact in float64
        c = (oc + (zero << sc)) / 2**sc  # correctly rounded (Python int division)
        # |v - X| <= 2**-52 (|acc mf| + |cf|) + ulps: over every |acc| <= acc_bound,
        # and in the window, where |acc mf| <= reach + |cf|
        top = (acc_bound * mc >> sc) + 1
        if (top + abs(c) + 2) * 2.0**-51 >= 0.5:
            return None
        band = math.ceil((reach + 2 * abs(c) + 4) * 2.0 ** (sc - 51))
        if 2 * band + 1 > NEAREST_CANDIDATES or 2 * band + 1 >= 1 << sc:
            return None
        if _hits_tie_band(mc, sc, oc + (zero << sc), band, lo, hi, acc_bound):
            return None
        m_f.append(mc * 2.0**-sc)
        c_f.append(c)
    return np.array(m_f), np.array(c_f)


def _hits_tie_band(m: int, s: int, off: int, band: int, lo, hi, acc_bound) -> bool:
    """Whether some ``acc`` with ``(acc m + off) / 2**s in [lo - 1.5, hi + 1.5]``
    and ``|acc| <= acc_bound`` has ``acc m + off`` within ``band`` of
    ``2**(s-1)`` modulo ``2**s``."""
    # the window, as accumulators (m > 0): ceil / floor of exact quotients
    a_lo = max(-acc_bound, -((off - (2 * lo - 3) * 2 ** (s - 1)) // m))
    a_hi = min(acc_bound, ((2 * hi + 3) * 2 ** (s - 1) - off) // m)
    if a_lo > a_hi:
        return False
    t = min((m & -m).bit_length() - 1, s)
    k = s - t
    inverse = pow(m >> t, -1, 1 << 64)  # m >> t is odd
    half = 1 << (s - 1)
    r = np.arange(half - band, half + band + 1, dtype=np.int64)
    d = (r - (off % (1 << s))) & ((1 << s) - 1)  # acc m = d (mod 2**s)
    d = d[(d & ((1 << t) - 1)) == 0] >> t  # solvable: 2**t divides d
    residue = (d.astype(np.uint64) * np.uint64(inverse)) & np.uint64((1 << k) - 1)
    # the first accumulator of each class at or above a_lo
    first = (residue.astype(np.int64) - a_lo) & ((1 << k) - 1)
    return bool(np.any(first <= a_hi - a_lo))


def max_pool2d(x, kernel, stride, padding, dilation, ceil_mode) -> np.ndarray:
    """``integer_ops.max_pool2d``, as one elementwise maximum per window tap
    (numpy's reduction over the small window axes is ~10x slower)."""
    x = np.asarray(x)
    fill = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
    pads = integer_ops.pads4(padding)
    # The reference's own windows (torch's output sizes): one source of truth.
    v, _, _ = integer_ops._windows(x, kernel, stride, pads, dilation, ceil_mode, fill)
    kh, kw = v.shape[-2:]
    y = v[..., 0, 0].copy()
    for i in range(kh):
        for j in range(kw):
            if i or j:
                np.maximum(y, v[..., i, j], out=y)
    return y


def requantize(
    acc: np.ndarray,
    multiplier,
    shift,
    zero_point: int,
    qmin: int,
    qmax: int,
    axis: int | None = None,
    mode: str = numerics.HALF_EVEN,
    out_dtype=np.int64,
) -> np.ndarray:
    """``numerics.requantize``, fast (the parameters prepared on every call)."""
    acc = np.asarray(acc)
    bound = magnitude(acc.dtype) if acc.dtype != np.int64 else 2**62
    r = Requantizer(
        multiplier,
        shift,
        zero_point,
        qmin,
        qmax,
        ndim=acc.ndim,
        axis=axis,
        mode=mode,
        acc_bound=bound,
    )
    return r(acc, out_dtype)


def fused_gemm_output(
    req: numerics.GemmRequant,
    acc_bound: int,
    qmin: int,
    qmax: int,
    *,
    ndim: int,
    axis: int,
    mode: str,
) -> Requantizer | None:
    """``numerics.gemm_output`` as one ``Requantizer``, or None where it may differ
    (``fused_epilogue`` with the factor ``2**fine``)."""
    if req.x_shift or req.w_shift:
        return None  # operand codes shifted before the gemm: not this form
    fine = 0 if req.fused_bias else req.fine
    return fused_epilogue(
        req.multiplier, req.shift, qmin, qmax, factor=1 << fine, bias=req.bias,
        acc_bound=acc_bound, ndim=ndim, axis=axis, mode=mode,
    )  # fmt: skip


def fused_epilogue(
    multiplier,
    shift,
    lo: int,
    hi: int,
    *,
    factor: int,
    bias,
    acc_bound: int,
    ndim: int,
    axis: int,
    mode: str,
) -> Requantizer | None:
    """A gemm's epilogue as one ``Requantizer``, or None where it may differ.

    The epilogue: the exact sums ``acc`` (``|acc| <= acc_bound``) times the
    integer ``factor`` (a left shift), plus ``bias`` (per channel along
    ``axis``, or None), each step saturating to 32 bits, then requantized by
    ``(multiplier, shift)`` and clamped to ``[lo, hi]``. When
    ``acc_bound * factor + max|bias| < 2**31`` nothing saturates, and
    ``(acc * factor + bias) * m == acc * (m factor) + bias * m`` exactly.
    """
    b = np.zeros(1, np.int64) if bias is None else np.asarray(bias, np.int64)
    if acc_bound * factor + int(np.max(np.abs(b))) >= 2**31:
        return None
    m = np.asarray(multiplier, np.int64).reshape(-1)
    s = np.asarray(shift, np.int64).reshape(-1)
    channels = max(m.size, s.size, b.size)
    m, s = (np.broadcast_to(v, (channels,)) for v in (m, s))
    offset = None if bias is None else np.broadcast_to(b.reshape(-1), (channels,)) * m
    r = Requantizer(
        m * factor, s, 0, lo, hi, ndim=ndim, axis=axis, mode=mode,
        acc_bound=acc_bound, offset=offset,
    )  # fmt: skip
    return None if r.path == "reference" else r


class PairTable:
    """``fn(a, b)``, elementwise, of two 8-bit code tensors, as one lookup per
    element in the 256 x 256 table of every pair's result, which ``fn`` itself
    computes once (so the numbers cannot differ): a residual add with its
    rescales and requantization, for instance."""

    def __init__(self, fn, dtypes):
        grids = [
            np.arange(np.iinfo(d).min, np.iinfo(d).max + 1, dtype=d) for d in dtypes
        ]
        self.table = np.ascontiguousarray(
            fn(grids[0].reshape(256, 1), grids[1].reshape(1, 256))
        )
        self.table = self.table.reshape(-1)
        self.signed = tuple(np.dtype(d).kind == "i" for d in dtypes)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        order = memory_order(a)  # work in a's memory order
        a, b = a.transpose(order), b.transpose(order)
        index = _code_index(a, self.signed[0]).astype(np.uint16)
        index <<= 8
        index |= _code_index(b, self.signed[1])
        return np.take(self.table, index).transpose(np.argsort(order))


def _code_index(x: np.ndarray, signed: bool) -> np.ndarray:
    """8-bit codes as table rows 0..255 (int8: ``x + 128``, by its sign bit)."""
    return x.view(np.uint8) ^ np.uint8(0x80) if signed else x


# ------------------------------------------------------------------ fake quantization


class FakeQuantizer:
    """``numerics.fake_quant`` of float32 values (per tensor or along ``axis``).

    ``clamp(round(x * fl32(1/s)) + zp, qmin, qmax) - zp`` times ``s``, all in
    float32: the rounded product is an integer-valued float32, and for codes of at
    most 16 bits every value that survives the clamp is exact, so this is the
    reference's float64 / int64 detour without the detour. NaN inputs (the
    reference maps them to the zero point) take the reference path.
    """

    def __init__(self, scale, zero_point, qmin: int, qmax: int, axis, ndim, mode):
        if qmax - qmin >= 2**16:
            raise ValueError("FakeQuantizer handles codes of at most 16 bits")
        self.reference = (scale, zero_point, qmin, qmax, axis, mode)
        scale = np.asarray(scale, np.float32)
        inv = (np.float32(1.0) / scale).astype(np.float32)
        along = (ndim, axis)
        self.inv = _along_float(inv, *along)
        self.scale = _along_float(scale, *along)
        zp = np.asarray(zero_point, np.int64)
        self.zp = _along_float(zp.astype(np.float32), *along)
        self.lo, self.hi, self.mode = np.float32(qmin), np.float32(qmax), mode
        self.has_zp = bool(np.any(zp != 0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        v = np.multiply(x, self.inv, dtype=np.float32)
        if v.size and np.isnan(np.min(v)):
            return numerics.fake_quant(x, *self.reference)
        with np.errstate(invalid="ignore"):  # half-up of inf: inf - inf
            v = numerics.round_float(v, self.mode)
        v += self.zp  # also turns the -0.0 of rint(-0.3) into the reference's 0.0
        np.clip(v, self.lo, self.hi, out=v)
        if self.has_zp:
            v -= self.zp
        v *= self.scale
        return v


def memory_order(x: np.ndarray) -> tuple[int, ...]:
    """The axes of ``x`` from the slowest-varying in memory to the fastest:
    ``x.transpose(order)`` is C-contiguous for any contiguous layout (NCHW,
    channels-last), so elementwise work on it runs in memory order."""
    return tuple(sorted(range(x.ndim), key=lambda a: -abs(x.strides[a])))


def _along_float(values, ndim: int, axis: int | None) -> np.ndarray:
    values = np.asarray(values).reshape(-1)
    if axis is None or values.size == 1:
        return values.reshape(())
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)
