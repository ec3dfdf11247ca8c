"""Every integer semantic of hbir, defined once, in pure numpy.

The torch fake-quant modules, the interpreter and (later) the convert passes and the
NPU simulator call these functions or mirror them; shared test vectors prove they
agree. Conventions:

* Scales are float32. Quantization multiplies by the float32 reciprocal of the scale,
  exactly as ``torch.fake_quantize_per_tensor_affine`` does (``x * (1.0f / s)``, round,
  add the zero point, clamp); dividing by the scale instead disagrees on near-ties.
* Rounding is half-to-even by default; ``legacy_round`` models use half-up
  (``floor(v + 0.5)``, evaluated in float32 like the torch side does).
* Integer arithmetic runs in int64 and saturates to the storage type at the end.
* Requantization is one 64-bit product and one rounding shift:
  ``y = clamp(round(acc * multiplier / 2**shift) + zero_point, qmin, qmax)``.
"""

from __future__ import annotations

import enum
import math

import numpy as np

HALF_EVEN = "half_even"
HALF_UP = "half_up"


class RoundingMode(enum.StrEnum):
    """How a value exactly halfway between two integers is rounded."""

    HALF_EVEN = HALF_EVEN
    HALF_UP = HALF_UP


# ----------------------------------------------------------------- integer ranges


def qrange(bits: int, narrow_range: bool = False) -> tuple[int, int]:
    """The signed code range of a ``bits``-wide type; narrow drops the lowest code."""
    if not 2 <= bits <= 32:
        raise ValueError(f"bits must be in [2, 32], got {bits}")
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return (qmin + 1 if narrow_range else qmin), qmax


def saturate(x: np.ndarray, bits: int) -> np.ndarray:
    """Clamp int64 values to the signed ``bits``-wide range."""
    lo, hi = qrange(bits)
    return np.clip(np.asarray(x, np.int64), lo, hi)


# ----------------------------------------------------------------- rounding


def round_float(v: np.ndarray, mode: str = HALF_EVEN) -> np.ndarray:
    """Round floating-point values to integral values (same dtype) with ``mode``."""
    v = np.asarray(v)
    if mode == HALF_EVEN:
        return np.rint(v)
    if mode == HALF_UP:
        return np.floor(v + v.dtype.type(0.5))
    raise ValueError(f"unknown rounding mode {mode!r}")


def shift_round(
    x: np.ndarray, n: int | np.ndarray, mode: str = HALF_EVEN
) -> np.ndarray:
    """``x / 2**n`` rounded to an integer with an explicit tie rule, exact in int64.

    ``n`` may be an array broadcasting against ``x`` (per-channel shifts); ``n == 0``
    returns ``x`` unchanged. Negative ``n`` is a left shift.
    """
    x = np.asarray(x, np.int64)
    n = np.asarray(n, np.int64)
    if np.any(n < 0):
        left = np.where(n < 0, -n, 0)
        x = x << left
        n = np.where(n < 0, 0, n)
    floor = x >> n
    rem = x - (floor << n)
    half = np.where(n > 0, np.left_shift(np.int64(1), np.maximum(n - 1, 0)), 1 << 62)
    if mode == HALF_EVEN:
        up = (rem > half) | ((rem == half) & ((floor & 1) == 1))
    elif mode == HALF_UP:
        up = rem >= half
    else:
        raise ValueError(f"unknown rounding mode {mode!r}")
    return floor + up


# ----------------------------------------------------------------- scales


def _along(values: np.ndarray, ndim: int, axis: int | None) -> np.ndarray:
    """Reshape per-channel ``values`` to broadcast along ``axis`` of an ndim tensor."""
    values = np.asarray(values)
    if axis is None or values.size == 1:
        return values.reshape(())
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)


def scale_from_absmax(absmax: np.ndarray, bits: int, narrow_range: bool = False):
    """Symmetric scale ``absmax / ((qmax - qmin) / 2)`` in float32, never below eps."""
    qmin, qmax = qrange(bits, narrow_range)
    scale = np.asarray(absmax, np.float32) / np.float32((qmax - qmin) / 2)
    return np.maximum(scale, np.finfo(np.float32).eps).astype(np.float32)


def pot_scale(scale: np.ndarray) -> np.ndarray:
    """The smallest power of two that is >= ``scale`` (covers the same range)."""
    scale = np.asarray(scale, np.float64)
    exponent = np.ceil(np.log2(np.maximum(scale, 2.0**-126)))
    return np.exp2(exponent).astype(np.float32)


def scale_from_min_max(
    min_val: np.ndarray, max_val: np.ndarray, bits: int, narrow_range: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Recover (float32 scale, int zero point) from a ``const_fake_quant`` range.

    Export writes ``min = scale * qmin`` and ``max = scale * qmax`` in float64, so the
    division below gives back the float32 scale exactly.
    """
    qmin, qmax = qrange(bits, narrow_range)
    lo, hi = np.asarray(min_val, np.float64), np.asarray(max_val, np.float64)
    scale = ((hi - lo) / (qmax - qmin)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1)).astype(np.float64)
    zero_point = np.clip(np.rint(qmin - lo / safe), qmin, qmax).astype(np.int64)
    return scale, zero_point


# ----------------------------------------------------------------- quantization


def quantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    qmin: int,
    qmax: int,
    axis: int | None = None,
    mode: str = HALF_EVEN,
) -> np.ndarray:
    """Float -> int64 codes: ``clamp(round(fl32(x * fl32(1/s))) + zp, qmin, qmax)``."""
    x = np.asarray(x, np.float32)
    scale = _along(np.asarray(scale, np.float32), x.ndim, axis)
    zero_point = _along(np.asarray(zero_point, np.int64), x.ndim, axis)
    inv = (np.float32(1.0) / scale).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        v = round_float((x * inv).astype(np.float32), mode).astype(np.float64)
    v = np.clip(np.nan_to_num(v, nan=0.0) + zero_point, qmin, qmax)
    return v.astype(np.int64)


def dequantize(
    q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, axis: int | None = None
) -> np.ndarray:
    """Codes -> float32: ``fl32((q - zp) * s)``."""
    q = np.asarray(q, np.int64)
    scale = _along(np.asarray(scale, np.float32), q.ndim, axis)
    zero_point = _along(np.asarray(zero_point, np.int64), q.ndim, axis)
    return ((q - zero_point).astype(np.float32) * scale).astype(np.float32)


def fake_quant(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    qmin: int,
    qmax: int,
    axis: int | None = None,
    mode: str = HALF_EVEN,
) -> np.ndarray:
    """Quantize then dequantize; equals torch's fake_quantize_per_*_affine."""
    q = quantize(x, scale, zero_point, qmin, qmax, axis, mode)
    return dequantize(q, scale, zero_point, axis)


def const_fake_quant(
    x: np.ndarray,
    min_val: np.ndarray,
    max_val: np.ndarray,
    bits: int,
    narrow_range: bool = False,
    axis: int | None = None,
    mode: str = HALF_EVEN,
) -> np.ndarray:
    """The semantics of ``qnt.const_fake_quant``: fake quantization over [min, max]."""
    scale, zero_point = scale_from_min_max(min_val, max_val, bits, narrow_range)
    qmin, qmax = qrange(bits, narrow_range)
    return fake_quant(x, scale, zero_point, qmin, qmax, axis, mode)


# ----------------------------------------------------------------- requantization


def quantize_multiplier(real: float, bits: int = 31) -> tuple[int, int]:
    """Split ``real > 0`` into an integer multiplier and a right shift.

    ``real ~= multiplier / 2**shift`` with ``multiplier`` in ``[2**(bits-1), 2**bits)``
    (rounded half-up from the float64 mantissa). ``shift`` may be negative for
    ``real >= 2**bits``.
    """
    if not real > 0 or not math.isfinite(real):
        raise ValueError(
            f"requantization scale must be positive and finite, got {real}"
        )
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2**exponent
    multiplier = math.floor(mantissa * (1 << bits) + 0.5)
    if multiplier == 1 << bits:
        multiplier //= 2
        exponent += 1
    return multiplier, bits - exponent


def requantize(
    acc: np.ndarray,
    multiplier: np.ndarray,
    shift: np.ndarray,
    zero_point: int,
    qmin: int,
    qmax: int,
    axis: int | None = None,
    mode: str = HALF_EVEN,
) -> np.ndarray:
    """``clamp(round(acc * multiplier / 2**shift) + zp, qmin, qmax)`` in int64.

    Per-channel ``multiplier`` / ``shift`` arrays broadcast along ``axis``. The product
    stays exact while ``|acc| < 2**32`` and ``multiplier < 2**31``.
    """
    acc = np.asarray(acc, np.int64)
    multiplier = _along(np.asarray(multiplier, np.int64), acc.ndim, axis)
    shift = _along(np.asarray(shift, np.int64), acc.ndim, axis)
    y = shift_round(acc * multiplier, shift, mode) + zero_point
    return np.clip(y, qmin, qmax)


# ----------------------------------------------------------------- integer division


def divide_round(
    num: np.ndarray, den: int | np.ndarray, mode: str = HALF_EVEN
) -> np.ndarray:
    """``num / den`` rounded to an integer with an explicit tie rule, exact in int64.

    ``den`` must be positive (an element count: integer mean and average pooling
    divide an exact window sum once). ``den`` may be an array broadcasting against
    ``num``. Half-up rounds ties toward +inf, like ``round_float``.
    """
    num = np.asarray(num, np.int64)
    den = np.asarray(den, np.int64)
    if np.any(den <= 0):
        raise ValueError("divide_round needs a positive divisor")
    floor = num // den
    twice_rem = 2 * (num - floor * den)  # in [0, 2 * den)
    if mode == HALF_EVEN:
        up = (twice_rem > den) | ((twice_rem == den) & ((floor & 1) == 1))
    elif mode == HALF_UP:
        up = twice_rem >= den
    else:
        raise ValueError(f"unknown rounding mode {mode!r}")
    return floor + up


# ----------------------------------------------------------------- colour (BT.601)
#
# Planes are integer arrays in [0, 255]; Cb/Cr (U/V) are stored offset by 128.
# Right shifts of negative values floor (numpy's >> is arithmetic), as in the C
# references. Results are clipped to [0, 255] and returned as int64.


def _clip8(v: np.ndarray) -> np.ndarray:
    return np.clip(v, 0, 255)


def rgb_to_yuv_bt601_full(
    r: np.ndarray, g: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Full-range (JFIF) RGB -> YCbCr in Q16, as libjpeg's ``jccolor.c``."""
    r, g, b = (np.asarray(p, np.int64) for p in (r, g, b))
    y = (19595 * r + 38470 * g + 7471 * b + 32768) >> 16
    cb = (-11059 * r - 21709 * g + 32768 * b + (128 << 16) + 32767) >> 16
    cr = (32768 * r - 27439 * g - 5329 * b + (128 << 16) + 32767) >> 16
    return _clip8(y), _clip8(cb), _clip8(cr)


def yuv_to_rgb_bt601_full(
    y: np.ndarray, u: np.ndarray, v: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Full-range (JFIF) YCbCr -> RGB in Q16, as libjpeg's ``jdcolor.c``.

    ``R = Y + 1.402 Cr'``, ``G = Y - 0.34414 Cb' - 0.71414 Cr'``, ``B = Y + 1.772 Cb'``
    with ``Cb' = U - 128``, ``Cr' = V - 128`` and the constants in Q16, each term
    rounded half-up by ``+ 32768 >> 16``.
    """
    y, cb, cr = (np.asarray(p, np.int64) for p in (y, u, v))
    cb, cr = cb - 128, cr - 128
    r = y + ((91881 * cr + 32768) >> 16)
    g = y + ((-22554 * cb - 46802 * cr + 32768) >> 16)
    b = y + ((116130 * cb + 32768) >> 16)
    return _clip8(r), _clip8(g), _clip8(b)


def rgb_to_yuv_bt601_video(
    r: np.ndarray, g: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Video-range RGB -> YUV in Q8 (Y in [16, 235], U/V in [16, 240])."""
    r, g, b = (np.asarray(p, np.int64) for p in (r, g, b))
    y = ((66 * r + 129 * g + 25 * b + 128) >> 8) + 16
    u = ((-38 * r - 74 * g + 112 * b + 128) >> 8) + 128
    v = ((112 * r - 94 * g - 18 * b + 128) >> 8) + 128
    return _clip8(y), _clip8(u), _clip8(v)


def yuv_to_rgb_bt601_video(
    y: np.ndarray, u: np.ndarray, v: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Video-range YUV -> RGB in Q8 (Microsoft's "Converting between YUV and RGB").

    ``C = Y - 16``, ``D = U - 128``, ``E = V - 128``;
    ``R = (298 C + 409 E + 128) >> 8``, ``G = (298 C - 100 D - 208 E + 128) >> 8``,
    ``B = (298 C + 516 D + 128) >> 8``, clipped to [0, 255].
    """
    c, d, e = (np.asarray(p, np.int64) for p in (y, u, v))
    c, d, e = c - 16, d - 128, e - 128
    r = (298 * c + 409 * e + 128) >> 8
    g = (298 * c - 100 * d - 208 * e + 128) >> 8
    b = (298 * c + 516 * d + 128) >> 8
    return _clip8(r), _clip8(g), _clip8(b)
