"""runtime/selection.py's pool indices and unpooling against torch's own."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hbir.dialects import shapes
from hbir.runtime import selection


def _windows(rng, count):
    """Random pools (kernel, stride, padding, dilation, ceil_mode) and inputs of
    few distinct values (many equal maxima: the tie rule decides)."""
    for _ in range(count):
        h, w = (int(v) for v in rng.integers(3, 10, 2))
        kernel = tuple(int(v) for v in rng.integers(1, 4, 2))
        stride = tuple(int(v) for v in rng.integers(1, 3, 2))
        dilation = tuple(int(v) for v in rng.integers(1, 3, 2))
        padding = tuple(int(rng.integers(0, k // 2 + 1)) for k in kernel)
        ceil = bool(rng.integers(0, 2))
        x = rng.integers(-3, 3, (2, 3, h, w))
        yield x, kernel, stride, padding, dilation, ceil


def test_max_pool_indices_are_torchs_on_codes_and_values():
    """Over 300 random pools (padding, dilation, ceil_mode; 6 distinct values, so
    most windows hold equal maxima) the indices of int8 codes and of float32
    values both equal torch's CPU ``max_pool2d_with_indices``: the first maximum
    in the window's row-major scan, padding never chosen."""
    rng = np.random.default_rng(0)
    checked = 0
    for x, kernel, stride, padding, dilation, ceil in _windows(rng, 300):
        xt = torch.from_numpy(x.astype(np.float32))
        try:
            _, want = F.max_pool2d(
                xt, kernel, stride, padding, dilation, ceil, return_indices=True
            )
        except RuntimeError:  # a window entirely in the padding: torch refuses
            continue
        out = shapes.pool2d(x.shape, kernel, stride, padding, dilation, ceil)[2:]
        how = (kernel, stride, padding, dilation, out)
        got = selection.max_pool_indices(x.astype(np.int8), *how)
        np.testing.assert_array_equal(got, want.numpy())
        got = selection.max_pool_indices(x.astype(np.float32), *how)
        np.testing.assert_array_equal(got, want.numpy())
        checked += 1
    assert checked > 200


def test_max_unpool_is_torchs_and_refuses_an_index_out_of_range():
    rng = np.random.default_rng(1)
    checked = 0
    for x, kernel, stride, padding, dilation, ceil in _windows(rng, 200):
        xt = torch.from_numpy(x.astype(np.float32))
        try:
            values, where = F.max_pool2d(
                xt, kernel, stride, padding, dilation, ceil, return_indices=True
            )
            want = F.max_unpool2d(
                values, where, kernel, stride, padding, output_size=x.shape[2:]
            )
        except (RuntimeError, ValueError):  # sizes torch's unpool refuses
            continue
        got = selection.max_unpool(values.numpy(), where.numpy(), x.shape[2:])
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want.numpy())
        checked += 1
    assert checked > 100
    where = np.array([0, 5, 16, 3]).reshape(1, 1, 2, 2)
    with pytest.raises(selection.IndexOutOfRangeError, match="index 16 is out of"):
        selection.max_unpool(np.ones((1, 1, 2, 2), np.int8), where, (4, 4))
