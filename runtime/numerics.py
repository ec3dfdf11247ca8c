"""Every integer semantic of hbir, defined once, in pure numpy.

The torch fake-quant modules, the interpreter and (later) the convert passes and the
NPU simulator call these functions or mirror them; shared test vectors prove they
agree. Conventions:

* Scales are float32. Quantization multiplies by the float32 reciprocal of the scale,
  exactly as ``torch.fake_quantize_per_tensor_affine`` does (``x * (1.0f / s)``, round,
  add the zero point, clamp); dividing by the scale instead disagrees on near-ties.
* Rounding is half-to-even by default; ``legacy_round`` models use half-up
  (``floor(v + 0.5)`` without rounding the addition), in fake quantization and
  fixed point alike.
* Integer arithmetic runs in int64 and saturates to the storage type at the end.
* Requantization is one 64-bit product and one rounding shift:
  ``y = clamp(round(acc * multiplier / 2**shift) + zero_point, qmin, qmax)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import ClassVar

import numpy as np

from hbir.errors import HbirError

# How a value exactly halfway between two integers is rounded: the only valid
# modes. The order is stored: a LUT table's ``rounding`` is an index into it.
HALF_EVEN = "half_even"
HALF_UP = "half_up"
ROUNDING_MODES = (HALF_EVEN, HALF_UP)


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


def pad_code(value: float, dtype) -> int:
    """The code an integer tensor of ``dtype`` is padded with for the float
    ``value`` (``hbir.pad``): rounded half to even, saturated to the dtype."""
    info = np.iinfo(dtype)
    return min(max(round(value), int(info.min)), int(info.max))


# ----------------------------------------------------------------- rounding


def round_float(v: np.ndarray, mode: str = HALF_EVEN) -> np.ndarray:
    """Round floating-point values to integral values (same dtype) with ``mode``."""
    v = np.asarray(v)
    if mode == HALF_EVEN:
        return np.rint(v)
    if mode == HALF_UP:
        # floor(v + 0.5) would round in the addition (0.49999997 + 0.5 == 1.0 in
        # float32, and above 2**23 every sum is rounded); v - floor(v) is exact.
        floor = np.floor(v)
        return floor + (v - floor >= v.dtype.type(0.5))
    raise ValueError(f"unknown rounding mode {mode!r}")


# The legal requantization parameters (``qnt.requantize`` verifies them): a
# multiplier in [0, 2**31) and a shift in [-31, 62], negative for a left shift.
MULTIPLIER_LIMIT = 1 << 31
SHIFT_RANGE = (-31, 62)


def shift_round(
    x: np.ndarray, n: int | np.ndarray, mode: str = HALF_EVEN
) -> np.ndarray:
    """``x / 2**n`` rounded to an integer with an explicit tie rule, exact in int64.

    ``n`` may be an array broadcasting against ``x`` (per-channel shifts); ``n == 0``
    returns ``x`` unchanged. Negative ``n`` (at least ``SHIFT_RANGE[0]``) is a left
    shift, saturating at ``±2**62`` instead of overflowing.
    """
    x = np.asarray(x, np.int64)
    n = np.asarray(n, np.int64)
    if np.any(n < 0):
        left = np.where(n < 0, -n, 0)
        if np.any(left > -SHIFT_RANGE[0]):
            raise ValueError(f"left shifts are at most {-SHIFT_RANGE[0]} bits")
        # A value beyond 2**(62 - left) would overflow int64; its shifted value
        # is beyond every 32-bit result anyway, so it saturates to that bound.
        bound = np.left_shift(np.int64(1), 62 - left)
        x = np.clip(x, -bound, bound) << left
        n = np.where(n < 0, 0, n)
    floor = x >> n
    rem = x - (floor << n)  # in [0, 2**n)
    return _round_up(floor, 2 * rem, np.left_shift(np.int64(1), n), mode)


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


def bias_scale(s_in, s_w) -> np.ndarray:
    """The int32 bias grid of a conv / linear / affine: ``fl32(s_in * s_w[c])``.

    The float32 product of the float32 input scale and the float32 weight scale(s),
    rounded once, exactly as torch multiplies two float32 tensors. Exact QAT
    (consistency level 2) fake-quantizes the bias to int32 on this grid; convert
    adds those codes to the accumulator as they are when the grid equals the
    accumulator's exact scale ``s_in * s_w[c]`` (e.g. power-of-two scales).
    """
    return np.asarray(s_in, np.float32) * np.asarray(s_w, np.float32)


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
    """Float -> int64 codes: ``clamp(round(x * fl32(1/s)) + zp, qmin, qmax)``.

    The product is float32 for float32 (and narrower) inputs and float64 for
    float64 inputs (consistency level 2's exact accumulators, int32 biases).
    """
    x = np.asarray(x)
    x = x.astype(np.float64 if x.dtype == np.float64 else np.float32, copy=False)
    scale = _along(np.asarray(scale, np.float32), x.ndim, axis)
    zero_point = _along(np.asarray(zero_point, np.int64), x.ndim, axis)
    inv = (np.float32(1.0) / scale).astype(np.float32).astype(x.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        v = round_float((x * inv).astype(x.dtype), mode).astype(np.float64)
    v = np.clip(np.nan_to_num(v, nan=0.0) + zero_point, qmin, qmax)
    return v.astype(np.int64)


def dequantize(
    q: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    axis: int | None = None,
    dtype=np.float32,
) -> np.ndarray:
    """Codes -> float: ``(q - zp) * s`` in ``dtype`` (float32 unless float64)."""
    q = np.asarray(q, np.int64)
    scale = _along(np.asarray(scale, np.float32), q.ndim, axis).astype(dtype)
    zero_point = _along(np.asarray(zero_point, np.int64), q.ndim, axis)
    return ((q - zero_point).astype(dtype) * scale).astype(dtype)


def fake_quant(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    qmin: int,
    qmax: int,
    axis: int | None = None,
    mode: str = HALF_EVEN,
) -> np.ndarray:
    """Quantize then dequantize; equals torch's fake_quantize_per_*_affine.

    float64 inputs stay float64 (torch's own float64 kernels dequantize in float32,
    which is wrong above 2**24 codes; hbir.quantization does it in float64 too).
    """
    dtype = np.float64 if np.asarray(x).dtype == np.float64 else np.float32
    q = quantize(x, scale, zero_point, qmin, qmax, axis, mode)
    return dequantize(q, scale, zero_point, axis, dtype)


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


def inv_scale(scale) -> np.float64:
    """``fl32(1 / fl32(s))`` as float64: the factor quantization multiplies by.

    ``quantize`` (and torch's fake quantization) compute ``x * fl32(1/s)``, not
    ``x / s``; a requantization into scale ``s`` therefore rounds
    ``acc * s_acc * fl32(1/s)``. With ``x / s`` instead, the two disagree wherever
    ``acc * s_acc / s`` lies within ``2**-24`` (relative) of a rounding tie, which
    exact ties (e.g. ``s_acc / s = 3/8``) hit often.
    """
    return np.float64(np.float32(1.0) / np.float32(scale))


def requantize_multipliers(real) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel ``(multiplier, shift)`` int64 arrays with ``m / 2**shift ~= real``.

    One pair when every channel has the same factor. A zero factor (an all-zero
    weight channel) becomes multiplier 0. Tiny factors give up low multiplier bits
    so that the shift stays at most 62.
    """
    real = np.asarray(real, np.float64).reshape(-1)
    if real.size > 1 and np.all(real == real[0]):
        real = real[:1]
    if np.any(real < 0) or not np.all(np.isfinite(real)):
        raise ValueError(
            f"requantization scales must be >= 0 and finite, got {real.tolist()}"
        )
    # quantize_multiplier, vectorised: mantissa * 2**31 and the half are exact.
    mantissa, exponent = np.frexp(real)
    multiplier = np.floor(mantissa * 2.0**31 + 0.5).astype(np.int64)
    carry = multiplier == 1 << 31
    multiplier = np.where(carry, multiplier // 2, multiplier)
    shift = 31 - (exponent.astype(np.int64) + carry)
    excess = np.maximum(shift - 62, 0)  # tiny factors: keep the shift <= 62
    multiplier, shift = multiplier >> excess, shift - excess
    zero = real == 0
    return np.where(zero, 0, multiplier), np.where(zero, 0, shift)


# ----------------------------------------------------------------- gemm requantization

# A float bias goes on a grid up to 2**MAX_FINE_BITS finer than the accumulator,
# as fine as keeps the shifted accumulator below 2**ACC_HEADROOM_BITS.
MAX_FINE_BITS = 16
ACC_HEADROOM_BITS = 30
# The accumulator of an integer conv / linear / matmul on both marches (the
# TAE's si32; ``passes/march.py`` ``NpuModel.acc_bits``).
ACC_BITS = 32


@dataclass(frozen=True)
class GemmRequant:
    """How the exact accumulator of an integer conv / linear / matmul becomes codes.

    ``acc`` (si32, scale ``s_x * s_w[c]``) is shifted left by ``fine`` bits, the
    bias codes are added (si32, on the grid ``s_x * s_w[c] * 2**-fine``), and one
    requantization ``round(acc * multiplier / 2**shift)`` gives the output codes.
    ``fused_bias``: the bias codes are exact int32 codes on the accumulator's own
    grid (consistency level 2), the gemm's bias operand.
    """

    multiplier: np.ndarray  # int64, one per output channel or one for all
    shift: np.ndarray
    bias: np.ndarray | None = None  # int64 codes, one per output channel
    fine: int = 0
    fused_bias: bool = False
    # Right shifts of the input / weight codes before the gemm
    # (``gemm_operand_shifts``); the accumulator's scale includes them.
    x_shift: int = 0
    w_shift: int = 0


def gemm_operand_shifts(
    terms: int, x_bits: int, w_bits: int, acc_bits: int = ACC_BITS
) -> tuple[int, int]:
    """Right shifts (input, weight) of the operand codes that keep every sum of
    ``terms`` products within the ``acc_bits`` accumulator.

    A ``terms``-long sum of ``x_bits`` x ``w_bits`` codes reaches
    ``terms * 2**(x_bits-1) * 2**(w_bits-1)``: for int8 x int8 that fits si32 up
    to 131,071 terms, for int16 x int8 only up to 511 (a 3x3 conv over 57
    channels). Beyond, the wider operand's codes are divided by ``2**s``
    (``shift_round``, the model's rounding: ``|round(q / 2**s)| <= 2**(bits-1-s)``)
    with the smallest ``s`` that makes the worst case fit, and the accumulator's
    scale grows by ``2**s``. The cost is ``s`` bits of that operand's resolution;
    the gain is that no input can saturate the accumulator. Convert inserts the
    shift; the fixed-point forward (``fixed_point_gemm``) computes the same.
    """
    worst = terms * (1 << (x_bits - 1)) * (1 << (w_bits - 1))
    limit = (1 << (acc_bits - 1)) - 1
    s = 0
    while worst > limit << s:
        s += 1
    if s >= max(x_bits, w_bits) - 1:
        raise ValueError(
            f"a {terms}-term sum of {x_bits}-bit x {w_bits}-bit codes cannot fit "
            f"a {acc_bits}-bit accumulator"
        )
    return (s, 0) if x_bits >= w_bits else (0, s)


def gemm_fine_bits(terms: int, x_bits: int, w_bits: int, bias_lsb) -> int:
    """Fractional bits for a float bias: the accumulator shifted left by them still
    fits in ``2**ACC_HEADROOM_BITS`` (bounded by the operand widths and the
    reduction length ``terms``), at most ``MAX_FINE_BITS``."""
    bound = terms * (1 << (x_bits - 1)) * (1 << (w_bits - 1))
    bound += float(np.max(np.abs(bias_lsb), initial=0.0)) + 1
    headroom = ACC_HEADROOM_BITS - math.ceil(math.log2(bound))
    return max(0, min(MAX_FINE_BITS, headroom))


def gemm_requantization(
    s_x,
    s_w,
    s_out,
    *,
    terms: int,
    x_bits: int,
    w_bits: int,
    bias=None,
    bias_codes=None,
    channels: int = 1,
    mode: str = HALF_EVEN,
) -> GemmRequant:
    """The requantization convert chooses for a gemm, and exact QAT computes.

    ``s_x`` (float32, per tensor), ``s_w`` (float32, per output channel or one) and
    ``s_out`` (float32) are the scales of the input, weight and output codes;
    ``bias`` the real bias (float64 per channel) or ``bias_codes`` an exact int32
    bias on the accumulator grid. The accumulator's real scale is ``s_x * s_w[c]``
    exactly (float64); a float bias goes on a grid ``2**fine`` finer
    (``gemm_fine_bits``), rounded with ``mode``; the factor is
    ``s_x * s_w[c] * 2**-fine * fl32(1/s_out)`` as a 31-bit multiplier.
    """
    x_shift, w_shift = gemm_operand_shifts(terms, x_bits, w_bits)
    if bias_codes is not None and (x_shift or w_shift):
        raise ValueError("an exact bias needs the unshifted accumulator grid")
    s_w = np.asarray(s_w, np.float32).astype(np.float64).reshape(-1)
    # Exact in float64: a product of two float32 values times a power of two.
    acc_scale = np.float64(np.float32(s_x)) * s_w * 2.0 ** (x_shift + w_shift)
    if acc_scale.size == 1:
        acc_scale = np.broadcast_to(acc_scale, (channels,))
    codes, fine, fused = None, 0, False
    if bias_codes is not None:
        codes = np.broadcast_to(np.asarray(bias_codes, np.int64), acc_scale.shape)
        fused = True
    elif bias is not None:
        lsb = np.broadcast_to(np.asarray(bias, np.float64), acc_scale.shape) / acc_scale
        fine = gemm_fine_bits(terms, x_bits - x_shift, w_bits - w_shift, lsb)
        codes = np.clip(round_float(lsb * 2.0**fine, mode), *qrange(32))
        codes = codes.astype(np.int64)
    real = acc_scale * 2.0**-fine * inv_scale(s_out)
    multiplier, shift = requantize_multipliers(real)
    return GemmRequant(multiplier, shift, codes, fine, fused, x_shift, w_shift)


def gemm_output(
    acc: np.ndarray,
    req: GemmRequant,
    qmin: int,
    qmax: int,
    axis: int,
    mode: str = HALF_EVEN,
) -> np.ndarray:
    """Output codes of a gemm from its exact accumulator (int64, before any bias).

    The integer pipeline step by step: the si32 accumulator, shifted left by
    ``fine`` (saturating to si32), plus the bias codes (saturating to si32), then
    ``requantize``, clamped to ``[qmin, qmax]``.
    """
    acc = np.asarray(acc, np.int64)
    if req.bias is not None and req.fused_bias:
        acc = saturate(acc + _along(req.bias, acc.ndim, axis), 32)
    elif req.bias is not None:
        acc = saturate(acc, 32)
        if req.fine:
            acc = saturate(shift_round(acc, -req.fine, mode), 32)
        acc = saturate(acc + _along(req.bias, acc.ndim, axis), 32)
    else:
        acc = saturate(acc, 32)
    channels_axis = axis if req.multiplier.size > 1 else None
    return requantize(
        acc, req.multiplier, req.shift, 0, qmin, qmax, channels_axis, mode
    )


@dataclass(frozen=True)
class Grids:
    """The code grids around an op that computes its integer lowering's numbers
    (``qnt.exact``): each a float32 scale and a width, zero points 0.

    ``in_scales`` has one entry per operand (0.0 marks a float constant operand,
    which the lowering puts on a grid of its own); a gemm has one input and its
    weight in ``w_scales`` (per weight channel, or one).
    """

    in_scales: tuple[float, ...]
    in_bits: tuple[int, ...]
    out_scale: float
    out_bits: int
    w_scales: tuple[float, ...] = ()
    w_bits: int = 0

    @property
    def x_scale(self) -> float:
        return self.in_scales[0]

    @property
    def x_bits(self) -> int:
        return self.in_bits[0]


def codes_on_grid(values, scale, bits: int, axis: int | None = None) -> np.ndarray:
    """The codes of values that lie on the grid ``scale`` (``fl32(q * s)``, as
    fake quantization leaves them), as float32 integers: ``rint(x * fl32(1/s))``,
    exact for ``|q| < 2**22``, clamped to the ``bits``-wide range."""
    values = np.asarray(values, np.float32)
    inv = (np.float32(1.0) / np.asarray(scale, np.float32)).astype(np.float32)
    inv = _along(inv, values.ndim, axis)
    return np.clip(np.rint(values * inv), *qrange(bits)).astype(np.float32)


def weight_sums(qw: np.ndarray, out_axis: int, sum_axis: int | None) -> tuple:
    """(``sum|qw|`` per output channel along ``out_axis``, and with a
    ``sum_axis`` the sums per output channel and index along it, ``[O, C]``,
    else None): what ``fixed_point_gemm`` bounds its sums by, a function of
    the weight codes alone (a caller may compute it once per weight version
    and pass it as ``w_stats``)."""
    w_abs = np.abs(qw)
    if sum_axis is None:
        others = tuple(a for a in range(qw.ndim) if a != out_axis % qw.ndim)
        return np.sum(w_abs, axis=others, dtype=np.float64), None
    w = np.moveaxis(w_abs, (out_axis % qw.ndim, sum_axis % qw.ndim), (0, 1))
    o, c = w.shape[:2]
    per_input = w.reshape(o, c, -1).sum(2, dtype=np.float64)
    return per_input.sum(1), per_input


# The most equal chunks a float32 sum splits into (more: float64 is as fast).
MAX_FLOAT32_CHUNKS = 16


def float32_chunks(
    per_input: np.ndarray, x_max: float, most: int = MAX_FLOAT32_CHUNKS
) -> int:
    """The fewest equal chunks (1: the whole) of a sum's axis in which every
    output's partial sums stay below ``2**24`` for inputs up to ``x_max`` in
    magnitude (``x_max * sum|w|`` over a chunk), whatever the order of
    summation, from ``per_input`` (``[outputs, C]``: each output's ``|w|`` per
    summed index, e.g. ``weight_sums``'); 0 where no split up to ``most``
    holds. Every exact float32 split (a QAT gemm's slices, a conv's grouped
    chunks, Winograd's products) is decided here."""
    rows, c = per_input.shape
    for chunks in range(1, min(c, most) + 1):
        if c % chunks == 0:
            sums = per_input.reshape(rows, chunks, -1).sum(2, dtype=np.float64)
            if x_max * float(sums.max(initial=0.0)) < 2**24:
                return chunks
    return 0


def fixed_point_gemm(
    grids: Grids,
    x: np.ndarray,
    w: np.ndarray,
    gemm: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    bias: np.ndarray | None,
    terms: int,
    axis: int,
    w_axis: int | None,
    w_out_axis: int = 0,
    w_codes: bool = False,
    mode: str = HALF_EVEN,
    output: Callable | None = None,
    split: tuple[int, int] | None = None,
    w_stats: tuple | None = None,
    exact: Callable[[np.ndarray, np.ndarray], np.ndarray | None] | None = None,
) -> np.ndarray:
    """What the integer pipeline computes for a quantized conv / linear / matmul,
    as the float32 values ``q * s_out`` of its output codes.

    ``x`` and ``w`` hold values on their grids (``fl32(q * s)``, as fake
    quantization leaves them); their codes are recovered exactly, ``gemm`` (a
    float64 conv / linear / matmul of the caller's) sums the code products exactly
    (each partial sum is an integer below ``2**53``), and ``gemm_requantization``
    + ``gemm_output`` turn the accumulator into output codes, saturated to the
    output width. ``axis`` is the output channel axis, ``w_axis`` the weight's
    scale axis (None for one weight scale), ``w_out_axis`` the weight axis of the
    output channels. ``gemm`` gets float32 codes when every partial sum stays
    below ``2**24`` (exact in float32), float64 codes otherwise. With
    ``w_codes`` the caller passes the weight's codes instead of its values.
    ``split`` (the axes of ``x`` and ``w`` the gemm sums over, where it is
    the sum of the gemms of equal slices along them: a conv without groups, a
    linear) lets a sum past ``2**24`` run as float32 gemms of the fewest slices
    that each stay below it (``float32_chunks``), added in int64, instead of
    one float64 gemm: the same exact sums. ``w_stats``: ``weight_sums(w codes,
    w_out_axis, split's w axis)`` where the caller keeps it (used unless the
    weight codes are shifted).
    ``output(acc, req, acc_bound, qmin, qmax, axis, mode)``, when given, is a
    prepared form of ``gemm_output`` (the runtime's compiled requantization,
    ``requantizer.prepared_gemm_output``) giving the output codes as float32,
    or None where it has none; ``acc_bound`` bounds ``|acc|`` for any input.
    ``exact(qx, qw)``, when given, is a faster exact engine of the caller's for
    the code sums (the codes as float32 in, integer sums out), or None where it
    does not take these operands; ``gemm`` sums what it does not take.
    """
    if terms * (1 << (grids.x_bits - 1)) * (1 << (grids.w_bits - 1)) > 2**53:
        raise ValueError(f"a {terms}-term accumulation may exceed 2**53")
    qx = codes_on_grid(x, grids.x_scale, grids.x_bits)
    w_scales = np.asarray(grids.w_scales, np.float32)
    qw = (
        np.asarray(w, np.float32)
        if w_codes
        else codes_on_grid(w, w_scales, grids.w_bits, w_axis)
    )
    # Operands whose products could overflow the accumulator lose low bits first.
    x_shift, w_shift = gemm_operand_shifts(terms, grids.x_bits, grids.w_bits)
    if x_shift:
        qx = shift_round(qx.astype(np.int64), x_shift, mode).astype(np.float32)
    if w_shift:
        qw = shift_round(qw.astype(np.int64), w_shift, mode).astype(np.float32)
    # float32 sums integers exactly below 2**24: bound every partial sum by
    # max|qx| * sum|qw| over a weight channel's reduction (a superset of it).
    if w_stats is None or w_shift:
        w_stats = weight_sums(qw, w_out_axis, None if split is None else split[1])
    w_sums, per_input = w_stats
    x_max = float(np.max(np.abs(qx), initial=0.0))
    bound = x_max * float(np.max(w_sums, initial=0.0))
    acc = None
    if exact is not None and not (x_shift or w_shift):
        acc = exact(qx, qw)
    if acc is None:
        chunks = 1
        if bound >= 2**24 and per_input is not None:
            chunks = float32_chunks(per_input, x_max) or 1
        if chunks > 1:  # each chunk of the summed channels exact in float32
            xs = np.split(qx, chunks, axis=split[0])
            ws = np.split(qw, chunks, axis=split[1])
            acc = np.rint(gemm(xs[0], ws[0])).astype(np.int64)
            for a, c in zip(xs[1:], ws[1:], strict=True):
                acc += np.rint(gemm(a, c)).astype(np.int64)
        else:
            if bound >= 2**24:
                qx, qw = qx.astype(np.float64), qw.astype(np.float64)
            acc = np.rint(gemm(qx, qw)).astype(np.int64)
    channels = acc.shape[axis]
    req = gemm_requantization(
        grids.x_scale,
        np.resize(w_scales, channels) if w_scales.size > 1 else w_scales,
        grids.out_scale,
        terms=terms,
        x_bits=grids.x_bits,
        w_bits=grids.w_bits,
        bias=bias,
        channels=channels,
        mode=mode,
    )
    qmin, qmax = qrange(grids.out_bits)
    if output is not None:
        acc_bound = int((1 << (grids.x_bits - 1 - x_shift)) * np.max(w_sums, initial=0))
        codes = output(acc, req, acc_bound, qmin, qmax, axis % acc.ndim, mode)
        if codes is not None:  # float32 codes: exact, as dequantize's
            return np.multiply(codes, np.float32(grids.out_scale), dtype=np.float32)
    codes = gemm_output(acc, req, qmin, qmax, axis, mode)
    return dequantize(codes, grids.out_scale, 0)


# ----------------------------------------------------------------- rescale, add, mul

# add / sub accumulate on a power-of-two grid 2**e with |each operand| <= 2**29.
ADD_HEADROOM_BITS = 29
# A float constant factor of a mul becomes codes with |codes| <= 2**14.
CONSTANT_FACTOR_BITS = 14


def clip_codes(lo: float, hi: float, scale, bits: int, mode: str = HALF_EVEN):
    """A relu / clip's float bounds as codes of the output grid (quantized as
    quantization does); an infinite bound is the type's own limit."""
    qmin, qmax = qrange(bits)
    return tuple(
        int(quantize(np.float32(b), scale, 0, qmin, qmax, mode=mode))
        if math.isfinite(b)
        else (qmin if b < 0 else qmax)
        for b in (lo, hi)
    )


def rescale_factor(s_in, s_out) -> np.float64:
    """The factor a rescale of codes from ``s_in`` to ``s_out`` multiplies by:
    exactly 1 between equal scales, else ``s_in * fl32(1/s_out)``."""
    if np.float32(s_in) == np.float32(s_out):
        return np.float64(1.0)
    return np.float64(np.float32(s_in)) * inv_scale(s_out)


def rescale(
    q: np.ndarray,
    s_in,
    s_out,
    bits: int,
    clip: tuple[int, int] | None = None,
    mode: str = HALF_EVEN,
    requant: Callable | None = None,
    acc_bound: int | None = None,
) -> np.ndarray:
    """Codes on ``s_in`` requantized onto ``s_out`` (one rounding), clamped to
    ``clip`` (a relu / clip folded in) or the ``bits``-wide range. ``requant``
    and ``acc_bound`` (a bound on ``|q|``): see ``requantize_by``."""
    m, shift = requantize_multipliers(rescale_factor(s_in, s_out))
    lo, hi = clip if clip is not None else qrange(bits)
    return requantize_by(requant, q, m, shift, lo, hi, mode, acc_bound)


def requantize_by(
    requant: Callable | None,
    acc: np.ndarray,
    multiplier: np.ndarray,
    shift: np.ndarray,
    qmin: int,
    qmax: int,
    mode: str,
    acc_bound: int | None,
) -> np.ndarray:
    """``requantize(acc, multiplier, shift, 0, qmin, qmax, mode=mode)`` (one
    multiplier), by ``requant(acc, multiplier, shift, qmin, qmax, mode,
    acc_bound)`` where the caller gives one and a bound on ``|acc|`` (the
    runtime's compiled requantization, ``requantizer.prepared_requantize``:
    the same numbers, as integer codes), else by ``requantize`` itself."""
    if requant is not None and acc_bound is not None and np.size(multiplier) == 1:
        return requant(acc, multiplier, shift, qmin, qmax, mode, acc_bound)
    return requantize(acc, multiplier, shift, 0, qmin, qmax, mode=mode)


def fixed_point_rescale(
    grids: Grids,
    x: np.ndarray,
    index: int = 0,
    clip: tuple[int, int] | None = None,
    mode: str = HALF_EVEN,
    requant: Callable | None = None,
) -> np.ndarray:
    """Values on the grid of input ``index`` rescaled as the integer pipeline
    does (``rescale``), as float32 values ``q * s_out``: what a max pool, a
    concat input or a data move between two grids computes. ``requant``: the
    requantization's prepared form (``requantize_by``)."""
    s_in, bits = grids.in_scales[index], grids.in_bits[index]
    q = codes_on_grid(x, s_in, bits).astype(_code_dtype(bits, requant))
    out = rescale(
        q, s_in, grids.out_scale, grids.out_bits, clip, mode, requant, 1 << (bits - 1)
    )
    return dequantize(out, grids.out_scale, 0)


def _code_dtype(bits: int, requant: Callable | None) -> type:
    """The dtype codes of ``bits`` are requantized from: int64 for
    ``requantize``, the narrowest that holds them for a prepared form (8- and
    16-bit codes: its table of every code)."""
    if requant is None or bits > 16:
        return np.int64
    return np.int8 if bits <= 8 else np.int16


def fixed_point_clip(
    grids: Grids,
    x: np.ndarray,
    lo: float,
    hi: float,
    mode: str = HALF_EVEN,
    requant: Callable | None = None,
) -> np.ndarray:
    """What the integer pipeline computes for a quantized relu / clip between two
    grids, as float32 values ``q * s_out``: the input codes rescaled onto the
    output grid, clamped to the bounds' output codes (``clip_codes``)."""
    clip = clip_codes(lo, hi, grids.out_scale, grids.out_bits, mode)
    return fixed_point_rescale(grids, x, 0, clip, mode, requant)


def exact_mean_shift(ratio: float, divisor: int, bits: int) -> int | None:
    """``k`` when a mean's rescale ``s_in / s_out`` is ``2**k`` (k >= 0) and its
    count is not a power of two: then ``round(sum * 2**k / n)`` is one integer
    division, exact for every tie, where a multiplier for ``2**k / n`` would be
    truncated (``floor(2**32 / 3)``: 7803.5 rounds down). None otherwise."""
    mantissa, exponent = math.frexp(ratio)
    if mantissa != 0.5 or divisor & (divisor - 1) == 0:
        return None
    shift = exponent - 1
    if shift < 0 or bits + shift + divisor.bit_length() > 31:
        return None
    return shift


def fixed_point_mean(
    grids: Grids,
    x: np.ndarray,
    dims: tuple[int, ...],
    keepdim: bool,
    divisor: int,
    mode: str = HALF_EVEN,
) -> np.ndarray:
    """What the integer pipeline computes for a quantized sum (``divisor`` 1),
    mean or global average pool over ``dims``, as float32 values ``q * s_out``.

    The exact si32 sum of the codes requantized once by ``s_in / n * fl32(1 /
    s_out)``, or, when that factor is ``2**k / n`` with ``n`` not a power of two
    (``exact_mean_shift``), the codes shifted left by ``k`` and one rounding
    division by ``n``.
    """
    s_in, bits = grids.x_scale, grids.x_bits
    q = codes_on_grid(x, s_in, bits).astype(np.int64)
    qmin, qmax = qrange(grids.out_bits)
    s_in64 = np.float64(np.float32(s_in))
    shift = exact_mean_shift(s_in64 * inv_scale(grids.out_scale), divisor, bits)
    if shift is not None:
        fine = saturate(shift_round(q, -shift, mode), 32)
        total = np.sum(fine, axis=dims, dtype=np.int64, keepdims=keepdim)
        acc, real = saturate(divide_round(total, divisor, mode), 32), 1.0
    else:
        total = np.sum(q, axis=dims, dtype=np.int64, keepdims=keepdim)
        acc, real = saturate(total, 32), s_in64 / divisor * inv_scale(grids.out_scale)
    m, shift_ = requantize_multipliers(real)
    out = requantize(acc, m, shift_, 0, qmin, qmax, mode=mode)
    return dequantize(out, grids.out_scale, 0)


# ----------------------------------------------------------------- average pooling

# Fine-grid bits of a windowed average pool, at most: the codes shifted left by F
# stay below 2**30 in magnitude (int8: 2**7 * 2**22 = 2**29), so every window
# average fits si32 and is exact to 2**-F input LSB. Larger windows take fewer
# bits (``avg_pool_fine_bits``) so that the window *sum* fits a 32-bit accumulator.
AVG_POOL_FINE_BITS = {8: 22, 16: 14}
ACC_BITS = 32  # the accumulator of the integer pipeline (and the NPU's)


def avg_pool_fine_bits(bits: int, window: int) -> int | None:
    """The fine-grid bits F of an average pool over ``window`` elements of
    ``bits``-wide codes: the largest F <= ``AVG_POOL_FINE_BITS[bits]`` with every
    window sum ``window * 2**(bits - 1 + F)`` within the 32-bit accumulator
    (``-2**31`` is the extreme: all codes at ``-2**(bits - 1)``). None when even
    F = 0 does not fit (a window of more than ``2**(32 - bits)`` elements)."""
    room = ACC_BITS - 1 - (bits - 1) - math.ceil(math.log2(window))
    if room < 0:
        return None
    return min(AVG_POOL_FINE_BITS[bits], room)


def avg_pool_counts(
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    include_pad: bool,
) -> np.ndarray:
    """The ``(Ho, Wo)`` element count of each window, as torch's ``avg_pool2d``
    counts it: with ``include_pad`` the window may cover the padding but not the
    ceil-mode overhang past it; without, only real input elements count.
    ``padding`` is ``(top, left)`` or ``(top, left, bottom, right)`` (a row
    tile's own: the bottom / right padding bounds the padded input there)."""
    extents = []
    before, after = padding[:2], (padding[2:] or padding[:2])
    for size, out, k, s, p, q in zip(
        in_hw, out_hw, kernel, stride, before, after, strict=True
    ):
        start = np.arange(out, dtype=np.int64) * s - p
        end = np.minimum(start + k, size + q)
        if not include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, size)
        extents.append(end - start)
    return np.outer(*extents)


def avg_pool_sums(
    q: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    out_hw: tuple[int, int],
) -> np.ndarray:
    """Exact int64 window sums of NCHW codes (zero padding; ``out_hw`` fixes the
    ceil-mode overhang, whose missing elements count as zeros); ``padding`` is
    ``(top, left)`` or ``(top, left, bottom, right)``, the sums the same."""
    q = np.asarray(q, np.int64)
    need = [(o - 1) * s + k for o, s, k in zip(out_hw, stride, kernel, strict=True)]
    padded = np.zeros(q.shape[:2] + tuple(need), np.int64)
    h = min(q.shape[2], need[0] - padding[0])
    w = min(q.shape[3], need[1] - padding[1])
    padded[:, :, padding[0] : padding[0] + h, padding[1] : padding[1] + w] = q[
        :, :, :h, :w
    ]
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=(2, 3))
    return windows[:, :, :: stride[0], :: stride[1]].sum(axis=(-2, -1))


def average_pool(
    q: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    include_pad: bool,
    out_hw: tuple[int, int],
) -> np.ndarray:
    """The integer ``hbir.avg_pool2d``: each exact window sum divided once by its
    element count, half to even (int64). ``padding``: ``(top, left)``, or a row
    tile's own ``(top, left, bottom, right)`` (``avg_pool_counts``)."""
    sums = avg_pool_sums(q, kernel, stride, padding, out_hw)
    counts = avg_pool_counts(q.shape[2:], out_hw, kernel, stride, padding, include_pad)
    return divide_round(sums, counts, HALF_EVEN)


def fixed_point_avg_pool(
    grids: Grids,
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    include_pad: bool,
    out_hw: tuple[int, int],
    mode: str = HALF_EVEN,
) -> np.ndarray:
    """What the integer pipeline computes for a quantized windowed average pool,
    as float32 values ``q * s_out``: the codes shifted left by
    ``avg_pool_fine_bits`` (si32; every window sum fits 32 bits),
    ``average_pool``, one requantization by ``s_in * 2**-F * fl32(1 / s_out)``."""
    s_in, bits = grids.x_scale, grids.x_bits
    fine_bits = avg_pool_fine_bits(bits, kernel[0] * kernel[1])
    if fine_bits is None:
        raise ValueError(f"an average pool over {kernel} has no 32-bit fine grid")
    q = codes_on_grid(x, s_in, bits).astype(np.int64)
    fine = requantize(q, [1], [-fine_bits], 0, *qrange(32), mode=mode)
    acc = saturate(average_pool(fine, kernel, stride, padding, include_pad, out_hw), 32)
    real = np.float64(np.float32(s_in)) * 2.0**-fine_bits * inv_scale(grids.out_scale)
    m, shift = requantize_multipliers(real)
    out = requantize(acc, m, shift, 0, *qrange(grids.out_bits), mode=mode)
    return dequantize(out, grids.out_scale, 0)


def exact_exponent(scales) -> int:
    """The largest e with every scale an integer multiple of 2**e."""
    exponents = []
    for s in np.asarray(scales, np.float64).reshape(-1):
        num, den = float(s).as_integer_ratio()
        exponents.append((num & -num).bit_length() - 1 - (den.bit_length() - 1))
    return min(exponents)


def add_grid_exponent(scales, magnitude_bits, constant_absmax: float = 0.0) -> int:
    """The power-of-two grid ``2**e`` an add / sub accumulates on.

    ``scales`` (one array per coded operand) and ``magnitude_bits`` (a bound
    ``|codes| <= 2**b`` per coded operand): the coarsest grid on which every scale
    is an integer multiple (the rescale is exact), or, when that grid would
    overflow, the finest with ``ADD_HEADROOM_BITS`` of room for the sum.
    """
    exact = min(exact_exponent(s) for s in scales)
    extent = sum(
        2.0**b * float(np.max(np.asarray(s, np.float64)))
        for s, b in zip(scales, magnitude_bits, strict=True)
    )
    extent += constant_absmax
    return max(exact, math.ceil(math.log2(extent)) - ADD_HEADROOM_BITS)


def on_add_grid(
    q, scale, e: int, mode: str = HALF_EVEN, axis=None, requant=None, acc_bound=None
) -> np.ndarray:
    """Codes on ``scale`` as si32 values on the grid ``2**e`` (``requant`` and
    ``acc_bound``, a bound on ``|q|``: ``requantize_by``)."""
    real = np.asarray(scale, np.float64).reshape(-1) * 2.0**-e
    if np.all(real == 1.0):
        return np.asarray(q, np.int64)
    m, shift = requantize_multipliers(real)
    lo, hi = qrange(32)
    if m.size == 1:
        return np.asarray(
            requantize_by(requant, q, m, shift, lo, hi, mode, acc_bound), np.int64
        )
    return requantize(q, m, shift, 0, lo, hi, axis, mode)


def constant_on_add_grid(values, e: int, mode: str = HALF_EVEN) -> np.ndarray:
    """A float constant operand of an add / sub on the grid ``2**e`` (si32)."""
    codes = round_float(np.asarray(values, np.float64) * 2.0**-e, mode)
    return np.clip(codes, *qrange(32)).astype(np.int64)


def constant_factor(values) -> tuple[np.ndarray, np.float32] | None:
    """A float constant factor of a mul as (si16 codes, scale); None if all zero.

    ``scale = fl32(max|c| / 2**CONSTANT_FACTOR_BITS)``, codes rounded half to even
    (a scalar is exact).
    """
    values = np.asarray(values, np.float64)
    absmax = float(np.max(np.abs(values), initial=0.0))
    if absmax == 0.0:
        return None
    scale = np.float32(absmax / 2**CONSTANT_FACTOR_BITS)
    codes = np.rint(values / np.float64(scale)).astype(np.int64)
    bound = 2**CONSTANT_FACTOR_BITS
    return np.clip(codes, -bound, bound), scale


# the binary ops computed on the add grid
_ADD_GRID_KINDS = {
    "add": np.add,
    "sub": np.subtract,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
# every kind fixed_point_binary computes
FIXED_POINT_BINARY_KINDS = ("mul", *_ADD_GRID_KINDS)


def fixed_point_binary(
    kind: str,
    grids: Grids,
    a: np.ndarray,
    b: np.ndarray,
    mode: str = HALF_EVEN,
    requant: Callable | None = None,
) -> np.ndarray:
    """What the integer pipeline computes for a quantized ``add`` / ``sub`` /
    ``mul`` / ``maximum`` / ``minimum`` of per-tensor operands, as the float32
    values ``q * s_out``.

    An operand with grid scale 0 is a float constant (float32 values). add / sub:
    each operand on the grid of ``add_grid_exponent`` (constants rounded onto
    it), the si32 sum, one requantization by ``2**e * fl32(1/s_out)``. mul: the
    si32 product of the codes (a constant as ``constant_factor`` codes), one
    requantization by ``s_a * s_b * fl32(1/s_out)``. maximum / minimum: as add,
    the larger / smaller of the two terms instead of their sum. ``requant``:
    the requantizations' prepared form (``requantize_by``).
    """
    operands = []
    for v, s, bits in zip((a, b), grids.in_scales, grids.in_bits, strict=True):
        v = np.asarray(v)
        if s == 0.0:
            operands.append((None, None, v.astype(np.float32).astype(np.float64)))
        else:  # (a mul's product of codes: int64)
            dtype = np.int64 if kind == "mul" else _code_dtype(bits, requant)
            operands.append((codes_on_grid(v, s, bits).astype(dtype), s, bits))
    qmin, qmax = qrange(grids.out_bits)
    if kind == "mul":
        codes, scales = [], []
        for q, s, v in operands:
            if q is None:
                q, s = constant_factor(v)
            codes.append(q)
            scales.append(np.float64(np.float32(s)))
        product = saturate(codes[0] * codes[1], 32)
        real = scales[0] * scales[1] * inv_scale(grids.out_scale)
        m, shift = requantize_multipliers(real)
        out = requantize_by(requant, product, m, shift, qmin, qmax, mode, 1 << 31)
        return dequantize(out, grids.out_scale, 0)
    coded = [(q, s, bits) for q, s, bits in operands if q is not None]
    constants = [v for q, _, v in operands if q is None]
    absmax = sum(float(np.max(np.abs(c), initial=0.0)) for c in constants)
    scales, widths = [s for _, s, _ in coded], [b - 1 for _, _, b in coded]
    e = add_grid_exponent(scales, widths, absmax)
    terms = [
        constant_on_add_grid(v, e, mode)
        if q is None
        else on_add_grid(q, s, e, mode, requant=requant, acc_bound=1 << (v - 1))
        for q, s, v in operands
    ]  # (v: a coded operand's bits)
    total = _ADD_GRID_KINDS[kind](terms[0], terms[1])
    m, shift = requantize_multipliers(2.0**e * inv_scale(grids.out_scale))
    total = saturate(total, 32)
    out = requantize_by(requant, total, m, shift, qmin, qmax, mode, 1 << 31)
    return dequantize(out, grids.out_scale, 0)


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
    return _round_up(floor, 2 * (num - floor * den), den, mode)


def _round_up(floor, twice_rem, den, mode: str):
    """``floor + 1`` where the dropped fraction ``twice_rem / (2 den)`` rounds up.

    The one tie rule of shift_round and divide_round: above a half always, at
    exactly a half to the even neighbour (half_even) or upward (half_up).
    """
    if mode == HALF_EVEN:
        up = (twice_rem > den) | ((twice_rem == den) & ((floor & 1) == 1))
    elif mode == HALF_UP:
        up = twice_rem >= den
    else:
        raise ValueError(f"unknown rounding mode {mode!r}")
    return floor + up


# ----------------------------------------------------------------- weighted resize

# Interpolation weights are integers in units of 2**-BILINEAR_BITS: each output is
# sum(wy * wx * q) in units of 2**-(2 * BILINEAR_BITS), exact in int32 for int16
# codes (bicubic's weights sum to at most 176 in absolute value per dim, so
# 176**2 * 2**15 < 2**31), and exact in float64 for values q * s with a float32
# scale s (the sum is an integer below 2**30 times s * 2**-14: 53 bits), so the QAT
# forward, the interpreter and the integer pipeline compute the same number.
BILINEAR_BITS = 7
RESIZE_WEIGHTED_MODES = ("bilinear", "bicubic")
CUBIC_A = -0.75  # torch's (and OpenCV's) cubic convolution coefficient


def _source_coordinate(
    in_size: int, out_size: int, align_corners: bool, scale: float | None
) -> np.ndarray:
    """torch's source coordinate of each output index (``area_pixel_compute_source
    _index``, unclamped): ``(dst + 0.5) * s - 0.5`` with ``s = 1 / scale`` when a
    scale factor is given and ``in / out`` otherwise, or ``dst * (in - 1) /
    (out - 1)`` with ``align_corners``."""
    dst = np.arange(out_size, dtype=np.float64)
    if align_corners:
        return dst * ((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0)
    ratio = 1.0 / scale if scale is not None else in_size / out_size
    return (dst + 0.5) * ratio - 0.5


def bilinear_taps(
    in_size: int, out_size: int, align_corners: bool, scale: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(source indices ``[out, 2]``, weights ``[out, 2]`` in 2**-BILINEAR_BITS).

    The source coordinate is torch's (``F.interpolate(mode="bilinear")``, clamped
    at 0); the fraction is rounded half to even to the weight grid, the low
    neighbour takes the rest, so each row sums to one exactly.
    """
    src = np.maximum(_source_coordinate(in_size, out_size, align_corners, scale), 0)
    low = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    high = np.minimum(low + 1, in_size - 1)
    one = 1 << BILINEAR_BITS
    weight = round_float((src - low) * one).astype(np.int64).clip(0, one)
    return np.stack([low, high], 1), np.stack([one - weight, weight], 1)


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """torch's cubic convolution weights ``[len(t), 4]`` of the neighbours at
    offsets -1, 0, 1, 2 from the floor of the source coordinate (``t`` its
    fraction), with ``CUBIC_A``."""
    a = CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], 1)


def bicubic_taps(
    in_size: int, out_size: int, align_corners: bool, scale: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(source indices ``[out, 4]``, weights ``[out, 4]`` in 2**-BILINEAR_BITS).

    torch's ``F.interpolate(mode="bicubic")``: the unclamped source coordinate,
    the four neighbours from one below its floor, each index clamped to the
    input (the border repeats); each weight rounded half to even to the weight
    grid, and the nearer of the two middle neighbours takes what rounding left,
    so each row sums to one exactly.
    """
    src = _source_coordinate(in_size, out_size, align_corners, scale)
    floor = np.floor(src)
    t = src - floor
    index = (floor.astype(np.int64)[:, None] + np.arange(-1, 3)).clip(0, in_size - 1)
    one = 1 << BILINEAR_BITS
    weight = round_float(_cubic_weights(t) * one).astype(np.int64)
    nearer = np.where(t <= 0.5, 1, 2)
    weight[np.arange(out_size), nearer] += one - weight.sum(1)
    return index, weight


def resize_taps(
    mode: str,
    in_size: int,
    out_size: int,
    align_corners: bool,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The NPU's taps of a weighted resize along one dim (``mode`` one of
    ``RESIZE_WEIGHTED_MODES``)."""
    if mode == "bilinear":
        return bilinear_taps(in_size, out_size, align_corners, scale)
    if mode == "bicubic":
        return bicubic_taps(in_size, out_size, align_corners, scale)
    raise ValueError(f"no NPU weights for resize mode {mode!r}")


def resize_weighted(x: np.ndarray, taps_h: tuple, taps_w: tuple) -> np.ndarray:
    """``sum(wy * wx * x)`` over the neighbours, weights in 2**-BILINEAR_BITS:
    int64 codes give the exact sum in units of 2**-(2 * BILINEAR_BITS); float64
    values give the interpolated value itself."""
    one = 1 << BILINEAR_BITS

    def along(v: np.ndarray, taps: tuple, axis: int) -> np.ndarray:
        index, weight = taps
        shape = [1] * v.ndim
        shape[axis] = -1
        total = 0
        for k in range(index.shape[1]):
            total = total + np.take(v, index[:, k], axis=axis) * weight[:, k].reshape(
                shape
            )
        if np.issubdtype(v.dtype, np.integer):
            return total
        return total / one  # exact: a power of two

    return along(along(x, taps_h, x.ndim - 2), taps_w, x.ndim - 1)


def fixed_point_resize(
    grids: Grids, x: np.ndarray, taps_h: tuple, taps_w: tuple, mode: str = HALF_EVEN
) -> np.ndarray:
    """What the integer pipeline computes for a quantized bilinear or bicubic
    resize with the NPU's weights, as float32 values ``q * s_out``: the exact
    weighted sum of the codes (``resize_weighted``, units of
    ``2**-(2 * BILINEAR_BITS)``: within 32 bits for 16-bit codes), one
    requantization by
    ``s_in * 2**-(2 * BILINEAR_BITS) * fl32(1 / s_out)``."""
    s_in, bits = grids.x_scale, grids.x_bits
    q = codes_on_grid(x, s_in, bits).astype(np.int64)
    acc = saturate(resize_weighted(q, taps_h, taps_w), 32)
    real = np.float64(np.float32(s_in)) * 2.0 ** (-2 * BILINEAR_BITS)
    m, shift = requantize_multipliers(real * inv_scale(grids.out_scale))
    out = requantize(acc, m, shift, 0, *qrange(grids.out_bits), mode=mode)
    return dequantize(out, grids.out_scale, 0)


# ----------------------------------------------------------------- roi resize
#
# The camera input's resizer (``hbir.roi_resize``): a region of a frame, resized
# to the model's input size. The roi is ``(left, top, right, bottom)`` in pixels of
# the frame, right and bottom inclusive (the reference runtime's ``hbDNNRoi``), so
# the region is ``right - left + 1`` wide; each coordinate lies in
# ``[-ROI_LIMIT, ROI_LIMIT)`` (the reference's 8192-pixel frames) and the region
# may leave the frame: a pixel outside it is the pad value (``constant``) or the
# nearest edge pixel (``border``). The region of ``h x w`` pixels is resized to
# ``H x W`` with the NPU's taps (``resize_taps``: bilinear at torch's
# ``align_corners=False`` coordinates, weights on the 2**-BILINEAR_BITS grid) and
# the exact weighted sum (``resize_weighted``) rounded half to even from
# 2**-(2 * BILINEAR_BITS); ``nearest`` takes pixel ``floor(dst * h / H)`` (exact in
# integers), so the result is a pixel of the region. Values stay bytes: weights
# sum to one and the rounding keeps [0, 255].
ROI_LIMIT = 8192
ROI_INTERPOLATIONS = ("bilinear", "nearest")
ROI_EXPANSIONS = ("constant", "border")


class RoiError(HbirError, ValueError):
    """A roi the resizer cannot take (the engines report it with their location)."""


def check_roi(roi: np.ndarray, batch: int) -> np.ndarray:
    """``roi`` as int64 ``[batch, 4]`` rows ``(left, top, right, bottom)``, or a
    ``RoiError`` naming the first bad row."""
    roi = np.asarray(roi)
    if roi.shape != (batch, 4) or not np.issubdtype(roi.dtype, np.integer):
        raise RoiError(
            f"roi must be {batch} x 4 integers (left, top, right, bottom), got "
            f"{roi.dtype} {list(roi.shape)}"
        )
    roi = roi.astype(np.int64)
    left, top, right, bottom = roi.T
    bad = (
        (roi < -ROI_LIMIT).any(1)
        | (roi >= ROI_LIMIT).any(1)
        | (right < left)
        | (bottom < top)
    )
    if bad.any():
        i = int(np.argmax(bad))
        raise RoiError(
            f"roi {roi[i].tolist()} of image {i} is not a region: it needs left <= "
            f"right, top <= bottom (both inclusive) and every coordinate in "
            f"[{-ROI_LIMIT}, {ROI_LIMIT})"
        )
    return roi


def pad_byte(value: int) -> int:
    """A pad value in [-128, 255] as the byte it fills: -128 is 128 (the
    reference's default ``(0, -128)`` pads black with neutral chroma)."""
    if not -128 <= value <= 255:
        raise ValueError(f"pad value {value} is not a byte (in [-128, 255])")
    return value & 0xFF


def _roi_taps(mode: str, size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    if mode == "nearest":
        index = np.arange(out, dtype=np.int64) * size // out
        return index[:, None], np.full((out, 1), 1 << BILINEAR_BITS, np.int64)
    return resize_taps(mode, size, out, False)


def roi_resize(
    sample: Callable[[int, np.ndarray, np.ndarray], np.ndarray],
    frame: tuple[int, int, int],
    roi: np.ndarray,
    size: tuple[int, int],
    interpolation: str,
    expansion: str,
    pad: tuple[int, ...],
) -> np.ndarray:
    """``[N, H, W, C]`` int64 bytes: each image's roi resized to ``size``.

    ``sample(n, rows, cols)`` gives image ``n``'s pixels ``[len(rows),
    len(cols), C]`` at rows and columns inside the ``frame`` (images, height,
    width); only the pixels the taps read are sampled. ``pad``: one byte per
    channel."""
    if interpolation not in ROI_INTERPOLATIONS or expansion not in ROI_EXPANSIONS:
        raise ValueError(f"roi resize: {interpolation!r} / {expansion!r}")
    batch, fh, fw = frame
    roi = check_roi(roi, batch)
    out = []
    for n, (left, top, right, bottom) in enumerate(roi.tolist()):
        taps_h = _roi_taps(interpolation, bottom - top + 1, size[0])
        taps_w = _roi_taps(interpolation, right - left + 1, size[1])
        # the rows and columns the taps read, and the taps re-indexed into them
        rows, th = np.unique(taps_h[0] + top, return_inverse=True)
        cols, tw = np.unique(taps_w[0] + left, return_inverse=True)
        inside_r = (rows >= 0) & (rows < fh)
        inside_c = (cols >= 0) & (cols < fw)
        block = sample(n, rows.clip(0, fh - 1), cols.clip(0, fw - 1))
        block = np.asarray(block, np.int64)
        if expansion == "constant":
            outside = ~(inside_r[:, None] & inside_c[None, :])
            block = np.where(outside[..., None], np.asarray(pad, np.int64), block)
        chw = np.moveaxis(block, -1, 0)
        acc = resize_weighted(
            chw,
            (th.reshape(taps_h[0].shape), taps_h[1]),
            (tw.reshape(taps_w[0].shape), taps_w[1]),
        )
        out.append(np.moveaxis(shift_round(acc, 2 * BILINEAR_BITS), 0, -1))
    return np.stack(out)


# ----------------------------------------------------------------- grid sample
#
# ``F.grid_sample`` with the NPU's bilinear weights: each output point's source
# coordinate is torch's unnormalisation of the grid value g (``((g + 1) * size -
# 1) / 2``, or ``(g + 1) / 2 * (size - 1)`` with ``align_corners``; clamped into
# the image with ``border`` padding), computed in float64 from the exact value
# ``g = q * s`` (16-bit codes, a float32 scale: every step is exact), its fraction
# rounded half to even to 2**-BILINEAR_BITS. The four neighbours' weights are
# products of those, so the sum is exact as for the resize; a neighbour outside
# the image counts 0 (``zeros`` padding). ``nearest`` takes the neighbour at the
# coordinate rounded half to even (torch's ``nearbyint``) with the full weight.
GRID_SAMPLE_MODES = ("bilinear", "nearest")
GRID_SAMPLE_PADDINGS = ("zeros", "border")


def grid_taps(
    g: np.ndarray, size: int, align_corners: bool, padding: str, mode: str
) -> tuple[np.ndarray, np.ndarray]:
    """(low index, high weight in 2**-BILINEAR_BITS) of the source coordinate of
    each normalised grid value ``g`` (float64, exact) along a dim of ``size``."""
    g = np.asarray(g, np.float64)
    if align_corners:
        src = (g + 1.0) / 2.0 * (size - 1)
    else:
        src = ((g + 1.0) * size - 1.0) / 2.0
    if padding == "border":
        src = np.clip(src, 0.0, size - 1)
    one = 1 << BILINEAR_BITS
    if mode == "nearest":
        return round_float(src).astype(np.int64), np.zeros(src.shape, np.int64)
    low = np.floor(src)
    weight = round_float((src - low) * one).astype(np.int64)
    return low.astype(np.int64), weight


def grid_sample_sum(
    x: np.ndarray,
    grid: np.ndarray,
    align_corners: bool,
    padding: str = "zeros",
    mode: str = "bilinear",
) -> np.ndarray:
    """``sum(wy * wx * x)`` over each output point's four neighbours (``x``:
    N, C, H, W; ``grid``: N, Ho, Wo, 2 normalised (x, y) values, exact float64):
    int64 codes give the exact sum in units of 2**-(2 * BILINEAR_BITS), float64
    values the sampled value itself. Result N, C, Ho, Wo."""
    n, c, h, w = x.shape
    one = 1 << BILINEAR_BITS
    x0, wx = grid_taps(grid[..., 0], w, align_corners, padding, mode)
    y0, wy = grid_taps(grid[..., 1], h, align_corners, padding, mode)
    batch = np.arange(n).reshape(n, 1, 1)
    integer = np.issubdtype(x.dtype, np.integer)
    total = np.zeros((n, *grid.shape[1:3], c), np.int64 if integer else np.float64)
    for dy, fy in ((0, one - wy), (1, wy)):
        for dx, fx in ((0, one - wx), (1, wx)):
            yy, xx = y0 + dy, x0 + dx
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            weight = np.where(inside, fy * fx, 0)
            picked = x[batch, :, yy.clip(0, h - 1), xx.clip(0, w - 1)]  # N,Ho,Wo,C
            total += weight[..., None] * picked
    total = np.moveaxis(total, -1, 1)
    return total if integer else total / (one * one)  # exact: a power of two


def fixed_point_grid_sample(
    grids: Grids,
    x: np.ndarray,
    grid: np.ndarray,
    align_corners: bool,
    padding: str,
    mode: str,
    rounding: str = HALF_EVEN,
) -> np.ndarray:
    """What the integer pipeline computes for a quantized grid sample, as float32
    values ``q * s_out``: the grid's codes to exact coordinates, the exact
    weighted sum of the input's codes (``grid_sample_sum``), one requantization
    by ``s_in * 2**-(2 * BILINEAR_BITS) * fl32(1 / s_out)``."""
    s_in, s_grid = grids.in_scales[0], grids.in_scales[1]
    q = codes_on_grid(x, s_in, grids.in_bits[0]).astype(np.int64)
    g = codes_on_grid(grid, s_grid, grids.in_bits[1]).astype(np.float64)
    g = g * np.float64(np.float32(s_grid))
    acc = saturate(grid_sample_sum(q, g, align_corners, padding, mode), 32)
    real = np.float64(np.float32(s_in)) * 2.0 ** (-2 * BILINEAR_BITS)
    m, shift = requantize_multipliers(real * inv_scale(grids.out_scale))
    out = requantize(acc, m, shift, 0, *qrange(grids.out_bits), mode=rounding)
    return dequantize(out, grids.out_scale, 0)


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


# ----------------------------------------------------------------- lookup tables
#
# Nonlinear ops run as tables over integer codes. Design and measured error:
# docs/lut-numerics.md. build_lut picks one of four kinds of table:
#
# * "direct"   (int8 input): 256 entries, ``table[q]`` is the correctly rounded code.
# * "segments" (int16 input): ``num_tables`` uniform segments over the 65536 input
#   codes, each a line ``offset + slope * (q - start)``, then one rounding shift.
# * "periodic" (int16 sin/cos): one multiply turns the code into a phase in turns
#   (fixed point, wrapping modulo one turn), then uniform segments over one turn.
# * "exponent" (int16 rsqrt/sqrt/reciprocal/log): the positive code splits into a
#   mantissa and a power of two (count leading zeros), segments over the mantissa,
#   then the power of two becomes a shift (for log: an added multiple of ln 2).
#
# Domain conventions, shared by every kind and by lut_reference_codes: log and rsqrt
# of x <= 0 are evaluated at the smallest positive input code (q = 1); sqrt of x < 0
# is 0; reciprocal of 0 is evaluated at q = 1 and of x < 0 keeps the sign (1/x is odd).


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))  # no overflow at either end


def _relu6_over_6(x: np.ndarray) -> np.ndarray:
    return np.clip(x + 3.0, 0.0, 6.0) / 6.0


_GELU_TANH_K = math.sqrt(2.0 / math.pi)
# torch's SELU constants
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946

# float64 reference functions; the domain conventions above are applied by the
# callers (they need the input scale). Keys are append-only: LutTable.to_arrays
# stores an op as its index here.
LUT_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "sqrt": lambda x: np.sqrt(np.maximum(x, 0.0)),
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "sin": np.sin,
    "cos": np.cos,
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: (
        0.5 * x * (1.0 + np.tanh(_GELU_TANH_K * (x + 0.044715 * x**3)))
    ),
    "silu": lambda x: x * _sigmoid(x),
    "hardsigmoid": _relu6_over_6,
    "hardswish": lambda x: x * _relu6_over_6(x),
    # with a parameter (LUT_PARAMETERS), their second argument; the default is
    # torch's
    "leaky_relu": lambda x, slope=0.01: np.where(x >= 0, x, slope * x),
    "elu": lambda x, alpha=1.0: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))),
    "celu": lambda x, alpha=1.0: np.where(
        x > 0, x, alpha * np.expm1(np.minimum(x, 0) / alpha)
    ),
    "softplus": lambda x, beta=1.0: np.logaddexp(0.0, beta * x) / beta,
    "selu": lambda x: (
        _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(np.minimum(x, 0)))
    ),
    "mish": lambda x: x * np.tanh(np.logaddexp(0.0, x)),
    "erf": _erf,
    "logsigmoid": lambda x: -np.logaddexp(0.0, -x),
    "softsign": lambda x: x / (1.0 + np.abs(x)),
    "tanhshrink": lambda x: x - np.tanh(x),
}

# The tables with a parameter: op -> (torch's name of it, its default). A table
# with a parameter is named ``op:value`` (``leaky_relu:0.1``, the value as Python's
# ``repr`` of a float), without one by the op; ``table_key`` makes the name.
LUT_PARAMETERS: dict[str, tuple[str, float]] = {
    "leaky_relu": ("negative_slope", 0.01),
    "elu": ("alpha", 1.0),
    "celu": ("alpha", 1.0),
    "softplus": ("beta", 1.0),
}


def table_key(op: str, parameter: float | None = None) -> str:
    """The name of ``op``'s table with ``parameter`` (None or the default: ``op``)."""
    if parameter is None or op not in LUT_PARAMETERS:
        return op
    parameter = float(parameter)
    if parameter == LUT_PARAMETERS[op][1]:
        return op
    return f"{op}:{parameter!r}"


def split_table_key(name: str) -> tuple[str, float | None]:
    """``(op, parameter)`` of a table name; ValueError if it names no table."""
    op, _, text = name.partition(":")
    if op not in LUT_FUNCTIONS:
        raise ValueError(f"unknown LUT op {op!r}; expected one of {', '.join(LUT_OPS)}")
    if not text:
        return op, None
    if op not in LUT_PARAMETERS:
        raise ValueError(f"LUT op {op!r} takes no parameter, got {name!r}")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"LUT table {name!r}: parameter is not a number") from None
    if not math.isfinite(value) or (op != "leaky_relu" and value <= 0):
        raise ValueError(f"LUT table {name!r}: parameter out of range")
    return op, value


def lut_function(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The float64 function of a table name (``sigmoid``, ``leaky_relu:0.1``)."""
    op, parameter = split_table_key(name)
    f = LUT_FUNCTIONS[op]
    if parameter is None:
        return f
    return lambda x: f(x, parameter)  # the parameter is every such function's second


# Segments per table for int16 inputs (int8 inputs always use the exact 256-entry
# table): the smallest multiple of 6 that meets the targets at typical scales, and
# keeps meeting them for the next ten multiples. Targets: int8 outputs within 1 LSB
# of the correctly rounded function (hardsigmoid/hardswish: for every input range
# from +-3 to +-16, since their kinks fall anywhere in a segment); int16 outputs of
# smooth ops within 2 LSB. Tuned by benchmarks/lut_error_table.py --tune; the
# measured errors are in docs/lut-numerics.md.
DEFAULT_NUM_TABLES: dict[str, int] = {
    "sigmoid": 162,
    "tanh": 450,
    "exp": 504,
    "log": 12,
    "sqrt": 30,
    "rsqrt": 48,
    "reciprocal": 48,
    "sin": 204,
    "cos": 204,
    "gelu": 162,
    "gelu_tanh": 162,
    "silu": 132,
    "hardsigmoid": 66,
    "hardswish": 18,
    "leaky_relu": 6,
    "elu": 180,
    "celu": 180,
    "softplus": 96,
    "selu": 228,
    "mish": 144,
    "erf": 504,
    "logsigmoid": 96,
    "softsign": 750,
    "tanhshrink": 168,
}

# The calibrated input intervals (lo, hi) the DEFAULT_NUM_TABLES targets are stated
# for; lo == 0 means (0, hi]. The tuning benchmark and the tests both read this.
LUT_TYPICAL_RANGES: dict[str, list[tuple[float, float]]] = {
    "sigmoid": [(-8, 8)],
    "tanh": [(-8, 8)],
    "exp": [(-8, 0), (-8, 8)],
    "log": [(0, 16), (0, 1000)],
    "sqrt": [(0, 16), (0, 1000)],
    "rsqrt": [(0, 16), (0, 1000)],
    "reciprocal": [(0, 16), (0, 1000)],
    "sin": [(-4, 4), (-300, 300)],
    "cos": [(-4, 4), (-300, 300)],
    "gelu": [(-8, 8)],
    "gelu_tanh": [(-8, 8)],
    "silu": [(-8, 8)],
    "hardsigmoid": [(-8, 8), (-10, 10)],
    "hardswish": [(-8, 8), (-10, 10)],
    "leaky_relu": [(-8, 8)],
    "elu": [(-8, 8)],
    "celu": [(-8, 8)],
    "softplus": [(-8, 8)],
    "selu": [(-8, 8)],
    "mish": [(-8, 8)],
    "erf": [(-4, 4), (-8, 8)],
    "logsigmoid": [(-8, 8)],
    "softsign": [(-8, 8)],
    "tanhshrink": [(-8, 8)],
}

LUT_OPS = tuple(LUT_FUNCTIONS)
LUT_KINDS = ("direct", "segments", "periodic", "exponent")
_PERIODIC_OPS = ("sin", "cos")
# op -> (mantissa octaves, direction of the power-of-two shift: +1 divides by it,
# -1 multiplies, 0 adds k * ln 2 instead); see _apply_exponent.
_EXPONENT_OPS = {"rsqrt": (2, 1), "sqrt": (2, -1), "reciprocal": (1, 1), "log": (1, 0)}
_MANTISSA_BITS = 15  # the mantissa of v <= 2**15 is exact in Q15
_PHASE_BITS = 24  # phase word: turns in Q24 (the output needs more than 16 bits)
_PHASE_EXTRA_BITS = 20  # extra bits of the turns-per-code constant (>= log2 |q|max)
_MAX_FRAC_BITS = 32
_MAX_NUM_TABLES = 32766  # every segment keeps at least one code or mantissa
_INT64_HEADROOM = 1 << 62
_INV_TWO_PI = Fraction("0.159154943091895335768883763372514362034459645740456448747667")


MAX_NUM_TABLES = 1 << 16  # a table per 16-bit input code: more cannot help


def check_num_tables(num_tables: int) -> int:
    """Validate a LUT ``num_tables`` (a positive multiple of 6, at most
    ``MAX_NUM_TABLES``) and return it.

    Multiples of 6 keep the reference toolchain's convention for ``num_tables``;
    ``build_lut`` documents what one table (segment) is for each kind.
    """
    if (
        isinstance(num_tables, bool)
        or not isinstance(num_tables, int | np.integer)
        or num_tables <= 0
        or num_tables % 6
        or num_tables > MAX_NUM_TABLES
    ):
        raise ValueError(
            f"num_tables must be a positive multiple of 6 up to {MAX_NUM_TABLES} "
            f"(a table per 16-bit input code), got {num_tables!r}"
        )
    return int(num_tables)


@dataclass(frozen=True)
class LutConfig:
    """Which table a quantized nonlinear op between two fake quantizations uses.

    Input and output are per-tensor symmetric grids (``scale``, ``bits``), so the
    table is a function of the input codes only; ``build_lut`` builds it.
    """

    num_tables: int
    in_scale: float
    in_bits: int
    out_scale: float
    out_bits: int

    # The fields as they are stored on a LUT-ready op of the IR, in this order.
    FIELDS: ClassVar[tuple[str, ...]] = (
        "num_tables",
        "in_scale",
        "in_bits",
        "out_scale",
        "out_bits",
    )

    def __post_init__(self) -> None:
        check_num_tables(self.num_tables)
        for name in ("in_bits", "out_bits"):
            if getattr(self, name) not in (8, 16):
                raise ValueError(f"{name} must be 8 or 16, got {getattr(self, name)}")
        for name in ("in_scale", "out_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def _lut_kind(op: str, in_bits: int) -> str:
    if in_bits == 8:
        return "direct"
    if op in _PERIODIC_OPS:
        return "periodic"
    return "exponent" if op in _EXPONENT_OPS else "segments"


def _f32_bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


def _frozen_int64(values) -> np.ndarray:
    array = np.array(values, np.int64).reshape(-1)
    array.setflags(write=False)
    return array


def _empty() -> np.ndarray:
    return _frozen_int64([])


@dataclass(frozen=True, eq=False)
class LutTable:
    """A lookup table: everything ``apply_lut`` needs, as integers.

    ``kind`` is "direct" (int8 input), "segments", "periodic" (sin/cos) or "exponent"
    (rsqrt/sqrt/reciprocal/log); ``build_lut`` describes each. Arrays are read-only
    int64:

    * ``entries`` (direct): 256 output codes indexed by ``q + 128``.
    * ``starts``: the first input code (segments), phase (periodic) or Q15 mantissa
      (exponent) of each of the ``num_tables`` segments.
    * ``offsets``, ``slopes``: segment ``i`` computes
      ``offsets[i] + slopes[i] * (t - starts[i])`` in output codes times
      ``2**frac_bits``, before the one rounding shift.
    * ``phase_mult``, ``phase_shift``, ``phase_bits`` (periodic): the phase in turns
      is ``((q * phase_mult + 2**(phase_shift-1)) >> phase_shift) mod 2**phase_bits``.
    * ``octave_step`` (log): ``ln 2 / out_scale`` times ``2**frac_bits``.

    The constructor checks shapes and ranges and that no int64 intermediate of
    ``apply_lut`` can overflow, so a table read back by ``from_arrays`` is safe.
    """

    op: str
    kind: str
    in_scale: float
    out_scale: float
    in_bits: int
    out_bits: int
    num_tables: int
    rounding: str = HALF_EVEN
    frac_bits: int = 0
    entries: np.ndarray = field(default_factory=_empty)
    starts: np.ndarray = field(default_factory=_empty)
    offsets: np.ndarray = field(default_factory=_empty)
    slopes: np.ndarray = field(default_factory=_empty)
    phase_mult: int = 0
    phase_shift: int = 0
    phase_bits: int = 0
    octave_step: int = 0

    def __post_init__(self) -> None:
        for name in ("entries", "starts", "offsets", "slopes"):
            object.__setattr__(self, name, _frozen_int64(getattr(self, name)))
        for name in ("in_scale", "out_scale"):
            object.__setattr__(self, name, float(np.float32(getattr(self, name))))
        if self.op not in LUT_FUNCTIONS:
            raise ValueError(f"unknown LUT op {self.op!r}")
        if self.in_bits not in (8, 16) or self.out_bits not in (8, 16):
            raise ValueError(
                f"LUT bits must be 8 or 16, got in {self.in_bits}, out {self.out_bits}"
            )
        expected = _lut_kind(self.op, self.in_bits)
        if self.kind != expected:
            raise ValueError(
                f"{self.op} with {self.in_bits}-bit input is a "
                f"{expected!r} table, not {self.kind!r}"
            )
        if self.rounding not in ROUNDING_MODES:
            raise ValueError(f"unknown rounding mode {self.rounding!r}")
        check_num_tables(self.num_tables)
        segmented = (self.starts.size, self.offsets.size, self.slopes.size)
        if self.kind == "direct":
            lo, hi = qrange(self.out_bits)
            if self.entries.shape != (256,) or np.any(
                (self.entries < lo) | (self.entries > hi)
            ):
                raise ValueError(f"a direct table has 256 entries in [{lo}, {hi}]")
            if any(segmented):
                raise ValueError("a direct table has no segments")
            return
        if self.entries.size:
            raise ValueError(f"a {self.kind} table has no entries")
        self._check_segments()

    def _check_segments(self) -> None:
        n = self.num_tables
        if n > _MAX_NUM_TABLES:
            raise ValueError(f"num_tables must be at most {_MAX_NUM_TABLES}, got {n}")
        if not (self.starts.shape == self.offsets.shape == self.slopes.shape == (n,)):
            raise ValueError(f"starts, offsets and slopes need {n} values each")
        if not 0 <= self.frac_bits <= _MAX_FRAC_BITS:
            raise ValueError(f"frac_bits must be in [0, {_MAX_FRAC_BITS}]")
        if self.kind == "periodic" and not (
            1 <= self.phase_shift
            and 1 <= self.phase_bits <= 30
            and self.phase_bits + self.phase_shift <= 46
            and 0 <= self.phase_mult < 1 << (self.phase_bits + self.phase_shift)
        ):
            raise ValueError("periodic phase constants out of range")
        if self.kind == "exponent" and self.frac_bits < 8:
            raise ValueError("exponent tables need frac_bits >= 8")
        starts, end = _segment_layout(self.kind, self.op, n, self.phase_bits)
        if not np.array_equal(self.starts, starts):
            raise ValueError(f"segment starts do not match num_tables = {n}")
        ends = np.append(starts[1:], end)
        # |offset| + |slope| * (width - 1) + 16 |octave_step| bounds every accumulator
        # (sqrt's shift frac_bits - j stays positive: j <= 7). In float64 first
        # (relative error ~1e-15): far below the headroom is the usual answer;
        # near it, exact Python ints decide.
        widths = (ends - starts - 1).astype(np.float64)
        near = np.abs(self.offsets.astype(np.float64))
        near += np.abs(self.slopes.astype(np.float64)) * widths
        approx = float(near.max()) + 16.0 * abs(self.octave_step)
        if approx < 0.999 * _INT64_HEADROOM:
            return
        worst = max(
            abs(a) + abs(b) * (end - start - 1)
            for a, b, start, end in zip(
                self.offsets.tolist(),
                self.slopes.tolist(),
                self.starts.tolist(),
                ends.tolist(),
                strict=True,
            )
        )
        if worst + 16 * abs(self.octave_step) >= _INT64_HEADROOM:
            raise ValueError("table coefficients would overflow int64 arithmetic")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LutTable):
            return NotImplemented
        mine, theirs = self.to_arrays(), other.to_arrays()
        return all(np.array_equal(mine[key], theirs[key]) for key in mine)

    def __hash__(self) -> int:
        return hash(
            (self.op, self.kind, self.in_scale, self.out_scale, self.num_tables)
        )

    def to_arrays(self) -> dict[str, np.ndarray | int]:
        """Plain ints and int64 arrays, for storing in the IR.

        ``op``, ``kind`` and ``rounding`` are indices into ``LUT_OPS``, ``LUT_KINDS``
        and ``ROUNDING_MODES``; scales are their float32 bit patterns.
        """
        return {
            "op": LUT_OPS.index(self.op),
            "kind": LUT_KINDS.index(self.kind),
            "rounding": ROUNDING_MODES.index(self.rounding),
            "in_scale": _f32_bits(self.in_scale),
            "out_scale": _f32_bits(self.out_scale),
            "in_bits": self.in_bits,
            "out_bits": self.out_bits,
            "num_tables": self.num_tables,
            "frac_bits": self.frac_bits,
            "phase_mult": self.phase_mult,
            "phase_shift": self.phase_shift,
            "phase_bits": self.phase_bits,
            "octave_step": self.octave_step,
            "entries": self.entries.copy(),
            "starts": self.starts.copy(),
            "offsets": self.offsets.copy(),
            "slopes": self.slopes.copy(),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray | int]) -> LutTable:
        """The inverse of ``to_arrays``; validates like the constructor."""
        ints = {key: int(value) for key, value in arrays.items() if np.ndim(value) == 0}

        def scale(key: str) -> float:
            return float(np.uint32(ints[key]).view(np.float32))

        return cls(
            op=LUT_OPS[ints["op"]],
            kind=LUT_KINDS[ints["kind"]],
            in_scale=scale("in_scale"),
            out_scale=scale("out_scale"),
            in_bits=ints["in_bits"],
            out_bits=ints["out_bits"],
            num_tables=ints["num_tables"],
            rounding=ROUNDING_MODES[ints["rounding"]],
            frac_bits=ints["frac_bits"],
            entries=arrays["entries"],
            starts=arrays["starts"],
            offsets=arrays["offsets"],
            slopes=arrays["slopes"],
            phase_mult=ints["phase_mult"],
            phase_shift=ints["phase_shift"],
            phase_bits=ints["phase_bits"],
            octave_step=ints["octave_step"],
        )


def _lut_inputs(op: str, q: np.ndarray, in_scale: float) -> np.ndarray:
    """``fl32(q * s_in)`` in float64, after the domain conventions."""
    q = np.asarray(q, np.int64)
    if op in ("log", "rsqrt"):
        q = np.maximum(q, 1)
    elif op == "reciprocal":
        q = np.where(q == 0, 1, q)
    return dequantize(q, np.float32(in_scale), 0).astype(np.float64)


def _lut_values(op: str, x: np.ndarray, out_scale: float) -> np.ndarray:
    """``f(x) / s_out`` in float64 (unrounded output codes); refuses NaN."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        y = lut_function(op)(x) / float(np.float32(out_scale))
    if np.any(np.isnan(y)):
        raise ValueError(f"{op} is undefined on part of its table's input range")
    return y


def lut_reference_codes(
    op: str,
    q: np.ndarray,
    in_scale: float,
    out_scale: float,
    out_bits: int,
    rounding: str = HALF_EVEN,
) -> np.ndarray:
    """The correctly rounded table: ``clamp(round(f(fl32(q * s_in)) / s_out))``.

    ``f`` is ``LUT_FUNCTIONS[op]`` in float64 on the dequantized input, after the
    domain conventions (log/rsqrt of ``x <= 0`` and reciprocal of 0 at ``q = 1``).
    Direct (int8-input) tables equal it exactly; the error of the other kinds is
    measured against it.
    """
    y = _lut_values(op, _lut_inputs(op, q, in_scale), out_scale)
    lo, hi = qrange(out_bits)
    return np.clip(round_float(y, rounding), lo, hi).astype(np.int64)


def build_lut(
    op: str,
    in_scale: float,
    in_bits: int,
    out_scale: float,
    out_bits: int,
    num_tables: int | None = None,
    rounding: str = HALF_EVEN,
) -> LutTable:
    """The table that evaluates ``op`` from ``in_bits`` codes to ``out_bits`` codes.

    A pure function of its arguments (results are cached). Scales are taken as
    float32; ``num_tables`` defaults to ``DEFAULT_NUM_TABLES[op]`` and must be a
    positive multiple of 6 (at most 32766). What one table (segment) is, per kind:

    * int8 input, "direct": ``entries[q + 128] = lut_reference_codes(op, q, ...)``,
      exact by construction; ``num_tables`` is validated and recorded, unused.
    * int16 input, "segments": ``num_tables`` uniform segments over the 65536
      input codes; ``u = q + 32768`` lies in segment ``(u * num_tables) >> 16``.
    * int16 sin/cos, "periodic": ``num_tables`` uniform segments over one turn of the
      phase, whatever the input range (a table's precision does not depend on
      ``in_scale``); segment ``(phase * num_tables) >> phase_bits``.
    * int16 rsqrt/sqrt/reciprocal/log, "exponent": ``num_tables`` segments over the
      mantissa. reciprocal/log: ``v = m * 2**k``, ``m`` in [1, 2), ``num_tables``
      segments; rsqrt/sqrt: ``v = m * 4**j``, ``m`` in [1, 4), ``num_tables / 2``
      uniform segments on each of [1, 2) and [2, 4).

    Each segment is the chord through the first and last float64 function values
    it covers (every code; for periodic tables a dense phase grid), shifted by the
    mid-range of the residual, which is the minimax line where the function is
    convex or concave; values are clamped half an output range beyond the output
    range (saturation makes them equivalent). Slopes and offsets are rounded to
    ``frac_bits`` fractional bits independently of ``rounding``, which only decides
    ties of the final shift. The output saturates.
    """
    base, _ = split_table_key(op)
    num_tables = check_num_tables(
        DEFAULT_NUM_TABLES[base] if num_tables is None else num_tables
    )
    if num_tables > _MAX_NUM_TABLES:
        raise ValueError(
            f"num_tables must be at most {_MAX_NUM_TABLES}, got {num_tables}"
        )
    if in_bits not in (8, 16) or out_bits not in (8, 16):
        raise ValueError(f"LUT bits must be 8 or 16, got in {in_bits}, out {out_bits}")
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {rounding!r}")
    s_in, s_out = float(np.float32(in_scale)), float(np.float32(out_scale))
    if not (0 < s_in < math.inf and 0 < s_out < math.inf):
        raise ValueError(
            f"LUT scales must be positive and finite, got {in_scale}, {out_scale}"
        )
    if s_in * (1 << (in_bits - 1)) > float(np.finfo(np.float32).max):
        raise ValueError(
            f"input scale {in_scale} overflows float32 at the extreme code"
        )
    return _build_lut(
        op,
        s_in,
        int(in_bits),
        s_out,
        int(out_bits),
        num_tables,
        rounding,
    )


@functools.lru_cache(maxsize=512)
def _build_lut(
    op: str,
    in_scale: float,
    in_bits: int,
    out_scale: float,
    out_bits: int,
    num_tables: int,
    rounding: str,
) -> LutTable:
    base, _ = split_table_key(op)
    kind = _lut_kind(base, in_bits)
    head = dict(
        op=base,
        kind=kind,
        in_scale=in_scale,
        out_scale=out_scale,
        in_bits=in_bits,
        out_bits=out_bits,
        num_tables=num_tables,
        rounding=rounding,
    )
    if kind == "direct":
        codes = np.arange(-128, 128)
        entries = lut_reference_codes(
            op, codes, in_scale, out_scale, out_bits, rounding
        )
        return LutTable(**head, entries=entries)
    if kind == "segments":
        fitted = _segments(op, in_scale, out_scale, out_bits, num_tables)
    else:
        builder = {"periodic": _periodic, "exponent": _exponent}[kind]
        fitted = builder(op, in_scale, out_scale, out_bits, num_tables)
    return LutTable(**head, **fitted)


def _segment_starts(width: int, n: int) -> np.ndarray:
    """``ceil(i * width / n)`` for ``i < n``: the first value of each segment."""
    return -((-np.arange(n, dtype=np.int64) * width) // n)


def _segment_layout(
    kind: str, op: str, n: int, phase_bits: int = _PHASE_BITS
) -> tuple[np.ndarray, int]:
    """Each segment's first value, and one past the last value, of the variable
    that ``apply_lut`` segments: input code, phase or Q15 mantissa. The inverse of
    its segment index ``(t * n) >> bits``."""
    if kind == "segments":
        qmin, qmax = qrange(16)
        return qmin + _segment_starts(1 << 16, n), qmax + 1
    if kind == "periodic":
        return _segment_starts(1 << phase_bits, n), 1 << phase_bits
    octaves = _EXPONENT_OPS[op][0]
    one = 1 << _MANTISSA_BITS
    starts = [
        (one << o) + _segment_starts(one << o, n // octaves) for o in range(octaves)
    ]
    return np.concatenate(starts), one << octaves


def _clamp_target(y: np.ndarray, out_bits: int) -> np.ndarray:
    """Clamp unrounded output codes half an output range beyond the output range.

    Saturation makes values beyond the range equivalent; the margin keeps the kink
    that clamping adds away from codes that do not saturate.
    """
    lo, hi = qrange(out_bits)
    margin = 1 << (out_bits - 1)
    return np.clip(y, lo - margin, hi + margin)


def _chord_slopes(d: np.ndarray, g: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per segment, the slope of the chord through its first and last samples.

    With the offset centred on the residual (``_fit_segments``) this is the minimax
    line wherever the function is convex or concave over the segment (research
    section 2.2 c); a golden-section search for the exact minimax slope measured no
    better on any op.
    """
    last = np.append(bounds[1:], d.size) - 1
    run = (d[last] - d[bounds]).astype(np.float64)
    return np.where(run > 0, (g[last] - g[bounds]) / np.maximum(run, 1.0), 0.0)


def _fit_segments(
    d: np.ndarray, g: np.ndarray, seg: np.ndarray, n: int, extra: float = 0.0
) -> dict:
    """Quantized near-minimax lines ``g ~ (offset + slope * d) / 2**frac_bits``.

    Samples are sorted by segment ``seg`` (every segment non-empty); ``d`` is the
    integer distance from the segment start. ``frac_bits`` is the largest (at most
    32) that keeps the accumulator, plus ``extra`` output codes, below ``2**58``;
    the offset is re-centred after the slope is rounded.
    """
    bounds = np.searchsorted(seg, np.arange(n))
    slope = _chord_slopes(d, g, bounds)
    span = np.maximum.reduceat(d, bounds).astype(np.float64)
    size = np.max(np.abs(g)) + np.max(np.abs(slope) * span) + extra
    frac_bits = min(_MAX_FRAC_BITS, 58 - math.ceil(math.log2(size + 1.0)))
    if frac_bits < 8:
        raise ValueError("LUT output scale is too fine for this input range")
    one = float(1 << frac_bits)
    slopes = np.rint(slope * one)
    r = g - slopes[seg] * d.astype(np.float64) / one
    centre = (np.maximum.reduceat(r, bounds) + np.minimum.reduceat(r, bounds)) / 2.0
    return dict(
        frac_bits=frac_bits,
        offsets=np.rint(centre * one).astype(np.int64),
        slopes=slopes.astype(np.int64),
    )


def _segments(op: str, in_scale: float, out_scale: float, out_bits: int, n: int):
    qmin, qmax = qrange(16)
    q = np.arange(qmin, qmax + 1, dtype=np.int64)
    starts, _ = _segment_layout("segments", op, n)
    seg = ((q - qmin) * n) >> 16
    g = _clamp_target(
        _lut_values(op, _lut_inputs(op, q, in_scale), out_scale), out_bits
    )
    return dict(starts=starts, **_fit_segments(q - starts[seg], g, seg, n))


def _phase_mult(in_scale: float) -> int:
    """Turns per input code in Q(phase_bits + phase_shift), modulo one turn.

    Only the fractional turns matter, because ``q`` is an integer; the exact
    rational product keeps them for any ``in_scale``.
    """
    bits = _PHASE_BITS + _PHASE_EXTRA_BITS
    return round(Fraction(in_scale) * _INV_TWO_PI * (1 << bits)) % (1 << bits)


def _periodic(op: str, in_scale: float, out_scale: float, out_bits: int, n: int):
    starts, end = _segment_layout("periodic", op, n)
    widths = np.append(starts[1:], end) - starts
    samples = max(3, min(257, (1 << 21) // n))
    grid = np.linspace(0.0, 1.0, samples)
    d = np.rint(grid[None, :] * (widths[:, None] - 1)).astype(np.int64)
    seg = np.repeat(np.arange(n), samples)
    d = d.reshape(-1)
    turns = (starts[seg] + d) / float(1 << _PHASE_BITS)
    g = _clamp_target(_lut_values(op, 2.0 * math.pi * turns, out_scale), out_bits)
    return dict(
        starts=starts,
        phase_mult=_phase_mult(in_scale),
        phase_shift=_PHASE_EXTRA_BITS,
        phase_bits=_PHASE_BITS,
        **_fit_segments(d, g, seg, n),
    )


def _exponent(op: str, in_scale: float, out_scale: float, out_bits: int, n: int):
    octaves, direction = _EXPONENT_OPS[op]
    per_octave = n // octaves
    one = 1 << _MANTISSA_BITS
    starts, end = _segment_layout("exponent", op, n)
    m = np.arange(one, end, dtype=np.int64)  # every Q15 mantissa
    octave = np.where(m >= 2 * one, 1, 0)
    seg = octave * per_octave + (
        ((m - (one << octave)) * per_octave) >> (_MANTISSA_BITS + octave)
    )
    # the table holds f(m * s_in) / s_out; v = m * 2**e gives f(v * s_in) / s_out
    # as that times 2**(-direction * e / octaves), or plus k * ln 2 / s_out for log
    g = _lut_values(op, (m / float(one)) * in_scale, out_scale)
    extra = 0.0
    if direction:
        # Scaling every value down to where the smallest output is still twice the
        # output range changes no output code: all of them saturate either way.
        e_max = 15 - 15 % octaves
        smallest = np.min(np.abs(g)) * 2.0 ** (-max(0, direction * e_max // octaves))
        if smallest > 1 << out_bits:
            g = g * ((1 << out_bits) / smallest)
    else:
        extra = 16 * math.log(2.0) / out_scale
    fit = _fit_segments(m - starts[seg], g, seg, n, extra)
    step = round(math.log(2.0) / out_scale * (1 << fit["frac_bits"])) if extra else 0
    return dict(starts=starts, octave_step=step, **fit)


def _floor_log2(v: np.ndarray) -> np.ndarray:
    """``floor(log2(v))`` for integers ``1 <= v < 2**16``: binary search on shifts."""
    k = np.zeros_like(v)
    for bits in (8, 4, 2, 1):
        k = k + bits * ((v >> (k + bits)) > 0)
    return k


def apply_lut(table: LutTable, q: np.ndarray) -> np.ndarray:
    """Evaluate ``table`` on input codes ``q``: int64 in, int64 out, integers only.

    The semantics, with ``A, B, T = offsets, slopes, starts``, ``N = num_tables``,
    ``F = frac_bits`` and ``round(x / 2**n)`` = ``shift_round(x, n, rounding)``:

    * direct: ``y = entries[q + 128]``.
    * segments: ``s = ((q + 32768) * N) >> 16``,
      ``y = round((A[s] + B[s] * (q - T[s])) / 2**F)``.
    * periodic: ``p = ((q * phase_mult + 2**(S-1)) >> S) & (2**PB - 1)`` with
      ``S, PB = phase_shift, phase_bits``; ``s = (p * N) >> PB``,
      ``y = round((A[s] + B[s] * (p - T[s])) / 2**F)``.
    * exponent: ``v = max(q, 1)`` (reciprocal: ``|q|``, 1 at ``q = 0``);
      ``k = floor(log2 v)``; ``O = 2`` octaves for rsqrt/sqrt, else 1;
      ``e = k - k % O``, ``o = k - e``; Q15 mantissa ``m = v << (15 - e)``;
      ``s = o*N/O + (((m - 2**(15+o)) * N/O) >> (15 + o))``;
      ``acc = A[s] + B[s] * (m - T[s]) + k * octave_step``, negated for
      reciprocal of ``q < 0``; ``y = round(acc / 2**(F + D * e / O))`` with
      ``D`` = 1 for rsqrt/reciprocal, -1 for sqrt, 0 for log; sqrt of ``q <= 0``
      is 0.

    then ``y`` saturates to the ``out_bits`` range. Codes outside the ``in_bits``
    range are an error. Every intermediate fits int64 (``LutTable`` checks it).
    """
    q = np.asarray(q)
    if not np.issubdtype(q.dtype, np.integer):
        raise TypeError(f"apply_lut takes integer codes, got {q.dtype}")
    q = q.astype(np.int64)
    qmin, qmax = qrange(table.in_bits)
    if q.size and (q.min() < qmin or q.max() > qmax):
        raise ValueError(f"input codes must lie in [{qmin}, {qmax}]")
    if table.kind == "direct":
        return table.entries[q - qmin]
    n, starts = table.num_tables, table.starts
    shift: int | np.ndarray = table.frac_bits
    if table.kind == "segments":
        seg = ((q - qmin) * n) >> table.in_bits
        acc = table.offsets[seg] + table.slopes[seg] * (q - starts[seg])
    elif table.kind == "periodic":
        bias = 1 << (table.phase_shift - 1)
        phase = ((q * table.phase_mult + bias) >> table.phase_shift) & (
            (1 << table.phase_bits) - 1
        )
        seg = (phase * n) >> table.phase_bits
        acc = table.offsets[seg] + table.slopes[seg] * (phase - starts[seg])
    else:
        acc, shift = _apply_exponent(table, q)
    lo, hi = qrange(table.out_bits)
    y = np.clip(shift_round(acc, shift, table.rounding), lo, hi)
    if table.op == "sqrt":
        y = np.where(q > 0, y, 0)
    return y


def _apply_exponent(table: LutTable, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The accumulator and right shift of an exponent table (before rounding)."""
    octaves, direction = _EXPONENT_OPS[table.op]
    per_octave = table.num_tables // octaves
    v = np.where(q == 0, 1, np.abs(q)) if table.op == "reciprocal" else np.maximum(q, 1)
    k = _floor_log2(v)
    e = k - k % octaves  # v = m * 2**e with m in [1, 2**octaves)
    octave = k - e
    m = v << (_MANTISSA_BITS - e)
    seg = octave * per_octave + (
        ((m - (1 << (_MANTISSA_BITS + octave))) * per_octave)
        >> (_MANTISSA_BITS + octave)
    )
    acc = table.offsets[seg] + table.slopes[seg] * (m - table.starts[seg])
    acc = acc + k * table.octave_step
    if table.op == "reciprocal":
        acc = np.where(q < 0, -acc, acc)
    return acc, table.frac_bits + direction * (e // octaves)


def lut_forward(
    op: str,
    x: np.ndarray,
    in_scale: float,
    in_bits: int,
    out_scale: float,
    out_bits: int,
    num_tables: int | None = None,
    rounding: str = HALF_EVEN,
) -> np.ndarray:
    """A float tensor through a table: quantize, ``apply_lut``, dequantize (float32).

    The one definition of a LUT op between fake quantizations, shared by
    ``pre_export`` (torch) and the interpreter (``qat.bc``): the input is quantized
    exactly as fake quantization does (symmetric, ``rounding``), so on the producer's
    grid it recovers the producer's codes.
    """
    table = build_lut(op, in_scale, in_bits, out_scale, out_bits, num_tables, rounding)
    qmin, qmax = qrange(in_bits)
    q = quantize(x, np.float32(in_scale), 0, qmin, qmax, mode=rounding)
    return dequantize(apply_lut(table, q), np.float32(out_scale), 0)
