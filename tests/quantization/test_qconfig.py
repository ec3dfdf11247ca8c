"""qconfigs and overrides: they take effect, and model_check_result.txt shows it."""

import operator
import sys

import pytest
import torch
from torch import nn

from hbir.quantization import (
    DeQuantStub,
    HistogramObserver,
    MinMaxObserver,
    PerChannelMinMaxObserver,
    PrepareError,
    QconfigSetter,
    QuantStub,
    get_qconfig,
    prepare,
    qint8,
    qint16,
)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.block = Block()
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.block(torch.relu(self.conv1(self.quant(x))))
        return self.dequant(self.fc(torch.flatten(x, 1)))


def _prepare(tmp_path, qconfig):
    torch.manual_seed(0)
    qat = prepare(Net().eval(), torch.randn(2, 3, 6, 6), qconfig, out_dir=tmp_path)
    return qat, (tmp_path / "model_check_result.txt").read_text()


def _row(text: str, name: str) -> str:
    """The 'Each layer out qconfig' row of module ``name``."""
    table = text.split("Each layer out qconfig:")[1].split("\n\n")[0]
    return next(line for line in table.splitlines() if line.startswith(f"| {name} "))


def _out_dtype(qat, name):
    return qat.get_submodule(name).activation_post_process.dtype


def test_get_qconfig_fields():
    qc = get_qconfig(observer=HistogramObserver, out_dtype=qint16, weight_dtype=qint8)
    assert qc.activation.observer is HistogramObserver and qc.activation.dtype == qint16
    assert qc.weight.observer is PerChannelMinMaxObserver and qc.weight.dtype == qint8
    assert qc.input is None
    fq = qc.activation()
    assert fq.dtype == qint16 and fq.quant_min == -32768
    assert isinstance(fq.activation_post_process, HistogramObserver)
    assert get_qconfig(in_dtype=qint16).input.dtype == qint16


def test_default_qconfig_everywhere(tmp_path):
    qat, text = _prepare(tmp_path, None)
    for name in ("quant", "conv1", "block.conv", "block._generated_add_0", "fc"):
        assert _out_dtype(qat, name) == qint8
        assert _row(text, name).rstrip(" |").endswith("default")
    assert "Qconfig overrides: none" in text


def test_module_name_override_takes_effect_and_is_visible(tmp_path):
    qat, text = _prepare(tmp_path, QconfigSetter(module_name={"conv1": qint16}))
    assert _out_dtype(qat, "conv1") == qint16
    assert _out_dtype(qat, "block.conv") == qint8
    assert "| conv1 " in text and "qint16" in _row(text, "conv1")
    assert "module_name['conv1']" in _row(text, "conv1")
    assert qat.conv1.fused_relu == "relu"
    # The consumers' input dtypes show where the int16 tensor goes.
    assert _row(text, "block.conv").split("|")[3].strip() == "qint16"
    assert _row(text, "block._generated_add_0").split("|")[3].strip() == "qint8, qint16"
    rules = text.split("Qconfig overrides and the modules they set:")[1].split("\n\n")[
        0
    ]
    assert "| module_name['conv1'] | conv1" in rules


def test_qconfig_setter_keyword_as_the_reference_spells_it(tmp_path):
    setter = QconfigSetter(module_name={"conv1": qint16})
    torch.manual_seed(0)
    example = torch.randn(2, 3, 6, 6)
    qat = prepare(Net().eval(), example, qconfig_setter=setter, out_dir=tmp_path)
    assert _out_dtype(qat, "conv1") == qint16
    assert _out_dtype(qat, "block.conv") == qint8
    with pytest.raises(TypeError, match="qconfig and qconfig_setter are one argument"):
        prepare(Net(), example, setter, qconfig_setter=setter, out_dir=tmp_path)


def test_module_name_prefix_covers_generated_modules(tmp_path):
    qat, text = _prepare(tmp_path, QconfigSetter(module_name={"block": qint16}))
    assert _out_dtype(qat, "block.conv") == qint16
    assert _out_dtype(qat, "block._generated_add_0") == qint16
    assert _out_dtype(qat, "conv1") == qint8
    assert "qint16, qint8" in _row(text, "block._generated_add_0")  # conv out, block in


@pytest.mark.parametrize("key", [nn.Linear, "linear"])
def test_module_type_override_by_class_or_op_name(tmp_path, key):
    qat, text = _prepare(tmp_path, QconfigSetter(module_type={key: qint16}))
    assert _out_dtype(qat, "fc") == qint16
    assert _out_dtype(qat, "conv1") == qint8
    assert "module_type[" in _row(text, "fc")


def test_module_type_override_by_torch_function(tmp_path):
    qat, _ = _prepare(tmp_path, QconfigSetter(module_type={operator.add: qint16}))
    assert _out_dtype(qat, "block._generated_add_0") == qint16


def test_name_beats_type_and_longest_name_wins(tmp_path):
    setter = QconfigSetter(
        module_name={"block": qint16, "block.conv": qint8},
        module_type={nn.Conv2d: qint16},
    )
    qat, text = _prepare(tmp_path, setter)
    assert _out_dtype(qat, "block.conv") == qint8
    assert "module_name['block.conv']" in _row(text, "block.conv")
    assert _out_dtype(qat, "conv1") == qint16
    assert _out_dtype(qat, "block._generated_add_0") == qint16


def test_misspelt_module_name_is_a_located_error(tmp_path):
    """A name rule that sets no module is a misspelling: the error names the
    rule, where the setter was made and the nearest module names; the check
    file is still written, flagging it."""
    setter = QconfigSetter(module_name={"backbone.conv1": qint16})
    made_at = f"{__file__}:{sys._getframe().f_lineno - 1}"
    with pytest.raises(PrepareError) as caught:
        _prepare(tmp_path, setter)
    message = str(caught.value)
    assert f"{made_at}: module_name['backbone.conv1'] names no module" in message
    assert "nearest: " in message and "conv1" in message.split("nearest: ")[1]
    text = (tmp_path / "model_check_result.txt").read_text()
    assert "| module_name['backbone.conv1'] | WARNING: applied to no module |" in text


def test_dict_override_sets_weight_and_output_dtypes(tmp_path):
    setter = QconfigSetter(module_name={"fc": {"weight": qint16, "out": qint16}})
    qat, text = _prepare(tmp_path, setter)
    assert qat.fc.weight_fake_quant.dtype == qint16
    assert qat.fc.weight_fake_quant.quant_max == 32767
    weights = text.split("Weight qconfig:")[1].split("\n\n")[0]
    assert "| fc          | Linear      | qint16" in weights


def test_in_dtype_gives_modules_their_own_input_fake_quant(tmp_path):
    qconfig = get_qconfig(observer=MinMaxObserver, in_dtype=qint16)
    qat, text = _prepare(tmp_path, QconfigSetter(module_name={"fc": qconfig}))
    fc = qat.fc
    assert len(fc.input_fake_quant) == 1 and fc.input_fake_quant[0].dtype == qint16
    assert fc.input_fake_quants() == (fc.input_fake_quant[0],)
    assert "| fc " in text and "qint16" in _row(text, "fc").split("|")[3]
    with torch.no_grad():
        qat(torch.randn(2, 3, 6, 6))
    assert fc.input_fake_quant[0].activation_post_process.has_data()


def test_bad_override_is_rejected():
    with pytest.raises(TypeError, match="QConfig, a dtype or a dict"):
        QconfigSetter(module_name={"fc": "int16"})
    with pytest.raises(TypeError, match="QConfig or QconfigSetter"):
        prepare(Net(), torch.randn(1, 3, 6, 6), qconfig="qint8")
