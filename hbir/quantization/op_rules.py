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
from typing import Any

import torch
from torch import fx, nn

from hbir.quantization import functionalize
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
    OneDimensional,
    PReLUDecomposition,
    SoftmaxDecomposition,
    VarianceDecomposition,
    WhereDecomposition,
    attention_mask,
    einsum_plan,
)
from hbir.quantization.recurrent import RECURRENT, UnsupportedRecurrence
from hbir.quantization.spellings import resolve
from hbir.runtime import numerics, op_table


class Unsupported(Exception):
    """This call of a known op has arguments prepare cannot quantize."""


@dataclass(frozen=True)
class OpRule:
    op: str
    build: Callable[..., tuple[nn.Module, tuple]]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise Unsupported(message)


def _is_tensor_arg(x: Any) -> bool:
    """A graph value that is a tensor (sizes computed in the graph are not)."""
    if not isinstance(x, fx.Node):
        return False
    value = x.meta.get("hbir_value")
    return value is None or value.is_tensor


# ----------------------------------------------------------------- module builders


def _weight_layer(cls):
    def build(q, mod, x, *, fused_relu=None):
        return cls.from_float(mod, q(), fused_relu=fused_relu), (x,)

    return build


def _from_float(cls):
    def build(q, mod, x, *, fused_relu=None):
        return cls.from_float(mod, q()), (x,)

    return build


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
    _require(mod.dim is not None, "nn.Softmax without dim")
    return SoftmaxDecomposition(mod.dim, q.step), (x,)


def _module_layer_norm(q, mod, x, *, fused_relu=None):
    module = LayerNormDecomposition(
        mod.normalized_shape, mod.eps, mod.weight, mod.bias, q.step
    )
    return module, (x,)


def _rank(node) -> int:
    """The rank of a graph value, as it was on the example inputs."""
    return len(node.meta["hbir_value"].shape)


def _module_batch_norm(q, mod, x, *, fused_relu=None):
    _require(mod.running_var is not None, "batch norm without running statistics")
    return qat.QuantAffine.from_batch_norm(mod, q(), _rank(x)), (x,)


def _group_norm_of(q, input, num_groups, weight, bias, eps):
    shape = input.meta["hbir_value"].shape
    _require(shape[1] % num_groups == 0, f"{shape[1]} channels in {num_groups} groups")
    _require(bias is None or weight is not None, "bias without weight")
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
    _require(key_padding_mask is None, "a key padding mask (made from inputs)")
    _require(_rank(query) == 3, "unbatched (2-D) inputs")
    _require(mod.bias_k is None and mod.bias_v is None, "add_bias_kv=True")
    _require(not mod.add_zero_attn, "add_zero_attn=True")
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
    _require(
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
    _require(p == 2, f"p={p} (2 only)")
    _require(out is None, "out=")
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
    _require(mode == "bilinear", f"mode={mode!r} (nearest and bilinear)")
    _require(not antialias, "antialias=True")
    _require(_rank(input) == 4, "inputs that are not N x C x H x W")
    _require(not recompute_scale_factor, "recompute_scale_factor=True")
    if _has_node(size):  # computed in the graph: an argument of each call
        return qat.Resize(q(), None, None, mode, align_corners), (input, size)
    module = qat.Resize(q(), size, scale_factor, mode, align_corners)
    return module, (input,)


def _has_node(value) -> bool:
    if isinstance(value, list | tuple):
        return any(_has_node(v) for v in value)
    return isinstance(value, fx.Node)


def _parameter(t):
    """A traced weight as a parameter of the QAT module (shared if it is one)."""
    if t is None or isinstance(t, nn.Parameter):
        return t
    return nn.Parameter(t.detach().clone(), requires_grad=False)


def _f_linear(q, input, weight, bias=None):
    w, b = q.constant(weight), q.constant(bias)
    mod = nn.Linear(w.shape[1], w.shape[0], bias=b is not None)
    mod.weight, mod.bias = _parameter(w), _parameter(b)
    return qat.Linear.from_float(mod, q()), (input,)


def _f_conv2d(q, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    _require(not isinstance(padding, str), f"padding={padding!r}")
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
    mod.weight, mod.bias = _parameter(w), _parameter(b)
    return qat.Conv2d.from_float(mod, q()), (input,)


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
    _require(not training, "batch norm in training mode (call model.eval())")
    bn = nn.BatchNorm1d(1)  # a holder for the statistics from_batch_norm reads
    bn.running_mean, bn.running_var = q.constant(running_mean), q.constant(running_var)
    _require(bn.running_var is not None, "batch norm without running statistics")
    bn.weight, bn.bias = _parameter(q.constant(weight)), _parameter(q.constant(bias))
    bn.eps = eps
    return qat.QuantAffine.from_batch_norm(bn, q(), _rank(input)), (input,)


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
    _require(not dropout_p, f"dropout_p={dropout_p} (dropout in the traced forward)")
    _require(not enable_gqa, "enable_gqa=True")
    if scale is None:
        scale = 1.0 / math.sqrt(query.meta["hbir_value"].shape[-1])
    shape = (query.meta["hbir_value"].shape[-2], key.meta["hbir_value"].shape[-2])
    try:
        masks = attention_mask(_constant_mask(q, attn_mask), is_causal, shape, True)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    return AttentionDecomposition(float(scale), q.step, masks), (query, key, value)


# ----------------------------------------------------------------- function builders


def _binary(cls):
    def build(q, input, other, *, alpha=1, out=None):
        _require(alpha == 1, f"alpha={alpha}")
        _require(out is None, "out=")
        _require(_is_tensor_arg(input) or _is_tensor_arg(other), "no tensor operand")
        return cls(q()), (input, other)

    return build


def _div(q, input, other, *, rounding_mode=None, out=None):
    _require(rounding_mode is None, f"rounding_mode={rounding_mode!r}")
    if not _is_tensor_arg(other):
        _require(
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
        _require(dtype is None, f"dtype={dtype}")
        return cls(q(), dim, keepdim), (input,)

    return build


def _unary(cls):
    def build(q, input, inplace=False, *, out=None):
        _require(out is None, "out=")
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
    _require(numbers, "tensor bounds")
    return qat.Clamp(q(), min, max), (input,)


def _clamp_min(q, input, min):
    return _clamp(q, input, min=min)


def _clamp_max(q, input, max):
    return _clamp(q, input, max=max)


def _hardtanh(q, input, min_val=-1.0, max_val=1.0, inplace=False):
    return qat.Clamp(q(), min_val, max_val), (input,)


def _pow(q, input, exponent):
    _require(_is_tensor_arg(input) and not _is_tensor_arg(exponent), "tensor exponent")
    if exponent == 2:
        return qat.QuantMul(q()), (input, input)
    powers = {0.5: lut.Sqrt, -0.5: lut.Rsqrt, -1: lut.Reciprocal}
    _require(exponent in powers, f"exponent {exponent} (supported: 2, 0.5, -0.5, -1)")
    return powers[exponent](q()), (input,)


def _neg(q, input, *, out=None):
    _require(out is None, "out=")
    return qat.QuantMul(q()), (input, -1.0)


def _square(q, input):
    return qat.QuantMul(q()), (input, input)


def _softmax(q, input, dim=None, _stacklevel=3, dtype=None):
    _require(dim is not None, "softmax without dim")
    _require(dtype in (None, torch.float32), f"dtype={dtype}")
    return SoftmaxDecomposition(dim, q.step), (input,)


def _log_softmax(q, input, dim=None, _stacklevel=3, dtype=None):
    _require(dim is not None, "log_softmax without dim")
    _require(dtype in (None, torch.float32), f"dtype={dtype}")
    return LogSoftmaxDecomposition(dim, q.step), (input,)


def _module_log_softmax(q, mod, x, *, fused_relu=None):
    _require(mod.dim is not None, "nn.LogSoftmax without dim")
    return LogSoftmaxDecomposition(mod.dim, q.step), (x,)


def _dims(input, dim) -> tuple[int, ...]:
    """``dim`` (None: all, an int, a sequence) as non-negative dims of ``input``."""
    rank = _rank(input)
    if dim is None or dim == ():
        return tuple(range(rank))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(d % rank for d in dims)


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
        _require(count > correction, f"{count} values with correction={correction}")
        module = VarianceDecomposition(
            dims, count, float(correction), bool(keepdim), sqrt, q.step
        )
        return module, (input,)

    return build


def _norm(q, input, p=2, dim=None, keepdim=False, *, out=None, dtype=None, ord=None):
    p = p if ord is None else ord
    _require(p in (2, "fro"), f"p={p!r} (the 2-norm only)")
    _require(out is None and dtype is None, "out= / dtype=")
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
    _require(use_input_stats, "use_input_stats=False (normalize with running stats)")
    weight, bias = q.constant(weight), q.constant(bias)
    channels = input.meta["hbir_value"].shape[1]
    return _group_norm_of(q, input, channels, weight, bias, eps)


def _module_instance_norm(q, mod, x, *, fused_relu=None):
    if mod.track_running_stats and mod.running_var is not None:
        return qat.QuantAffine.from_batch_norm(mod, q(), _rank(x)), (x,)
    channels = x.meta["hbir_value"].shape[1]
    return _group_norm_of(q, x, channels, mod.weight, mod.bias, mod.eps)


def _one(v) -> int:
    return v[0] if isinstance(v, list | tuple) else v


def _conv_as_2d(cls2d, mod, **extra) -> nn.Module:
    """The float 2-d form of a 1-d conv: kernel ``(1, k)``, its weight (a new
    parameter of shape ``[O, I, 1, k]``) and bias."""
    _require(not isinstance(mod.padding, str), f"padding={mod.padding!r}")
    conv = cls2d(
        mod.in_channels,
        mod.out_channels,
        (1, _one(mod.kernel_size)),
        stride=(1, _one(mod.stride)),
        padding=(0, _one(mod.padding)),
        dilation=(1, _one(mod.dilation)),
        groups=mod.groups,
        bias=mod.bias is not None,
        **extra,
    )
    conv.weight = nn.Parameter(mod.weight.detach().unsqueeze(2).clone())
    if mod.bias is not None:
        conv.bias = mod.bias
    return conv


def _module_conv1d(q, mod, x, *, fused_relu=None):
    _require(mod.padding_mode == "zeros", f"padding_mode={mod.padding_mode!r}")
    conv = _conv_as_2d(nn.Conv2d, mod)
    inner = qat.Conv2d.from_float(conv, q.step("conv", qat.Conv2d, True))
    return OneDimensional("conv1d", inner), (x,)


def _module_conv_transpose1d(q, mod, x, output_size=None, *, fused_relu=None):
    _require(output_size is None, "output_size=")
    conv = _conv_as_2d(
        nn.ConvTranspose2d, mod, output_padding=(0, _one(mod.output_padding))
    )
    inner = qat.ConvTranspose2d.from_float(
        conv, q.step("conv", qat.ConvTranspose2d, True)
    )
    return OneDimensional("conv_transpose1d", inner), (x,)


def _f_conv1d(q, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    w, b = q.constant(weight), q.constant(bias)
    mod = nn.Conv1d(
        w.shape[1] * groups,
        w.shape[0],
        w.shape[2],
        stride,
        padding,
        dilation,
        groups,
        bias=b is not None,
    )
    mod.weight, mod.bias = _parameter(w), _parameter(b)
    return _module_conv1d(q, mod, input)


def _max_pool1d(
    q,
    input,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode=False,
    return_indices=False,
):
    _require(not return_indices, "return_indices=True")
    stride = kernel_size if stride is None or stride == [] else stride
    pool = qat.MaxPool2d(
        (1, _one(kernel_size)),
        (1, _one(stride)),
        (0, _one(padding)),
        (1, _one(dilation)),
        False,
        ceil_mode,
        qconfig=q.step("pool", qat.MaxPool2d, True),
    )
    return OneDimensional("max_pool1d", pool), (input,)


def _module_max_pool1d(q, mod, x, *, fused_relu=None):
    return _max_pool1d(
        q,
        x,
        mod.kernel_size,
        mod.stride,
        mod.padding,
        mod.dilation,
        mod.ceil_mode,
        mod.return_indices,
    )


def _avg_pool1d(
    q,
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
):
    stride = kernel_size if stride is None or stride == [] else stride
    pool = qat.AvgPool2d(
        (1, _one(kernel_size)),
        (1, _one(stride)),
        (0, _one(padding)),
        ceil_mode,
        count_include_pad,
        qconfig=q.step("pool", qat.AvgPool2d, True),
    )
    return OneDimensional("avg_pool1d", pool), (input,)


def _module_avg_pool1d(q, mod, x, *, fused_relu=None):
    return _avg_pool1d(
        q,
        x,
        mod.kernel_size,
        mod.stride,
        mod.padding,
        mod.ceil_mode,
        mod.count_include_pad,
    )


def _adaptive_avg_pool1d(q, input, output_size):
    length = input.meta["hbir_value"].shape[-1]
    out = _one(output_size)
    _require(
        length % out == 0,
        f"adaptive pooling from {length} to {out} (windows of different sizes: an "
        "output size that divides the input size)",
    )
    window = length // out
    pool = qat.AvgPool2d(
        (1, window), (1, window), qconfig=q.step("pool", qat.AvgPool2d, True)
    )
    return OneDimensional("adaptive_avg_pool1d", pool), (input,)


def _module_adaptive_avg_pool1d(q, mod, x, *, fused_relu=None):
    return _adaptive_avg_pool1d(q, x, mod.output_size)


def _where_of(q, cond, a, b):
    mask = _from_sizes(q, cond)
    _require(
        mask is not None,
        "a condition computed from inputs (a comparison): masks have no quantized "
        "form yet; a constant mask (made from sizes) is supported",
    )
    _require(mask.dtype == torch.bool, f"a condition of dtype {mask.dtype}")
    a_tensor, b_tensor = _is_tensor_arg(a), _is_tensor_arg(b)
    for v, is_tensor in ((a, a_tensor), (b, b_tensor)):
        _require(
            is_tensor or v == 0,
            f"a fill value of {v} (0 or a tensor: other values, such as an "
            "attention mask's -inf, have no quantized form yet)",
        )
    _require(a_tensor or b_tensor, "no tensor operand")
    module = WhereDecomposition(mask, a_tensor, b_tensor, q.step)
    return module, (a if a_tensor else 0.0, b if b_tensor else 0.0)


def _where(q, condition, input, other=None, *, out=None):
    _require(other is not None and out is None, "where(condition) (the indices)")
    return _where_of(q, condition, input, other)


def _tensor_where(q, input, condition, other):
    return _where_of(q, condition, input, other)


def _masked_fill(q, input, mask, value):
    return _where_of(q, mask, value, input)


def _cumsum(q, input, dim, *, dtype=None, out=None):
    _require(dtype in (None, torch.float32) and out is None, "dtype= / out=")
    shape = input.meta["hbir_value"].shape
    module = CumsumDecomposition(dim, shape[dim], len(shape), q.step)
    return module, (input,)


def _prelu_of(q, input, weight):
    shape = input.meta["hbir_value"].shape
    _require(len(shape) >= 2, "prelu of a tensor without a channel dim")
    channels = shape[1]
    _require(
        weight.numel() in (1, channels), f"{weight.numel()} slopes, {channels} channels"
    )
    if weight.numel() != channels:
        weight = nn.Parameter(weight.detach().reshape(1).repeat(channels))
    return PReLUDecomposition(weight, len(shape), q.step), (input,)


def _module_prelu(q, mod, x, *, fused_relu=None):
    return _prelu_of(q, x, mod.weight)


def _prelu(q, input, weight):
    return _prelu_of(q, input, _parameter(q.constant(weight)))


def _zero_state(q, hx) -> bool:
    """``hx`` is made of constant zeros (``torch.zeros`` folded by tracing): the
    same as no initial state."""
    states = hx if isinstance(hx, list | tuple) else (hx,)
    for node in states:
        if not (isinstance(node, fx.Node) and node.op == "get_attr"):
            return False
        if bool(q.constant(node).any()):
            return False
    return True


def _module_recurrent(q, mod, x, hx=None, *, fused_relu=None):
    shape = x.meta["hbir_value"].shape
    _require(len(shape) == 3, "an unbatched sequence (a 2-d input)")
    steps = shape[1 if mod.batch_first else 0]
    if hx is not None and _zero_state(q, hx):
        hx = None
    try:
        module = RECURRENT[type(mod)](mod, steps, hx is not None, q.step)
    except UnsupportedRecurrence as e:
        raise Unsupported(str(e)) from None
    return module, (x,) if hx is None else (x, hx)


def _addcmul(q, input, tensor1, tensor2, *, value=1, out=None):
    _require(out is None, "out=")
    return AddProductDecomposition(False, value, 1, q.step), (input, tensor1, tensor2)


def _addmm(q, input, mat1, mat2, *, beta=1, alpha=1, out=None):
    _require(out is None, "out=")
    module = AddProductDecomposition(True, alpha, beta, q.step)
    return module, (input, mat1, mat2)


def _einsum(q, equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    _require(all(_is_tensor_arg(x) for x in operands), "operands that are not tensors")
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
    _require(bias is None or weight is not None, "bias without weight")
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
    _require(not return_indices, "return_indices=True")
    module = qat.MaxPool2d(
        kernel_size, stride, padding, dilation, False, ceil_mode, qconfig=q()
    )
    return module, (input,)


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
    _require(min(pad, default=0) >= 0, "negative padding (a crop: slice instead)")
    _require(isinstance(value, int | float), "a pad value that is not a number")
    _require(
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
    _require(
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
    _require(not return_indices, "return_indices=True")
    window = _adaptive_window(input, output_size)
    return qat.MaxPool2d(window, window, qconfig=q()), (input,)


def _module_adaptive_max_pool2d(q, mod, x, *, fused_relu=None):
    return _adaptive_max_pool2d(q, x, mod.output_size, mod.return_indices)


# ----------------------------------------------------------------- pass-through


def _pad_keeps_grid(input, pad, mode="constant", value=None):
    return min(pad, default=0) >= 0 and (mode != "constant" or not value)


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
    "max_pool2d": _from_float(qat.MaxPool2d),
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
    "lstm": _module_recurrent,
    "conv1d": _module_conv1d,
    "conv_transpose1d": _module_conv_transpose1d,
    "max_pool1d": _module_max_pool1d,
    "avg_pool1d": _module_avg_pool1d,
    "adaptive_avg_pool1d": _module_adaptive_avg_pool1d,
    "gru": _module_recurrent,
    "layer_norm": _module_layer_norm,
    "affine": _module_batch_norm,
    "group_norm": _module_group_norm,
    "multihead_attention": _module_multihead_attention,
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
    "conv1d": _f_conv1d,
    "max_pool1d": _max_pool1d,
    "avg_pool1d": _avg_pool1d,
    "adaptive_avg_pool1d": _adaptive_avg_pool1d,
    "addcmul": _addcmul,
    "addmm": _addmm,
    "einsum": _einsum,
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
    "constant_pad": _constant_pad,
    "abs": _unary(qat.Abs),
}

_SPELLING_BUILDERS: dict[str, Callable] = {
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
        _require(threshold == _SOFTPLUS_THRESHOLD, f"threshold={threshold}")
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
        _require(not kwargs, ", ".join(f"{k}=" for k in kwargs))
        _require(threshold == _SOFTPLUS_THRESHOLD, f"threshold={threshold}")
        _require(
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


# Pass-through only for some arguments (a nonzero pad value or bilinear resize would
# create values off the input grid).
_CONDITIONS: dict[str, Callable[..., bool]] = {
    "F.pad": _pad_keeps_grid,
    "F.interpolate": _interpolate_keeps_grid,
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
            if entry.quantized == op_table.PASSTHROUGH:
                if spelling in _CONDITIONS:
                    CONDITIONAL_PASSTHROUGH[target] = _CONDITIONS[spelling]
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
