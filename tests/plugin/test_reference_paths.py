"""The rest of the reference notes' import lines, after the prefix swap:
``hbdk4.check`` / ``is_exporting`` and the profiler's ``QatBcEditor``."""

import json

import torch
from torch import nn

import hbir
from hbir.plugin.quantization import (
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    prepare,
    set_fake_quantize,
)
from hbir.plugin.quantization.hbdk4 import check, export, is_exporting
from hbir.profiler.bc_editor.bc_editor import QatBcEditor


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x):
        return self.dequant(torch.relu(self.conv(self.quant(x))))


def _validated(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(1, 2, 6, 6)
    qat = prepare(Net().eval(), (x,), out_dir=tmp_path)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(x)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat, x


def test_is_exporting_is_true_only_inside_export(tmp_path):
    qat, x = _validated(tmp_path)
    seen = []
    qat.conv.register_forward_hook(lambda *_: seen.append(is_exporting()))
    with torch.no_grad():
        qat(x)
    export(qat, (x,))
    assert seen[0] is False and seen[-1] is True
    assert not is_exporting()


def test_check_reports_whether_the_model_exports(tmp_path, capsys):
    qat, x = _validated(tmp_path)
    assert check(qat, (x,), save_dir=tmp_path / "c", only_record_errors=False)
    text = (tmp_path / "c" / "export_check.txt").read_text()
    assert text.startswith("export: ok")
    assert "@forward: hbir.conv2d: 1" in text
    # a model still calibrating does not export: False, and why
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    assert not check(qat, (x,), save_dir=tmp_path / "d")
    why = (tmp_path / "d" / "export_check.txt").read_text()
    assert why.strip() and why in capsys.readouterr().out


def test_qat_bc_editor_removes_the_named_fake_quants(tmp_path):
    qat, x = _validated(tmp_path)
    qat_bc = export(qat, (x,))
    hbir.save(qat_bc, tmp_path / "qat.bc")
    asm = qat_bc.module.get_asm()
    ids = [
        int(line.split("=")[0].strip()[1:])
        for line in asm.splitlines()
        if '"qnt.const_fake_quant"' in line
    ]
    (tmp_path / "config.json").write_text(json.dumps({"remove_fake_quant": ids[:1]}))
    editor = QatBcEditor(
        bc_path=str(tmp_path / "qat.bc"),
        config_path=str(tmp_path / "config.json"),
        new_bc_path=str(tmp_path / "qat_modified.bc"),
    )
    assert editor.run() == ids[:1]
    edited = hbir.load(tmp_path / "qat_modified.bc").module.get_asm()
    assert edited.count('"qnt.const_fake_quant"') == len(ids) - 1


def test_graphs_is_functions(tmp_path):
    qat, x = _validated(tmp_path)
    qat_bc = export(qat, (x,))
    assert [f.name for f in qat_bc.graphs] == [f.name for f in qat_bc.functions]
    hbm = hbir.compile(hbir.convert(qat_bc, "nash-e"))
    assert hbm.graphs is hbm.functions
