"""Max pooling indices and max unpooling (SegNet, ENet) through every stage.

``MaxPool2d(return_indices=True)`` / ``F.max_pool2d(..., return_indices=True)``
give torch's indices of the pool's fake-quantized input (int64:
``hbir.max_pool2d_indices`` / ``npu.max_pool_indices``) and ``MaxUnpool2d`` /
``F.max_unpool2d`` writes values at them into zeros (``hbir.max_unpool2d`` /
``npu.max_unpool``). Each graph goes through prepare, calibration, pre_export,
export (qat.bc == qat.export.pt), convert (quantized.bc == qat.bc) and compile
(model.hbm loaded back == quantized.bc), both ops on the NPU and no CPU island
but the edges. The indices themselves, as an output, are checked against
torch's on the fake-quantized input; the integer rule against torch over many
windows in ``tests/runtime/test_selection.py``.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo_stages import every_stage_bit_identical, validated

import hbir
from hbir.quantization import (
    ConsistencyStrategy,
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    export,
    prepare,
    set_fake_quantize,
)


class _Pooled(nn.Module):
    """quant -> conv -> relu -> ``body(y)`` -> dequant of each result."""

    def __init__(self, body):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.mid = nn.Conv2d(4, 4, 1)
        self.body = body

    def forward(self, x):
        out = self.body(self, F.relu(self.conv(self.quant(x))))
        if isinstance(out, tuple):  # (values, indices): the indices as they are
            return self.dequant(out[0]), out[1]
        return self.dequant(out)


class _SegNet(_Pooled):
    """SegNet's encoder / decoder pair: pooling indices kept for the unpool."""

    def __init__(self):
        super().__init__(None)
        self.pool = nn.MaxPool2d(2, 2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2, 2)

    def forward(self, x):
        y = F.relu(self.conv(self.quant(x)))
        p, where = self.pool(y)
        z = F.relu(self.mid(p))
        return self.dequant(self.unpool(z, where, output_size=y.shape[-2:]))


def _padded_ceil(m, y):
    p, where = F.max_pool2d(y, 3, 2, 1, ceil_mode=True, return_indices=True)
    return F.max_unpool2d(m.mid(p), where, 3, 2, 1, output_size=y.shape[-2:])


def _adaptive(m, y):
    p, where = F.adaptive_max_pool2d(y, (4, 3), return_indices=True)
    return F.max_unpool2d(p * 0.5, where, 2, output_size=y.shape[-2:])


def _dilated(m, y):
    values, indices = F.max_pool2d(y, 2, 1, 0, dilation=2, return_indices=True)
    return values, indices


GRAPHS = {
    "segnet-modules": _SegNet,
    "padded-ceil-mode-functional": lambda: _Pooled(_padded_ceil),
    "adaptive-with-indices": lambda: _Pooled(_adaptive),
    # the indices as a model output, a dilated window
    "dilated-indices-output": lambda: _Pooled(_dilated),
}


@pytest.mark.parametrize(
    "name, level",
    [(name, None) for name in sorted(GRAPHS)] + [("segnet-modules", 2)],
    ids=[*sorted(GRAPHS), "segnet-modules-level2"],
)
def test_pool_indices_and_unpool_are_bit_identical_at_every_stage(
    name, level, tmp_path
):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(4)
    inputs = [torch.randn(2, 3, 8, 6, generator=g) for _ in range(3)]
    ConsistencyStrategy.set_consistency_level(level)
    try:
        qat = validated(GRAPHS[name](), inputs, tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    units = every_stage_bit_identical(qat, inputs, tmp_path)
    assert ("hbir.max_pool2d_indices", "aae") in units
    if name != "dilated-indices-output":
        assert ("hbir.max_unpool2d", "dte") in units


def test_the_indices_are_torchs_on_the_fake_quantized_input(tmp_path):
    """The QAT model's indices are torch's own on the pool's input (many equal
    codes: the tie rule is torch's, the first maximum of each window)."""
    torch.manual_seed(0)
    inputs = [torch.randn(2, 3, 8, 6) for _ in range(2)]
    model = GRAPHS["dilated-indices-output"]()
    qat = validated(model, inputs, tmp_path)
    qat_bc = export(qat, (inputs[0],))
    for x in inputs:
        with torch.no_grad():
            y = qat.get_submodule("conv")(qat.get_submodule("quant")(x))
            # the pool's input: the relu's output on its grid
            y = F.relu(y)
            _, want = F.max_pool2d(y, 2, 1, 0, dilation=2, return_indices=True)
        got = qat_bc["forward"].feed({"_input_0": x.numpy()})
        indices = [
            np.asarray(v) for v in got.values() if np.asarray(v).dtype == np.int64
        ]
        assert len(indices) == 1
        np.testing.assert_array_equal(indices[0], want.numpy())


class _UnpoolAt(nn.Module):
    """Unpooling at indices that are a model input (int64)."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x, where):
        return self.dequant(F.max_unpool2d(self.conv(self.quant(x)), where, 2))


def test_an_index_out_of_range_is_a_located_error_in_every_engine(tmp_path):
    x = torch.randn(1, 3, 2, 2)
    where = torch.tensor([[0, 3, 8, 15]]).reshape(1, 1, 2, 2).repeat(1, 3, 1, 1)
    qat = prepare(_UnpoolAt().eval(), (x, where), out_dir=tmp_path)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(x, where)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    qat_bc = export(qat, (x, where))
    quantized = hbir.convert(qat_bc, "nash-e")
    hbir.compile(quantized, tmp_path / "model.hbm", "nash-e")
    loaded = hbir.load(str(tmp_path / "model.hbm"))
    bad = where.clone()
    bad[0, 1, 1, 1] = 16  # a 4 x 4 output has 16 positions
    feed = {"_input_0": x.numpy(), "_input_1": bad.numpy()}
    for f in (qat_bc["forward"], quantized["forward"], loaded["forward"]):
        with pytest.raises(hbir.HbirError, match="index 16 is out of range"):
            f.feed(feed)
