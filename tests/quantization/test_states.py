"""FakeQuantState: what each state does, and the wrong-mode errors."""

import pytest
import torch
from torch import nn

from hbir.quantization import (
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    prepare,
    set_fake_quantize,
)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.fc = nn.Linear(8, 4)
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.fc(self.quant(x)))


@pytest.fixture
def model_and_qat(tmp_path):
    torch.manual_seed(0)
    model = Net().eval()
    return model, prepare(model, torch.randn(2, 8), out_dir=tmp_path)


def _data(scale=1.0, seed=0):
    return torch.randn(16, 8, generator=torch.Generator().manual_seed(seed)) * scale


def _on_grid(t, scale):
    """``t`` is ``fl32(q * scale)`` for integer codes ``q``."""
    return torch.equal(torch.round(t / scale) * scale, t)


def test_calibration_observes_without_quantizing(model_and_qat):
    model, qat = model_and_qat
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    x = _data()
    with torch.no_grad():
        assert torch.equal(qat(x), model(x))
    scale = qat.fc.activation_post_process.scale
    expected = model.fc(x).abs().max() / 127.5
    assert scale.item() == pytest.approx(expected.item(), rel=1e-6)


def test_validation_quantizes_with_frozen_scales(model_and_qat):
    _, qat = model_and_qat
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(_data())
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    frozen = [b.clone() for n, b in qat.named_buffers() if n.endswith("scale")]
    with torch.no_grad():
        out = qat(_data(scale=10.0, seed=1))  # a wider range must not move the scales
    now = [b for n, b in qat.named_buffers() if n.endswith("scale")]
    assert all(torch.equal(a, b) for a, b in zip(frozen, now, strict=True))
    fq = qat.fc.activation_post_process
    assert _on_grid(out, fq.scale)
    assert out.abs().max().item() <= 128 * fq.scale.item()


def test_qat_quantizes_updates_scales_and_trains(model_and_qat):
    _, qat = model_and_qat
    qat.train()
    set_fake_quantize(qat, FakeQuantState.QAT)
    x = _data()
    out = qat(x)
    fq = qat.fc.activation_post_process
    assert fq.scale.item() != 1.0 and _on_grid(out.detach(), fq.scale)
    out.square().sum().backward()
    assert qat.fc.weight.grad is not None and qat.fc.weight.grad.abs().sum() > 0
    before = fq.scale.clone()
    qat(x * 3)
    assert fq.scale.item() > before.item()


def test_float_state_passes_through_and_keeps_scales(model_and_qat):
    model, qat = model_and_qat
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(_data())
    set_fake_quantize(qat, FakeQuantState._FLOAT)
    scale = qat.fc.activation_post_process.scale.clone()
    x = _data(scale=5.0, seed=2)
    with torch.no_grad():
        assert torch.equal(qat(x), model(x))
    assert torch.equal(qat.fc.activation_post_process.scale, scale)


@pytest.mark.parametrize(
    ("state", "mode", "hint"),
    [
        (FakeQuantState.QAT, "eval", "model.train()"),
        (FakeQuantState.CALIBRATION, "train", "model.eval()"),
        (FakeQuantState.VALIDATION, "train", "model.eval()"),
        (FakeQuantState._FLOAT, "train", "model.eval()"),
    ],
)
def test_wrong_mode_when_setting_the_state(model_and_qat, state, mode, hint):
    _, qat = model_and_qat
    qat.train(mode == "train")
    with pytest.raises(RuntimeError, match=f"{state.name}.*{mode} mode.*call {hint}"):
        set_fake_quantize(qat, state)


# an uncalibrated model on purpose: its first VALIDATION forward warns
@pytest.mark.filterwarnings("ignore:the first forward in FakeQuantState.VALIDATION")
def test_wrong_mode_at_forward_names_the_module_and_the_fix(model_and_qat):
    _, qat = model_and_qat
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    qat.train()  # e.g. a training loop resumed without switching back to QAT
    with pytest.raises(
        RuntimeError, match=r"quant\.activation_post_process.*model\.eval\(\)"
    ):
        qat(_data())
    qat.train()
    set_fake_quantize(qat, FakeQuantState.QAT)
    qat.eval()
    with pytest.raises(RuntimeError, match=r"FakeQuantState\.QAT.*model\.train\(\)"):
        qat(_data())


def test_state_must_be_a_fake_quant_state(model_and_qat):
    _, qat = model_and_qat
    with pytest.raises(TypeError, match="FakeQuantState"):
        set_fake_quantize(qat, "qat")


def test_validation_before_any_calibration_warns_and_names_the_fake_quants(
    model_and_qat,
):
    """Caught at the first VALIDATION forward (not when the state is set: a
    checkpoint may still be loaded), once, and again by pre_export."""
    import warnings

    from hbir.quantization import pre_export

    _, qat = model_and_qat
    qat.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        set_fake_quantize(qat, FakeQuantState.VALIDATION)
    with pytest.warns(
        UserWarning,
        match=r"VALIDATION: \d+ fake quant\(s\) have "
        r"observed nothing \(.*fc.*CALIBRATION",
    ):
        qat(_data())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qat(_data())  # once
    with pytest.warns(UserWarning, match=r"pre_export: \d+ fake quant\(s\)"):
        pre_export(qat)


def test_a_checkpoint_loaded_after_validation_is_set_is_not_a_false_alarm(
    model_and_qat, tmp_path
):
    import warnings

    _, qat = model_and_qat
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(_data())
    state = qat.state_dict()
    fresh = prepare(Net().eval(), _data(), out_dir=tmp_path)
    fresh.eval()
    set_fake_quantize(fresh, FakeQuantState.VALIDATION)
    fresh.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = fresh(_data())
    torch.save(fresh, tmp_path / "whole.pt")  # the hook pickles
    assert torch.equal(
        torch.load(tmp_path / "whole.pt", weights_only=False)(_data()), out
    )


def test_a_calibrated_scale_of_exactly_1_is_not_an_uncalibrated_one(tmp_path):
    """A power-of-two scale of 1.0 is a calibration result: no warning."""
    import warnings

    from hbir.quantization import export, get_qconfig

    torch.manual_seed(0)
    model = Net().eval()
    qconfig = get_qconfig()
    qconfig = qconfig.replace(activation=qconfig.activation.replace(pot=True))
    qat = prepare(model, torch.randn(2, 8), qconfig, out_dir=tmp_path)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(torch.linspace(-100, 100, 16 * 8).reshape(16, 8))
    assert qat.quant.activation_post_process.scale.item() == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        set_fake_quantize(qat, FakeQuantState.VALIDATION)
        export(qat, (torch.randn(2, 8),))
