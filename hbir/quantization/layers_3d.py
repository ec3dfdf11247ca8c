"""3-d convolutions as one 2-d convolution over their depth windows.

``nn.Conv3d`` / ``F.conv3d`` (occupancy and video heads) is prepared as: the input
``[N, C, D, H, W]`` zero-padded along the depth, the depth slices of every output
depth's window read with one ``index_select`` (the window's ``kd`` slices side by
side), moved to ``[Do * N, kd * C, H, W]``, one QAT ``Conv2d`` with the kernel's
``(kh, kw)`` and the weight as a new parameter of shape ``[O, kd * C, kh, kw]``
(the 3-d weight's depth taps side by side, in the window's order), and the result
moved back to ``[N, O, Do, Ho, Wo]``. Every step but the conv moves codes, so the
NPU's 2-d conv computes the 3-d conv's exact integer sums, in one instruction.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hbir.quantization import qat_modules as qat
from hbir.quantization.decompositions import Decomposition
from hbir.quantization.rule_support import parameter, require


def _three(v) -> tuple[int, int, int]:
    return tuple(v) if isinstance(v, list | tuple) else (v, v, v)


class DepthWindows(Decomposition):
    """A 3-d conv as one 2-d conv over its depth windows (see the module)."""

    op = "conv3d"

    def __init__(self, inner: nn.Module, kernel: int, stride: int, padding: int,
                 dilation: int, depth: int) -> None:  # fmt: skip
        super().__init__()
        self.inner = inner
        self.padding = padding
        padded = depth + 2 * padding
        self.out_depth = (padded - dilation * (kernel - 1) - 1) // stride + 1
        self.kernel = kernel
        taps = [
            od * stride + k * dilation
            for od in range(self.out_depth)
            for k in range(kernel)
        ]
        self.register_buffer("taps", torch.tensor(taps), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding:
            x = F.pad(x, (0, 0, 0, 0, self.padding, self.padding))
        n, c, _, h, w = x.shape
        windows = x.index_select(2, self.taps)  # N, C, Do * kd, H, W
        windows = windows.reshape(n, c, self.out_depth, self.kernel, h, w)
        windows = windows.permute(2, 0, 3, 1, 4, 5)  # Do, N, kd, C, H, W
        y = self.inner(windows.reshape(self.out_depth * n, self.kernel * c, h, w))
        # (sizes one by one: prepare inlines this forward on proxies)
        y = y.reshape(self.out_depth, n, y.shape[1], y.shape[2], y.shape[3])
        return y.permute(1, 2, 0, 3, 4)


def _conv3d_of(q, weight, bias, stride, padding, dilation, groups, depth):
    require(groups == 1, f"groups={groups} (1 only)")
    require(not isinstance(padding, str), f"padding={padding!r}")
    o, c, kd, kh, kw = weight.shape
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = (
        _three(stride),
        _three(padding),
        _three(dilation),
    )
    conv = nn.Conv2d(
        kd * c, o, (kh, kw), (sh, sw), (ph, pw), (dh, dw), bias=bias is not None
    )
    conv.weight = nn.Parameter(
        weight.detach().permute(0, 2, 1, 3, 4).reshape(o, kd * c, kh, kw).clone()
    )
    if bias is not None:
        conv.bias = bias
    inner = qat.Conv2d.from_float(conv, q.step("conv", qat.Conv2d, True))
    return DepthWindows(inner, kd, sd, pd, dd, depth)


def module_conv3d(q, mod, x, *, fused_relu=None):
    require(mod.padding_mode == "zeros", f"padding_mode={mod.padding_mode!r}")
    depth = x.meta["hbir_value"].shape[2]
    return _conv3d_of(
        q, mod.weight, mod.bias, mod.stride, mod.padding, mod.dilation, mod.groups,
        depth,
    ), (x,)  # fmt: skip


def _f_conv3d(q, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    w, b = parameter(q.constant(weight)), parameter(q.constant(bias))
    depth = input.meta["hbir_value"].shape[2]
    module = _conv3d_of(q, w, b, stride, padding, dilation, groups, depth)
    return module, (input,)


# op -> builder, read by op_rules
MODULE_BUILDERS = {"conv3d": module_conv3d}
FUNCTION_BUILDERS = {"conv3d": _f_conv3d}
