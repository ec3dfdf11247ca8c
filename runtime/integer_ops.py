"""Integer conv / gemm / pool / resize: the specified semantics (pure numpy).

One source of integer truth for the ops of ``quantized.bc`` that accumulate: the
interpreter's integer kernels (hbir, NCHW) and the npu kernels (NHWC, fused) call
these functions, and so will the NPU simulator.

Accumulation
    A conv / conv_transpose / linear / matmul sums ``x * w`` code products
    **exactly** (int64; no intermediate rounding). ``bias`` (si32 codes, one per
    output channel) is added to the exact sum, then the result saturates to the
    accumulator width ``acc_bits`` (32 on every march, ``passes/march.py``). An
    ``engine`` computes the exact sums: the default is numpy int64 (exact up to
    2**63); the interpreter passes torch float64 kernels, exact while every partial
    sum is below 2**53 (``check_f64_exact``), and several times faster.
    ``acc_bound`` is the largest sum the operand widths allow; convert keeps it
    below ``2**(acc_bits - 1)`` or the accumulator saturates
    (``passes/march.py``, ``accumulator_fits``).

Pools
    max pool: exact (the element type is kept; padding is -inf, as torch). avg
    pool: ``numerics.average_pool`` (the exact window sum divided once by torch's
    window count, half-to-even). Global average: the exact sum over H x W divided
    once.

Resize
    nearest: a gather of codes at torch's source indices (exact). Integer bilinear
    without NPU weights: the float64 interpolation of the codes rounded once,
    half-to-even (``np.rint``); with NPU weights ``numerics.resize_weighted``.

Padding here is ``(top, left, bottom, right)``; layouts are NCHW (the npu kernels
transpose NHWC views in and out).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hbir.runtime import numerics

ACC_BITS = 32

# engine(x, w, stride, pads, dilation, groups) -> exact sums (any numeric dtype)
ConvEngine = Callable[..., np.ndarray]


def saturate(y: np.ndarray, bits: int) -> np.ndarray:
    """Clamp an int64 array to the signed ``bits``-wide range."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(np.asarray(y, np.int64), lo, hi)


def acc_bound(terms: int, x_bits: int, w_bits: int) -> int:
    """The largest |sum| of ``terms`` products of ``x_bits`` x ``w_bits`` codes."""
    return terms * (1 << (x_bits - 1)) * (1 << (w_bits - 1))


def check_f64_exact(x: np.ndarray, w: np.ndarray, terms: int) -> None:
    """float64 accumulation is exact while terms * max|x| * max|w| <= 2**53."""
    bound = terms
    for a in (x, w):
        info = np.iinfo(a.dtype)
        bound *= max(-int(info.min), int(info.max))
    if bound > 2**53:
        raise ValueError(
            f"{terms}-term {x.dtype} x {w.dtype} accumulation may exceed 2**53"
        )


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = v.size
    return np.asarray(v, np.int64).reshape(shape)


def finish(acc, bias, axis: int, bits: int = ACC_BITS) -> np.ndarray:
    """Exact sums (+ bias codes along ``axis``), saturated to ``bits``."""
    y = np.rint(acc).astype(np.int64) if np.asarray(acc).dtype.kind == "f" else acc
    y = np.asarray(y, np.int64)
    if bias is not None:
        y = y + _along(bias, y.ndim, axis)
    return saturate(y, bits)


# ------------------------------------------------------------------ conv


def pads4(padding: Sequence[int]) -> tuple[int, int, int, int]:
    p = tuple(int(v) for v in padding)
    return (p[0], p[1], p[0], p[1]) if len(p) == 2 else p  # type: ignore[return-value]


def numpy_conv2d(x, w, stride, pads, dilation, groups) -> np.ndarray:
    """Exact int64 conv (NCHW x OIHW) by windows and einsum: the reference engine."""
    t, lf, b, r = pads
    x = np.pad(np.asarray(x, np.int64), ((0, 0), (0, 0), (t, b), (lf, r)))
    w = np.asarray(w, np.int64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (wd - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    og = o // groups
    for g in range(groups):
        xg = x[:, g * cg : (g + 1) * cg]
        wg = w[g * og : (g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xg[
                    :,
                    :,
                    i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                    j * dw : j * dw + sw * (ow - 1) + 1 : sw,
                ]
                out[:, g * og : (g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, wg[:, :, i, j]
                )
    return out


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    *,
    bits: int = ACC_BITS,
    engine: ConvEngine | None = None,
) -> np.ndarray:
    """Integer conv (NCHW codes, OIHW weight codes): exact sums + bias, saturated."""
    engine = engine or numpy_conv2d
    acc = engine(x, w, tuple(stride), pads4(padding), tuple(dilation), groups)
    return finish(acc, bias, 1, bits)


def numpy_conv_transpose2d(x, w, stride, padding, output_padding, groups, dilation):
    """Exact int64 transposed conv (NCHW x [C_in, C_out/g, KH, KW]): scatter-add."""
    x, w = np.asarray(x, np.int64), np.asarray(w, np.int64)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    (sh, sw), (ph, pw) = stride, padding
    (oph, opw), (dh, dw) = output_padding, dilation
    full_h = (h - 1) * sh + dh * (kh - 1) + 1 + oph
    full_w = (wd - 1) * sw + dw * (kw - 1) + 1 + opw
    out = np.zeros((n, og * groups, full_h, full_w), np.int64)
    cg = c // groups
    for g in range(groups):
        xg = x[:, g * cg : (g + 1) * cg]
        wg = w[g * cg : (g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", xg, wg[:, :, i, j])
                out[
                    :,
                    g * og : (g + 1) * og,
                    i * dh : i * dh + sh * (h - 1) + 1 : sh,
                    j * dw : j * dw + sw * (wd - 1) + 1 : sw,
                ] += contrib
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    return out[:, :, ph : ph + oh, pw : pw + ow]


def conv_transpose2d(
    x,
    w,
    bias,
    stride,
    padding,
    output_padding,
    groups,
    dilation,
    *,
    bits: int = ACC_BITS,
    engine=None,
) -> np.ndarray:
    """Integer transposed conv: exact sums + bias, saturated to ``bits``."""
    engine = engine or numpy_conv_transpose2d
    acc = engine(
        x,
        w,
        tuple(stride),
        tuple(padding),
        tuple(output_padding),
        groups,
        tuple(dilation),
    )
    return finish(acc, bias, 1, bits)


# ------------------------------------------------------------------ gemm


def numpy_matmul(a, b) -> np.ndarray:
    return np.matmul(np.asarray(a, np.int64), np.asarray(b, np.int64))


def linear(x, w, bias, *, bits: int = ACC_BITS, engine=None) -> np.ndarray:
    """``x @ w.T`` (+ bias along the last axis), exact, saturated to ``bits``."""
    if engine is None:
        acc = numpy_matmul(x, np.swapaxes(w, -1, -2))
    else:
        acc = engine(x, w)
    return finish(acc, bias, -1, bits)


def matmul(a, b, *, bits: int = ACC_BITS, engine=None) -> np.ndarray:
    """Batched ``a @ b``, exact, saturated to ``bits``."""
    acc = (engine or numpy_matmul)(a, b)
    return finish(acc, None, -1, bits)


# ------------------------------------------------------------------ pools


def pool_sizes(size, kernel, stride, pads, dilation, ceil_mode) -> tuple[int, int]:
    """A pooling window's output (height, width) over ``size`` = (h, w), torch's."""
    t, lf, b, r = pads

    def out_size(size, k, s, p0, p1, d):
        eff = d * (k - 1) + 1
        num = size + p0 + p1 - eff
        o = (-(-num // s) if ceil_mode else num // s) + 1
        if ceil_mode and (o - 1) * s >= size + p0:  # torch: last window starts inside
            o -= 1
        return o

    (h, w), (kh, kw), (sh, sw), (dh, dw) = size, kernel, stride, dilation
    return out_size(h, kh, sh, t, b, dh), out_size(w, kw, sw, lf, r, dw)


def _windows(x, kernel, stride, pads, dilation, ceil_mode, fill):
    """(N, C, OH, OW, KH, KW) windows of x padded with ``fill``, torch's sizes."""
    t, lf, b, r = pads
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh, ow = pool_sizes((h, w), kernel, stride, pads, dilation, ceil_mode)
    need_h = (oh - 1) * sh + dh * (kh - 1) + 1
    need_w = (ow - 1) * sw + dw * (kw - 1) + 1
    extra_h = max(0, need_h - (h + t + b))
    extra_w = max(0, need_w - (w + lf + r))
    xp = np.pad(
        x, ((0, 0), (0, 0), (t, b + extra_h), (lf, r + extra_w)), constant_values=fill
    )
    v = np.lib.stride_tricks.sliding_window_view(
        xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3)
    )
    v = v[:, :, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw, ::dh, ::dw]
    return v, oh, ow


def max_pool2d(x, kernel, stride, padding, dilation, ceil_mode) -> np.ndarray:
    """Exact max over each window (padding never wins); the element type kept."""
    x = np.asarray(x)
    fill = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
    v, _, _ = _windows(x, kernel, stride, pads4(padding), dilation, ceil_mode, fill)
    return v.max(axis=(-2, -1)).astype(x.dtype)


def global_avg_pool2d(x, *, bits: int, rounding: str = numerics.HALF_EVEN):
    """The exact sum over H x W divided once (half-to-even), saturated."""
    total = np.sum(x, axis=(2, 3), dtype=np.int64, keepdims=True)
    count = x.shape[2] * x.shape[3]
    return saturate(numerics.divide_round(total, count, rounding), bits)


# ------------------------------------------------------------------ resize


def resize_rint(interpolated: np.ndarray, bits: int) -> np.ndarray:
    """Integer nearest / bilinear without NPU weights: the float64 interpolation of
    the codes (``F.interpolate`` semantics, the caller's engine) rounded once
    half-to-even, saturated."""
    return saturate(np.rint(interpolated).astype(np.int64), bits)


def resize_npu_taps(mode: str, in_hw, out_hw, corners: bool, scale) -> tuple:
    """The NPU's taps along H and W (``numerics.resize_taps``); ``scale`` None or
    the (H, W) scale factors."""
    scale = [None, None] if scale is None else list(scale)
    return tuple(
        numerics.resize_taps(mode, n, out, corners, s)
        for n, out, s in zip(in_hw, out_hw, scale, strict=True)
    )


def resize_npu(x, mode: str, size, corners: bool, scale, bits: int) -> np.ndarray:
    """Bilinear / bicubic with the NPU's integer weights
    (``numerics.resize_weighted``): the exact weighted sums, saturated."""
    taps = resize_npu_taps(mode, x.shape[2:], size, corners, scale)
    return saturate(numerics.resize_weighted(np.asarray(x, np.int64), *taps), bits)
