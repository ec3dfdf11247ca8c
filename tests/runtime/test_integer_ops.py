"""runtime/integer_ops.py: the pure-numpy specification equals the fast engines.

The interpreter (and the npu kernels) pass torch float64 engines; the default
engines are numpy int64. Both must give the same exact sums, for every padding,
stride, dilation and group layout the compile passes produce (asymmetric tile
padding included), and saturate to the accumulator width.
"""

import numpy as np
import pytest

from hbir.runtime import integer_ops
from hbir.runtime import interpreter as interp

rng = np.random.default_rng(0)


@pytest.mark.parametrize(
    "stride,pads,dilation,groups",
    [
        ((1, 1), (1, 1, 1, 1), (1, 1), 1),
        ((2, 1), (1, 0, 0, 2), (1, 1), 1),  # a tile's own padding
        ((1, 2), (0, 0, 0, 0), (2, 1), 2),
        ((1, 1), (1, 1, 1, 1), (1, 1), 4),  # depthwise
    ],
)
def test_conv2d_numpy_engine_equals_the_float64_engine(stride, pads, dilation, groups):
    x = rng.integers(-128, 128, (2, 4, 7, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 4 // groups, 3, 3), dtype=np.int8)
    b = rng.integers(-(2**20), 2**20, 8)
    args = (x, w, b, stride, pads, dilation, groups)
    want = integer_ops.conv2d(*args)
    got = integer_ops.conv2d(*args, engine=interp._conv2d_engine)
    assert np.array_equal(want, got)


def test_conv_transpose2d_numpy_engine_equals_the_float64_engine():
    x = rng.integers(-128, 128, (1, 4, 5, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
    args = (x, w, None, (2, 2), (1, 1), (1, 0), 1, (1, 1))
    want = integer_ops.conv_transpose2d(*args)
    got = integer_ops.conv_transpose2d(*args, engine=interp._conv_transpose2d_engine)
    assert np.array_equal(want, got)


def test_gemms_saturate_to_the_accumulator_width():
    x = np.full((1, 1024), -32768, np.int16)
    w = np.full((2, 1024), -128, np.int8)
    assert integer_ops.linear(x, w, None).tolist() == [[2**31 - 1] * 2]
    assert integer_ops.linear(x, w, None, bits=64).tolist() == [[2**32] * 2]
    assert integer_ops.matmul(x, w.T).tolist() == [[2**31 - 1] * 2]


def test_max_pool_with_asymmetric_padding_never_picks_the_padding():
    x = rng.integers(-128, 0, (1, 2, 5, 5), dtype=np.int8)  # all negative
    y = integer_ops.max_pool2d(x, (3, 3), (2, 2), (1, 1, 0, 1), (1, 1), False)
    assert y.dtype == np.int8 and (y < 0).all()
    assert y[0, 0, 0, 0] == x[0, 0, :2, :2].max()
