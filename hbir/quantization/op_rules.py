"""What ``prepare`` does with each torch op: tables of rules plus small builders.

* ``MODULE_RULES`` / ``FUNCTION_RULES`` / ``METHOD_RULES`` map a float module class, a
  torch function or a Tensor method name to an :class:`OpRule`: the op name (used in
  generated module names, qconfig type rules and reports) and a builder. A builder is
  called like the torch op, with a qconfig source ``q`` first, and returns the QAT
  module (or a :class:`Decomposition`) and the arguments to call it with.
* ``PASSTHROUGH_*`` ops only move or select values (reshape, permute, slicing,
  ``amax``...): their output holds values of their fake-quantized input, so they keep
  the producer's scale and stay ``call_function`` / ``call_method`` nodes.

A builder raises :class:`Unsupported` for a variant it cannot quantize.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn

from hbir.quantization import functionalize, layers_1d, layers_3d
from hbir.quantization import lut_modules as lut
from hbir.quantization import qat_modules as qat
from hbir.quantization.decompositions import (
    AddProductDecomposition,
    AttentionDecomposition,
    CumsumDecomposition,
    DivDecomposition,
    EinsumDecomposition,
    EinsumPermutation,
    GroupNormDecomposition,
    LayerNormDecomposition,
    LogSoftmaxDecomposition,
    MultiheadAttentionDecomposition,
    NormalizeDecomposition,
    NormDecomposition,
    PReLUDecomposition,
    SoftmaxDecomposition,
    VarianceDecomposition,
    WhereDecomposition,
    attention_mask,
    einsum_plan,
)
from hbir.quantization.recurrent import module_recurrent
from hbir.quantization.rule_support import (
    Unsupported,
    is_tensor_arg,
    parameter,
    rank,
    require,
)
from hbir.quantization.spellings import resolve
from hbir.runtime import numerics, op_table, selection


@dataclass(frozen=True)
class OpRule:
    op: str
    build: Callable[..., tuple[nn.Module, tuple]]


# ----------------------------------------------------------------- module builders


def _weight_layer(cls):
    def build(q, mod, x, *, fused_relu=None):
        return cls.from_float(mod, q(), fused_relu=fused_relu), (x,)

    return build


def _from_float(cls):
    def build(q, mod, x, *, fused_relu=None):
        return cls.from_float(mod, q()), (x,)

    return build


def _module_max_pool2d(q, mod, x, *, fused_relu=None):
    return qat.MaxPool2d.from_float(mod, q()), (x,)


def _module_lut(cls, **attrs):
    def build(q, mod, x, *, fused_relu=None):
        kwargs = {key: getattr(mod, name) for key, name in attrs.items()}
        return cls(q(), **kwargs), (x,)

    return build


def _module_simple(cls):
    def build(q, mod, x, *, fused_relu=None):
        return cls(q()), (x,)

    return build


def _module_hardtanh(q, mod, x, *, fused_relu=None):
    return qat.Clamp(q(), mod.min_val, mod.max_val), (x,)


def _module_softmax(q, mod, x, *, fused_relu=None):
    require(mod.dim is not None, "nn.Softmax without dim")
    return SoftmaxDecomposition(mod.dim, q.step), (x,)


def _module_layer_norm(q, mod, x, *, fused_relu=None):
    module = LayerNormDecomposition(
        mod.normalized_shape, mod.eps, mod.weight, mod.bias, q.step
    )
    return module, (x,)


def _module_batch_norm(q, mod, x, *, fused_relu=None):
    require(mod.running_var is not None, "batch norm without running statistics")
    return qat.QuantAffine.from_batch_norm(mod, q(), rank(x)), (x,)


def _group_norm_of(q, input, num_groups, weight, bias, eps):
    shape = input.meta["hbir_value"].shape
    require(shape[1] % num_groups == 0, f"{shape[1]} channels in {num_groups} groups")
    require(bias is None or weight is not None, "bias without weight")
    group_size = math.prod(shape[1:]) // num_groups
    module = GroupNormDecomposition(
        num_groups, group_size, eps, weight, bias, len(shape), q.step
    )
    return module, (input,)


def _module_multihead_attention(
    q,
    mod,
    query,
    key,
    value,
    key_padding_mask=None,
    need_weights=True,
    attn_mask=None,
    average_attn_weights=True,
    is_causal=False,
    *,
    fused_relu=None,
):
    require(key_padding_mask is None, "a key padding mask (made from inputs)")
    require(rank(query) == 3, "unbatched (2-D) inputs")
    require(mod.bias_k is None and mod.bias_v is None, "add_bias_kv=True")
    require(not mod.add_zero_attn, "add_zero_attn=True")
    mask = _constant_mask(q, attn_mask)
    if mask is not None and mask.dim() == 3:  # [N * heads, L, S]
        mask = mask.reshape(-1, mod.num_heads, *mask.shape[1:])
    seq = 1 if mod.batch_first else 0
    shape = (query.meta["hbir_value"].shape[seq], key.meta["hbir_value"].shape[seq])
    try:
        masks = attention_mask(mask, is_causal and mask is None, shape, allowed=False)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    module = MultiheadAttentionDecomposition(mod, q.step, masks)
    return module, (query, key, value)


def _constant_mask(q, mask):
    """An attention mask that is a graph constant or made from sizes (a causal mask
    of the sequence length: its value on the example inputs), or None."""
    if mask is None:
        return None
    value = _from_sizes(q, mask)
    require(
        value is not None,
        "an attention mask computed from inputs (a padding mask): only constant "
        "masks (causal, made from sizes) have a quantized form",
    )
    return value


def _from_sizes(q, node):
    """The value of a graph constant or of a tensor made from sizes, else None."""
    if not isinstance(node, fx.Node):
        return None
    if node.op == "get_attr":
        return q.constant(node)
    return node.meta.get(functionalize.FROM_SIZES_META)


def _module_group_norm(q, mod, x, *, fused_relu=None):
    return _group_norm_of(q, x, mod.num_groups, mod.weight, mod.bias, mod.eps)


def _group_norm(q, input, num_groups, weight=None, bias=None, eps=1e-5):
    weight, bias = q.constant(weight), q.constant(bias)
    return _group_norm_of(q, input, num_groups, weight, bias, eps)


def _normalize(q, input, p=2.0, dim=1, eps=1e-12, out=None):
    require(p == 2, f"p={p} (2 only)")
    require(out is None, "out=")
    return NormalizeDecomposition(dim, q.step), (input,)


def _resize(
    q,
    input,
    size=None,
    scale_factor=None,
    mode="nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias=False,
):
    require(
        mode in numerics.RESIZE_WEIGHTED_MODES,
        f"mode={mode!r} (nearest, bilinear and bicubic)",
    )
    require(not antialias, "antialias=True")
    require(rank(input) == 4, "inputs that are not N x C x H x W")
    require(not recompute_scale_factor, "recompute_scale_factor=True")
    if _has_node(size):  # computed in the graph: an argument of each call
        return qat.Resize(q(), None, None, mode, align_corners), (input, size)
    module = qat.Resize(q(), size, scale_factor, mode, align_corners)
    return module, (input,)


def _grid_sample(
    q, input, grid, mode="bilinear", padding_mode="zeros", align_corners=None
):
    require(mode in numerics.GRID_SAMPLE_MODES, f"mode={mode!r} (bilinear, nearest)")
    require(
        padding_mode in numerics.GRID_SAMPLE_PADDINGS,
        f"padding_mode={padding_mode!r} (zeros, border)",
    )
    require(rank(input) == 4, "inputs that are not N x C x H x W")
    return qat.GridSample(q(), mode, padding_mode, bool(align_corners)), (input, grid)


def _has_node(value) -> bool:
    if isinstance(value, list | tuple):
        return any(_has_node(v) for v in value)
    return isinstance(value, fx.Node)


def _module_embedding(q, mod, ids, *, fused_relu=None):
    require(mod.max_norm is None, f"max_norm={mod.max_norm}")
    require(not mod.sparse, "sparse=True")
    return qat.Embedding.from_float(mod, q()), (ids,)


def _embedding(
    q,
    input,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type=2.0,
    scale_grad_by_freq=False,
    sparse=False,
):
    require(max_norm is None, f"max_norm={max_norm}")
    require(not sparse, "sparse=True")
    return qat.Embedding(q(), parameter(q.constant(weight)), padding_idx), (input,)


def _f_linear(q, input, weight, bias=None):
    w, b = q.constant(weight), q.constant(bias)
    mod = nn.Linear(w.shape[1], w.shape[0], bias=b is not None)
    mod.weight, mod.bias = parameter(w), parameter(b)
    return qat.Linear.from_float(mod, q()), (input,)


def _f_conv2d(q, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    require(not isinstance(padding, str), f"padding={padding!r}")
    if q.from_parameters(weight) and weight.op != "get_attr":  # computed each forward
        return _computed_weight_conv2d(
            q, input, weight, bias, stride, padding, dilation, groups
        )
    w, b = q.constant(weight), q.constant(bias)
    mod = nn.Conv2d(
        w.shape[1] * groups,
        w.shape[0],
        tuple(w.shape[2:]),
        stride,
        padding,
        dilation,
        groups,
        bias=b is not None,
    )
    mod.weight, mod.bias = parameter(w), parameter(b)
    return qat.Conv2d.from_float(mod, q()), (input,)


def _computed_weight_conv2d(q, input, weight, bias, stride, padding, dilation, groups):
    o, i, kh, kw = weight.meta["hbir_value"].shape
    b = q.constant(bias)
    conv = qat.ComputedWeightConv2d(
        i * groups,
        o,
        (kh, kw),
        stride,
        padding,
        dilation,
        groups,
        b is not None,
        qconfig=q(),
    )
    conv.bias = parameter(b)
    return conv, (input, weight)


def _f_batch_norm(
    q,
    input,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training=False,
    momentum=0.1,
    eps=1e-5,
):
    require(not training, "batch norm in training mode (call model.eval())")
    bn = nn.BatchNorm1d(1)  # a holder for the statistics from_batch_norm reads
    bn.running_mean, bn.running_var = q.constant(running_mean), q.constant(running_var)
    require(bn.running_var is not None, "batch norm without running statistics")
    bn.weight, bn.bias = parameter(q.constant(weight)), parameter(q.constant(bias))
    bn.eps = eps
    return qat.QuantAffine.from_batch_norm(bn, q(), rank(input)), (input,)


def _attention(
    q,
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
):
    require(not dropout_p, f"dropout_p={dropout_p} (dropout in the traced forward)")
    require(not enable_gqa, "enable_gqa=True")
    if scale is None:
        scale = 1.0 / math.sqrt(query.meta["hbir_value"].shape[-1])
    shape = (query.meta["hbir_value"].shape[-2], key.meta["hbir_value"].shape[-2])
    if q.from_parameters(attn_mask):  # a learned bias (relative positions)
        module = AttentionDecomposition(
            float(scale), q.step, attention_mask(None, is_causal, shape, True), True
        )
        return module, (query, key, value, attn_mask)
    try:
        masks = attention_mask(_constant_mask(q, attn_mask), is_causal, shape, True)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    return AttentionDecomposition(float(scale), q.step, masks), (query, key, value)


# ----------------------------------------------------------------- function builders


def _binary(cls):
    def build(q, input, other, *, alpha=1, out=None):
        require(alpha == 1, f"alpha={alpha}")
        require(out is None, "out=")
        require(is_tensor_arg(input) or is_tensor_arg(other), "no tensor operand")
        return cls(q()), (input, other)

    return build


def _div(q, input, other, *, rounding_mode=None, out=None):
    require(rounding_mode is None, f"rounding_mode={rounding_mode!r}")
    if not is_tensor_arg(other):
        require(
            not isinstance(other, fx.Node),
            "division by a number computed from sizes (make it a Python number, "
            "e.g. a module attribute)",
        )
        return qat.QuantMul(q()), (input, 1.0 / other)
    return DivDecomposition(q.step), (input, other)


def _cat(q, tensors, dim=0, *, out=None):
    return qat.QuantCat(q(), dim), (list(tensors),)


def _stack(q, tensors, dim=0, *, out=None):
    return qat.QuantStack(q(), dim), (list(tensors),)


def _matmul(q, input, other, *, out=None):
    return qat.QuantMatmul(q()), (input, other)


def _reduce(cls):
    def build(q, input, dim=None, keepdim=False, *, dtype=None, out=None):
        require(dtype is None, f"dtype={dtype}")
        return cls(q(), dim, keepdim), (input,)

    return build


def _unary(cls):
    def build(q, input, inplace=False, *, out=None):
        require(out is None, "out=")
        return cls(q()), (input,)

    return build


def _unary_inplace(cls):
    def build(q, input, inplace=False):
        return cls(q()), (input,)

    return build


def _gelu(q, input, approximate="none"):
    return lut.GELU(q(), approximate=approximate), (input,)


def _clamp(q, input, min=None, max=None, *, out=None):
    numbers = all(v is None or isinstance(v, int | float) for v in (min, max))
    require(numbers, "tensor bounds")
    return qat.Clamp(q(), min, max), (input,)


def _clamp_min(q, input, min):
    return _clamp(q, input, min=min)


def _clamp_max(q, input, max):
    return _clamp(q, input, max=max)


def _hardtanh(q, input, min_val=-1.0, max_val=1.0, inplace=False):
    return qat.Clamp(q(), min_val, max_val), (input,)


def _pow(q, input, exponent):
    require(is_tensor_arg(input) and not is_tensor_arg(exponent), "tensor exponent")
    if exponent == 2:
        return qat.QuantMul(q()), (input, input)
    powers = {0.5: lut.Sqrt, -0.5: lut.Rsqrt, -1: lut.Reciprocal}
    require(exponent in powers, f"exponent {exponent} (supported: 2, 0.5, -0.5, -1)")
    return powers[exponent](q()), (input,)


def _neg(q, input, *, out=None):
    require(out is None, "out=")
    return qat.QuantMul(q()), (input, -1.0)


def _square(q, input):
    return qat.QuantMul(q()), (input, input)


def _softmax(q, input, dim=None, _stacklevel=3, dtype=None):
    require(dim is not None, "softmax without dim")
    require(dtype in (None, torch.float32), f"dtype={dtype}")
    return SoftmaxDecomposition(dim, q.step), (input,)


def _log_softmax(q, input, dim=None, _stacklevel=3, dtype=None):
    require(dim is not None, "log_softmax without dim")
    require(dtype in (None, torch.float32), f"dtype={dtype}")
    return LogSoftmaxDecomposition(dim, q.step), (input,)


def _module_log_softmax(q, mod, x, *, fused_relu=None):
    require(mod.dim is not None, "nn.LogSoftmax without dim")
    return LogSoftmaxDecomposition(mod.dim, q.step), (x,)


def _dims(input, dim) -> tuple[int, ...]:
    """``dim`` (None: all, an int, a sequence) as non-negative dims of ``input``."""
    n = rank(input)
    if dim is None or dim == ():
        return tuple(range(n))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(d % n for d in dims)


def _variance(sqrt: bool):
    """``var`` / ``std`` in their three signatures: ``(x, dim, *, correction,
    keepdim)``, ``(x, dim, unbiased, keepdim)`` and ``(x, unbiased)``."""

    def build(q, input, dim=None, *args, correction=None, keepdim=False, unbiased=None):
        if isinstance(dim, bool):
            unbiased, dim = dim, None
        if args:
            unbiased = args[0]
            keepdim = args[1] if len(args) > 1 else keepdim
        if correction is None:
            correction = 0 if unbiased is False else 1
        dims = _dims(input, dim)
        count = math.prod(input.meta["hbir_value"].shape[d] for d in dims)
        require(count > correction, f"{count} values with correction={correction}")
        module = VarianceDecomposition(
            dims, count, float(correction), bool(keepdim), sqrt, q.step
        )
        return module, (input,)

    return build


def _norm(q, input, p=2, dim=None, keepdim=False, *, out=None, dtype=None, ord=None):
    p = p if ord is None else ord
    require(p in (2, "fro"), f"p={p!r} (the 2-norm only)")
    require(out is None and dtype is None, "out= / dtype=")
    return NormDecomposition(_dims(input, dim), bool(keepdim), q.step), (input,)


def _instance_norm(
    q,
    input,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats=True,
    momentum=0.1,
    eps=1e-5,
):
    require(use_input_stats, "use_input_stats=False (normalize with running stats)")
    weight, bias = q.constant(weight), q.constant(bias)
    channels = input.meta["hbir_value"].shape[1]
    return _group_norm_of(q, input, channels, weight, bias, eps)


def _module_instance_norm(q, mod, x, *, fused_relu=None):
    if mod.track_running_stats and mod.running_var is not None:
        return qat.QuantAffine.from_batch_norm(mod, q(), rank(x)), (x,)
    channels = x.meta["hbir_value"].shape[1]
    return _group_norm_of(q, x, channels, mod.weight, mod.bias, mod.eps)


def _where_of(q, cond, a, b):
    mask = _from_sizes(q, cond)
    if mask is None and isinstance(cond, fx.Node) and q.is_data_mask(cond):
        # a computed mask (a comparison): a selection on the output grid
        a_tensor, b_tensor = is_tensor_arg(a), is_tensor_arg(b)
        require(a_tensor or b_tensor, "no tensor operand")
        for v, is_tensor in ((a, a_tensor), (b, b_tensor)):
            require(not is_tensor or q.is_quantized(v), "a value that is not quantized")
        return qat.QuantSelect(q(), (a_tensor, b_tensor)), (cond, a, b)
    require(
        mask is not None,
        "a condition computed from inputs (a comparison): masks have no quantized "
        "form yet; a constant mask (made from sizes) is supported",
    )
    require(mask.dtype == torch.bool, f"a condition of dtype {mask.dtype}")
    a_tensor, b_tensor = is_tensor_arg(a), is_tensor_arg(b)
    for v, is_tensor in ((a, a_tensor), (b, b_tensor)):
        require(
            is_tensor or v == 0,
            f"a fill value of {v} (0 or a tensor: other values, such as an "
            "attention mask's -inf, have no quantized form yet)",
        )
    require(a_tensor or b_tensor, "no tensor operand")
    module = WhereDecomposition(mask, a_tensor, b_tensor, q.step)
    return module, (a if a_tensor else 0.0, b if b_tensor else 0.0)


def _where(q, condition, input, other=None, *, out=None):
    require(other is not None and out is None, "where(condition) (the indices)")
    return _where_of(q, condition, input, other)


def _tensor_where(q, input, condition, other):
    return _where_of(q, condition, input, other)


def _masked_fill(q, input, mask, value):
    return _where_of(q, mask, value, input)


def _cumsum(q, input, dim, *, dtype=None, out=None):
    require(dtype in (None, torch.float32) and out is None, "dtype= / out=")
    shape = input.meta["hbir_value"].shape
    module = CumsumDecomposition(dim, shape[dim], len(shape), q.step)
    return module, (input,)


def _prelu_of(q, input, weight):
    shape = input.meta["hbir_value"].shape
    require(len(shape) >= 2, "prelu of a tensor without a channel dim")
    channels = shape[1]
    require(
        weight.numel() in (1, channels), f"{weight.numel()} slopes, {channels} channels"
    )
    if weight.numel() != channels:
        weight = nn.Parameter(weight.detach().reshape(1).repeat(channels))
    return PReLUDecomposition(weight, len(shape), q.step), (input,)


def _module_prelu(q, mod, x, *, fused_relu=None):
    return _prelu_of(q, x, mod.weight)


def _prelu(q, input, weight):
    return _prelu_of(q, input, parameter(q.constant(weight)))


def _addcmul(q, input, tensor1, tensor2, *, value=1, out=None):
    require(out is None, "out=")
    return AddProductDecomposition(False, value, 1, q.step), (input, tensor1, tensor2)


def _addmm(q, input, mat1, mat2, *, beta=1, alpha=1, out=None):
    require(out is None, "out=")
    module = AddProductDecomposition(True, alpha, beta, q.step)
    return module, (input, mat1, mat2)


def _einsum(q, equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    require(all(is_tensor_arg(x) for x in operands), "operands that are not tensors")
    shapes = [tuple(x.meta["hbir_value"].shape) for x in operands]
    try:
        plan = einsum_plan(equation, shapes)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    cls = EinsumDecomposition if plan["inputs"] else EinsumPermutation
    return cls(plan, q.step), operands


def _layer_norm(q, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    weight, bias = q.constant(weight), q.constant(bias)
    require(bias is None or weight is not None, "bias without weight")
    module = LayerNormDecomposition(normalized_shape, eps, weight, bias, q.step)
    return module, (input,)


def _max_pool2d(
    q,
    input,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode=False,
    return_indices=False,
):
    module = qat.MaxPool2d(
        kernel_size, stride, padding, dilation, return_indices, ceil_mode, qconfig=q()
    )
    return module, (input,)


# functions whose module returns (pooled values, the input's int64 indices)
WITH_INDICES = frozenset(
    {F.max_pool2d_with_indices, F.adaptive_max_pool2d_with_indices}
)


def _with_indices(builder: Callable, at: int, args: tuple, kwargs: dict):
    """``builder`` called with ``return_indices=True``, whatever the call says
    (its ``at``-th positional argument or keyword): the ``*_with_indices``
    functions return indices always."""
    kwargs = {k: v for k, v in kwargs.items() if k != "return_indices"}
    return lambda q: builder(q, *args[:at], return_indices=True, **kwargs)


def _avg_pool2d(
    q,
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    module = qat.AvgPool2d(
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
        qconfig=q(),
    )
    return module, (input,)


def _constant_pad(q, input, pad, mode="constant", value=None):
    require(not _cropping(pad), "negative padding (a crop: slice instead)")
    require(
        all(isinstance(p, int) for p in pad),
        "a nonzero pad value with amounts computed from sizes",
    )
    require(isinstance(value, int | float), "a pad value that is not a number")
    require(
        math.isfinite(value),
        f"pad value {value} (no grid holds it: pad with a finite value, or use the "
        "pool's own padding)",
    )
    return qat.ConstantPad(q(), tuple(pad), float(value)), (input,)


def _adaptive_window(input, output_size) -> tuple[int, int]:
    """The pool window of an adaptive pool whose output size divides the input's
    (then every window is the same and they do not overlap)."""
    h, w = input.meta["hbir_value"].shape[-2:]
    oh, ow = (
        output_size if isinstance(output_size, list | tuple) else (output_size,) * 2
    )
    oh, ow = oh or h, ow or w
    require(
        h % oh == 0 and w % ow == 0,
        f"adaptive pooling from {h}x{w} to {oh}x{ow} (windows of different sizes: "
        "an output size that divides the input size)",
    )
    return h // oh, w // ow


def _adaptive_avg_pool2d(q, input, output_size):
    window = _adaptive_window(input, output_size)
    if window == tuple(input.meta["hbir_value"].shape[-2:]):  # a global pool
        return qat.AdaptiveAvgPool2d(output_size, qconfig=q()), (input,)
    return qat.AvgPool2d(window, window, qconfig=q()), (input,)


def _module_adaptive_avg_pool2d(q, mod, x, *, fused_relu=None):
    return _adaptive_avg_pool2d(q, x, mod.output_size)


def _adaptive_max_pool2d(q, input, output_size, return_indices=False):
    window = _adaptive_window(input, output_size)
    module = qat.MaxPool2d(window, window, return_indices=return_indices, qconfig=q())
    return module, (input,)


def _module_adaptive_max_pool2d(q, mod, x, *, fused_relu=None):
    return _adaptive_max_pool2d(q, x, mod.output_size, mod.return_indices)


# ----------------------------------------------------------------- pass-through


def _cropping(pad) -> bool:
    """A negative pad amount (sizes computed in the graph are not checked here)."""
    return any(isinstance(p, int) and p < 0 for p in pad)


def _pad_keeps_grid(input, pad, mode="constant", value=None):
    return not _cropping(pad) and (mode != "constant" or not value)


def _interpolate_keeps_grid(
    input, size=None, scale_factor=None, mode="nearest", *a, **k
):
    return mode == "nearest"


# ----------------------------------------------------------------- the rule tables
# Builders by (op, kind), where the op table's spellings of one op share one; by
# spelling where a spelling has its own signature. LUT ops share generic builders.

_MODULE_BUILDERS: dict[str, Callable] = {
    "conv2d": _weight_layer(qat.Conv2d),
    "conv_transpose2d": _weight_layer(qat.ConvTranspose2d),
    "linear": _weight_layer(qat.Linear),
    "max_pool2d": _module_max_pool2d,
    "avg_pool2d": _from_float(qat.AvgPool2d),
    "adaptive_avg_pool2d": _module_adaptive_avg_pool2d,
    "adaptive_max_pool2d": _module_adaptive_max_pool2d,
    "relu": _module_simple(qat.ReLU),
    "relu6": _module_simple(qat.ReLU6),
    "clamp": _module_hardtanh,
    "softmax": _module_softmax,
    "log_softmax": _module_log_softmax,
    "instance_norm": _module_instance_norm,
    "prelu": _module_prelu,
    "lstm": module_recurrent,
    "gru": module_recurrent,
    "rnn": module_recurrent,
    **layers_1d.MODULE_BUILDERS,
    **layers_3d.MODULE_BUILDERS,
    "layer_norm": _module_layer_norm,
    "affine": _module_batch_norm,
    "group_norm": _module_group_norm,
    "multihead_attention": _module_multihead_attention,
    "embedding": _module_embedding,
}

_FUNCTION_BUILDERS: dict[str, Callable] = {
    "add": _binary(qat.QuantAdd),
    "sub": _binary(qat.QuantSub),
    "mul": _binary(qat.QuantMul),
    "maximum": _binary(qat.QuantMaximum),
    "minimum": _binary(qat.QuantMinimum),
    "div": _div,
    "cat": _cat,
    "stack": _stack,
    "matmul": _matmul,
    "mean": _reduce(qat.QuantMean),
    "sum": _reduce(qat.QuantSum),
    "relu": _unary_inplace(qat.ReLU),
    "relu6": _unary_inplace(qat.ReLU6),
    "clamp": _clamp,
    "pow": _pow,
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "var": _variance(False),
    "std": _variance(True),
    "norm": _norm,
    "instance_norm": _instance_norm,
    "prelu": _prelu,
    "cumsum": _cumsum,
    "where": _where,
    "addcmul": _addcmul,
    "addmm": _addmm,
    "einsum": _einsum,
    **layers_1d.FUNCTION_BUILDERS,
    **layers_3d.FUNCTION_BUILDERS,
    "layer_norm": _layer_norm,
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
    "adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "adaptive_max_pool2d": _adaptive_max_pool2d,
    "attention": _attention,
    "neg": _neg,
    "group_norm": _group_norm,
    "normalize": _normalize,
    "resize": _resize,
    "grid_sample": _grid_sample,
    "constant_pad": _constant_pad,
    "abs": _unary(qat.Abs),
    "embedding": _embedding,
}

_SPELLING_BUILDERS: dict[str, Callable] = {
    # what F.max_pool2d(..., return_indices=True) calls: always with indices
    "F.max_pool2d_with_indices": lambda q, *a, **k: _with_indices(_max_pool2d, 6, a, k)(
        q
    ),
    "F.adaptive_max_pool2d_with_indices": lambda q, *a, **k: _with_indices(
        _adaptive_max_pool2d, 2, a, k
    )(q),
    "F.hardtanh": _hardtanh,
    "Tensor.where": _tensor_where,
    "Tensor.masked_fill": _masked_fill,
    "torch.masked_fill": _masked_fill,
    "torch.clamp_min": _clamp_min,
    "Tensor.clamp_min": _clamp_min,
    "torch.clamp_max": _clamp_max,
    "Tensor.clamp_max": _clamp_max,
    "torch.square": _square,
    "Tensor.square": _square,
    "F.gelu": _gelu,
    "F.linear": _f_linear,
    "F.conv2d": _f_conv2d,
    "F.batch_norm": _f_batch_norm,
}


def _lut_module_builder(cls):
    if issubclass(cls, lut.ParametricLutModule):
        return _module_parametric_lut(cls)
    attrs = {"approximate": "approximate"} if cls is lut.GELU else {}
    return _module_lut(cls, **attrs)


# torch's softplus is linear above ``threshold``; the table is softplus itself, which
# differs from it by less than exp(-20) at the default
_SOFTPLUS_THRESHOLD = 20.0


def _module_parametric_lut(cls):
    name = numerics.LUT_PARAMETERS[cls.op][0]

    def build(q, mod, x, *, fused_relu=None):
        threshold = getattr(mod, "threshold", _SOFTPLUS_THRESHOLD)
        require(threshold == _SOFTPLUS_THRESHOLD, f"threshold={threshold}")
        return _table_with(cls, q, getattr(mod, name)), (x,)

    return build


def _parametric_lut(cls):
    """``F.leaky_relu(x, negative_slope)``, ``F.elu(x, alpha)``, ``F.celu(x,
    alpha)``, ``F.softplus(x, beta, threshold)``: the parameter is second."""
    name, default = numerics.LUT_PARAMETERS[cls.op]

    def build(q, input, value=default, third=None, **kwargs):
        value = kwargs.pop(name, value)
        threshold = _SOFTPLUS_THRESHOLD
        if cls.op == "softplus":
            threshold = kwargs.pop(
                "threshold", _SOFTPLUS_THRESHOLD if third is None else third
            )
        kwargs.pop("inplace", None)
        require(not kwargs, ", ".join(f"{k}=" for k in kwargs))
        require(threshold == _SOFTPLUS_THRESHOLD, f"threshold={threshold}")
        require(
            isinstance(value, int | float) and not isinstance(value, bool),
            f"{name} that is not a Python number",
        )
        return _table_with(cls, q, value), (input,)

    return build


def _table_with(cls, q, value):
    """The LUT module with its parameter, or Unsupported when no table has it."""
    name = numerics.LUT_PARAMETERS[cls.op][0]
    try:
        numerics.split_table_key(numerics.table_key(cls.op, value))
    except ValueError:
        raise Unsupported(f"{name}={value} (out of the table's range)") from None
    return cls(q(), value=value)


def _selects(input, *args, **kwargs):
    """``max(x)`` / ``max(x, dim)`` select values; ``max(x, y)`` of two tensors
    does not (``torch.maximum``: the operands on one grid)."""
    other = args[0] if args else kwargs.get("other", kwargs.get("dim"))
    return not isinstance(other, fx.Node) or "other" in kwargs and False


# Pass-through only for some arguments (a nonzero pad value or bilinear resize would
# create values off the input grid).
_CONDITIONS: dict[str, Callable[..., bool]] = {
    "F.pad": _pad_keeps_grid,
    "F.interpolate": _interpolate_keeps_grid,
    "torch.max": _selects,
    "torch.min": _selects,
    "Tensor.max": _selects,
    "Tensor.min": _selects,
}

# torch modules whose forward is one call of a functional prepare has a rule for:
# traced into, so the call gets that rule (nn.Upsample and its subclasses
# UpsamplingNearest2d / UpsamplingBilinear2d call F.interpolate).
TRACED_THROUGH: tuple[type, ...] = (nn.Upsample, nn.Unfold)
# the transformer layers call nn.MultiheadAttention, linears, layer norms and their
# activation (under tracing their fast path is off: its arguments are proxies)
TRACED_THROUGH += (
    nn.Transformer,
    nn.TransformerEncoder,
    nn.TransformerDecoder,
    nn.TransformerEncoderLayer,
    nn.TransformerDecoderLayer,
)
# the padding modules call F.pad
TRACED_THROUGH += (
    nn.modules.padding._ConstantPadNd,
    nn.modules.padding._ReflectionPadNd,
    nn.modules.padding._ReplicationPadNd,
    nn.modules.padding._CircularPadNd,
)
MODULE_RULES: dict[type, OpRule] = {}
FUNCTION_RULES: dict[Callable, OpRule] = {}
METHOD_RULES: dict[str, OpRule] = {}
# Modules that are identities at inference stay in the graph as they are
# (``prepare`` drops ``nn.Identity`` and turns ``nn.Flatten`` into ``torch.flatten``).
PASSTHROUGH_MODULES: tuple[type, ...] = ()
PASSTHROUGH_FUNCTIONS: set[Callable] = set()
PASSTHROUGH_METHODS: set[str] = set()
CONDITIONAL_PASSTHROUGH: dict[Callable, Callable[..., bool]] = {}
CONDITIONAL_METHODS: dict[str, Callable[..., bool]] = {}
# torch's top-k and sort leave the order of equal values open: prepare calls
# runtime/selection.py's instead (function or method -> substitute)
TIE_RULED: dict = {
    torch.topk: selection.topk,
    "topk": selection.topk,
    torch.sort: selection.sort,
    "sort": selection.sort,
    torch.argsort: selection.argsort,
    "argsort": selection.argsort,
}
# integer arithmetic prepare keeps on index tensors (never on values)
INDEX_FUNCTIONS: set[Callable] = set()
INDEX_METHODS: set[str] = set()
# a function or method spelling -> its (first) op table entry
ENTRY_OF_FUNCTION: dict[Callable, op_table.OpEntry] = {}
ENTRY_OF_METHOD: dict[str, op_table.OpEntry] = {}
ENTRY_OF_MODULE: dict[type, op_table.OpEntry] = {}


def module_rule(module: nn.Module) -> OpRule | None:
    """The rule of ``module``'s class or of the nearest base it keeps ``forward`` of.

    A subclass that does not override ``forward`` (timm's ``Linear``, a user's
    ``class MyBN(nn.BatchNorm2d): pass``) computes what its base computes; one that
    overrides it is traced into instead.
    """
    cls = type(module)
    for index, base in enumerate(cls.__mro__):
        if base in MODULE_RULES:
            between = cls.__mro__[:index]
            return None if any(map(_overrides, between)) else MODULE_RULES[base]
    return None


# Methods a subclass may define and still compute what its base computes.
_HARMLESS = frozenset({"__init__", "extra_repr", "__repr__", "reset_parameters"})


def _overrides(cls: type) -> bool:
    """``cls`` defines a method that may change the computation (``forward``, or a
    helper it calls such as ``_conv_forward``)."""
    return any(
        callable(v) and k not in _HARMLESS and not k.startswith("__") or k == "forward"
        for k, v in vars(cls).items()
    )


def _builder(entry: op_table.OpEntry, spelling: str, kind: str) -> Callable:
    if spelling in _SPELLING_BUILDERS:
        return _SPELLING_BUILDERS[spelling]
    if entry.lut is not None:
        cls = lut.LUT_MODULES[entry.op]
        if kind == "module":
            return _lut_module_builder(cls)
        if issubclass(cls, lut.ParametricLutModule):
            return _parametric_lut(cls)
        return _unary(cls)
    table = _MODULE_BUILDERS if kind == "module" else _FUNCTION_BUILDERS
    if entry.op not in table:
        raise AssertionError(f"op table: no prepare builder for {spelling} ({kind})")
    return table[entry.op]


def _derive_rules() -> None:
    """Fill the rule tables from the op table's torch spellings."""
    global PASSTHROUGH_MODULES
    for entry in op_table.OPS:
        for spelling in entry.torch:
            kind, target = resolve(spelling)
            entries = {"module": ENTRY_OF_MODULE, "method": ENTRY_OF_METHOD}
            entries.get(kind, ENTRY_OF_FUNCTION).setdefault(target, entry)
            if entry.quantized == op_table.INDEX:
                (INDEX_METHODS if kind == "method" else INDEX_FUNCTIONS).add(target)
                continue
            if entry.quantized == op_table.PASSTHROUGH:
                if spelling in _CONDITIONS:
                    conditional = (
                        CONDITIONAL_METHODS
                        if kind == "method"
                        else CONDITIONAL_PASSTHROUGH
                    )
                    conditional[target] = _CONDITIONS[spelling]
                elif kind == "module":
                    PASSTHROUGH_MODULES += (target,)
                elif kind == "method":
                    PASSTHROUGH_METHODS.add(target)
                else:
                    PASSTHROUGH_FUNCTIONS.add(target)
                continue
            rule = OpRule(entry.op, _builder(entry, spelling, kind))
            rules = {"module": MODULE_RULES, "function": FUNCTION_RULES}
            rules.get(kind, METHOD_RULES)[target] = rule


_derive_rules()
