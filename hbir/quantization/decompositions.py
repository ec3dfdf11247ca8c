"""Ops that deployment computes in steps, written as chains of QAT modules.

``prepare`` inlines each container's ``forward`` into the prepared graph, so every step
is its own ``call_module`` with its own output fake quant; the container stays in the
module tree (``attn.softmax`` holding ``attn.softmax.exp`` ...) to group the steps and
to carry the op's parameters. Intermediate steps are at least int16 (a softmax sum or a
variance in int8 loses most of its precision); the last step has the qconfig's output
dtype. Each step's qconfig is resolved by name, so ``attn.softmax.exp`` can be
overridden on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from hbir.quantization.lut_modules import Exp, Log, Reciprocal, Rsqrt, Sqrt
from hbir.quantization.qat_modules import (
    QuantAdd,
    QuantAffine,
    QuantMatmul,
    QuantMean,
    QuantMul,
    QuantSub,
    QuantSum,
)
from hbir.quantization.qconfig import QConfig

# (step name, module class, is the op's final step) -> QConfig
StepQconfig = Callable[[str, type, bool], QConfig]


class Decomposition(nn.Module):
    """A container whose forward ``prepare`` inlines step by step."""

    op = ""


class SoftmaxDecomposition(Decomposition):
    """``softmax(x) = e * reciprocal(sum(e))`` with ``e = exp(x - max(x))``.

    Subtracting the row maximum (a pass-through ``amax``: it selects an input value)
    bounds ``e`` to (0, 1] and the sum to [1, n], so each step has a small fixed range.
    """

    op = "softmax"

    def __init__(
        self,
        dim: int,
        qconfig_for: StepQconfig,
        keep: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.dim = dim
        self.masked = keep is not None
        if bias is not None:  # a constant added first (a finite attention mask)
            self.register_buffer("bias", bias.to(torch.float32))
            self.add_bias = QuantAdd(qconfig_for("add_bias", QuantAdd, False))
        self.sub = QuantSub(qconfig_for("sub", QuantSub, False))
        self.exp = Exp(qconfig_for("exp", Exp, False))
        if self.masked:  # the positions a mask excludes (-inf, False): exp times 0
            self.register_buffer("keep", keep.to(torch.float32))
            self.keep_exp = QuantMul(qconfig_for("keep", QuantMul, False))
        self.sum = QuantSum(qconfig_for("sum", QuantSum, False), dim, keepdim=True)
        self.reciprocal = Reciprocal(qconfig_for("reciprocal", Reciprocal, False))
        self.mul = QuantMul(qconfig_for("mul", QuantMul, True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "add_bias"):
            x = self.add_bias(x, self.bias)
        e = self.exp(self.sub(x, torch.amax(x, self.dim, keepdim=True)))
        if self.masked:
            e = self.keep_exp(e, self.keep)
        return self.mul(e, self.reciprocal(self.sum(e)))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class WhereDecomposition(Decomposition):
    """``where(cond, a, b)`` for a constant ``cond`` (a mask made from sizes):
    ``a * keep + b * (1 - keep)`` with ``keep`` the mask as 0 / 1, each product
    its own step (a quantized constant factor of 0 or 1), the sum the last; an
    operand that is the number 0 has no product."""

    op = "where"

    def __init__(
        self, cond: torch.Tensor, a_tensor: bool, b_tensor: bool, qconfig_for
    ) -> None:
        super().__init__()
        self.a_tensor, self.b_tensor = a_tensor, b_tensor
        both = a_tensor and b_tensor
        self.register_buffer("keep", cond.to(torch.float32))
        self.register_buffer("drop", 1.0 - cond.to(torch.float32))
        if a_tensor:
            self.keep_a = QuantMul(qconfig_for("keep_a", QuantMul, not both))
        if b_tensor:
            self.keep_b = QuantMul(qconfig_for("keep_b", QuantMul, not both))
        if both:
            self.add = QuantAdd(qconfig_for("add", QuantAdd, True))

    def forward(self, a, b):
        if not self.b_tensor:
            return self.keep_a(a, self.keep)
        if not self.a_tensor:
            return self.keep_b(b, self.drop)
        return self.add(self.keep_a(a, self.keep), self.keep_b(b, self.drop))


class CumsumDecomposition(Decomposition):
    """``cumsum(x, dim)`` as a linear over ``dim`` with the fixed weights
    ``w[j, i] = 1 if i <= j`` (its weight fake quantization: every value of the
    running sum is an exact sum of codes, requantized once): ``dim`` moved last,
    the linear, moved back."""

    op = "cumsum"

    def __init__(self, dim: int, length: int, rank: int, qconfig_for: StepQconfig):
        super().__init__()
        from hbir.quantization.qat_modules import Linear

        self.dim, self.last = dim % rank, rank - 1
        linear = nn.Linear(length, length, bias=False)
        linear.weight = nn.Parameter(
            torch.ones(length, length).tril(), requires_grad=False
        )
        self.sum = Linear.from_float(linear, qconfig_for("sum", Linear, True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dim == self.last:
            return self.sum(x)
        return self.sum(x.transpose(self.dim, self.last)).transpose(self.dim, self.last)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class PReLUDecomposition(Decomposition):
    """``prelu(x) = relu(x) + w[c] * (x - relu(x))``: the negative part
    (``x - relu(x)``, exact on the input grid) times the learnable per-channel
    slope (a per-channel affine), added to the positive part. A single slope is
    given to every channel (the QAT model trains one per channel)."""

    op = "prelu"

    def __init__(self, weight: nn.Parameter, rank: int, qconfig_for: StepQconfig):
        super().__init__()
        from hbir.quantization.qat_modules import ReLU

        self.relu = ReLU(qconfig_for("relu", ReLU, False))
        self.negative = QuantSub(qconfig_for("negative", QuantSub, False))
        view = (-1,) + (1,) * (rank - 2)
        self.slope = QuantAffine(
            qconfig_for("slope", QuantAffine, False), weight, None, view
        )
        self.add = QuantAdd(qconfig_for("add", QuantAdd, True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positive = self.relu(x)
        return self.add(positive, self.slope(self.negative(x, positive)))


class LogSoftmaxDecomposition(Decomposition):
    """``log_softmax(x) = (x - max(x)) - log(sum(exp(x - max(x))))``: the shifted
    input is at most 0 and the sum in [1, n], so each step keeps a small range."""

    op = "log_softmax"

    def __init__(self, dim: int, qconfig_for: StepQconfig) -> None:
        super().__init__()
        self.dim = dim
        self.shift = QuantSub(qconfig_for("shift", QuantSub, False))
        self.exp = Exp(qconfig_for("exp", Exp, False))
        self.sum = QuantSum(qconfig_for("sum", QuantSum, False), dim, keepdim=True)
        self.log = Log(qconfig_for("log", Log, False))
        self.sub = QuantSub(qconfig_for("sub", QuantSub, True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shifted = self.shift(x, torch.amax(x, self.dim, keepdim=True))
        return self.sub(shifted, self.log(self.sum(self.exp(shifted))))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class VarianceDecomposition(Decomposition):
    """``var(x) = mean((x - mean(x))^2) * n / (n - correction)`` over ``dims``;
    ``std`` is its square root (a table)."""

    op = "var"

    def __init__(
        self,
        dims: tuple[int, ...],
        count: int,
        correction: float,
        keepdim: bool,
        sqrt: bool,
        qconfig_for: StepQconfig,
    ) -> None:
        super().__init__()
        self.dims, self.keepdim = dims, keepdim
        self.factor = count / (count - correction) if correction else None
        self.mean = QuantMean(qconfig_for("mean", QuantMean, False), dims, keepdim=True)
        self.sub = QuantSub(qconfig_for("sub", QuantSub, False))
        self.square = QuantMul(qconfig_for("square", QuantMul, False))
        last = self.factor is None and not sqrt
        self.var = QuantMean(qconfig_for("var", QuantMean, last), dims, keepdim)
        self.scale = None
        if self.factor is not None:
            self.scale = QuantMul(qconfig_for("scale", QuantMul, not sqrt))
        self.sqrt = Sqrt(qconfig_for("sqrt", Sqrt, True)) if sqrt else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centered = self.sub(x, self.mean(x))
        y = self.var(self.square(centered, centered))
        if self.scale is not None:
            y = self.scale(y, self.factor)
        return y if self.sqrt is None else self.sqrt(y)

    def extra_repr(self) -> str:
        return f"dims={self.dims}, factor={self.factor}, keepdim={self.keepdim}"


class NormDecomposition(Decomposition):
    """The 2-norm ``sqrt(sum(x * x, dims))``."""

    op = "norm"

    def __init__(self, dims, keepdim: bool, qconfig_for: StepQconfig) -> None:
        super().__init__()
        self.dims, self.keepdim = dims, keepdim
        self.square = QuantMul(qconfig_for("square", QuantMul, False))
        self.sum = QuantSum(qconfig_for("sum", QuantSum, False), dims, keepdim)
        self.sqrt = Sqrt(qconfig_for("sqrt", Sqrt, True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sqrt(self.sum(self.square(x, x)))

    def extra_repr(self) -> str:
        return f"dims={self.dims}, keepdim={self.keepdim}"


class AddProductDecomposition(Decomposition):
    """``beta * input + alpha * (a op b)``: ``addcmul`` (op: ``*``, alpha is its
    ``value``), ``addmm`` / ``baddbmm`` (op: ``@``). A factor of 1 is no step; with
    ``beta = 0`` the input is ignored (as torch does, even where it is NaN)."""

    op = "addcmul"

    def __init__(
        self, matmul: bool, alpha: float, beta: float, qconfig_for: StepQconfig
    ) -> None:
        super().__init__()
        self.alpha, self.beta = alpha, beta
        cls = QuantMatmul if matmul else QuantMul
        scaled, added = alpha != 1, beta != 0
        self.product = cls(qconfig_for("product", cls, not (scaled or added)))
        if scaled:
            self.scale = QuantMul(qconfig_for("scale", QuantMul, not added))
        if added and beta != 1:
            self.scale_input = QuantMul(qconfig_for("scale_input", QuantMul, False))
        if added:
            self.add = QuantAdd(qconfig_for("add", QuantAdd, True))

    def forward(self, input, a, b):
        y = self.product(a, b)
        if self.alpha != 1:
            y = self.scale(y, self.alpha)
        if self.beta == 0:
            return y
        if self.beta != 1:
            input = self.scale_input(input, self.beta)
        return self.add(input, y)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta}"


class EinsumDecomposition(Decomposition):
    """``torch.einsum`` of two operands as one quantized batched matmul: each
    operand permuted to (batch, kept, contracted) / (batch, contracted, kept) and
    viewed as 3-d, the product viewed and permuted to the output's labels.
    ``plan`` (``einsum_plan``) holds the permutations and views, made once from the
    traced shapes; a one-operand einsum is a permutation (``EinsumPermutation``)."""

    op = "einsum"

    def __init__(self, plan: dict, qconfig_for: StepQconfig) -> None:
        super().__init__()
        self.plan = plan
        self.matmul = QuantMatmul(qconfig_for("matmul", QuantMatmul, True))

    def forward(self, a, b):
        plan = self.plan
        (perm_a, view_a), (perm_b, view_b) = plan["inputs"]
        a = a.permute(perm_a).reshape(view_a)
        b = b.permute(perm_b).reshape(view_b)
        return self.matmul(a, b).reshape(plan["out_view"]).permute(plan["out_perm"])

    def extra_repr(self) -> str:
        return f"equation={self.plan['equation']!r}"


class EinsumPermutation(Decomposition):
    """A one-operand ``torch.einsum`` that only reorders its labels."""

    op = "einsum"

    def __init__(self, plan: dict, qconfig_for: StepQconfig) -> None:
        super().__init__()
        self.plan = plan

    def forward(self, a):
        return a.permute(self.plan["out_perm"])

    def extra_repr(self) -> str:
        return f"equation={self.plan['equation']!r}"


def einsum_plan(equation: str, shapes: list[tuple[int, ...]]) -> dict:
    """The permutations and views of ``EinsumDecomposition``; ValueError for what
    it cannot compute (ellipses, repeated or summed-out labels, 3+ operands)."""
    text = equation.replace(" ", "")
    if "..." in text:
        raise ValueError("an einsum with '...' (write the labels out)")
    lhs, arrow, out = text.partition("->")
    ins = lhs.split(",")
    if not arrow:
        counts = {c: lhs.count(c) for c in lhs if c != ","}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(ins) not in (1, 2) or len(ins) != len(shapes):
        raise ValueError(f"an einsum of {len(ins)} operands (1 or 2)")
    for labels, shape in zip(ins, shapes, strict=True):
        if len(set(labels)) != len(labels) or len(labels) != len(shape):
            raise ValueError(f"einsum operand {labels!r} (a repeated label: diagonal)")
    size = {
        c: n
        for labels, shape in zip(ins, shapes, strict=True)
        for c, n in zip(labels, shape, strict=True)
    }
    if len(ins) == 1:
        if sorted(ins[0]) != sorted(out):
            raise ValueError("a one-operand einsum that sums (use sum)")
        return {
            "equation": equation,
            "inputs": [],
            "out_perm": [ins[0].index(c) for c in out],
        }
    a, b = ins
    if any((c in a) != (c in b) and c not in out for c in a + b):
        raise ValueError("an einsum label summed in one operand only (sum it first)")
    batch = [c for c in out if c in a and c in b]
    contracted = [c for c in a if c in b and c not in out]
    left = [c for c in out if c in a and c not in b]
    right = [c for c in out if c in b and c not in a]

    def prod(labels):
        return math.prod(size[c] for c in labels)

    order = batch + left + right
    return {
        "equation": equation,
        "inputs": [
            (
                [a.index(c) for c in batch + left + contracted],
                (prod(batch), prod(left), prod(contracted)),
            ),
            (
                [b.index(c) for c in batch + contracted + right],
                (prod(batch), prod(contracted), prod(right)),
            ),
        ],
        "out_view": tuple(size[c] for c in order),
        "out_perm": [order.index(c) for c in out],
    }


class LayerNormDecomposition(Decomposition):
    """``(x - mean) * rsqrt(mean((x - mean)^2) + eps)``, then ``* weight + bias``.

    ``eps`` is added as its own quantized step (``add_eps``) before the rsqrt table,
    so the table stays a plain ``rsqrt`` that exponent normalisation evaluates within
    a few LSB; an ``eps`` below the variance's LSB rounds away, as in fixed point.
    """

    op = "layer_norm"

    def __init__(
        self,
        normalized_shape: tuple[int, ...],
        eps: float,
        weight: nn.Parameter | None,
        bias: nn.Parameter | None,
        qconfig_for: StepQconfig,
    ) -> None:
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        dims = tuple(range(-len(self.normalized_shape), 0))
        affine = weight is not None
        self.mean = QuantMean(qconfig_for("mean", QuantMean, False), dims, keepdim=True)
        self.sub = QuantSub(qconfig_for("sub", QuantSub, False))
        self.square = QuantMul(qconfig_for("square", QuantMul, False))
        self.var = QuantMean(qconfig_for("var", QuantMean, False), dims, keepdim=True)
        self.add_eps = QuantAdd(qconfig_for("add_eps", QuantAdd, False))
        self.rsqrt = Rsqrt(qconfig_for("rsqrt", Rsqrt, False))
        self.mul = QuantMul(qconfig_for("mul", QuantMul, not affine))
        self.affine = None
        if affine:
            qconfig = qconfig_for("affine", QuantAffine, True)
            self.affine = QuantAffine(qconfig, weight, bias, self.normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centered = self.sub(x, self.mean(x))
        var = self.var(self.square(centered, centered))
        normed = self.mul(centered, self.rsqrt(self.add_eps(var, self.eps)))
        return normed if self.affine is None else self.affine(normed)

    def extra_repr(self) -> str:
        return f"normalized_shape={self.normalized_shape}, eps={self.eps}"


class DivDecomposition(Decomposition):
    """``x / y = x * reciprocal(y)`` for a tensor divisor."""

    op = "div"

    def __init__(self, qconfig_for: StepQconfig) -> None:
        super().__init__()
        self.reciprocal = Reciprocal(qconfig_for("reciprocal", Reciprocal, False))
        self.mul = QuantMul(qconfig_for("mul", QuantMul, True))

    def forward(self, x, y):
        return self.mul(x, self.reciprocal(y))


class AttentionDecomposition(Decomposition):
    """``softmax(q @ k^T * scale + mask) @ v``: ``F.scaled_dot_product_attention``
    without dropout, as two quantized matmuls around a quantized softmax. A constant
    mask (``attention_mask``) is its softmax's ``bias`` and ``keep``: the max is
    taken over every position, then the excluded ones are multiplied by 0. A float
    mask the graph computes from parameters (a relative position bias) is a fourth
    input, added to the scores as a quantized step (``learned_bias``)."""

    op = "attention"

    def __init__(
        self,
        scale: float,
        qconfig_for: StepQconfig,
        mask: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
        learned_bias: bool = False,
    ) -> None:
        super().__init__()
        self.scale = scale
        self.qk = QuantMatmul(qconfig_for("qk", QuantMatmul, False))
        self.mul = QuantMul(qconfig_for("mul", QuantMul, False))
        self.learned_bias = learned_bias
        if learned_bias:
            self.add_bias = QuantAdd(qconfig_for("add_bias", QuantAdd, False))
        keep, bias = mask
        self.softmax = SoftmaxDecomposition(
            -1, _prefixed(qconfig_for, "softmax", False), keep, bias
        )
        self.av = QuantMatmul(qconfig_for("av", QuantMatmul, True))

    def forward(self, q, k, v, bias=None):
        scores = self.mul(self.qk(q, k.transpose(-2, -1)), self.scale)
        if self.learned_bias:
            scores = self.add_bias(scores, bias)
        return self.av(self.softmax(scores), v)

    def extra_repr(self) -> str:
        return f"scale={self.scale}"


def attention_mask(
    mask: torch.Tensor | None, causal: bool, shape: tuple[int, int], allowed: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A constant attention mask as a softmax's ``(keep, bias)``: bool masks (True
    = ``allowed``, which is SDPA's convention; nn.MultiheadAttention's is the
    opposite) and -inf entries exclude a position, finite float entries are added.
    ``causal``: the lower triangle of ``shape`` (queries x keys) is kept."""
    keep = bias = None
    if causal:
        keep = torch.ones(shape, dtype=torch.bool).tril()
    if mask is not None:
        if mask.dtype == torch.bool:
            allowed_here = mask if allowed else ~mask
            keep = allowed_here if keep is None else keep & allowed_here
        else:
            finite = torch.isfinite(mask)
            if not bool(finite.all()):
                keep = finite if keep is None else keep & finite
            values = torch.where(finite, mask, torch.zeros_like(mask))
            if bool(values.any()):
                bias = values
    if keep is not None and not bool(keep.any(-1).all()):
        raise ValueError("a mask that excludes every key of some query")
    return keep, bias


def _prefixed(qconfig_for: StepQconfig, prefix: str, final: bool) -> StepQconfig:
    """Step qconfigs of a nested decomposition, none of them the op's final step
    unless ``final``."""
    return lambda step, cls, last: qconfig_for(f"{prefix}.{step}", cls, final and last)


class GroupNormDecomposition(Decomposition):
    """Group norm: the channels split into ``num_groups`` groups, each normalized
    over its channels and positions (a layer norm over the group's values), then a
    per-channel affine."""

    op = "group_norm"

    def __init__(
        self,
        num_groups: int,
        group_size: int,
        eps: float,
        weight: nn.Parameter | None,
        bias: nn.Parameter | None,
        rank: int,
        qconfig_for: StepQconfig,
    ) -> None:
        super().__init__()
        self.num_groups = num_groups
        affine = weight is not None
        self.norm = LayerNormDecomposition(
            (group_size,), eps, None, None, _prefixed(qconfig_for, "norm", not affine)
        )
        self.affine = None
        if affine:
            view = (-1,) + (1,) * (rank - 2)
            qconfig = qconfig_for("affine", QuantAffine, True)
            self.affine = QuantAffine(qconfig, weight, bias, view)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups = x.unflatten(1, (self.num_groups, -1)).flatten(2)
        y = self.norm(groups).reshape_as(x)
        return y if self.affine is None else self.affine(y)

    def extra_repr(self) -> str:
        return f"num_groups={self.num_groups}"


class NormalizeDecomposition(Decomposition):
    """``F.normalize`` (p = 2): ``x * rsqrt(sum(x * x, dim))``; the rsqrt table's
    domain convention (0 is its smallest positive code) stands in for ``eps``."""

    op = "normalize"

    def __init__(self, dim: int, qconfig_for: StepQconfig) -> None:
        super().__init__()
        self.dim = dim
        self.square = QuantMul(qconfig_for("square", QuantMul, False))
        self.sum = QuantSum(qconfig_for("sum", QuantSum, False), dim, keepdim=True)
        self.rsqrt = Rsqrt(qconfig_for("rsqrt", Rsqrt, False))
        self.mul = QuantMul(qconfig_for("mul", QuantMul, True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mul(x, self.rsqrt(self.sum(self.square(x, x))))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class MultiheadAttentionDecomposition(Decomposition):
    """``nn.MultiheadAttention`` (self- or cross-attention, no masks): the input
    projections as three quantized linears, the heads' attention
    (``AttentionDecomposition``), the output projection. Returns ``(output, None)``:
    the averaged attention weights are not computed."""

    op = "multihead_attention"

    def __init__(
        self,
        mha: nn.Module,
        qconfig_for: StepQconfig,
        mask: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
    ) -> None:
        super().__init__()
        from hbir.quantization.qat_modules import Linear

        e, heads = mha.embed_dim, mha.num_heads
        self.num_heads, self.batch_first = heads, mha.batch_first
        if mha._qkv_same_embed_dim:
            weights = mha.in_proj_weight.detach().chunk(3)
        else:
            weights = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
        biases = (
            mha.in_proj_bias.detach().chunk(3)
            if mha.in_proj_bias is not None
            else (None,) * 3
        )
        for name, w, b in zip(("q", "k", "v"), weights, biases, strict=True):
            linear = nn.Linear(w.shape[1], e, bias=b is not None)
            linear.weight = nn.Parameter(w.detach().clone())
            if b is not None:
                linear.bias = nn.Parameter(b.clone())
            # int8 like any linear: a gemm cannot take two int16 operands on nash-e
            qconfig = qconfig_for(f"{name}_proj", Linear, True)
            setattr(self, f"{name}_proj", Linear.from_float(linear, qconfig))
        scale = 1.0 / math.sqrt(e // heads)
        self.attention = AttentionDecomposition(
            scale, _prefixed(qconfig_for, "attention", False), mask
        )
        self.out_proj = Linear.from_float(
            mha.out_proj, qconfig_for("out_proj", Linear, True)
        )

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    def forward(self, query, key, value):
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        q = self._heads(self.q_proj(query))
        k = self._heads(self.k_proj(key))
        v = self._heads(self.v_proj(value))
        out = self.out_proj(self.attention(q, k, v).transpose(1, 2).flatten(2))
        return (out if self.batch_first else out.transpose(0, 1)), None

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, batch_first={self.batch_first}"
