"""Requantization of exact integer sums, fast and bit for bit ``numerics.requantize``.

``Requantizer`` prepares one op's requantization once (for the plans of
``runtime/plan.py`` and the simulator's instructions) and computes it on every
call by the cheapest form that provably gives the reference's integers:

* int64 (``right``, ``left``, ``integer``): the half-to-even rounding of
  ``p / 2**s`` is ``(p + 2**(s-1) - 1 + bit_s(p)) >> s``;
* float64, exactly (``float``), where the bounds allow
  (``Requantizer._float_form``);
* float64 rounding to nearest (``nearest``), where float64 cannot hold the
  product but no accumulator that matters lands near a rounding tie
  (``_nearest_form`` proves it per channel by modular arithmetic);
* a lookup in the table of every code's result, for 8- and 16-bit codes and
  one multiplier.

The ``nearest``, ``float`` and ``right`` forms run as one compiled pass
(``runtime/jit_kernels.py``, the same arithmetic) where numba is there, else as
numpy passes.

An optional per-channel ``offset`` folds a preceding bias add (and a left shift
folded into the multiplier) into the same pass, valid when the caller has proved
that none of the folded steps saturates (``fused_epilogue``).

``tests/runtime/test_kernels.py`` checks every path against the reference,
``tests/runtime/test_jit.py`` the compiled passes against both.
"""

from __future__ import annotations

import collections
import functools
import math
import os
import threading
from collections.abc import Callable

import numpy as np
import torch

from hbir.runtime import numerics


@functools.cache
def loops():
    """``runtime/jit_kernels`` (compiled one-pass loops), or None where numba is
    missing or ``HBIR_JIT=0``: then every path keeps its numpy form."""
    if os.environ.get("HBIR_JIT", "1") == "0":
        return None
    try:
        from hbir.runtime import jit_kernels
    except ImportError:
        return None
    return jit_kernels


def magnitude(dtype) -> int:
    """The largest |code| of an integer dtype (128 for int8, 255 for uint8)."""
    return _magnitude(np.dtype(dtype))


@functools.cache
def _magnitude(dtype: np.dtype) -> int:
    info = np.iinfo(dtype)
    return max(-int(info.min), int(info.max))


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
        self._path = self._choose(m, s, off, acc_bound)
        self._pending = None
        self._flat = None  # the parameters as ``_compiled`` takes them
        one = m.size == s.size == 1 and (off is None or off.size == 1)
        self.per_tensor = one  # the same function of every element
        self.tables = {} if one and acc_bound <= 2**15 else None
        self.bound = acc_bound
        if self._path == "right" and np.any(s == 0):
            # p / 2**0 == 2p / 2**1: one rounding formula for every channel
            unshifted = s == 0
            m, s = np.where(unshifted, 2 * m, m), np.maximum(s, 1)
            off = None if off is None else np.where(unshifted, 2 * off, off)
        if self._path == "integer":
            m = m >> s  # multiplier / 2**shift is an integer: no rounding at all
        along = self._along = (ndim, None if m.size == s.size == 1 else axis)
        self.m = _along(m, *along)
        self.unit = bool(np.all(m == 1))
        self.offset = None if off is None else _along(off, ndim, axis)
        self.s = _along(s, *along)
        if self._path == "right":
            half = np.left_shift(np.int64(1), self.s - 1)
            self.bias = half - 1 if mode == numerics.HALF_EVEN else half
            exact = self._float_form(m, s, off)
            if exact is not None:
                self._path = "float"
                along_f = (ndim, axis if exact[0].size > 1 else None)
                self.a0, self.m_f, self.c_f = (along_float(a, *along_f) for a in exact)
            else:  # proved (or not) when first needed: see ``path``
                self._pending = (m, s, off, zero, lo, hi, acc_bound, ndim, axis)
        if self._path == "left":
            left = -self.s
            self.s = left
            limit = np.left_shift(np.int64(1), 62 - left)
            self.limit = (
                None if acc_bound * int(np.max(m)) <= int(np.min(limit)) else limit
            )

    @property
    def path(self) -> str:
        """How this requantizer computes: ``integer``, ``left``, ``right``
        (int64 passes), ``float`` (exact float64), ``nearest`` (certified
        float64) or ``reference``. The ``nearest`` proof, the costly part of
        preparing, runs on first use, so a requantizer that a plan fuses away
        never pays for it."""
        if self._pending is not None:
            m, s, off, zero, lo, hi, acc_bound, ndim, axis = self._pending
            self._pending = None
            nearest = _proved_nearest_form(m, s, off, zero, lo, hi, acc_bound)
            if nearest is not None:  # (its arrays first: another thread may run)
                along_f = (ndim, axis if nearest[0].size > 1 else None)
                self.m_f, self.c_f = (along_float(a, *along_f) for a in nearest)
                self.axis, self._torch = along_f[1], None
                self._path = "nearest"
        return self._path

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
        x = torch.from_numpy(acc if acc.flags.writeable else acc.copy())
        y = torch.empty_like(x, dtype=torch.from_numpy(np.empty(0, out_dtype)).dtype)
        rows = max(1, NEAREST_BLOCK // max(1, acc.size // acc.shape[2]))
        for r in range(0, acc.shape[2], rows):
            v = x[:, :, r : r + rows] * m_f
            v.add_(c_f).round_().clamp_(self.lo, self.hi)
            y[:, :, r : r + rows] = v
        return y.numpy()

    def _compiled(self, acc: np.ndarray, out_dtype: np.dtype, into=None) -> np.ndarray:
        """This path's arithmetic as one compiled pass (``jit_kernels``), in
        ``acc``'s memory order; the result has that memory order too (``into``,
        if given, has it and is written)."""
        blocks = ChannelBlocks(acc, self._flat_parameters()[1])
        y = blocks.empty(out_dtype) if into is None else blocks.flat_view(into)
        self._loop(blocks)(blocks.x, y)
        return blocks.restore(y) if into is None else into

    def _loop(self, blocks: ChannelBlocks) -> Callable[[np.ndarray, np.ndarray], None]:
        """This path's compiled loop for the layout of ``blocks``, as
        ``loop(flat acc, flat result)``."""
        jit = loops()
        params, _ = self._flat_parameters()
        shape = blocks.shape
        half_up, zero = self.mode == numerics.HALF_UP, self.zero
        lo, hi = self.lo, self.hi
        if self._path == "nearest":
            if blocks.channels_last and params[0].size > 1:
                return lambda x, y: jit.nearest_last(x, *params, lo, hi, y)
            return lambda x, y: jit.nearest_inner(x, shape, *params, lo, hi, y)
        if self._path == "float":
            return lambda x, y: jit.float_inner(
                x, shape, *params, zero, half_up, lo, hi, y
            )
        return lambda x, y: jit.right_inner(x, shape, *params, zero, half_up, lo, hi, y)

    def bind(self, acc: np.ndarray, into: np.ndarray):
        """``self(a, into.dtype, into)`` for any ``a`` laid out like ``acc``
        (shape, dtype, strides), everything but the loop itself done once
        (the simulator's epilogues, into the same buffer on every run); None
        where the compiled pass cannot write ``into``."""
        if not self._writes_into(acc, into):
            return None
        blocks = ChannelBlocks(acc, self._flat_parameters()[1])
        loop, perm, y = self._loop(blocks), blocks.perm, blocks.flat_view(into)
        layout = (acc.shape, acc.strides, acc.dtype)

        def run(a: np.ndarray) -> np.ndarray:
            if (a.shape, a.strides, a.dtype) != layout:
                return self(a, into.dtype, into)
            loop(a.transpose(perm).reshape(-1), y)
            return into

        return run

    def _flat_parameters(self) -> tuple[tuple[np.ndarray, ...], int | None]:
        """(this path's per-channel parameters as 1-D arrays in the order its
        ``jit_kernels`` loop takes them, the channel axis or None), made once."""
        if self._flat is None:
            self._flat = self._make_flat_parameters()
        return self._flat

    def _make_flat_parameters(self) -> tuple[tuple[np.ndarray, ...], int | None]:
        if self._path == "nearest":
            params = (self.m_f, self.c_f)
        elif self._path == "float":
            params = (self.a0, self.m_f, self.c_f)
        else:
            off = np.zeros(1, np.int64) if self.offset is None else self.offset
            params = (self.m, off, self.s, self.bias)
        dtype = np.float64 if self._path != "right" else np.int64
        params = tuple(np.ascontiguousarray(np.reshape(p, -1), dtype) for p in params)
        channels = max(p.size for p in params)
        return params, (self.params["axis"] if channels > 1 else None)

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
        m, s, off = np.broadcast_arrays(m, s, off)
        if np.any(m < 0) or np.any(off == np.iinfo(np.int64).min):
            return None  # (never made by convert; the int64 path is exact)
        for shift in np.unique(s).tolist():  # (reach << s) + 2 m < 2**52
            room = 2**52 - (reach << shift)
            if room <= 0 or np.any(m[s == shift] >= (room + 1) // 2):
                return None
        # a = round(-off / m), halves up: -off = q m + r with 0 <= r < m
        q, r = np.divmod(-off, np.maximum(m, 1))
        a = np.where(m == 0, 0, q + (2 * r >= m))
        # |c| <= m / 2: exact, as int64 arithmetic wraps modulo 2**64 and the
        # true sum fits (a * m alone may wrap when |off| is near 2**63)
        c = a * m + off
        if np.any(np.abs(a) >= 2**52) or np.any(np.abs(c) >= 2**52):
            return None
        unit = np.ldexp(1.0, -s)  # 2**-s, exact
        return a.astype(np.float64), m * unit, c * unit

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

    def __call__(self, acc: np.ndarray, out_dtype, into=None) -> np.ndarray:
        """The requantized ``acc`` as ``out_dtype``; written into ``into`` (an
        array of ``acc``'s shape) and returned as it when given."""
        if into is not None and self._writes_into(acc, into):
            return self._compiled(acc, into.dtype, into)
        if self.tables is not None and acc.dtype.kind in "iu" and acc.itemsize <= 2:
            y = self._by_table(acc, np.dtype(out_dtype))
        else:
            y = self._compute(acc, out_dtype)
        if into is None:
            return y
        into[...] = y
        return into

    def _writes_into(self, acc: np.ndarray, into: np.ndarray) -> bool:
        """Whether the compiled pass can write straight into ``into``: the same
        shape and memory order as ``acc``, contiguous in it."""
        if self.path not in ("nearest", "float", "right") or not acc.size:
            return False
        if into.shape != acc.shape or loops() is None:
            return False
        order = memory_order(acc)
        return order == memory_order(into) and into.transpose(order).flags.c_contiguous

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
        return np.take(table, flat).transpose(inverse_order(perm))

    def _compute(self, acc: np.ndarray, out_dtype) -> np.ndarray:
        path = self.path
        if path in ("nearest", "float", "right") and acc.size and loops():
            return self._compiled(acc, np.dtype(out_dtype))
        if acc.dtype.kind == "f" and path not in ("nearest", "float"):
            acc = acc.astype(np.int64)  # integers (float32 sums of conv2d_sums)
        if path == "reference":
            m, s, axis = self.reference
            acc = np.asarray(acc, np.int64)
            if self.offset is not None:
                raise AssertionError("an offset requantizer must not fall back")
            y = numerics.requantize(
                acc, m, s, self.zero, self.lo, self.hi, axis, self.mode
            )
            return y.astype(out_dtype)
        if path == "nearest":
            if acc.ndim == 4 and acc.size >= NEAREST_BLOCK and self.axis != 2:
                return self._nearest_by_rows(acc, out_dtype)
            v = np.multiply(acc, self.m_f, dtype=np.float64)
            v += self.c_f
            np.rint(v, out=v)
            y = np.empty_like(v, out_dtype)  # in v's memory order
            np.clip(v, self.lo, self.hi, out=y, casting="unsafe")
            return y
        if path == "float":
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
        if path == "right":
            if self.mode == numerics.HALF_EVEN:
                odd = p >> self.s
                odd &= 1
                odd += self.bias
                p += odd
            else:
                p += self.bias
            p >>= self.s
        elif path == "left":
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


_PROOFS: collections.OrderedDict = collections.OrderedDict()  # the last ones made
_PROOFS_KEPT = 4096
_PROOFS_LOCK = threading.Lock()  # (requantizers are proved on first use, any thread)
_UNPROVED = object()


def _proved_nearest_form(m, s, off, zero, lo, hi, acc_bound):
    """``_nearest_form``, remembered for the last few thousand parameter sets:
    compiling a model and loading its model.hbm prepare the same requantizers
    twice, and the proof costs a few ms per op."""
    key = tuple(None if a is None else (a.dtype.str, a.tobytes()) for a in (m, s, off))
    key += (int(zero), int(lo), int(hi), int(acc_bound))
    with _PROOFS_LOCK:
        found = _PROOFS.get(key, _UNPROVED)
        if found is not _UNPROVED:
            _PROOFS.move_to_end(key)
    if found is _UNPROVED:
        found = _nearest_form(m, s, off, zero, lo, hi, acc_bound)
        with _PROOFS_LOCK:
            _PROOFS[key] = found
            while len(_PROOFS) > _PROOFS_KEPT:
                _PROOFS.popitem(last=False)
    return None if found is None else tuple(a.copy() for a in found)


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
    m_f, c_f, congruences = [], [], []
    for mc, sc, oc in zip(
        *(np.broadcast_to(v, (n,)) for v in (m, s, off)), strict=True
    ):
        mc, sc, oc = int(mc), int(sc), int(oc)
        if mc <= 0 or sc < 1 or (mc >> (mc & -mc).bit_length() - 1) >= 2**53:
            return None  # m / 2**s must be exact in float64
        oc += zero << sc
        c = oc / 2**sc  # correctly rounded (Python int division)
        # |v - X| <= 2**-52 (|acc mf| + |cf|) + ulps: over every |acc| <= acc_bound,
        # and in the window, where |acc mf| <= reach + |cf|
        top = (acc_bound * mc >> sc) + 1
        if (top + abs(c) + 2) * 2.0**-51 >= 0.5:
            return None
        band = math.ceil((reach + 2 * abs(c) + 4) * 2.0 ** (sc - 51))
        if 2 * band + 1 > NEAREST_CANDIDATES or 2 * band + 1 >= 1 << sc:
            return None
        congruences.append(_tie_congruence(mc, sc, oc, band, lo, hi, acc_bound))
        m_f.append(mc * 2.0**-sc)
        c_f.append(c)
    if _hits_tie_band(congruences):
        return None
    return np.array(m_f), np.array(c_f)


def _tie_congruence(m: int, s: int, off: int, band: int, lo, hi, acc_bound):
    """One channel's tie band as a congruence on ``acc``: (the window of
    accumulators whose result is within 1.5 of ``[lo, hi]``, ``2**(s-1)``, the
    band, ``off mod 2**s``, ``2**t`` the power of two in ``m``, ``s``, the odd
    ``m / 2**t``); None for an empty window."""
    # the window, as accumulators (m > 0): ceil / floor of exact quotients
    a_lo = max(-acc_bound, -((off - (2 * lo - 3) * 2 ** (s - 1)) // m))
    a_hi = min(acc_bound, ((2 * hi + 3) * 2 ** (s - 1) - off) // m)
    if a_lo > a_hi:
        return None
    t = min((m & -m).bit_length() - 1, s)
    return a_lo, a_hi - a_lo, 1 << (s - 1), band, off % (1 << s), t, s, m >> t


def _hits_tie_band(congruences) -> bool:
    """Whether, in some channel, an ``acc`` of its window has ``acc m + off``
    within its band of ``2**(s-1)`` modulo ``2**s`` (all channels at once:
    one row of candidate residues per channel; compiled, row by row with an
    early exit: ``jit_kernels.hits_tie_band``)."""
    rows = [c for c in congruences if c is not None]
    if not rows:
        return False
    a_lo, width, half, band, off, t, s, odd = (
        np.array([row[i] for row in rows], np.int64) for i in range(8)
    )
    jit = loops()
    if jit is not None:
        return bool(jit.hits_tie_band(a_lo, width, half, band, off, t, s, odd))
    a_lo, width, half, band, off, t, s = (
        v[:, None] for v in (a_lo, width, half, band, off, t, s)
    )
    odd = odd.astype(np.uint64)[:, None]
    inverse = odd.copy()  # right to 3 bits (odd * odd = 1 mod 8); Newton doubles
    for _ in range(5):  # 3 -> 96 bits: the inverse modulo 2**64 (uint64 wraps)
        inverse *= np.uint64(2) - odd * inverse
    j = np.arange(-int(band.max()), int(band.max()) + 1, dtype=np.int64)[None, :]
    d = (half + j - off) & ((1 << s) - 1)  # acc m = d (mod 2**s)
    solvable = ((d & ((1 << t) - 1)) == 0) & (np.abs(j) <= band)
    k_mask = (1 << (s - t)) - 1
    residue = ((d >> t).astype(np.uint64) * inverse).astype(np.int64) & k_mask
    # the first accumulator of each class at or above a_lo
    first = (residue - a_lo) & k_mask
    return bool(np.any(solvable & (first <= width)))


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


_PREPARED_OUTPUTS: collections.OrderedDict = collections.OrderedDict()
PREPARED_OUTPUTS_KEPT = 1024  # (QAT moves the scales: old entries age out)


def prepared_gemm_output(acc, req, acc_bound, qmin, qmax, axis, mode):
    """``numerics.gemm_output(acc, req, qmin, qmax, axis, mode)`` as float32
    codes by the compiled requantization (``fused_gemm_output``), built once per
    requantization and kept (the last ``PREPARED_OUTPUTS_KEPT``), or None where
    that form may differ. The fixed-point forward of the QAT modules
    (VALIDATION) passes it to ``numerics.fixed_point_gemm``: the reference's
    numbers, without its int64 passes on every call."""
    bias = None if req.bias is None else np.asarray(req.bias, np.int64)
    key = (
        np.asarray(req.multiplier, np.int64).tobytes(),
        np.asarray(req.shift, np.int64).tobytes(),
        None if bias is None else bias.tobytes(),
        req.fine, req.fused_bias, req.x_shift, req.w_shift,
        acc_bound, qmin, qmax, acc.ndim, axis, mode,
    )  # fmt: skip
    output = _PREPARED_OUTPUTS.get(key, False)
    if output is False:
        output = fused_gemm_output(
            req, acc_bound, qmin, qmax, ndim=acc.ndim, axis=axis, mode=mode
        )
        _PREPARED_OUTPUTS[key] = output
        while len(_PREPARED_OUTPUTS) > PREPARED_OUTPUTS_KEPT:
            _PREPARED_OUTPUTS.popitem(last=False)
    else:
        _PREPARED_OUTPUTS.move_to_end(key)
    return None if output is None else output(acc, np.float32)


_PREPARED_REQUANTIZERS: collections.OrderedDict = collections.OrderedDict()


def prepared_requantize(acc, multiplier, shift, qmin, qmax, mode, acc_bound):
    """``numerics.requantize(acc, multiplier, shift, 0, qmin, qmax, mode=mode)``
    (one multiplier; ``|acc| <= acc_bound``) as integer codes by a
    ``Requantizer``, built once per requantization and kept (the last
    ``PREPARED_OUTPUTS_KEPT``): the rescales, clips and adds of the QAT modules'
    fixed-point forward (VALIDATION) pass it to ``numerics.requantize_by``."""
    m, s = (
        int(np.asarray(multiplier).reshape(-1)[0]),
        int(np.asarray(shift).reshape(-1)[0]),
    )
    key = (m, s, qmin, qmax, mode, acc_bound, np.ndim(acc))
    r = _PREPARED_REQUANTIZERS.get(key)
    if r is None:
        r = _PREPARED_REQUANTIZERS[key] = Requantizer(
            [m], [s], 0, qmin, qmax,
            ndim=np.ndim(acc), axis=None, mode=mode, acc_bound=acc_bound,
        )  # fmt: skip
        while len(_PREPARED_REQUANTIZERS) > PREPARED_OUTPUTS_KEPT:
            _PREPARED_REQUANTIZERS.popitem(last=False)
    else:
        _PREPARED_REQUANTIZERS.move_to_end(key)
    wide = max(-qmin, qmax) >= 1 << 15
    return r(np.asarray(acc), np.int64 if wide else np.int16)


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


class ChannelBlocks:
    """``x`` in memory order, flat and C-contiguous (``x``), seen as
    ``[outer, C, inner]`` (``shape``; ``C`` the size of ``axis``, 1 for None):
    the layout of ``jit_kernels``' per-channel loops. ``restore`` gives a flat
    result ``x``'s axes back, keeping its memory order."""

    def __init__(self, x: np.ndarray, axis: int | None):
        self.perm = memory_order(x)
        flat = x.transpose(self.perm)
        if not flat.flags.c_contiguous:  # (ascontiguousarray makes 0-d 1-d)
            flat = np.ascontiguousarray(flat)
        self.flat_shape = flat.shape
        k = None if axis is None else self.perm.index(axis)
        if k is None:
            self.shape = (1, 1, flat.size)
        else:
            inner = math.prod(flat.shape[k + 1 :])
            self.shape = (math.prod(flat.shape[:k]), flat.shape[k], inner)
        self.x = flat.reshape(-1)
        self.channels_last = self.shape[2] == 1 and self.shape[1] > 1

    def empty(self, dtype) -> np.ndarray:
        return np.empty(self.x.size, dtype)

    def flat_view(self, y: np.ndarray) -> np.ndarray:
        """``y`` (laid out like ``x`` was) as the flat array ``restore`` takes."""
        return y.transpose(self.perm).reshape(-1)

    def restore(self, y: np.ndarray) -> np.ndarray:
        return y.reshape(self.flat_shape).transpose(inverse_order(self.perm))


def memory_order(x: np.ndarray) -> tuple[int, ...]:
    """The axes of ``x`` from the slowest-varying in memory to the fastest:
    ``x.transpose(order)`` is C-contiguous for any contiguous layout (NCHW,
    channels-last), so elementwise work on it runs in memory order."""
    return _order(x.strides)


@functools.lru_cache(maxsize=1024)
def inverse_order(order: tuple[int, ...]) -> tuple[int, ...]:
    """The axes that undo ``x.transpose(order)`` (``np.argsort(order)``, once
    per order: numpy's argsort of a tuple costs microseconds on every call)."""
    return tuple(int(a) for a in np.argsort(order))


@functools.lru_cache(maxsize=1024)
def _order(strides: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(strides)), key=lambda a: -abs(strides[a])))


def along_float(values, ndim: int, axis: int | None) -> np.ndarray:
    values = np.asarray(values).reshape(-1)
    if axis is None or values.size == 1:
        return values.reshape(())
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)
