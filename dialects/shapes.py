"""Result-shape rules of the hbir ops, in plain Python.

One rule per op family, used twice: by the op builders (so callers need not spell
result types) and by the verifiers (so a hand-written result type is checked against
the same rule). A rule raises ``ShapeError`` with a message naming the operand and
the numbers; verifiers turn it into a ``VerifyException``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hbir.errors import HbirValueError

Shape = tuple[int, ...]


class ShapeError(HbirValueError):
    """An operand shape or attribute that no result shape can follow from."""


def _check_len(name: str, values: Sequence[int], n: int) -> None:
    if len(values) != n:
        raise ShapeError(f"{name} needs {n} values, got {len(values)}")


def _check_positive(name: str, values: Sequence[int]) -> None:
    if any(v <= 0 for v in values):
        raise ShapeError(f"{name} values must be positive, got {list(values)}")


def _check_rank(name: str, shape: Shape, rank: int) -> None:
    if len(shape) != rank:
        raise ShapeError(f"{name} has {len(shape)} dims, expected {rank}")


def normalize_dim(dim: int, rank: int, name: str = "dim") -> int:
    """A possibly negative dimension index as a non-negative one."""
    if not -rank <= dim < max(rank, 1):
        raise ShapeError(f"{name} {dim} is out of range for rank {rank}")
    return dim % rank if rank else 0


def broadcast(lhs: Shape, rhs: Shape) -> Shape:
    """numpy/torch broadcasting of two shapes."""
    n = max(len(lhs), len(rhs))
    a = (1,) * (n - len(lhs)) + tuple(lhs)
    b = (1,) * (n - len(rhs)) + tuple(rhs)
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            raise ShapeError(
                f"shapes {tuple(lhs)} and {tuple(rhs)} are not broadcastable"
            )
        out.append(max(x, y))
    return tuple(out)


def _window(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def conv2d(
    x: Shape,
    w: Shape,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> Shape:
    """NCHW input, OIHW weight, symmetric padding ``[ph, pw]`` (torch semantics)."""
    _check_rank("input", x, 4)
    _check_rank("weight", w, 4)
    for name, values in (
        ("stride", stride),
        ("padding", padding),
        ("dilation", dilation),
    ):
        _check_len(name, values, 2)
    _check_positive("stride", stride)
    _check_positive("dilation", dilation)
    if groups <= 0:
        raise ShapeError(f"groups must be positive, got {groups}")
    n, c, h, wd = x
    o, ci, kh, kw = w
    if c != ci * groups:
        raise ShapeError(
            f"input has {c} channels, weight expects {ci} * groups {groups}"
        )
    if o % groups:
        raise ShapeError(
            f"weight has {o} output channels, not divisible by groups {groups}"
        )
    oh = _window(h, kh, stride[0], padding[0], dilation[0])
    ow = _window(wd, kw, stride[1], padding[1], dilation[1])
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"kernel {kh}x{kw} does not fit input {h}x{wd}")
    return (n, o, oh, ow)


def conv_transpose2d(
    x: Shape,
    w: Shape,
    stride: Sequence[int],
    padding: Sequence[int],
    output_padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> Shape:
    """NCHW input, weight ``(C_in, C_out / groups, kH, kW)`` as in torch."""
    _check_rank("input", x, 4)
    _check_rank("weight", w, 4)
    for name, values in (
        ("stride", stride),
        ("padding", padding),
        ("output_padding", output_padding),
        ("dilation", dilation),
    ):
        _check_len(name, values, 2)
    _check_positive("stride", stride)
    _check_positive("dilation", dilation)
    n, c, h, wd = x
    ci, og, kh, kw = w
    if c != ci:
        raise ShapeError(f"input has {c} channels, weight expects {ci}")
    if groups <= 0 or c % groups:
        raise ShapeError(f"input channels {c} not divisible by groups {groups}")
    for i in range(2):
        if output_padding[i] >= max(stride[i], dilation[i]):
            raise ShapeError("output_padding must be smaller than stride or dilation")
    sizes = []
    for size, k, i in ((h, kh, 0), (wd, kw, 1)):
        sizes.append(
            (size - 1) * stride[i]
            - 2 * padding[i]
            + dilation[i] * (k - 1)
            + output_padding[i]
            + 1
        )
    return (n, og * groups, *sizes)


def pool2d(
    x: Shape,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
) -> Shape:
    """torch's pooling output size, including its ceil_mode rule."""
    _check_rank("input", x, 4)
    for name, values in (
        ("kernel", kernel),
        ("stride", stride),
        ("padding", padding),
        ("dilation", dilation),
    ):
        _check_len(name, values, 2)
    _check_positive("kernel", kernel)
    _check_positive("stride", stride)
    for i in range(2):
        if padding[i] * 2 > kernel[i]:
            raise ShapeError(f"padding {list(padding)} exceeds half the kernel")
    out = []
    for i, size in enumerate(x[2:]):
        span = size + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1
        if ceil_mode:
            o = -(-span // stride[i]) + 1
            # The last window must start inside the input or the left padding.
            if (o - 1) * stride[i] >= size + padding[i]:
                o -= 1
        else:
            o = span // stride[i] + 1
        if o <= 0:
            raise ShapeError(f"kernel {list(kernel)} does not fit input {x[2:]}")
        out.append(o)
    return (x[0], x[1], *out)


def linear(x: Shape, w: Shape) -> Shape:
    if len(x) < 1:
        raise ShapeError("input must have at least 1 dim")
    _check_rank("weight", w, 2)
    if x[-1] != w[1]:
        raise ShapeError(f"input inner dim {x[-1]} != weight inner dim {w[1]}")
    return (*x[:-1], w[0])


def matmul(a: Shape, b: Shape) -> Shape:
    """Batched matmul of rank >= 2 operands with broadcast batch dims."""
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul operands need rank >= 2, got {len(a)} and {len(b)}")
    if a[-1] != b[-2]:
        raise ShapeError(f"lhs inner dim {a[-1]} != rhs rows {b[-2]}")
    return (*broadcast(a[:-2], b[:-2]), a[-2], b[-1])


def reduce(x: Shape, dims: Sequence[int], keepdim: bool) -> Shape:
    norm = {normalize_dim(d, len(x)) for d in dims}
    if len(norm) != len(dims):
        raise ShapeError(f"dims {list(dims)} repeat a dimension")
    if keepdim:
        return tuple(1 if i in norm else s for i, s in enumerate(x))
    return tuple(s for i, s in enumerate(x) if i not in norm)


def concat(shapes: Sequence[Shape], dim: int) -> Shape:
    if not shapes:
        raise ShapeError("concat needs at least one input")
    rank = len(shapes[0])
    d = normalize_dim(dim, rank)
    total = 0
    for i, s in enumerate(shapes):
        if len(s) != rank or any(s[j] != shapes[0][j] for j in range(rank) if j != d):
            raise ShapeError(f"input {i} has shape {s}, incompatible with {shapes[0]}")
        total += s[d]
    return (*shapes[0][:d], total, *shapes[0][d + 1 :])


def slice_(
    x: Shape, begin: Sequence[int], end: Sequence[int], step: Sequence[int]
) -> Shape:
    """Per-dimension ``[begin, end)`` with positive ``step``; ends clamp to the size."""
    for name, values in (("begin", begin), ("end", end), ("step", step)):
        _check_len(name, values, len(x))
    _check_positive("step", step)
    out = []
    for size, b, e, s in zip(x, begin, end, step, strict=True):
        b, e = (b + size if b < 0 else b), (e + size if e < 0 else e)
        b, e = min(max(b, 0), size), min(max(e, 0), size)
        out.append(max(0, -(-(e - b) // s)))
    return tuple(out)


def split(x: Shape, sizes: Sequence[int], dim: int) -> list[Shape]:
    d = normalize_dim(dim, len(x))
    if sum(sizes) != x[d] or any(s <= 0 for s in sizes):
        raise ShapeError(f"split sizes {list(sizes)} do not partition dim {d} of {x}")
    return [(*x[:d], s, *x[d + 1 :]) for s in sizes]


def transpose(x: Shape, perm: Sequence[int]) -> Shape:
    if sorted(perm) != list(range(len(x))):
        raise ShapeError(f"perm {list(perm)} is not a permutation of rank {len(x)}")
    return tuple(x[p] for p in perm)


def reshape(x: Shape, shape: Sequence[int]) -> Shape:
    """A target shape with at most one -1, which is inferred."""
    shape = list(shape)
    total = 1
    for s in x:
        total *= s
    if shape.count(-1) > 1:
        raise ShapeError("reshape allows at most one -1")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if -1 in shape:
        if known == 0 or total % known:
            raise ShapeError(f"cannot reshape {tuple(x)} into {tuple(shape)}")
        shape[shape.index(-1)] = total // known
    elif known != total:
        raise ShapeError(f"cannot reshape {tuple(x)} ({total} elements) into {shape}")
    return tuple(shape)


def pad(x: Shape, low: Sequence[int], high: Sequence[int]) -> Shape:
    _check_len("low", low, len(x))
    _check_len("high", high, len(x))
    out = tuple(s + lo + hi for s, lo, hi in zip(x, low, high, strict=True))
    if any(s < 0 for s in out):
        raise ShapeError(f"padding gives a negative size {out}")
    return out


def resize2d(x: Shape, size: Sequence[int]) -> Shape:
    _check_rank("input", x, 4)
    _check_len("size", size, 2)
    _check_positive("size", size)
    return (x[0], x[1], *size)


def grid_sample(x: Shape, grid: Shape) -> Shape:
    """``F.grid_sample`` of an N, C, H, W input at an N, Ho, Wo, 2 grid."""
    _check_rank("input", x, 4)
    _check_rank("grid", grid, 4)
    if grid[0] != x[0] or grid[3] != 2:
        raise ShapeError(f"grid {list(grid)} does not fit input {list(x)}")
    return (x[0], x[1], grid[1], grid[2])


def topk(x: Shape, k: int, dim: int) -> Shape:
    d = normalize_dim(dim, len(x))
    if not 0 <= k <= x[d]:
        raise ShapeError(f"k {k} is out of range for dim {dim} of size {x[d]}")
    return x[:d] + (k,) + x[d + 1 :]


def gather(x: Shape, index: Shape, dim: int) -> Shape:
    """``torch.gather``: the index's shape, its rank the input's and its sizes at
    most the input's in every other dim."""
    d = normalize_dim(dim, len(x))
    if len(index) != len(x):
        raise ShapeError(f"index has {len(index)} dims, the input {len(x)}")
    if any(i > n for a, (i, n) in enumerate(zip(index, x, strict=True)) if a != d):
        raise ShapeError(f"index shape {list(index)} exceeds input {list(x)}")
    return tuple(index)


def index_select(x: Shape, index: Shape, dim: int) -> Shape:
    d = normalize_dim(dim, len(x))
    if len(index) != 1:
        raise ShapeError(f"index must be 1-d, got {len(index)} dims")
    return x[:d] + (index[0],) + x[d + 1 :]
