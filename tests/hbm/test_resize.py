"""Bicubic ``F.interpolate`` / ``nn.Upsample`` through every stage to model.hbm.

The integer semantics (``numerics.bicubic_taps``: torch's cubic convolution
weights rounded to the NPU's 2**-7 grid, the border clamped as torch clamps it)
are checked against torch in ``tests/runtime/test_numerics.py``; here each
spelling goes through prepare, calibration, pre_export, export (qat.bc ==
qat.export.pt), convert (quantized.bc == qat.bc) and compile (model.hbm loaded
back == quantized.bc), the resize on the NPU's AAE and no CPU island but the
edges, at the default consistency level and at level 2.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo_stages import every_stage_bit_identical, validated

from hbir.quantization import ConsistencyStrategy


class _Resized(nn.Module):
    """quant -> conv -> relu -> ``resize`` -> conv -> dequant."""

    def __init__(self, resize):
        super().__init__()
        from hbir.quantization import DeQuantStub, QuantStub

        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Conv2d(4, 2, 1)
        self.resize = resize

    def forward(self, x):
        y = F.relu(self.conv(self.quant(x)))
        return self.dequant(self.head(self.resize(self, y)))


class _UpsampleModule(_Resized):
    def __init__(self, module):
        super().__init__(lambda m, y: m.up(y))
        self.up = module


GRAPHS = {
    "bicubic-scale-2": lambda: _Resized(
        lambda m, y: F.interpolate(y, scale_factor=2.0, mode="bicubic")
    ),
    "bicubic-size-align-corners": lambda: _Resized(
        lambda m, y: F.interpolate(y, size=(13, 7), mode="bicubic", align_corners=True)
    ),
    "bicubic-down": lambda: _Resized(
        lambda m, y: F.interpolate(y, size=(5, 4), mode="bicubic")
    ),
    "bicubic-size-from-the-graph": lambda: _Resized(
        lambda m, y: F.interpolate(y[..., ::2, ::2], size=y.shape[-2:], mode="bicubic")
    ),
    "upsample-bicubic-module": lambda: _UpsampleModule(
        nn.Upsample(scale_factor=2, mode="bicubic", align_corners=False)
    ),
}


@pytest.mark.parametrize(
    "name, level",
    [(name, None) for name in sorted(GRAPHS)] + [("bicubic-scale-2", 2)],
    ids=[*sorted(GRAPHS), "bicubic-scale-2-level2"],
)
def test_bicubic_is_bit_identical_at_every_stage(name, level, tmp_path):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(2, 3, 8, 6, generator=g) for _ in range(3)]
    ConsistencyStrategy.set_consistency_level(level)
    try:
        qat = validated(GRAPHS[name](), inputs, tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    units = every_stage_bit_identical(qat, inputs, tmp_path)
    assert ("hbir.resize2d", "aae") in units


def test_the_qat_model_is_torchs_bicubic_up_to_the_weight_grid(tmp_path):
    """With fake quantization off, the prepared model's bicubic differs from the
    float model's only by the NPU's weights (each within a step of 2**-7 of
    torch's): a relative bound on the resized values, never a different mode."""
    from hbir.quantization import FakeQuantState, set_fake_quantize

    torch.manual_seed(0)
    model = GRAPHS["bicubic-scale-2"]().eval()
    x = torch.randn(2, 3, 8, 6)
    qat = validated(model, [x], tmp_path)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)  # observes, no fake quant
    with torch.no_grad():
        want, got = model(x), qat(x)
        nearest = F.interpolate(F.relu(model.conv(x)), scale_factor=2.0, mode="nearest")
        far = (model.head(nearest) - want).abs().max()
    err = (got - want).abs().max()
    # measured: 1.05 % of the largest output, 1/34 of nearest's difference; the
    # bounds leave room only for another seed's data
    assert err <= 0.015 * want.abs().max(), (err, want.abs().max())
    assert err < far / 20  # far closer to torch's bicubic than another mode is
