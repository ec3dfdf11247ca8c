"""``FakeCast``: round to IEEE binary16 and back, with a straight-through gradient.

The fake quantization of an fp16 value (the float16 qconfig, on a march with fp16:
``MarchLimits.float_bits``). ``x.to(torch.float16).to(x.dtype)`` rounds half to
even and overflows to ±inf as IEEE 754 says; every stage after it computes the
same rounding (``hbir.cast`` to ``f16`` in HBIR, ``numerics.round_f16``), so a
value on the fp16 grid is the same binary16 everywhere (docs/quantization.md).
"""

from __future__ import annotations

import torch
from torch import nn

from hbir.quantization.dtypes import float16


class _RoundF16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float16).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


class FakeCast(nn.Module):
    """Round to float16 and back (``dtype=torch.float16``), as the reference's
    ``FakeCast``. On in every state but ``FakeQuantState._FLOAT``; there is nothing
    to observe or calibrate."""

    def __init__(self, dtype: object = torch.float16) -> None:
        super().__init__()
        if dtype not in (torch.float16, float16):
            raise ValueError(
                f"FakeCast: dtype must be torch.float16 (fp16), got {dtype!r}"
            )
        self.dtype = float16
        self.enabled = True

    def enable_fake_quant(self, enabled: bool = True) -> FakeCast:
        self.enabled = enabled
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled or x.dtype == torch.float16:
            return x
        return _RoundF16.apply(x)

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, enabled={self.enabled}"
