"""Exact integer Winograd F(2x2, 3x3): a 3x3 stride-1 conv of 8-bit codes in
2.25x fewer float32 multiply-adds, bit for bit the direct conv's sums.

Winograd's minimal filtering (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", 2016) computes each 2x2 output tile as
``A^T [(G g G^T) * (B^T d B)] A``: 16 products per tile and channel where the
direct conv takes 36. Its ``G`` has halves; doubled (``2G``, below) every
transform is an integer matrix, so in integers the result is exactly 4 times
the conv's sums, and the division by 4 at the end is exact. What makes float32
exact is the bound: the input transform adds or subtracts two codes per axis
(``|B^T d B| <= 4 max|x|``), so every partial sum of one product plane, in any
order, is at most ``4 max|x| * sum_c |(2G) g (2G)^T|`` per output channel and
plane; where that passes 2**24 the input channels split into the fewest equal
chunks within it (``numerics.float32_chunks``, as for the direct conv),
each chunk's sums exact, added in float64 before the output transform.

So a conv takes this path only where it is exact, decided once from the weight
codes (``pack``), and faster: the 16 products are 16 float32 gemms (one
``torch.bmm``), the transforms compiled one-pass loops
(``runtime/jit_kernels``: ``winograd_input`` / ``winograd_output``). On an
AVX2 CPU it runs ResNet-18's 3x3 convs 1.3-1.7x faster than oneDNN's direct
float32 conv; where torch's int8 gemm is the fast engine (VNNI) that one keeps
them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hbir.runtime import numerics
from hbir.runtime.requantizer import loops, magnitude

# 2 x the G of F(2x2, 3x3): integer, so the weight transform is exact
G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], np.int64)
# Fewer channels than this in or out: the direct conv (the gemms too small
# for the transforms to pay).
MIN_CHANNELS = 8


@dataclass(frozen=True)
class WinogradWeight:
    """A 3x3 conv's weight transformed once: ``u[k*16 + p]`` is plane ``p`` of
    ``(2G) g (2G)^T`` for input-channel chunk ``k``, ``[O, C / chunks]``."""

    u: torch.Tensor  # float32 [chunks * 16, O, C / chunks]
    chunks: int
    x_dtype: np.dtype  # the inputs the bound was proven for

    def takes(self, x: np.ndarray, stride, pads, dilation) -> bool:
        """Whether this conv call is one the transform computes exactly."""
        t, lf, b, r = pads
        return (
            x.dtype == self.x_dtype
            and tuple(stride) == (1, 1)
            and tuple(dilation) == (1, 1)
            and min(x.shape[2] + t + b, x.shape[3] + lf + r) >= 3
        )


def pack(w: np.ndarray, x_dtype) -> WinogradWeight | None:
    """``w`` (OIHW codes) transformed for inputs of ``x_dtype``, or None where
    the path does not apply or is not exact: not a dense 3x3 conv of 8-bit
    codes, too few channels, no split of at most 16 chunks that float32
    holds, or no compiled loops."""
    x_dtype = np.dtype(x_dtype)
    o, c = w.shape[:2]
    if (
        w.ndim != 4
        or w.shape[2:] != (3, 3)
        or x_dtype.kind not in "iu"
        or x_dtype.itemsize != 1
        or w.dtype.kind not in "iu"
        or min(o, c) < MIN_CHANNELS
        or loops() is None
    ):
        return None
    u = np.einsum("ai,ocij,bj->aboc", G2, w.astype(np.int64), G2).reshape(16, o, c)
    # |B^T d B| <= 4 max|x|: each output's reach per input channel, per plane
    per_input = np.abs(u).reshape(16 * o, c)
    chunks = numerics.float32_chunks(per_input, 4 * magnitude(x_dtype))
    if not chunks:
        return None
    planes = u.reshape(16, o, chunks, c // chunks).transpose(2, 0, 1, 3)
    packed = torch.from_numpy(planes.reshape(chunks * 16, o, c // chunks))
    return WinogradWeight(packed.float().contiguous(), chunks, x_dtype)


def sums(x: np.ndarray, ww: WinogradWeight, pads, dtype) -> np.ndarray:
    """The exact stride-1 conv sums of NCHW codes ``x`` (any memory order),
    ``pads`` (t, l, b, r), as ``dtype`` (an integer dtype wide enough, or a
    float one for integer-valued floats): NCHW, in channels-last memory."""
    n, c, h, w = x.shape
    t, lf, b, r = pads
    oh, ow = h + t + b - 2, w + lf + r - 2
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    jit, chunks = loops(), ww.chunks
    v = np.empty((chunks * 16, n * th * tw, c // chunks), np.float32)
    jit.winograd_input(x.transpose(0, 2, 3, 1), t, lf, th, tw, chunks, v)
    m = torch.bmm(torch.from_numpy(v), ww.u.transpose(1, 2)).numpy()
    out = np.empty((n, oh, ow, ww.u.shape[1]), dtype)
    jit.winograd_output(m, chunks, th, tw, out)
    return out.transpose(0, 3, 1, 2)
