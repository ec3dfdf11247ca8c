"""``F.grid_sample`` all the way to model.hbm (issue 27): BEV samplers and
deformable sampling.

A BEV sampler reads image features at a fixed camera-to-BEV grid (a buffer, which
prepare quantizes with a generated stub); deformable attention and flow warping
read them at coordinates the model predicts (a conv's tanh). Both take every
mode, padding and ``align_corners`` through prepare, calibration, a QAT step,
export, convert and compile: qat.bc equals qat.export.pt, quantized.bc qat.bc and
model.hbm quantized.bc, bit for bit, and the program runs the sample on the NPU.
The integer semantics (``numerics.grid_sample_sum``: the NPU's bilinear weights at
coordinates computed exactly from the grid's codes) are tested against torch in
``tests/runtime/test_numerics.py``.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo_stages import every_stage_bit_identical, validated

from hbir.quantization import ConsistencyStrategy


class BevSampler(nn.Module):
    """Image features sampled at a fixed grid (LSS / BEVFormer-style projection
    of BEV cells into the image), then a BEV conv."""

    def __init__(self, how: dict):
        super().__init__()
        self.how = how
        self.image = nn.Conv2d(3, 8, 3, padding=1)
        self.bev = nn.Conv2d(8, 4, 1)
        g = torch.Generator().manual_seed(3)
        self.register_buffer("grid", torch.rand(1, 5, 6, 2, generator=g) * 2.4 - 1.2)

    def forward(self, x):
        f = F.relu(self.image(x))
        grid = self.grid.expand(x.shape[0], -1, -1, -1)
        return self.bev(F.grid_sample(f, grid, **self.how))


class DeformableSampler(nn.Module):
    """Sampling at predicted coordinates (deformable attention, flow warping):
    the grid is a tanh of a conv of the features, so QAT trains it too."""

    def __init__(self, how: dict):
        super().__init__()
        self.how = how
        self.image = nn.Conv2d(3, 8, 3, padding=1)
        self.offset = nn.Conv2d(8, 2, 3, padding=1)

    def forward(self, x):
        f = F.relu(self.image(x))
        grid = torch.tanh(self.offset(f)).permute(0, 2, 3, 1) * 1.1
        return F.grid_sample(f, grid, **self.how) + f


HOWS = {
    "bilinear-zeros": {"mode": "bilinear", "padding_mode": "zeros"},
    "bilinear-border-corners": {
        "mode": "bilinear",
        "padding_mode": "border",
        "align_corners": True,
    },
    "nearest-zeros": {"mode": "nearest", "padding_mode": "zeros"},
    "nearest-border": {
        "mode": "nearest",
        "padding_mode": "border",
        "align_corners": True,
    },
}


@pytest.mark.parametrize(
    "how, level",
    [(how, None) for how in sorted(HOWS)] + [("bilinear-zeros", 2)],
    ids=[*sorted(HOWS), "bilinear-zeros-level2"],
)
@pytest.mark.parametrize("model", [BevSampler, DeformableSampler])
def test_grid_sample_is_bit_identical_at_every_stage(model, how, level, tmp_path):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    inputs = [torch.randn(2, 3, 8, 8, generator=g) for _ in range(3)]
    ConsistencyStrategy.set_consistency_level(level)
    try:
        qat = validated(model(HOWS[how]), inputs, tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    units = every_stage_bit_identical(qat, inputs, tmp_path)
    assert ("hbir.grid_sample", "aae") in units


def test_the_grid_is_trained_by_qat(tmp_path):
    """The gradient reaches the offsets (torch's grid_sample's, through the
    exact forward)."""
    from hbir.quantization import FakeQuantState, prepare, set_fake_quantize

    model = DeformableSampler(HOWS["bilinear-zeros"])
    x = torch.randn(2, 3, 8, 8)
    qat = prepare(model.eval(), (x,), out_dir=tmp_path).eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(x)
    qat.train()
    set_fake_quantize(qat, FakeQuantState.QAT)
    qat(x).pow(2).mean().backward()
    grad = qat.get_submodule("offset").weight.grad
    assert grad is not None and float(grad.abs().sum()) > 0


def test_unsupported_grid_sample_arguments_are_refused_at_prepare(tmp_path):
    from hbir.quantization import UnsupportedOpError, prepare

    model = BevSampler({"mode": "bicubic"})
    with pytest.raises(
        UnsupportedOpError, match=r"mode='bicubic' \(bilinear, nearest\)"
    ):
        prepare(model, (torch.randn(1, 3, 8, 8),), out_dir=tmp_path)
    model = BevSampler({"padding_mode": "reflection"})
    with pytest.raises(UnsupportedOpError, match="padding_mode='reflection'"):
        prepare(model, (torch.randn(1, 3, 8, 8),), out_dir=tmp_path)
