"""Compiled one-pass loops (numba) for the elementwise work numpy does in many passes.

numpy computes a requantization ``clamp(rint(acc * m + c))`` as four passes over
the tensor, each writing a float64 temporary; compiled, the same arithmetic is one
pass that reads ``acc`` once and writes the narrow result (~10x faster on a conv's
output). The loops here compute exactly what ``runtime/requantizer.py``'s numpy
forms compute, operation for operation in the same float64 / int64 arithmetic
(numba emits separate IEEE multiplies and adds, no fused multiply-add and no
reassociation), so they are bit for bit those forms; ``tests/runtime/test_jit.py``
compares them on random and edge-case data.

Every loop takes C-contiguous arrays in memory order: ``x[outer, C, inner]``
with per-channel parameters of length ``C`` (length 1 broadcasts), or
``x[outer, C]`` where the channel is the fastest axis (channels-last), so the
innermost loop is the one that vectorises.

numba is imported with this module, which ``requantizer`` and ``kernels`` import
on first use (``loops()``); with numba missing or ``HBIR_JIT=0`` they keep their
numpy forms. Compiled code is cached beside this file where that is writable.
"""

from __future__ import annotations

import numba
import numpy as np

_JIT = dict(nogil=True, cache=True, boundscheck=False)

FLOAT32_LIMIT = float(2**24)  # float32 holds every integer below this exactly


@numba.njit(**_JIT)
def _round(v, half_up):
    if half_up:  # numerics.round_float: floor + (v - floor >= 0.5), exact
        f = np.floor(v)
        return f + (1.0 if v - f >= 0.5 else 0.0)
    return np.rint(v)


@numba.njit(**_JIT)
def nearest_last(acc, mf, cf, lo, hi, out):
    """``clamp(rint(acc * mf[c] + cf[c]), lo, hi)`` of ``acc[p, c]``."""
    rows, channels = acc.shape
    for p in range(rows):
        for c in range(channels):
            v = np.rint(acc[p, c] * mf[c] + cf[c])
            out[p, c] = min(max(v, lo), hi)


@numba.njit(**_JIT)
def nearest_inner(acc, mf, cf, lo, hi, out):
    """``clamp(rint(acc * mf[c] + cf[c]), lo, hi)`` of ``acc[o, c, i]``."""
    outer, channels, inner = acc.shape
    for o in range(outer):
        for c in range(channels):
            k = c if mf.size > 1 else 0
            m, a = mf[k], cf[k]
            for i in range(inner):
                v = np.rint(acc[o, c, i] * m + a)
                out[o, c, i] = min(max(v, lo), hi)


@numba.njit(**_JIT)
def float_inner(acc, a0, mf, cf, zero, half_up, lo, hi, out):
    """``clamp(round((acc - a0[c]) * mf[c] + cf[c]) + zero, lo, hi)``."""
    outer, channels, inner = acc.shape
    for o in range(outer):
        for c in range(channels):
            k = c if mf.size > 1 else 0
            z, m, a = a0[k], mf[k], cf[k]
            for i in range(inner):
                v = _round((float(acc[o, c, i]) - z) * m + a, half_up) + zero
                out[o, c, i] = min(max(v, lo), hi)


@numba.njit(**_JIT)
def right_inner(acc, m, off, s, bias, zero, half_up, lo, hi, out):
    """``clamp(((acc m[c] + off[c]) + bias[c] (+ odd bit)) >> s[c] + zero, lo, hi)``
    in int64: ``Requantizer``'s right-shift form."""
    outer, channels, inner = acc.shape
    for o in range(outer):
        for c in range(channels):
            mk, ok = m[c if m.size > 1 else 0], off[c if off.size > 1 else 0]
            sk, bk = s[c if s.size > 1 else 0], bias[c if bias.size > 1 else 0]
            for i in range(inner):
                p = np.int64(acc[o, c, i]) * mk + ok
                if half_up:
                    p = (p + bk) >> sk
                else:
                    p = (p + bk + ((p >> sk) & 1)) >> sk
                out[o, c, i] = min(max(p + zero, lo), hi)


@numba.njit(**_JIT)
def quantize_inner(x, inv, zp, half_up, qmin, qmax, out):
    """``numerics.quantize``: ``clamp(round(x * inv[c]) + zp[c], qmin, qmax)``, the
    product and its rounding in ``x``'s float type (``inv`` has it), NaN -> 0."""
    outer, channels, inner = x.shape
    for o in range(outer):
        for c in range(channels):
            k = c if inv.size > 1 else 0
            s, z = inv[k], zp[c if zp.size > 1 else 0]
            for i in range(inner):
                v = np.float64(_round(x[o, c, i] * s, half_up))
                if v != v:
                    v = 0.0
                out[o, c, i] = min(max(v + z, qmin), qmax)


@numba.njit(**_JIT)
def max_abs_at_least(x, limit):
    """Whether some ``|x| >= limit`` (float32 sums that may have rounded)."""
    flat = x.reshape(-1)
    hit = False
    for i in range(flat.size):
        hit |= abs(flat[i]) >= limit
    return hit


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
