"""The result-shape rules agree with the shapes torch itself produces."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from hbir.dialects import shapes


@pytest.mark.parametrize(
    "h,k,s,p,d,g",
    list(itertools.product([7, 8], [1, 3], [1, 2], [0, 1], [1, 2], [1, 2])),
)
def test_conv2d_matches_torch(h, k, s, p, d, g):
    x = torch.zeros(2, 4, h, h + 1)
    w = torch.zeros(6, 4 // g, k, k)
    want = F.conv2d(x, w, stride=s, padding=p, dilation=d, groups=g).shape
    assert shapes.conv2d(x.shape, w.shape, (s, s), (p, p), (d, d), g) == tuple(want)


@pytest.mark.parametrize(
    "s,p,op,d",
    # torch (and we) reject output_padding >= max(stride, dilation)
    [
        c
        for c in itertools.product([1, 2, 3], [0, 1], [0, 1], [1, 2])
        if c[2] < max(c[0], c[3])
    ],
)
def test_conv_transpose2d_matches_torch(s, p, op, d):
    x = torch.zeros(1, 4, 5, 6)
    w = torch.zeros(4, 3, 3, 2)
    want = F.conv_transpose2d(
        x, w, stride=s, padding=p, output_padding=op, dilation=d
    ).shape
    got = shapes.conv_transpose2d(x.shape, w.shape, (s, s), (p, p), (op, op), (d, d), 1)
    assert got == tuple(want)


@pytest.mark.parametrize(
    "h,k,s,p,ceil",
    list(itertools.product([7, 8, 9], [2, 3], [1, 2, 3], [0, 1], [0, 1])),
)
def test_pool2d_matches_torch(h, k, s, p, ceil):
    x = torch.zeros(1, 2, h, h)
    want = F.max_pool2d(x, k, s, p, ceil_mode=bool(ceil)).shape
    assert shapes.pool2d(x.shape, (k, k), (s, s), (p, p), (1, 1), bool(ceil)) == want
    want = F.avg_pool2d(x, k, s, p, ceil_mode=bool(ceil)).shape
    assert shapes.pool2d(x.shape, (k, k), (s, s), (p, p), (1, 1), bool(ceil)) == want


def test_matmul_broadcast_and_errors():
    assert shapes.matmul((2, 1, 4, 8), (3, 8, 5)) == (2, 3, 4, 5)
    assert shapes.matmul((2, 1, 4, 8), (3, 8, 5)) == tuple(
        torch.matmul(torch.zeros(2, 1, 4, 8), torch.zeros(3, 8, 5)).shape
    )
    with pytest.raises(shapes.ShapeError, match="lhs inner dim 8 != rhs rows 7"):
        shapes.matmul((4, 8), (7, 5))


def test_slice_reshape_split_pad():
    x = torch.zeros(5, 9)
    assert shapes.slice_((5, 9), (1, -7), (100, 9), (2, 3)) == tuple(
        x[1::2, 2:9:3].shape
    )
    assert shapes.reshape((2, 3, 4), (4, -1)) == (4, 6)
    with pytest.raises(shapes.ShapeError, match="at most one -1"):
        shapes.reshape((2, 3), (-1, -1))
    assert shapes.split((2, 8), (3, 5), -1) == [(2, 3), (2, 5)]
    with pytest.raises(shapes.ShapeError, match="do not partition"):
        shapes.split((2, 8), (3, 4), 1)
    assert shapes.pad((2, 3), (0, 1), (1, 2)) == (3, 6)


def test_conv_transpose2d_rejects_large_output_padding():
    with pytest.raises(shapes.ShapeError, match="output_padding must be smaller"):
        shapes.conv_transpose2d(
            (1, 4, 5, 5), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1), (1, 1), 1
        )


def test_errors_name_the_operand_and_numbers():
    with pytest.raises(
        shapes.ShapeError, match="input has 4 channels, weight expects 3"
    ):
        shapes.conv2d((1, 4, 8, 8), (2, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1)
    with pytest.raises(shapes.ShapeError, match=r"shapes \(4, 8\) and \(3,\)"):
        shapes.broadcast((4, 8), (3,))
    with pytest.raises(shapes.ShapeError, match="dim 2 is out of range for rank 2"):
        shapes.reduce((4, 8), (2,), False)
