"""Float-model markers for where quantization starts and ends.

Put one ``QuantStub`` on each float input of the part to deploy and one
``DeQuantStub`` on each output; both are identities in the float model. ``prepare``
swaps them for their QAT versions: a ``QuantStub`` gets a ``FakeQuantize`` (fixed
scale if ``scale`` is given), a ``DeQuantStub`` marks the rest of the graph as float.
"""

from __future__ import annotations

import torch
from torch import nn


class QuantStub(nn.Module):
    """Start of the quantized region; ``scale`` fixes the input scale."""

    def __init__(
        self, scale: float | None = None, zero_point: int | None = None, qconfig=None
    ):
        super().__init__()
        if zero_point not in (None, 0):
            raise ValueError("quantization is symmetric: zero_point must be 0 or None")
        self.scale = scale
        self.zero_point = zero_point
        self.qconfig = qconfig

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class DeQuantStub(nn.Module):
    """End of the quantized region: what follows runs in float."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x
