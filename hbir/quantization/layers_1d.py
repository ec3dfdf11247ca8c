"""1-d convolutions and pools as their 2-d forms on ``[N, C, 1, L]``.

``nn.Conv1d`` / ``F.conv1d``, ``nn.ConvTranspose1d``, ``nn.MaxPool1d`` /
``F.max_pool1d``, ``nn.AvgPool1d`` / ``F.avg_pool1d`` and ``nn.AdaptiveAvgPool1d``
(an output size dividing the input's) are prepared as the 2-d QAT module with a
kernel of height 1 between an ``unsqueeze(2)`` and a ``squeeze(2)``: the same
windows and numbers, computed by the NPU's 2-d instructions. The conv's weight is a
new parameter of shape ``[O, I, 1, k]`` (the float module's, viewed).
"""

from __future__ import annotations

import torch
from torch import nn

from hbir.quantization import qat_modules as qat
from hbir.quantization.decompositions import Decomposition
from hbir.quantization.rule_support import parameter, require


class OneDimensional(Decomposition):
    """A 1-d conv or pool (``[N, C, L]``) as its 2-d form on ``[N, C, 1, L]``: the
    same windows, the NPU's 2-d instruction."""

    def __init__(self, op: str, inner: nn.Module) -> None:
        super().__init__()
        self.op = op
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.unsqueeze(2)).squeeze(2)


def _one(v) -> int:
    return v[0] if isinstance(v, list | tuple) else v


def _conv_as_2d(cls2d, mod, **extra) -> nn.Module:
    """The float 2-d form of a 1-d conv: kernel ``(1, k)``, its weight (a new
    parameter of shape ``[O, I, 1, k]``) and bias."""
    require(not isinstance(mod.padding, str), f"padding={mod.padding!r}")
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


def module_conv1d(q, mod, x, *, fused_relu=None):
    require(mod.padding_mode == "zeros", f"padding_mode={mod.padding_mode!r}")
    conv = _conv_as_2d(nn.Conv2d, mod)
    inner = qat.Conv2d.from_float(conv, q.step("conv", qat.Conv2d, True))
    return OneDimensional("conv1d", inner), (x,)


def _module_conv_transpose1d(q, mod, x, output_size=None, *, fused_relu=None):
    require(output_size is None, "output_size=")
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
    mod.weight, mod.bias = parameter(w), parameter(b)
    return module_conv1d(q, mod, input)


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
    require(not return_indices, "return_indices=True")
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
    require(
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


# op -> builder, read by op_rules
MODULE_BUILDERS = {
    "conv1d": module_conv1d,
    "conv_transpose1d": _module_conv_transpose1d,
    "max_pool1d": _module_max_pool1d,
    "avg_pool1d": _module_avg_pool1d,
    "adaptive_avg_pool1d": _module_adaptive_avg_pool1d,
}
FUNCTION_BUILDERS = {
    "conv1d": _f_conv1d,
    "max_pool1d": _max_pool1d,
    "avg_pool1d": _avg_pool1d,
    "adaptive_avg_pool1d": _adaptive_avg_pool1d,
}
