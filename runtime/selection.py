"""Selection by value and by index, once: top-k, sort, argmax, gather, index_select.

These ops choose elements rather than compute new ones, so they are exact on any
grid: the codes of a quantized tensor are ordered as its values are (one positive
scale), and selecting codes selects the values they stand for. What makes engines
disagree is the order of equal values. torch leaves it open for ``topk`` and
``sort`` (its CPU ``topk`` returns the later of two equal elements first, its
sort the earlier one), and a fake-quantized tensor has many equal values, so the
rule is fixed here and every engine follows it:

* ``topk`` / ``sort``: equal values in the order of their indices, the lower index
  first, in both directions (a stable sort);
* ``argmax`` / ``argmin``: the first extreme value (as torch documents it).

The torch forms (``topk``, ``sort``; they import torch when called: this module
is also the instruction set's) are what a prepared model calls instead of
``torch.topk`` / ``torch.sort`` and what the interpreter runs on float tensors;
the numpy forms (``topk_indices``, ``arg_extreme``) are the integer semantics the
npu kernels and the interpreter run on codes. Index reads (``gather``,
``index_select``) refuse an index out of range: a wrong index never reads
another element silently.
"""

from __future__ import annotations

import numpy as np

from hbir.errors import HbirError
from hbir.runtime import op_table


class IndexOutOfRangeError(HbirError, IndexError):
    """An index read outside its dim (the engines report it with their location)."""


# ------------------------------------------------------------------ torch forms


def topk(
    input,
    k: int,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,  # noqa: A002  (torch's keyword)
):
    """``torch.topk`` with the tie rule above (always sorted)."""
    import torch

    values, indices = torch.sort(input, dim=dim, descending=largest, stable=True)
    return torch.return_types.topk(
        (values.narrow(dim, 0, k), indices.narrow(dim, 0, k))
    )


def sort(input, dim: int = -1, descending: bool = False, stable=None):
    """``torch.sort``, always stable (``stable`` is accepted and implied)."""
    import torch

    values, indices = torch.sort(input, dim=dim, descending=descending, stable=True)
    return torch.return_types.sort((values, indices))


def argsort(input, dim: int = -1, descending: bool = False, stable=None):
    """``torch.argsort``, always stable."""
    import torch

    return torch.sort(input, dim=dim, descending=descending, stable=True).indices


def index_copy(input, dim: int, index, source):
    """``input`` with ``source``'s slices written at ``index`` along ``dim``
    (``canvas[:, idx] = feats``); of repeated indices the last write wins."""
    import torch

    keep = torch.from_numpy(last_writes(index.numpy()))
    return input.index_copy(dim, index[keep], source.index_select(dim, keep))


# ------------------------------------------------------------------ numpy forms


def last_writes(index: np.ndarray) -> np.ndarray:
    """The positions of ``index`` whose value does not occur again later, in
    order (the writes that survive a sequential scatter)."""
    _, first_from_end = np.unique(index[::-1], return_index=True)
    return np.sort(len(index) - 1 - first_from_end).astype(np.int64)


def topk_indices(x: np.ndarray, k: int, dim: int, largest: bool) -> np.ndarray:
    """The int64 indices of the ``k`` largest (smallest) values along ``dim``, in
    order, equal values by index (lower first)."""
    keys = x.astype(np.int64) if x.dtype.kind in "iub" else x
    order = np.argsort(-keys if largest else keys, axis=dim, kind="stable")
    return np.take(order, np.arange(k), axis=dim).astype(np.int64)


def arg_extreme(x: np.ndarray, dim: int, keepdim: bool, largest: bool) -> np.ndarray:
    """The int64 index of the first maximum (minimum) along ``dim``."""
    pick = np.argmax if largest else np.argmin
    return np.asarray(pick(x, axis=dim, keepdims=keepdim), np.int64)


def floor_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a // b`` of int64 indices, rounded toward minus infinity (torch's)."""
    _check_divisor(b)
    return np.floor_divide(a, b)


def remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a % b`` with the divisor's sign (torch's ``remainder``)."""
    _check_divisor(b)
    return np.remainder(a, b)


def _check_divisor(b: np.ndarray) -> None:
    if np.any(np.asarray(b) == 0):
        raise IndexOutOfRangeError("integer division by zero")


COMPARE_KINDS = op_table.COMPARE_KINDS
_COMPARE = dict(
    zip(
        COMPARE_KINDS,
        (np.equal, np.not_equal, np.greater, np.greater_equal, np.less, np.less_equal),
        strict=True,
    )
)


def compare(kind: str, a: np.ndarray, b: np.ndarray, scales=None) -> np.ndarray:
    """``a <kind> b`` as a bool mask. ``scales`` (s_a, s_b): ``a`` and ``b`` are
    codes compared as the float32 values ``fl32(q * s)`` fake quantization gives
    them, which is what the torch model compares (one correctly rounded product:
    numpy's float32 multiply); without, as they are (same-grid codes, or codes
    against integer thresholds, ``compare_thresholds``)."""
    if scales is not None:
        a = np.asarray(a).astype(np.float32) * np.float32(scales[0])
        b = np.asarray(b).astype(np.float32) * np.float32(scales[1])
    return _COMPARE[kind](a, b)


def compare_thresholds(
    kind: str, constant: np.ndarray, scale: float, bits: int
) -> tuple[str, np.ndarray]:
    """(kind', thresholds): ``fl32(q * s) <kind> c`` for every ``bits``-wide code
    ``q`` is ``q <kind'> t`` with integer thresholds ``t`` (int32; beyond the
    code range where the comparison is always or never true), since ``fl32(q *
    s)`` is strictly increasing in ``q``."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    values = np.arange(lo, hi + 1).astype(np.float32) * np.float32(scale)
    c = np.asarray(constant, np.float32)
    left = lo + np.searchsorted(values, c, side="left")
    right = lo + np.searchsorted(values, c, side="right")
    if kind in ("eq", "ne"):  # the one code of value c, or none (hi + 1)
        t = np.where(right > left, left, hi + 1)
        return kind, t.astype(np.int32)
    kind, t = {
        "gt": ("ge", right),
        "ge": ("ge", left),
        "lt": ("lt", left),
        "le": ("lt", right),
    }[kind]
    return kind, np.asarray(t).astype(np.int32)


def check_index(index: np.ndarray, size: int, what: str) -> None:
    """Refuse an index outside ``[0, size)``, naming it."""
    if index.size and (index.min() < 0 or index.max() >= size):
        bad = index[(index < 0) | (index >= size)].flat[0]
        raise IndexOutOfRangeError(
            f"{what}: index {int(bad)} is out of range for size {size}"
        )


def gather(x: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
    """``torch.gather``: ``y[i][j][k] = x[i][index[i][j][k]][k]`` (``dim`` 1);
    ``index`` has ``x``'s rank and at most its size in the other dims."""
    dim %= x.ndim
    check_index(index, x.shape[dim], "gather")
    window = tuple(slice(0, n) for n in index.shape)
    window = window[:dim] + (slice(None),) + window[dim + 1 :]
    return np.take_along_axis(x[window], index, axis=dim)


def index_copy_codes(
    x: np.ndarray, index: np.ndarray, source: np.ndarray, dim: int
) -> np.ndarray:
    """``index_copy`` on arrays: a copy of ``x`` with ``source`` written at
    ``index`` along ``dim`` (the last of repeated indices wins)."""
    dim %= x.ndim
    check_index(index, x.shape[dim], "index_copy")
    keep = last_writes(index)
    out = x.copy()
    where = (slice(None),) * dim + (index[keep],)
    out[where] = np.take(source, keep, axis=dim)
    return out


def index_select(x: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
    """``torch.index_select``: the slices of ``x`` at a 1-d ``index`` on ``dim``."""
    dim %= x.ndim
    check_index(index, x.shape[dim], "index_select")
    return np.take(x, index, axis=dim)


# ------------------------------------------------------------------ pool indices


def max_pool_indices(
    x: np.ndarray,
    kernel,
    stride,
    padding,
    dilation,
    out_hw,
) -> np.ndarray:
    """``F.max_pool2d(..., return_indices=True)``'s indices of NCHW ``x``: per
    window (``out_hw`` of them, torch's count with its ceil_mode rule) the flat
    ``h * W + w`` of the first maximum in the window's row-major scan, padding
    never chosen (torch's CPU rule: a later element replaces the best only when
    greater, or when it is NaN)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh, ow = out_hw
    rows = np.arange(oh)[:, None] * sh - ph  # the window's first row, per output row
    cols = np.arange(ow)[None, :] * sw - pw
    best = np.full((n, c, oh, ow), np.nan if x.dtype.kind == "f" else 0, x.dtype)
    index = np.full((n, c, oh, ow), -1, np.int64)
    for i in range(kh):
        for j in range(kw):
            r, q = rows + i * dh, cols + j * dw  # [oh, 1], [1, ow]
            inside = (r >= 0) & (r < h) & (q >= 0) & (q < w)  # [oh, ow]
            rr, qq = np.clip(r, 0, h - 1), np.clip(q, 0, w - 1)
            value = x[:, :, rr, qq]  # [n, c, oh, ow]
            better = inside & ((index < 0) | (value > best))
            if x.dtype.kind == "f":
                better |= inside & np.isnan(value)
            best = np.where(better, value, best)
            index = np.where(better, rr * w + qq, index)
    return index


def max_unpool(x: np.ndarray, indices: np.ndarray, size) -> np.ndarray:
    """``F.max_unpool2d``: zeros of NCHW size ``x.shape[:2] + size`` with each
    element of ``x`` written at its flat ``h * W + w`` index of its own channel
    (of repeated indices the last write in row-major order wins); an index out
    of range is an ``IndexOutOfRangeError``, as torch refuses it."""
    n, c = x.shape[:2]
    h, w = size
    check_index(indices, h * w, "max_unpool2d")
    flat = indices.reshape(n * c, -1) + np.arange(n * c)[:, None] * (h * w)
    out = np.zeros(n * c * h * w, x.dtype)
    flat = flat.reshape(-1)
    keep = last_writes(flat)
    out[flat[keep]] = x.reshape(-1)[keep]
    return out.reshape(n, c, h, w)
