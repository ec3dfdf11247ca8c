"""qconfig templates: the dtypes and scales they give the fake quants, the rules
model_check_result.txt lists, the errors, and export/convert/compile still
bit-identical to the VALIDATION model."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

import hbir
from hbir.profiler import QuantAnalysis
from hbir.quantization import (
    DeQuantStub,
    FakeQuantize,
    FakeQuantState,
    FixedScaleObserver,
    PrepareError,
    QconfigSetter,
    QuantStub,
    export,
    get_qconfig,
    prepare,
    qint8,
    qint16,
    set_fake_quantize,
)
from hbir.quantization.templates import (
    ConvDtypeTemplate,
    MatmulDtypeTemplate,
    ModuleNameTemplate,
    SensitivityTemplate,
    TemplateError,
)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Sequential(nn.Conv2d(8, 8, 1), nn.ReLU())
        self.fc = nn.Linear(8 * 4 * 4, 16)
        self.proj = nn.Linear(16, 16)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.head(self.conv(self.quant(x)))
        y = self.fc(x.flatten(1))
        z = torch.matmul(y.unsqueeze(2), self.proj(y).unsqueeze(1))
        return self.dequant(z)


def _data(count=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, 4, 4, generator=g) for _ in range(count)]


def _calibrated(setter, tmp_path):
    torch.manual_seed(0)
    model = Net().eval()
    data = _data()
    qat = prepare(model, (data[0],), qconfig_setter=setter, out_dir=tmp_path)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for x in data:
            qat(x)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return model, qat, (tmp_path / "model_check_result.txt").read_text()


def _rules(text: str) -> dict[str, str]:
    table = text.split("Qconfig overrides and the modules they set:")[1]
    rows = {}
    for line in table.split("\n\n")[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("rule", ""):
            rows[cells[0]] = cells[1]
    return rows


def _matmul(qat):
    return next(m for n, m in qat.named_modules() if type(m).__name__ == "QuantMatmul")


def test_module_name_template_sets_dtype_and_fixed_scale(tmp_path):
    setter = QconfigSetter(
        get_qconfig(),
        templates=[
            ModuleNameTemplate({"": qint8, "head": qint16}),
            ModuleNameTemplate(
                {"conv": {"dtype": qint16, "threshold": {"output": 4.0, "input": 2.0}}}
            ),
        ],
    )
    _, qat, text = _calibrated(setter, tmp_path)
    conv = qat.get_submodule("conv")
    out = conv.activation_post_process
    assert out.dtype == qint16
    assert isinstance(out.activation_post_process, FixedScaleObserver)
    # the reference's threshold: scale = threshold / -quant_min
    assert out.scale.item() == np.float32(4.0 / 32768)
    (fq_in,) = conv.input_fake_quant
    assert fq_in.dtype == qint16 and fq_in.scale.item() == np.float32(2.0 / 32768)
    head = qat.get_submodule("head.0")
    assert head.activation_post_process.dtype == qint16
    assert qat.get_submodule("fc").activation_post_process.dtype == qint8
    rules = _rules(text)
    assert "head.0" in rules["ModuleNameTemplate['head']"].split(", ")
    assert rules["ModuleNameTemplate['conv']"] == "conv"
    assert "fc" in rules["ModuleNameTemplate['']"].split(", ")


def test_conv_and_matmul_templates_set_operand_dtypes(tmp_path):
    setter = QconfigSetter(
        get_qconfig(),
        templates=[
            ConvDtypeTemplate(input_dtype=qint16, weight_dtype=qint8),
            MatmulDtypeTemplate(input_dtypes=[qint8, qint16]),
        ],
    )
    _, qat, text = _calibrated(setter, tmp_path)
    # conv-like ops (conv, linear): int16 inputs, int8 weights; the producers
    # give int8, so each gets its own int16 input fake quant
    for name in ("conv", "head.0", "fc", "proj"):
        module = qat.get_submodule(name)
        (fq_in,) = module.input_fake_quant
        assert fq_in.dtype == qint16 and fq_in.quant_max == 32767, name
        assert module.weight_fake_quant.dtype == qint8
        x = fq_in.activation_post_process
        absmax = max(-x.min_val.item(), x.max_val.item())
        assert fq_in.scale.item() == np.float32(
            np.float32(absmax) / np.float32(32767.5)
        )
    matmul = _matmul(qat)
    assert [fq.dtype for fq in matmul.input_fake_quant] == [qint8, qint16]
    rules = _rules(text)
    conv_rule = "ConvDtypeTemplate(input_dtype=qint16, weight_dtype=qint8)"
    assert set(rules[conv_rule].split(", ")) == {"conv", "head.0", "fc", "proj"}
    matmul_rule = "MatmulDtypeTemplate(input_dtypes=[qint8, qint16])"
    assert rules[matmul_rule] != "WARNING: applied to no module"


def test_an_input_dtype_the_producer_already_has_adds_no_fake_quant(tmp_path):
    setter = QconfigSetter(
        get_qconfig(),
        templates=[
            ConvDtypeTemplate(input_dtype=qint8, weight_dtype=qint8),
            MatmulDtypeTemplate(input_dtypes=qint8),
        ],
    )
    _, qat, _ = _calibrated(setter, tmp_path)
    assert qat.get_submodule("conv").input_fake_quant is None
    assert _matmul(qat).input_fake_quant is None


def _stages_equal(qat, tmp_path):
    qat_bc = export(qat, (_data(1, seed=9)[0],))
    quantized = hbir.convert(qat_bc, "nash-e")
    hbm = hbir.compile(quantized, tmp_path / "model.hbm", "nash-e")
    for x in _data(3, seed=11):
        with torch.no_grad():
            want = qat(x).numpy()
        feed = {"_input_0": x.numpy()}
        for stage, function in (
            ("qat.bc", qat_bc["forward"]),
            ("quantized.bc", quantized["forward"]),
        ):
            (got,) = function.feed(feed, reference=True).values()
            np.testing.assert_array_equal(np.asarray(got), want, err_msg=stage)
        (got,) = hbm[0].feed(feed).values()
        np.testing.assert_array_equal(np.asarray(got), want, err_msg="model.hbm")


@pytest.mark.slow
def test_mixed_templates_stay_bit_identical_through_compile(tmp_path):
    setter = QconfigSetter(
        get_qconfig(),
        templates=[
            ModuleNameTemplate({"": qint8, "head": {"dtype": qint16}}),
            ConvDtypeTemplate(input_dtype=qint16, weight_dtype=qint8),
            MatmulDtypeTemplate(input_dtypes=[qint8, qint16]),
        ],
    )
    _, qat, _ = _calibrated(setter, tmp_path)
    _stages_equal(qat, tmp_path)


def _sensitivity_table(tmp_path) -> tuple[str, list]:
    _, qat, _ = _calibrated(QconfigSetter(get_qconfig()), tmp_path / "a")
    float_model = copy.deepcopy(qat)
    for m in float_model.modules():
        if isinstance(m, FakeQuantize):
            m.enable_fake_quant(False)
    qa = QuantAnalysis(float_model, qat, "fake_quant", out_dir=str(tmp_path / "qa"))
    qa.set_bad_case((_data(1, seed=3)[0],))
    rows = qa.sensitivity(metric="L1")["output_0"]
    return str(tmp_path / "qa" / "output_output_0_L1_sensitive_ops.pt"), rows


def test_sensitivity_template_reads_the_profilers_table(tmp_path):
    path, rows = _sensitivity_table(tmp_path)
    activation = [r[0] for r in rows if r[1] == "activation"]
    weight = [r[0] for r in rows if r[1] == "weight"]
    setter = QconfigSetter(
        get_qconfig(),
        templates=[SensitivityTemplate(path, topk_or_ratio=2, sensitive_type="both")],
    )
    _, qat, text = _calibrated(setter, tmp_path / "b")
    top = [(r[0], r[1]) for r in rows[:2]]
    for name in activation:
        want = qint16 if (name, "activation") in top else qint8
        assert qat.get_submodule(name).activation_post_process.dtype == want, name
    for name in weight:
        want = qint16 if (name, "weight") in top else qint8
        assert qat.get_submodule(name).weight_fake_quant.dtype == want, name
    rules = _rules(text)
    first = f"SensitivityTemplate[{rows[0][0]!r} {rows[0][1]}: qint16]"
    assert rules[first] == rows[0][0]
    # a ratio: the top share of the activation rows (ceil)
    ratio = SensitivityTemplate(rows, topk_or_ratio=0.5)
    high = [op for op, _, s in ratio.rows if s == qint16]
    assert high == activation[: int(np.ceil(len(activation) / 2))]


def test_sensitivity_template_threshold_setting(tmp_path):
    _, rows = _sensitivity_table(tmp_path)
    first = next(r[0] for r in rows if r[1] == "activation")
    setter = QconfigSetter(
        get_qconfig(),
        templates=[
            SensitivityTemplate(rows, 1, high_precision_dtype={"threshold": 8.0})
        ],
    )
    _, qat, _ = _calibrated(setter, tmp_path / "b")
    fq = qat.get_submodule(first).activation_post_process
    assert fq.scale.item() == np.float32(8.0 / 128)


def test_misspelt_template_name_is_a_located_error(tmp_path):
    template = ModuleNameTemplate({"": qint8, "heda": qint16})
    line = template.made_at
    assert line.startswith(__file__ + ":")
    with pytest.raises(PrepareError) as caught:
        _calibrated(QconfigSetter(get_qconfig(), templates=[template]), tmp_path)
    message = str(caught.value)
    assert f"{line}: ModuleNameTemplate['heda'] names no module" in message
    assert "nearest: head" in message


def test_freeze_keeps_later_templates_off(tmp_path):
    setter = QconfigSetter(
        get_qconfig(),
        templates=[
            ModuleNameTemplate({"fc": qint16}, freeze=True),
            ModuleNameTemplate({"": qint8}),
        ],
    )
    _, qat, _ = _calibrated(setter, tmp_path)
    assert qat.get_submodule("fc").activation_post_process.dtype == qint16
    assert qat.get_submodule("proj").activation_post_process.dtype == qint8


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ModuleNameTemplate({"a": torch.bfloat16}), "not a quantized dtype"),
        (lambda: ModuleNameTemplate({"a": {"dtype": qint8, "scale": 1}}), "unknown"),
        (lambda: ModuleNameTemplate({"a": {"threshold": -1.0}}), "positive"),
        (lambda: ModuleNameTemplate({"a": {"threshold": {"out": 1.0}}}), "'output'"),
        (lambda: MatmulDtypeTemplate([qint8, qint8, qint8]), "one dtype or two"),
        (lambda: SensitivityTemplate([["conv", "exact"]]), "torch analysis"),
        (lambda: SensitivityTemplate([("conv",)]), r"is not \[op_name"),
        (lambda: SensitivityTemplate([], sensitive_type="bias"), "sensitive_type"),
        (lambda: SensitivityTemplate("/nonexistent.pt"), "cannot read"),
    ],
)
def test_bad_templates_are_refused(make, message):
    with pytest.raises(TemplateError, match=message):
        make()
