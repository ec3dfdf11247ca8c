"""Compiled one-pass loops (numba) for the elementwise work numpy does in many passes.

numpy computes a requantization ``clamp(rint(acc * m + c))`` as four passes over
the tensor, each writing a float64 temporary; compiled, the same arithmetic is one
pass that reads ``acc`` once and writes the narrow result (~10x faster on a conv's
output). The loops here compute exactly what ``runtime/requantizer.py``'s numpy
forms compute, operation for operation in the same float64 / int64 arithmetic
(numba emits separate IEEE multiplies and adds, no fused multiply-add and no
reassociation), so they are bit for bit those forms; ``tests/runtime/test_jit.py``
compares them on random and edge-case data.

Every loop takes flat C-contiguous arrays in memory order, seen as
``x[outer, C, inner]`` (``shape``) with per-channel parameters of length ``C``
(length 1 broadcasts), or as ``x[rows, C]`` where the channel is the fastest
axis (channels-last); flat indices, so the innermost loop vectorises.

numba is imported with this module, which ``requantizer`` and ``kernels`` import
on first use (``loops()``); with numba missing or ``HBIR_JIT=0`` they keep their
numpy forms. Compiled code is cached beside this file where that is writable.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

_JIT = dict(nogil=True, cache=True, boundscheck=False)

FLOAT32_LIMIT = float(2**24)  # float32 holds every integer below this exactly


@numba.njit(**_JIT)
def _round(v, half_up):
    if half_up:  # numerics.round_float: floor + (v - floor >= 0.5), exact
        f = np.floor(v)
        return f + (1.0 if v - f >= 0.5 else 0.0)
    return np.rint(v)


# (Each loop takes a row view of its operand reshaped inside: numba then
# vectorises the innermost loop, which it does not over two flat arguments.)


@intrinsic
def _bits(typingctx, x):
    """The bits of a float64 as an int64 (a reinterpretation, no conversion)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


# 1.5 * 2**52: v + _ROUNDER, for |v| < 2**51, is rint(v) + _ROUNDER exactly
# (the sum's unit in the last place is 1, and IEEE addition rounds half to
# even), and its bits are those of _ROUNDER plus rint(v) as an integer.
_ROUNDER = 6755399441055744.0


def _clamp_rint(v, lo, hi, out):
    """``clamp(rint(v), lo, hi)`` as an element of ``out`` (compiled below)."""


@overload(_clamp_rint, jit_options=_JIT)
def _clamp_rint_typed(v, lo, hi, out):
    """For an integer ``out`` of at most 32 bits: the low bits of
    ``clamp(v, lo, hi) + _ROUNDER``, the same number (``lo`` and ``hi`` are
    integers and rint is monotone, so clamping first changes nothing) in about
    half the vector instructions of a ``rint``, two comparisons and a
    conversion. Chosen by ``out``'s type, when the loop is compiled."""
    if isinstance(out.dtype, types.Integer) and out.dtype.bitwidth <= 32:
        return lambda v, lo, hi, out: _bits(min(max(v, lo), hi) + _ROUNDER)
    return lambda v, lo, hi, out: min(max(np.rint(v), lo), hi)


@numba.njit(**_JIT)
def nearest_last(acc, mf, cf, lo, hi, out):
    """``clamp(rint(acc * mf[c] + cf[c]), lo, hi)``, channels fastest."""
    channels = mf.size
    rows = acc.size // channels
    a, y = acc.reshape((rows, channels)), out.reshape((rows, channels))
    for p in range(rows):
        ap, yp = a[p], y[p]
        for c in range(channels):
            yp[c] = _clamp_rint(ap[c] * mf[c] + cf[c], lo, hi, out)


@numba.njit(**_JIT)
def nearest_inner(acc, shape, mf, cf, lo, hi, out):
    """``clamp(rint(acc * mf[c] + cf[c]), lo, hi)`` of ``acc[o, c, i]``."""
    a, y = acc.reshape(shape), out.reshape(shape)
    for o in range(shape[0]):
        for c in range(shape[1]):
            k = c if mf.size > 1 else 0
            m, b, ai, yi = mf[k], cf[k], a[o, c], y[o, c]
            for i in range(shape[2]):
                yi[i] = _clamp_rint(ai[i] * m + b, lo, hi, out)


@numba.njit(**_JIT)
def float_inner(acc, shape, a0, mf, cf, zero, half_up, lo, hi, out):
    """``clamp(round((acc - a0[c]) * mf[c] + cf[c]) + zero, lo, hi)``."""
    a, y = acc.reshape(shape), out.reshape(shape)
    for o in range(shape[0]):
        for c in range(shape[1]):
            k = c if mf.size > 1 else 0
            z, m, b, ai, yi = a0[k], mf[k], cf[k], a[o, c], y[o, c]
            for i in range(shape[2]):
                v = _round((float(ai[i]) - z) * m + b, half_up) + zero
                yi[i] = min(max(v, lo), hi)


@numba.njit(**_JIT)
def right_inner(acc, shape, m, off, s, bias, zero, half_up, lo, hi, out):
    """``clamp(((acc m[c] + off[c]) + bias[c] (+ odd bit)) >> s[c] + zero, lo, hi)``
    in int64: ``Requantizer``'s right-shift form."""
    a, y = acc.reshape(shape), out.reshape(shape)
    for o in range(shape[0]):
        for c in range(shape[1]):
            mk, ok = m[c if m.size > 1 else 0], off[c if off.size > 1 else 0]
            sk, bk = s[c if s.size > 1 else 0], bias[c if bias.size > 1 else 0]
            ai, yi = a[o, c], y[o, c]
            for i in range(shape[2]):
                p = np.int64(ai[i]) * mk + ok
                if half_up:
                    p = (p + bk) >> sk
                else:
                    p = (p + bk + ((p >> sk) & 1)) >> sk
                yi[i] = min(max(p + zero, lo), hi)


@numba.njit(**_JIT)
def quantize_inner(x, shape, inv, zp, half_up, qmin, qmax, out):
    """``numerics.quantize``: ``clamp(round(x * inv[c]) + zp[c], qmin, qmax)``, the
    product and its rounding in ``x``'s float type (``inv`` has it), NaN -> 0."""
    a, y = x.reshape(shape), out.reshape(shape)
    for o in range(shape[0]):
        for c in range(shape[1]):
            k = c if inv.size > 1 else 0
            s, z = inv[k], zp[c if zp.size > 1 else 0]
            ai, yi = a[o, c], y[o, c]
            for i in range(shape[2]):
                v = np.float64(_round(ai[i] * s, half_up))
                if v != v:
                    v = 0.0
                yi[i] = min(max(v + z, qmin), qmax)


@numba.njit(**_JIT)
def max_abs_at_least(x, limit):
    """Whether some ``|x| >= limit`` (float32 sums that may have rounded)."""
    flat = x.reshape(-1)
    hit = False
    for i in range(flat.size):
        hit |= abs(flat[i]) >= limit
    return hit


@numba.njit(**_JIT)
def max_row_abs_sum(x, k):
    """The largest ``sum |x[r, :]|`` over the rows of ``k`` elements of a flat
    C-contiguous integer array (int64: no code's magnitude overflows)."""
    flat = x.reshape(-1)
    best = np.int64(0)
    for r in range(flat.size // k):
        total = np.int64(0)
        row = flat[r * k : (r + 1) * k]
        for i in range(k):
            total += abs(np.int64(row[i]))
        best = max(best, total)
    return best


@numba.njit(**_JIT)
def pair_lookup(a, b, flip_a, flip_b, table, out):
    """``out = table[(a ^ flip_a) << 8 | (b ^ flip_b)]`` of 8-bit codes as uint8."""
    fa, fb = np.uint16(flip_a), np.uint16(flip_b)
    for i in range(a.size):
        out[i] = table[((np.uint16(a[i]) ^ fa) << 8) | (np.uint16(b[i]) ^ fb)]


@numba.njit(**_JIT)
def max_pool(x, kh, kw, sh, sw, dh, dw, top, left, fill, out):
    """Max over each window of ``x[b, h, w, c]`` into ``out[b, oh, ow, c]``; taps
    outside ``x`` (padding) never win, a window of padding only gives ``fill``."""
    rows, h, w, channels = x.shape
    _, oh, ow, _ = out.shape
    for b in range(rows):
        for oy in range(oh):
            for ox in range(ow):
                for c in range(channels):
                    out[b, oy, ox, c] = fill
                for i in range(kh):
                    y = oy * sh - top + i * dh
                    if y < 0 or y >= h:
                        continue
                    for j in range(kw):
                        xx = ox * sw - left + j * dw
                        if xx < 0 or xx >= w:
                            continue
                        for c in range(channels):
                            out[b, oy, ox, c] = max(out[b, oy, ox, c], x[b, y, xx, c])


@numba.njit(**_JIT)
def copy4(src, dst):
    """``dst[...] = src`` of two 4-d arrays of one shape, any strides, looping
    over the axes in their order (the caller orders them for memory)."""
    n0, n1, n2, n3 = dst.shape
    for a in range(n0):
        for b in range(n1):
            for c in range(n2):
                s, d = src[a, b, c], dst[a, b, c]
                for i in range(n3):
                    d[i] = s[i]


@numba.njit(**_JIT)
def _product(x, w):
    """``x * w`` of an 8-bit code and an int16 weight holding an 8-bit code, as
    int32, multiplied in 16 bits (exact: ``|p| <= 255 * 128``; the vector
    multiplies are then 16-bit ones, ~25 % faster than 32-bit on AVX2)."""
    return np.int32(np.int16(np.int16(x) * w))


@numba.njit(**_JIT)
def depthwise(x, w, sh, sw, dh, dw, top, left, out):
    """A depthwise conv's exact int32 sums, channels last: ``out[b, oy, ox, c] =
    sum_ij x[b, oy sh - top + i dh, ox sw - left + j dw, c] * w[i, j, c]``, taps
    outside ``x`` (its zero padding) skipped. The caller proves the sums fit;
    ``x`` holds 8-bit codes and ``w`` (int16) 8-bit codes, one of them signed.
    A 3x3 window inside ``x`` sums its nine taps per channel in one expression
    (in a register, not through ``out``: ~30 % faster)."""
    n, h, wd, channels = x.shape
    _, oh, ow, _ = out.shape
    kh, kw, _ = w.shape
    three = kh == 3 and kw == 3
    for b in range(n):
        for oy in range(oh):
            y0 = oy * sh - top
            for ox in range(ow):
                x0 = ox * sw - left
                o = out[b, oy, ox]
                inside = y0 >= 0 and y0 + 2 * dh < h and x0 >= 0 and x0 + 2 * dw < wd
                if three and inside:
                    ya, yb, yc = y0, y0 + dh, y0 + 2 * dh
                    xa, xb, xc = x0, x0 + dw, x0 + 2 * dw
                    r0, r1, r2 = x[b, ya, xa], x[b, ya, xb], x[b, ya, xc]
                    r3, r4, r5 = x[b, yb, xa], x[b, yb, xb], x[b, yb, xc]
                    r6, r7, r8 = x[b, yc, xa], x[b, yc, xb], x[b, yc, xc]
                    w0, w1, w2 = w[0, 0], w[0, 1], w[0, 2]
                    w3, w4, w5 = w[1, 0], w[1, 1], w[1, 2]
                    w6, w7, w8 = w[2, 0], w[2, 1], w[2, 2]
                    for c in range(channels):
                        o[c] = (
                            _product(r0[c], w0[c])
                            + _product(r1[c], w1[c])
                            + _product(r2[c], w2[c])
                            + _product(r3[c], w3[c])
                            + _product(r4[c], w4[c])
                            + _product(r5[c], w5[c])
                            + _product(r6[c], w6[c])
                            + _product(r7[c], w7[c])
                            + _product(r8[c], w8[c])
                        )
                    continue
                for c in range(channels):
                    o[c] = 0
                for i in range(kh):
                    y = y0 + i * dh
                    if y < 0 or y >= h:
                        continue
                    for j in range(kw):
                        xx = x0 + j * dw
                        if xx < 0 or xx >= wd:
                            continue
                        xr, wr = x[b, y, xx], w[i, j]
                        for c in range(channels):
                            o[c] += _product(xr[c], wr[c])


@numba.njit(**_JIT)
def winograd_input(x, top, left, th, tw, chunks, v):
    """Winograd F(2x2, 3x3)'s input transform of 8-bit codes, exact in float32:
    ``v[k*16 + 4a + b, t, q] = (B^T d B)[a, b]`` of the 4x4 patch ``d`` of
    channel ``k*cs + q`` (``cs = C / chunks``) under tile ``t = (n th + ty) tw
    + tx``, whose top-left pixel is ``x[n, 2ty - top, 2tx - left]`` (pixels
    outside ``x``: its zero padding). ``x`` is ``[N, H, W, C]`` (any strides)."""
    n, h, w, c = x.shape
    cs = c // chunks
    d = np.empty((4, 4, c), np.float32)
    s = np.empty((4, 4, c), np.float32)
    for b in range(n):
        for ty in range(th):
            for tx in range(tw):
                t = (b * th + ty) * tw + tx
                for i in range(4):
                    y = 2 * ty - top + i
                    for j in range(4):
                        xx = 2 * tx - left + j
                        dij = d[i, j]
                        if 0 <= y < h and 0 <= xx < w:
                            row = x[b, y, xx]
                            for q in range(c):
                                dij[q] = row[q]
                        else:
                            dij[:] = 0.0
                for j in range(4):  # B^T d: the columns
                    d0, d1, d2, d3 = d[0, j], d[1, j], d[2, j], d[3, j]
                    s0, s1, s2, s3 = s[0, j], s[1, j], s[2, j], s[3, j]
                    for q in range(c):
                        s0[q] = d0[q] - d2[q]
                        s1[q] = d1[q] + d2[q]
                        s2[q] = d2[q] - d1[q]
                        s3[q] = d1[q] - d3[q]
                for a in range(4):  # (B^T d) B: the rows, chunk by chunk
                    for k in range(chunks):
                        lo, hi = k * cs, (k + 1) * cs
                        e0, e1 = s[a, 0, lo:hi], s[a, 1, lo:hi]
                        e2, e3 = s[a, 2, lo:hi], s[a, 3, lo:hi]
                        p = k * 16 + a * 4
                        v0, v1, v2, v3 = v[p, t], v[p + 1, t], v[p + 2, t], v[p + 3, t]
                        for q in range(cs):
                            v0[q] = e0[q] - e2[q]
                            v1[q] = e1[q] + e2[q]
                            v2[q] = e2[q] - e1[q]
                            v3[q] = e1[q] - e3[q]


@numba.njit(**_JIT)
def _winograd_tile(mp, out, b, y, x):
    """One tile of ``winograd_output``: ``mp[4a + c, o]`` its 16 product
    planes' sums, written to ``out[b, y:y + 2, x:x + 2]`` (what of it exists)."""
    _, oh, ow, o = out.shape
    full = y + 1 < oh and x + 1 < ow
    for q in range(o):
        m0, m1, m2, m3 = mp[0, q], mp[1, q], mp[2, q], mp[3, q]
        m4, m5, m6, m7 = mp[4, q], mp[5, q], mp[6, q], mp[7, q]
        m8, m9, m10, m11 = mp[8, q], mp[9, q], mp[10, q], mp[11, q]
        m12, m13, m14, m15 = mp[12, q], mp[13, q], mp[14, q], mp[15, q]
        # A^T M (float64: exact), then (A^T M) A
        c0, c1 = np.float64(m0) + m4 + m8, np.float64(m1) + m5 + m9
        c2, c3 = np.float64(m2) + m6 + m10, np.float64(m3) + m7 + m11
        d0, d1 = np.float64(m4) - m8 - m12, np.float64(m5) - m9 - m13
        d2, d3 = np.float64(m6) - m10 - m14, np.float64(m7) - m11 - m15
        y00, y01 = (c0 + c1 + c2) * 0.25, (c1 - c2 - c3) * 0.25
        y10, y11 = (d0 + d1 + d2) * 0.25, (d1 - d2 - d3) * 0.25
        if full:
            out[b, y, x, q] = y00
            out[b, y, x + 1, q] = y01
            out[b, y + 1, x, q] = y10
            out[b, y + 1, x + 1, q] = y11
        else:
            out[b, y, x, q] = y00
            if x + 1 < ow:
                out[b, y, x + 1, q] = y01
            if y + 1 < oh:
                out[b, y + 1, x, q] = y10
                if x + 1 < ow:
                    out[b, y + 1, x + 1, q] = y11


@numba.njit(**_JIT)
def winograd_output(m, chunks, th, tw, out):
    """Winograd F(2x2, 3x3)'s output transform: ``out[n, 2ty + i, 2tx + j, o]
    = (A^T M A)[i, j] / 4`` where ``M[4a + b] = sum_k m[k*16 + 4a + b, t, o]``
    (each chunk's exact integer products, float32; added in float64, exact
    below 2**53), the 4 undoing the integer weight transform's scale. Rows and
    columns past ``out`` (an odd size) are dropped. ``out`` is ``[N, OH, OW,
    O]`` of any integer or float dtype."""
    n = out.shape[0]
    o = out.shape[3]
    acc = np.empty((16, o), np.float64)
    for b in range(n):
        for ty in range(th):
            for tx in range(tw):
                t = (b * th + ty) * tw + tx
                for p in range(16):  # (contiguous: the tile's loop vectorises)
                    ap, mp = acc[p], m[p, t]
                    for q in range(o):
                        ap[q] = mp[q]
                    for k in range(1, chunks):
                        mk = m[k * 16 + p, t]
                        for q in range(o):
                            ap[q] += mk[q]
                _winograd_tile(acc, out, b, 2 * ty, 2 * tx)


@numba.njit(**_JIT)
def fake_quantize(x, inv, scale, zero, qmin, qmax, out):
    """``torch.fake_quantize_per_tensor_affine``'s forward on flat float32
    arrays, bit for bit (its CPU kernel's arithmetic, checked in
    ``tests/quantization/test_fake_quantize.py``): ``(clamp(nearbyint(x *
    inv) + zero, qmin, qmax) - zero) * scale`` in float32, ``inv`` being
    ``fl32(1 / scale)``; NaN goes to ``qmin``, as there."""
    for i in range(x.size):
        v = np.rint(x[i] * inv) + zero
        if v != v:
            q = qmin
        else:
            q = min(max(v, qmin), qmax)
        out[i] = (q - zero) * scale


@numba.njit(**_JIT)
def hits_tie_band(a_lo, width, half, band, off, t, s, odd):
    """``requantizer._hits_tie_band``'s question, row by row with an early exit:
    whether in some row an ``acc`` in ``[a_lo, a_lo + width]`` has ``acc * m +
    off`` within ``band`` of ``half`` modulo ``2**s`` (``m = odd * 2**t``). The
    arithmetic is the numpy form's: int64 masks, the inverse of ``odd`` modulo
    ``2**64`` by Newton's iteration in wrapping uint64."""
    two = np.uint64(2)
    for i in range(a_lo.size):
        o = np.uint64(odd[i])
        inverse = o  # right to 3 bits (odd * odd = 1 mod 8); Newton doubles
        for _ in range(5):
            inverse = inverse * (two - o * inverse)
        si, ti = s[i], t[i]
        s_mask = (np.int64(1) << si) - 1
        t_mask = (np.int64(1) << ti) - 1
        k_mask = (np.int64(1) << (si - ti)) - 1
        for j in range(-band[i], band[i] + 1):
            d = (half[i] + j - off[i]) & s_mask  # acc m = d (mod 2**s)
            if d & t_mask:
                continue
            residue = np.int64(np.uint64(d >> ti) * inverse) & k_mask
            if (residue - a_lo[i]) & k_mask <= width[i]:
                return True
    return False
