"""Fast exact integer kernels on plain arrays: gemm, conv, requantization.

The interpreter's prepared plans (``runtime/plan.py``) call these, and so can the
NPU simulator: every function takes numpy arrays and Python numbers, never an
xDSL op. Each kernel computes exactly what its reference in
``runtime/integer_ops.py`` / ``runtime/numerics.py`` computes, bit for bit
(``tests/runtime/test_kernels.py`` checks it); only the way of getting there is
faster.

Exact sums
    int8 x int8 convs and gemms run on ``torch._int_mm`` (int32 accumulation,
    VNNI), exact while ``terms * 2**14 < 2**31``, on a CPU where it is fast
    (``int_mm_fast``: measured once per process; without VNNI torch's
    ``_int_mm`` is a scalar loop ~100x slower than a float32 gemm, and the
    float engines below take those sums too). A prepared large int8 / uint8
    conv runs on oneDNN's int8 conv instead (``_onednn_sums``: float32 sums,
    exact below 2**24, checked). Other widths (int16, uint8, grouped
    convs) use float32 torch kernels where every partial sum provably stays below
    2**24 (from the weight codes: ``max|x| * sum|w_c|``). A conv past that bound
    splits its input channels into the fewest equal chunks whose own bound
    holds (``float32_split``: one float32 grouped conv computes every chunk's
    sums, exact, and they are added in int32 / int64; 2-4x faster than the
    float64 conv it replaces on an AVX2 CPU). A dense 3x3 stride-1 conv of
    8-bit codes on those float engines runs as an exact integer Winograd
    F(2x2, 3x3) instead (``runtime/winograd.py``: 2.25x fewer multiply-adds,
    under its own bound). Otherwise float64 where the sums stay below 2**53,
    and numpy int64 (the reference engine) beyond.

Requantization
    lives in ``runtime/requantizer.py`` (``Requantizer``), shared by the plans and
    the simulator like these kernels.

Weights are packed once (``pack_conv2d``, ``pack_linear``) and the packed form is
reused on every call.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from numpy.lib.stride_tricks import as_strided

from hbir.runtime import integer_ops, numerics, winograd
from hbir.runtime.requantizer import (
    ChannelBlocks,
    along_float,
    inverse_order,
    loops,
    magnitude,
    memory_order,
)

INT_MM_LIMIT = 2**31  # _int_mm accumulates in int32
FLOAT32_LIMIT = 2**24  # float32 holds every integer below this exactly
FLOAT64_LIMIT = 2**53


@functools.cache
def int_mm_fast() -> bool:
    """Whether ``torch._int_mm`` beats a float32 gemm of the same shape here,
    measured once per process (best of five, ~1M multiply-adds each).

    With VNNI it runs ~5x faster than float32 (the benchmarks' machine:
    219 GMAC/s); without it, torch falls back to a scalar loop (~0.7 GMAC/s
    on an AVX2 EPYC, against ~30 GFLOP/s for float32). Both engines are
    exact within their bounds, so the choice changes no number."""
    import time

    a = torch.ones((64, 256), dtype=torch.int8)
    b = torch.ones((256, 64), dtype=torch.int8)
    fa, fb = a.float(), b.float()

    def best(fn) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (two threads on a loaded machine: noise)
    try:
        int_mm = best(lambda: torch._int_mm(a, b))
        return int_mm < best(lambda: torch.mm(fa, fb))
    except RuntimeError:  # a torch without the CPU kernel
        return False
    finally:
        torch.set_num_threads(threads)


def _method(x_dtype, w: np.ndarray, out_axis: int, int_mm_ok: bool) -> str:
    """How to sum ``x * w`` exactly: the fastest engine whose bound holds.

    The bound of any partial sum of output channel ``c`` is
    ``max|x| * sum_k |w[c, k]|``, whatever the summation order.
    """
    others = tuple(a for a in range(w.ndim) if a != out_axis % w.ndim)
    w_sum = int(np.max(np.sum(np.abs(w.astype(np.int64)), axis=others), initial=0))
    bound = magnitude(x_dtype) * w_sum
    if (
        int_mm_ok
        and x_dtype == np.int8
        and w.dtype == np.int8
        and bound < INT_MM_LIMIT
        and int_mm_fast()
    ):
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


def linear_sums(x: np.ndarray, p: PackedLinear, raw: bool = False) -> np.ndarray:
    """Exact ``x @ w.T`` over the last axis (int32 or int64 sums; with ``raw``,
    the float engines' sums as they are: integer-valued floats, exact, one pass
    fewer for a caller that reads floats anyway)."""
    if p.method == "int_mm":
        x2 = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
        if not x2.flags.writeable:  # a constant input: torch takes writable arrays
            x2 = x2.copy()
        y = torch._int_mm(torch.from_numpy(x2), p.packed).numpy()
        return y.reshape(*x.shape[:-1], y.shape[-1])
    if p.method == "int64":
        return integer_ops.numpy_matmul(x, p.weight.T)
    y = F.linear(_as_float(x, p.method), p.packed)
    return y.numpy() if raw else _exact(y)


def matmul_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact batched ``a @ b`` of two integer arrays (int32 or int64 sums).

    Where the widths alone do not keep float32 exact, these very operands may:
    every partial sum of an output is at most ``sum_k |a[i, k]| * max|b|``, so
    rows whose magnitudes add up to little (attention probabilities: int16
    codes that sum to about one scale's worth per row) take the float32 gemm
    (measured per call: one pass over ``a``)."""
    bound = a.shape[-1] * magnitude(a.dtype) * magnitude(b.dtype)
    if bound >= FLOAT32_LIMIT and a.dtype.kind in "iu" and _rows_fit_float32(a, b):
        bound = 0
    if bound < FLOAT32_LIMIT:
        method = "float32"
    elif (
        a.dtype == np.int8 and b.dtype == np.int8 and a.ndim == b.ndim == 2
    ) and int_mm_fast():
        return int8_matmul(np.ascontiguousarray(a), np.ascontiguousarray(b))
    elif bound < FLOAT64_LIMIT:
        method = "float64"
    else:
        return integer_ops.numpy_matmul(a, b)
    return _exact(torch.matmul(_as_float(a, method), _as_float(b, method)))


def _rows_fit_float32(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``max_i sum_k |a[i, k]| * max|b| < 2**24`` (``max|b|`` bounded by
    its dtype): float32 sums ``a @ b`` exactly."""
    jit = loops()
    if jit is None or not a.flags.c_contiguous or a.size == 0:
        return False
    rows = int(jit.max_row_abs_sum(a, a.shape[-1]))
    return rows * magnitude(b.dtype) < FLOAT32_LIMIT


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
    # a depthwise conv of 8-bit codes (one weight channel per input channel):
    # its weight as int16 [KH, KW, C] for the compiled loop, or None
    depthwise: np.ndarray | None = None
    # a depthwise 1x1 conv (a per-channel scale: layer norm's affine): its
    # weight as [1, C, 1, 1] in the sums' integer dtype, or None
    scale: np.ndarray | None = None
    # float32_split: the input-channel chunks (``packed`` holds each chunk's
    # weight as one group of a grouped conv: [chunks * O, C / chunks, KH, KW])
    chunks: int = 1
    # a dense 3x3 conv of 8-bit codes on a float engine: its weight for the
    # exact integer Winograd transform (``runtime/winograd.py``), or None
    winograd: winograd.WinogradWeight | None = None


def pack_conv2d(
    w: np.ndarray, x_dtype, groups: int, reused: bool = False
) -> PackedConv:
    """Pack ``w`` (OIHW codes) for inputs of ``x_dtype``; ``reused``: the packed
    weight will serve many calls (a prepared plan), so large int8 convs may use
    oneDNN (``_onednn_sums``), whose own weight packing costs about a call."""
    x_dtype = np.dtype(x_dtype)
    method = _method(x_dtype, w, 0, int_mm_ok=groups == 1)
    chunks = _float32_chunks(w, x_dtype) if method == "float64" and groups == 1 else 1
    if chunks > 1:
        method = "float32_split"
        o, c, kh, kw = w.shape
        regrouped = w.reshape(o, chunks, c // chunks, kh, kw).transpose(1, 0, 2, 3, 4)
        packed = _as_float(
            regrouped.reshape(chunks * o, c // chunks, kh, kw), "float32"
        )
    elif method == "int_mm":
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
    depthwise = None
    if (
        w.shape[1] == 1
        and groups == w.shape[0]
        and x_dtype in (np.dtype(np.int8), np.dtype(np.uint8))
        and w.dtype == np.int8
        and magnitude(x_dtype) * channel_sum < INT_MM_LIMIT  # int32 sums
    ):
        depthwise = np.ascontiguousarray(w[:, 0].transpose(1, 2, 0), np.int16)
    scale = None
    if w.shape[1:] == (1, 1, 1) and groups == w.shape[0] and x_dtype.kind in "iu":
        wide = magnitude(x_dtype) * channel_sum >= INT_MM_LIMIT
        scale = w.reshape(1, -1, 1, 1).astype(np.int64 if wide else np.int32)
    fast = None
    if groups == 1 and method in ("float32", "float32_split", "float64"):
        fast = winograd.pack(w, x_dtype)
    return PackedConv(
        method, w, groups, packed, onednn, channel_sum, depthwise, scale, chunks, fast
    )


def _float32_chunks(w: np.ndarray, x_dtype: np.dtype) -> int:
    """The fewest equal chunks of ``w``'s input channels (OIHW) that float32
    sums exactly for any inputs of ``x_dtype`` (``numerics.float32_chunks``
    over each output channel's ``sum|w|`` per input channel); 1 where no split
    holds (or the inputs are not integer codes)."""
    if x_dtype.kind not in "iu" or w.dtype.kind not in "iu":
        return 1
    o, c = w.shape[:2]
    per_input = np.abs(w.astype(np.int64)).reshape(o, c, -1).sum(2)  # [O, C]
    return numerics.float32_chunks(per_input, magnitude(x_dtype)) or 1


def _split_sums(x, p: PackedConv, stride, pads, dilation, raw: bool) -> np.ndarray:
    """A ``float32_split`` conv's exact sums: every chunk's in one float32
    grouped conv (each exact: ``_float32_chunks``), added in int32 (int64
    where the whole sum may pass 2**31; with ``raw``, float64, exact below
    2**53)."""
    t, lf, b, r = pads
    # NCHW memory: oneDNN's grouped conv ran 10-20 % faster on it than on
    # channels-last (ResNet-18's 256- and 512-channel layers, AVX2)
    xt = _as_float(np.ascontiguousarray(x), "float32")
    if (t, lf) != (b, r):
        xt = F.pad(xt, (lf, r, t, b))
        t = lf = 0
    y = F.conv2d(xt, p.packed, None, stride, (t, lf), dilation, p.chunks).numpy()
    n, _, oh, ow = y.shape
    parts = y.reshape(n, p.chunks, -1, oh, ow)
    if raw:
        dtype = np.float64
    else:
        wide = magnitude(x.dtype) * p.channel_sum >= INT_MM_LIMIT
        dtype = np.int64 if wide else np.int32
    acc = parts[:, 0].astype(dtype)
    for g in range(1, p.chunks):  # (each chunk's sums exact: added exactly)
        np.add(acc, parts[:, g], out=acc, casting="unsafe")
    return acc


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


# Below this many multiply-adds oneDNN's fixed cost (~50-80 µs a call here)
# loses to im2col + _int_mm (1x1 convs: one gemm of the pixels; above, oneDNN
# wins there too: 24 -> 96 channels of 56x112, ~420 µs against ~590).
ONEDNN_MIN_MACS = 8_000_000


def _onednn_sums(x: np.ndarray, p: PackedConv, stride, pads, dilation, min_macs=None):
    """The conv sums through oneDNN's int8 conv (``OnednnConv``), or None when
    this call is not worth it (or a sum reached 2**24)."""
    call = OnednnConv.of(x, p, stride, pads, dilation, min_macs)
    return None if call is None else call()


class OnednnConv:
    """oneDNN's int8 conv of one input array, prepared once: ``call()`` gives
    the sums of the array's current values, or None where a sum reached 2**24.

    oneDNN sums u8 x s8 exactly in int32 and returns them as float32, exact
    below 2**24: guaranteed when ``128 * sum|w_c| < 2**24``, else checked on
    the result. int8 codes ``x`` become u8 codes ``x + 128`` (in a buffer of
    the call's own) with zero point 128, which oneDNN subtracts exactly (also
    in the padding). The result is NCHW in channels-last memory. A caller that
    runs the same conv on the same array (the simulator's buffers) keeps the
    call: every argument is made once."""

    @classmethod
    def of(cls, x, p: PackedConv, stride, pads, dilation, min_macs=None):
        """The call for NCHW ``x``, or None where oneDNN cannot run it (``p``
        not eligible: ``pack_conv2d``) or is not worth it: fewer than
        ``min_macs`` multiply-adds (by default ``ONEDNN_MIN_MACS``; any for
        grouped convs, whose other engine is float torch), a depthwise conv
        the compiled loop takes."""
        if p.onednn is None:
            return None
        macs = _conv_macs(x.shape, p.weight.shape, stride, pads, dilation)
        if min_macs is None:
            min_macs = ONEDNN_MIN_MACS if p.groups == 1 else 0
        if macs < min_macs or _depthwise_loop(p, macs):
            return None
        return cls(x, p, tuple(stride), tuple(pads), tuple(dilation))

    def __init__(self, x, p: PackedConv, stride, pads, dilation):
        t, lf, b, r = pads
        n, c, h, w = x.shape
        o = p.weight.shape[0]
        zero = 128 if x.dtype == np.int8 else 0
        # oneDNN pads alike on both sides: uneven padding (a tile's edge) is
        # written into the input copy once, as the code of 0, and oneDNN pads
        # nothing
        inside = (t, lf) == (b, r)
        shape = (n, c, h, w) if inside else (n, c, h + t + b, w + lf + r)
        # packed for this input shape: oneDNN's kernel for it takes the weight
        # in the packed layout, where a shape-less packing is reordered on
        # every call
        geometry = (stride, (t, lf) if inside else (0, 0), dilation, shape)
        packed = p.onednn.get(geometry)
        if packed is None:
            packed = p.onednn[geometry] = (
                torch.ops.onednn.qconv_prepack(
                    torch.from_numpy(p.weight), torch.ones(o), 1.0, zero,
                    list(stride), list(geometry[1]), list(dilation), p.groups,
                    list(shape),
                ),
                torch.ones(o),
                torch.zeros(o, dtype=torch.int64),
            )  # fmt: skip
        codes = np.full((n,) + shape[2:] + (c,), zero, np.uint8)  # NHWC
        interior = codes if inside else codes[:, t : t + h, lf : lf + w]
        self.interior = interior.transpose(0, 3, 1, 2)  # NCHW view, channels last
        self.x, self.zero = (x.view(np.uint8) if zero else x), zero
        self.args = (
            torch.from_numpy(codes.transpose(0, 3, 1, 2)), 1.0, zero, *packed,
            None, list(stride), list(geometry[1]), list(dilation), p.groups,
            1.0, 0, torch.float32, "none", [], "",
        )  # fmt: skip
        self.check = magnitude(x.dtype) * p.channel_sum >= FLOAT32_LIMIT

    def __call__(self) -> np.ndarray | None:
        if self.zero:  # x + 128
            np.bitwise_xor(self.x, np.uint8(0x80), out=self.interior)
        else:
            self.interior[...] = self.x
        y = torch.ops.onednn.qconv2d_pointwise(*self.args).numpy()
        if self.check and _reaches(y):
            return None  # a sum float32 may have rounded: the exact path instead
        return y


def _reaches(y: np.ndarray, limit: float = FLOAT32_LIMIT) -> bool:
    """Whether some ``|y| >= limit`` (one compiled pass where there is one)."""
    jit = loops()
    if jit is not None:
        return bool(jit.max_abs_at_least(y.transpose(memory_order(y)), limit))
    lo, hi = torch.aminmax(torch.from_numpy(y))
    return max(-float(lo), float(hi)) >= limit


def copy_into(x: np.ndarray, into: np.ndarray) -> np.ndarray:
    """``into[...] = x`` for ``x`` of ``into``'s shape and dtype. Where ``x`` is
    a transposed view (its axes in another memory order than ``into``'s): one
    compiled pass over the axes in ``into``'s memory order (its writes
    sequential), or in ``x``'s where ``into``'s fastest axis is too short to
    loop over (NCHW -> NHWC of 3 channels), where numpy's strided copy, always
    in the destination's order, is ~7x slower. Returns ``into``."""
    jit = loops()
    same = x.dtype == into.dtype and x.shape == into.shape and x.ndim <= 4
    if jit is None or not same or memory_order(x) == memory_order(into):
        np.copyto(into, x)
        return into
    lift = (None,) * (4 - x.ndim)
    src, dst = x[lift], into[lift]
    order = memory_order(dst)
    if dst.shape[order[-1]] < 16:
        order = memory_order(src)
    jit.copy4(src.transpose(order), dst.transpose(order))
    return into


def _conv_macs(x_shape, w_shape, stride, pads, dilation) -> int:
    """The multiply-adds of a conv (its output size times its taps)."""
    oh, ow = integer_ops.pool_sizes(
        x_shape[2:], w_shape[2:], stride, pads, dilation, False
    )
    return math.prod(w_shape) * x_shape[0] * oh * ow


# Below this many multiply-adds a depthwise conv of 8-bit codes runs the
# compiled loop (~50 µs for 192 channels of 28x28, stride 2, against oneDNN's
# ~120 with its fixed cost); above, oneDNN (its kernel vectorises better:
# 144 channels of 56x56, ~380 µs against ~860).
DEPTHWISE_LOOP_MAX_MACS = 1_000_000


def _depthwise_loop(p: PackedConv, macs: int) -> bool:
    """Whether the compiled loop takes a depthwise conv: below
    ``DEPTHWISE_LOOP_MAX_MACS``, or at any size where oneDNN's int8 conv is
    not there to take the large ones (its float32 grouped conv is ~3x slower
    than the loop)."""
    return (
        p.depthwise is not None
        and (macs < DEPTHWISE_LOOP_MAX_MACS or p.onednn is None)
        and loops() is not None
    )


def _depthwise_sums(x, w, stride, pads, dilation) -> np.ndarray:
    """A depthwise conv's int32 sums (one compiled pass, vectorised over the
    channels), NCHW in channels-last memory like oneDNN's."""
    window = (w.shape[:2], stride, pads, dilation, False)
    oh, ow = integer_ops.pool_sizes(x.shape[2:], *window)  # (a conv's: no ceil)
    out = np.empty((x.shape[0], oh, ow, x.shape[1]), np.int32)
    (sh, sw), (dh, dw), (t, lf, _, _) = stride, dilation, pads
    loops().depthwise(x.transpose(0, 2, 3, 1), w, sh, sw, dh, dw, t, lf, out)
    return out.transpose(0, 3, 1, 2)


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


def conv2d_sums(
    x: np.ndarray, p: PackedConv, stride, pads, dilation, raw: bool = False
) -> np.ndarray:
    """Exact conv sums (NCHW int32 or int64, or float32 holding integers below
    2**24), no bias; ``pads`` is (t, l, b, r). ``raw``: the float engines'
    sums as they are (integer-valued floats), not converted to integers."""
    stride, dilation = tuple(stride), tuple(dilation)
    pads = integer_ops.pads4(pads)
    if p.scale is not None and not any(pads) and x.shape[1] == p.scale.shape[1]:
        # a per-channel scale: one multiply in x's memory order (channels
        # last stays channels last), exact in the scale's integer dtype
        (sh, sw), taken = stride, x
        if (sh, sw) != (1, 1):
            taken = x[:, :, ::sh, ::sw]
        return np.multiply(taken, p.scale, dtype=p.scale.dtype)
    if _depthwise_loop(p, _conv_macs(x.shape, p.weight.shape, stride, pads, dilation)):
        return _depthwise_sums(x, p.depthwise, stride, pads, dilation)
    if p.onednn is not None:
        y = _onednn_sums(x, p, stride, pads, dilation)
        if y is not None:
            return y
    if p.winograd is not None and p.winograd.takes(x, stride, pads, dilation):
        wide = magnitude(x.dtype) * p.channel_sum >= INT_MM_LIMIT
        return winograd.sums(x, p.winograd, pads, np.int64 if wide else np.int32)
    if p.method == "int_mm" and _pointwise_channels_last(x, p, pads):
        (sh, sw), n = stride, x.shape[0]
        pixels = x[:, :, ::sh, ::sw].transpose(0, 2, 3, 1)  # NHWC view
        oh, ow = pixels.shape[1:3]
        cols = np.ascontiguousarray(pixels).reshape(-1, x.shape[1])
        if not cols.flags.writeable:  # x itself (torch warns on read-only arrays)
            cols = cols.copy()
        y = torch._int_mm(torch.from_numpy(cols), p.packed.t()).numpy()
        return y.reshape(n, oh, ow, -1).transpose(0, 3, 1, 2)  # channels last
    if p.method == "float32_split":
        return _split_sums(x, p, stride, pads, dilation, raw)
    if p.method in ("float32", "float64") and p.groups == 1:
        if _pointwise_channels_last(x, p, pads):  # one float gemm of the pixels
            (sh, sw), n = stride, x.shape[0]
            pixels = x[:, :, ::sh, ::sw].transpose(0, 2, 3, 1)  # NHWC view
            oh, ow = pixels.shape[1:3]
            cols = np.ascontiguousarray(pixels).reshape(-1, x.shape[1])
            w2 = p.packed.reshape(p.packed.shape[0], -1)
            y = F.linear(_as_float(cols, p.method), w2)
            y = y.numpy() if raw else _exact(y)
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
    return y.numpy() if raw else _exact(y)


class _Scratch(threading.local):
    """The two float32 buffers the bound 1x1 convs of one thread share (they
    run one at a time, each result read before the next runs): ``pair``, a
    new pair when a conv needs more than the last one holds."""

    def __init__(self):
        self.pair: tuple[torch.Tensor, torch.Tensor] | None = None
        self.sizes = (0, 0)

    def take(self, first: int, second: int) -> tuple[torch.Tensor, torch.Tensor]:
        held = self.sizes
        if first > held[0] or second > held[1]:
            self.sizes = (max(first, held[0]), max(second, held[1]))
            self.pair = tuple(torch.empty(n, dtype=torch.float32) for n in self.sizes)
        return self.pair


_SCRATCH = _Scratch()


def bound_sums(
    x: np.ndarray, p: PackedConv, stride, pads, dilation, raw: bool = False
) -> Callable[[], np.ndarray]:
    """``conv2d_sums(x, p, stride, pads, dilation, raw)`` of this very array
    (the simulator's buffer: the same on every run) as ``run()``. A float32
    1x1 stride-1 conv of channels-last codes (each pixel's channels adjacent;
    a batch's samples may lie apart) converts its pixels into one float32
    buffer and multiplies into another (``torch.mm(out=)``, both shared per
    thread: no allocation per call), 15-25 % faster than the call on
    MobileNetV2's 1x1 convs; its result is valid until the next bound conv
    runs. Any other conv: the call itself."""
    pads = integer_ops.pads4(pads)
    if not (
        p.method == "float32"
        and p.groups == 1
        and tuple(stride) == (1, 1)
        and _pointwise_channels_last(x, p, pads)
        and x.flags.writeable  # (torch warns on read-only arrays)
    ):
        return functools.partial(conv2d_sums, x, p, stride, pads, dilation, raw)
    n, c, h, w = x.shape
    src = torch.from_numpy(x.transpose(0, 2, 3, 1))  # NHWC, as strided as x
    o = p.packed.shape[0]
    wt = p.packed.reshape(o, -1).t()
    rows = n * h * w
    seen: list = [None]  # (the scratch pair, its views for this conv)

    def run() -> np.ndarray:
        pair = _SCRATCH.take(rows * c, rows * o)
        if seen[0] is not pair:  # (views made once per scratch pair)
            xf = pair[0][: rows * c].view(n, h, w, c)
            yf = pair[1][: rows * o].view(rows, o)
            y = yf.numpy().reshape(n, h, w, o).transpose(0, 3, 1, 2)  # channels last
            seen[:] = [pair, xf, xf.view(rows, c), yf, y]
        _, xf, x2, yf, y = seen
        xf.copy_(src)  # (int8 -> float32: exact)
        torch.mm(x2, wt, out=yf)
        return y if raw else y.astype(np.int32)

    return run


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


def max_pool2d(x, kernel, stride, padding, dilation, ceil_mode) -> np.ndarray:
    """``integer_ops.max_pool2d``, as one elementwise maximum per window tap
    (numpy's reduction over the small window axes is ~10x slower)."""
    x = np.asarray(x)
    fill = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
    pads = integer_ops.pads4(padding)
    jit = loops()
    if jit is not None and x.dtype.kind in "iu" and x.ndim == 4:
        # [B, H, W, C] in memory: channels-last as it is, NCHW as (N*C, H, W, 1)
        n, c, h, w = x.shape
        last = x.strides[1] == x.itemsize and c > 1
        rows = x.transpose(0, 2, 3, 1) if last else x.reshape(n * c, h, w, 1)
        rows = np.ascontiguousarray(rows)
        window = (kernel, stride, pads, dilation, ceil_mode)
        oh, ow = integer_ops.pool_sizes((h, w), *window)
        y = np.empty((rows.shape[0], oh, ow, rows.shape[3]), x.dtype)
        jit.max_pool(rows, *kernel, *stride, *dilation, *pads[:2], fill, y)
        return y.transpose(0, 3, 1, 2) if last else y.reshape(n, c, oh, ow)
    # The reference's own windows (torch's output sizes): one source of truth.
    v, _, _ = integer_ops._windows(x, kernel, stride, pads, dilation, ceil_mode, fill)
    kh, kw = v.shape[-2:]
    y = v[..., 0, 0].copy()
    for i in range(kh):
        for j in range(kw):
            if i or j:
                np.maximum(y, v[..., i, j], out=y)
    return y


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

    def bind(self, a: np.ndarray, b: np.ndarray, into: np.ndarray):
        """``self(a, b, into)`` for these very arrays, as ``run()`` (the
        simulator's buffers, the same on every run): one compiled lookup over
        their flat bytes; None where they are not all C-contiguous and alike."""
        arrays = (a, b, into)
        if (
            loops() is None
            or into.dtype != self.table.dtype
            or not all(x.flags.c_contiguous and x.shape == into.shape for x in arrays)
        ):
            return None
        flat = [x.reshape(-1) for x in arrays]
        fa, fb = (0x80 if s else 0 for s in self.signed)
        jit, table = loops(), self.table
        af, bf, y = flat[0].view(np.uint8), flat[1].view(np.uint8), flat[2]
        return lambda: jit.pair_lookup(af, bf, fa, fb, table, y)

    def __call__(self, a: np.ndarray, b: np.ndarray, into=None) -> np.ndarray:
        """``fn(a, b)``; written into ``into`` (of the result's shape) and
        returned as it when given."""
        a, b = np.broadcast_arrays(a, b)  # fn broadcasts its operands alike
        order = memory_order(a)  # work in a's memory order
        a, b = a.transpose(order), b.transpose(order)
        jit = loops()
        if jit is not None and a.flags.c_contiguous and b.flags.c_contiguous:
            target = None if into is None else into.transpose(order)
            direct = (
                target is not None
                and target.flags.c_contiguous
                and target.dtype == self.table.dtype
            )
            y = target if direct else np.empty(a.shape, self.table.dtype)
            flips = (0x80 if s else 0 for s in self.signed)
            jit.pair_lookup(
                a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8),
                *flips, self.table, y.reshape(-1),
            )  # fmt: skip
            if direct:
                return into
        else:
            index = _code_index(a, self.signed[0]).astype(np.uint16)
            index <<= 8
            index |= _code_index(b, self.signed[1])
            y = np.take(self.table, index)
        y = y.transpose(inverse_order(order))
        if into is None:
            return y
        into[...] = y
        return into


def _code_index(x: np.ndarray, signed: bool) -> np.ndarray:
    """8-bit codes as table rows 0..255 (int8: ``x + 128``, by its sign bit)."""
    return x.view(np.uint8) ^ np.uint8(0x80) if signed else x


class CodeTable:
    """``numerics.apply_lut(table, x)`` of 8- or 16-bit codes as one lookup in
    the list of every code's result, which ``apply_lut`` itself computes once
    (so the numbers cannot differ): an int16 LUT op (softmax's exp, GELU,
    rsqrt) is then one pass per call, not the segment arithmetic in int64.
    Only for a table whose input range is the codes' whole dtype, where no code
    can be out of range (``of`` gives None otherwise)."""

    def __init__(self, entries: np.ndarray, signed: bool):
        self.entries, self.signed = entries, signed

    @classmethod
    def of(cls, table: numerics.LutTable, x_dtype, out_dtype) -> CodeTable | None:
        x_dtype = np.dtype(x_dtype)
        if x_dtype.kind not in "iu" or x_dtype.itemsize > 2:
            return None
        if table.in_bits != 8 * x_dtype.itemsize or x_dtype.kind != "i":
            return None  # (the tables' inputs are signed codes of in_bits)
        info = np.iinfo(x_dtype)
        codes = np.arange(info.min, info.max + 1, dtype=np.int64)
        entries = numerics.apply_lut(table, codes).astype(out_dtype)
        return cls(entries, signed=True)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        unsigned = np.dtype(f"u{x.dtype.itemsize}")
        index = x.view(unsigned) ^ unsigned.type(1 << (8 * x.dtype.itemsize - 1))
        return np.take(self.entries, index)


# ------------------------------------------------------------------ quantization


class Quantizer:
    """``numerics.quantize(x, ...).astype(dtype)`` for one op, its parameters
    prepared once; float32 and float64 inputs in one compiled pass where there
    is one (``jit_kernels.quantize_inner``: the same float arithmetic)."""

    def __init__(self, scales, zeros, qmin: int, qmax: int, axis, mode, dtype):
        self.reference = (scales, zeros, qmin, qmax, axis, mode)
        self.dtype, self.axis = np.dtype(dtype), axis
        scales = np.asarray(scales, np.float32).reshape(-1)
        inv = (np.float32(1.0) / scales).astype(np.float32)
        self.inv = {np.dtype(t): inv.astype(t) for t in (np.float32, np.float64)}
        self.zp = np.asarray(zeros, np.float64).reshape(-1)
        self.per_channel = max(scales.size, self.zp.size) > 1
        self.half_up, self.lo, self.hi = mode == numerics.HALF_UP, qmin, qmax

    def __call__(self, x: np.ndarray) -> np.ndarray:
        jit = loops()
        if jit is None or x.dtype not in self.inv or not x.size:
            return numerics.quantize(x, *self.reference).astype(self.dtype)
        blocks = ChannelBlocks(x, self.axis if self.per_channel else None)
        y = blocks.empty(self.dtype)
        inv = self.inv[x.dtype]
        x, shape, lo, hi = blocks.x, blocks.shape, self.lo, self.hi
        jit.quantize_inner(x, shape, inv, self.zp, self.half_up, lo, hi, y)
        return blocks.restore(y)


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
        self.inv = along_float(inv, *along)
        self.scale = along_float(scale, *along)
        zp = np.asarray(zero_point, np.int64)
        self.zp = along_float(zp.astype(np.float32), *along)
        self.lo, self.hi, self.mode = np.float32(qmin), np.float32(qmax), mode
        self.has_zp = bool(np.any(zp != 0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        v = np.multiply(x, self.inv, dtype=np.float32)
        if v.size and np.isnan(np.min(v)):
            return numerics.fake_quant(x, *self.reference)
        with np.errstate(invalid="ignore"):  # half-up of inf: inf - inf
            v = numerics.round_float(v, self.mode)
        v = np.asarray(v)  # numpy makes scalars of 0-d results
        v += self.zp  # also turns the -0.0 of rint(-0.3) into the reference's 0.0
        np.clip(v, self.lo, self.hi, out=v)
        if self.has_zp:
            v -= self.zp
        v *= self.scale
        return v


# ------------------------------------------------------------------ fp16

# An fp16 op of one operand (npu ``fp16_map``; hbm_opcodes.FP16_FUNCTIONS): the
# torch function the float model calls, in float32.
FP16_UNARY = {
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "exp": torch.exp,
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
}


def fp16_unary(function: str, x: np.ndarray) -> np.ndarray:
    """``function`` of binary16 values: widened to float32 (exact), the float32
    kernel, rounded once to binary16 (half to even, overflow to inf)."""
    y = FP16_UNARY[function](torch.from_numpy(np.asarray(x, np.float32)))
    with np.errstate(over="ignore"):
        return y.numpy().astype(np.float16)
