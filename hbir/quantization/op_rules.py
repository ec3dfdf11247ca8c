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

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

from hbir.quantization import lut_modules as lut
from hbir.quantization import qat_modules as qat
from hbir.quantization.decompositions import (
    DivDecomposition,
    LayerNormDecomposition,
    SoftmaxDecomposition,
)


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
    return isinstance(x, fx.Node)


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


def _module_batch_norm(q, mod, x, *, fused_relu=None):
    _require(mod.running_var is not None, "BatchNorm2d without running statistics")
    return qat.QuantAffine.from_batch_norm(mod, q()), (x,)


MODULE_RULES: dict[type, OpRule] = {
    nn.Conv2d: OpRule("conv2d", _weight_layer(qat.Conv2d)),
    nn.ConvTranspose2d: OpRule("conv_transpose2d", _weight_layer(qat.ConvTranspose2d)),
    nn.Linear: OpRule("linear", _weight_layer(qat.Linear)),
    nn.MaxPool2d: OpRule("max_pool2d", _from_float(qat.MaxPool2d)),
    nn.AvgPool2d: OpRule("avg_pool2d", _from_float(qat.AvgPool2d)),
    nn.AdaptiveAvgPool2d: OpRule(
        "adaptive_avg_pool2d", _from_float(qat.AdaptiveAvgPool2d)
    ),
    nn.ReLU: OpRule("relu", _module_simple(qat.ReLU)),
    nn.ReLU6: OpRule("relu6", _module_simple(qat.ReLU6)),
    nn.Hardtanh: OpRule("clamp", _module_hardtanh),
    nn.Sigmoid: OpRule("sigmoid", _module_lut(lut.Sigmoid)),
    nn.Tanh: OpRule("tanh", _module_lut(lut.Tanh)),
    nn.GELU: OpRule("gelu", _module_lut(lut.GELU, approximate="approximate")),
    nn.SiLU: OpRule("silu", _module_lut(lut.SiLU)),
    nn.Hardsigmoid: OpRule("hardsigmoid", _module_lut(lut.Hardsigmoid)),
    nn.Hardswish: OpRule("hardswish", _module_lut(lut.Hardswish)),
    nn.Softmax: OpRule("softmax", _module_softmax),
    nn.LayerNorm: OpRule("layer_norm", _module_layer_norm),
    nn.BatchNorm2d: OpRule("affine", _module_batch_norm),
}

# Modules that are identities at inference stay in the graph as they are
# (``prepare`` drops ``nn.Identity`` and turns ``nn.Flatten`` into ``torch.flatten``).
PASSTHROUGH_MODULES = (nn.Dropout,)


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
        return qat.QuantMul(q()), (input, 1.0 / other)
    return DivDecomposition(q.step), (input, other)


def _cat(q, tensors, dim=0, *, out=None):
    return qat.QuantCat(q(), dim), (list(tensors),)


def _matmul(q, input, other, *, out=None):
    return qat.QuantMatmul(q()), (input, other)


def _reduce(cls):
    def build(q, input, dim=None, keepdim=False, *, dtype=None, out=None):
        _require(dtype is None, f"dtype={dtype}")
        return cls(q(), dim, keepdim), (input,)

    return build


def _unary(cls):
    def build(q, input, *, out=None):
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


def _hardtanh(q, input, min_val=-1.0, max_val=1.0, inplace=False):
    return qat.Clamp(q(), min_val, max_val), (input,)


def _pow(q, input, exponent):
    _require(_is_tensor_arg(input) and not _is_tensor_arg(exponent), "tensor exponent")
    if exponent == 2:
        return qat.QuantMul(q()), (input, input)
    powers = {0.5: lut.Sqrt, -0.5: lut.Rsqrt, -1: lut.Reciprocal}
    _require(exponent in powers, f"exponent {exponent} (supported: 2, 0.5, -0.5, -1)")
    return powers[exponent](q()), (input,)


def _square(q, input):
    return qat.QuantMul(q()), (input, input)


def _softmax(q, input, dim=None, _stacklevel=3, dtype=None):
    _require(dim is not None, "softmax without dim")
    _require(dtype is None, f"dtype={dtype}")
    return SoftmaxDecomposition(dim, q.step), (input,)


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


def _adaptive_avg_pool2d(q, input, output_size):
    return qat.AdaptiveAvgPool2d(output_size, qconfig=q()), (input,)


_ADD = OpRule("add", _binary(qat.QuantAdd))
_SUB = OpRule("sub", _binary(qat.QuantSub))
_MUL = OpRule("mul", _binary(qat.QuantMul))
_DIV = OpRule("div", _div)
_MATMUL = OpRule("matmul", _matmul)
_MEAN = OpRule("mean", _reduce(qat.QuantMean))
_SUM = OpRule("sum", _reduce(qat.QuantSum))
_RELU = OpRule("relu", _unary_inplace(qat.ReLU))
_RELU6 = OpRule("relu6", _unary_inplace(qat.ReLU6))
_CLAMP = OpRule("clamp", _clamp)
_SOFTMAX = OpRule("softmax", _softmax)
_POW = OpRule("pow", _pow)
_LUT = {cls.op: OpRule(cls.op, _unary(cls)) for cls in lut.LUT_MODULES}

FUNCTION_RULES: dict[Callable, OpRule] = {
    operator.add: _ADD,
    operator.iadd: _ADD,
    torch.add: _ADD,
    operator.sub: _SUB,
    operator.isub: _SUB,
    torch.sub: _SUB,
    operator.mul: _MUL,
    operator.imul: _MUL,
    torch.mul: _MUL,
    operator.truediv: _DIV,
    torch.div: _DIV,
    torch.cat: OpRule("cat", _cat),
    torch.concat: OpRule("cat", _cat),
    torch.concatenate: OpRule("cat", _cat),
    operator.matmul: _MATMUL,
    torch.matmul: _MATMUL,
    torch.bmm: _MATMUL,
    torch.mean: _MEAN,
    torch.sum: _SUM,
    F.relu: _RELU,
    torch.relu: _RELU,
    F.relu6: _RELU6,
    F.hardtanh: OpRule("clamp", _hardtanh),
    torch.clamp: _CLAMP,
    torch.clip: _CLAMP,
    operator.pow: _POW,
    torch.pow: _POW,
    torch.square: OpRule("mul", _square),
    torch.sigmoid: _LUT["sigmoid"],
    F.sigmoid: _LUT["sigmoid"],
    torch.tanh: _LUT["tanh"],
    F.tanh: _LUT["tanh"],
    torch.exp: _LUT["exp"],
    torch.log: _LUT["log"],
    torch.sqrt: _LUT["sqrt"],
    torch.rsqrt: _LUT["rsqrt"],
    torch.reciprocal: _LUT["reciprocal"],
    torch.sin: _LUT["sin"],
    torch.cos: _LUT["cos"],
    F.gelu: OpRule("gelu", _gelu),
    F.silu: OpRule("silu", _unary_inplace(lut.SiLU)),
    F.hardsigmoid: OpRule("hardsigmoid", _unary_inplace(lut.Hardsigmoid)),
    F.hardswish: OpRule("hardswish", _unary_inplace(lut.Hardswish)),
    F.softmax: _SOFTMAX,
    torch.softmax: _SOFTMAX,
    F.layer_norm: OpRule("layer_norm", _layer_norm),
    F.max_pool2d: OpRule("max_pool2d", _max_pool2d),
    F._max_pool2d: OpRule("max_pool2d", _max_pool2d),
    F.avg_pool2d: OpRule("avg_pool2d", _avg_pool2d),
    F.adaptive_avg_pool2d: OpRule("adaptive_avg_pool2d", _adaptive_avg_pool2d),
}

METHOD_RULES: dict[str, OpRule] = {
    "add": _ADD,
    "add_": _ADD,
    "sub": _SUB,
    "mul": _MUL,
    "div": _DIV,
    "matmul": _MATMUL,
    "mean": _MEAN,
    "sum": _SUM,
    "relu": _RELU,
    "clamp": _CLAMP,
    "clip": _CLAMP,
    "pow": _POW,
    "square": OpRule("mul", _square),
    "softmax": _SOFTMAX,
    **{op: _LUT[op] for op in ("sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt")},
    **{op: _LUT[op] for op in ("reciprocal", "sin", "cos")},
}


# ----------------------------------------------------------------- pass-through


def _pad_keeps_grid(input, pad, mode="constant", value=None):
    return mode == "constant" and not value


def _interpolate_keeps_grid(
    input, size=None, scale_factor=None, mode="nearest", *a, **k
):
    return mode == "nearest"


PASSTHROUGH_FUNCTIONS: set[Callable] = {
    torch.flatten,
    torch.reshape,
    torch.permute,
    torch.transpose,
    torch.swapaxes,
    torch.squeeze,
    torch.unsqueeze,
    torch.split,
    torch.chunk,
    torch.unbind,
    torch.narrow,
    torch.t,
    torch.movedim,
    torch.flip,
    torch.roll,
    torch.amax,
    torch.clone,
    torch.detach,
    operator.getitem,
    F.dropout,
}

PASSTHROUGH_METHODS: set[str] = {
    "view",
    "view_as",
    "reshape",
    "reshape_as",
    "permute",
    "transpose",
    "flatten",
    "unflatten",
    "contiguous",
    "squeeze",
    "unsqueeze",
    "split",
    "chunk",
    "unbind",
    "narrow",
    "t",
    "movedim",
    "flip",
    "roll",
    "amax",
    "expand",
    "expand_as",
    "repeat",
    "clone",
    "detach",
    "float",
    "to",
    "type_as",
}

# Pass-through only for some arguments (a nonzero pad value or bilinear resize would
# create values off the input grid).
CONDITIONAL_PASSTHROUGH: dict[Callable, Callable[..., bool]] = {
    F.pad: _pad_keeps_grid,
    F.interpolate: _interpolate_keeps_grid,
}
