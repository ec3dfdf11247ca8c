"""hbir.convert as a user calls it: march spellings, and each mistake's error."""

import subprocess
import sys

import pytest
import torch

import hbir

QAT_BC = """\
func.func @forward(%0: tensor<4xf32>) -> tensor<4xf32> {
  %1 = qnt.const_fake_quant %0 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<4xf32>
  %2 = hbir.relu %1 : tensor<4xf32>
  %3 = qnt.const_fake_quant %2 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<4xf32>
  func.return %3 : tensor<4xf32>
}
"""

FLOAT = """\
func.func @forward(%0: tensor<4xf32>) -> tensor<4xf32> {
  %1 = hbir.relu %0 : tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
"""


@pytest.fixture
def qat_bc():
    return hbir.Module.parse(QAT_BC)


def test_march_enum_goes_where_a_march_string_does(qat_bc):
    by_name = hbir.convert(qat_bc, "nash-e")
    for march in (hbir.March.nash_e, hbir.March.NASH_E, hbir.March("nash-e")):
        quantized = hbir.convert(qat_bc, march)
        assert quantized.march == "nash-e"
        assert quantized.module.get_asm() == by_name.module.get_asm()
    assert hbir.convert(qat_bc, hbir.March.nash_m).march == "nash-m"
    assert [m.value for m in hbir.March] == [
        "nash-e",
        "nash-m",
        "nash-p",
        "nash-h",
        "nash-b",
        "nash-b-lite",
        "nash-b-plus",
    ]


def test_unknown_march_names_the_known_ones(qat_bc):
    with pytest.raises(hbir.HbirError, match="expected one of nash-e, nash-m"):
        hbir.convert(qat_bc, "nash-x")


def test_importing_hbir_convert_keeps_the_function():
    code = (
        "import hbir.convert\n"
        "import hbir\n"
        "from hbir.convert import convert, March\n"
        "assert callable(hbir.convert) and convert is hbir.convert, hbir.convert\n"
        "m = hbir.Module.parse(open(0).read())\n"
        "print(hbir.convert(m, March.nash_e).march)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], input=QAT_BC, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == "nash-e\n"


# ---- mistakes


class Net(torch.nn.Module):
    def forward(self, x):
        return x


@pytest.mark.parametrize(
    ("call", "fix"),
    [
        (lambda m: hbir.convert(m, "nash-e"), r"export it first: qat_bc = "),
        (lambda m: hbir.save(m, "qat.bc"), r"torch.save\(model.state_dict\(\)"),
        (lambda m: hbir.statistics(m), r"export it first"),
    ],
)
def test_a_torch_model_is_refused_with_the_fix(call, fix):
    with pytest.raises(hbir.ModelTypeError, match="got a torch model \\(Net\\)") as e:
        call(Net())
    assert isinstance(e.value, TypeError) and isinstance(e.value, hbir.HbirError)
    assert "hbir.quantization.export(" in str(e.value)
    with pytest.raises(hbir.ModelTypeError, match=fix):
        call(Net())


def test_a_path_is_refused_with_the_fix():
    with pytest.raises(
        hbir.ModelTypeError, match=r"load it first with hbir.load\('qat.bc'\)"
    ):
        hbir.convert("qat.bc", "nash-e")
    with pytest.raises(hbir.ModelTypeError, match="expected an hbir.Module"):
        hbir.statistics(42)


def test_converting_a_converted_model_is_refused(qat_bc):
    quantized = hbir.convert(qat_bc, "nash-e")
    with pytest.raises(hbir.HbirError, match="already converted for nash-e") as e:
        hbir.convert(quantized, "nash-m")
    assert "Convert the qat.bc it was made from instead" in str(e.value)
    assert quantized.march == "nash-e"  # not relabelled
    # Also without the march attribute: fixed-point ops and no fake quant.
    del quantized.module.op.attributes["hbir.march"]
    with pytest.raises(hbir.HbirError, match="already converted \\(quantized.bc\\)"):
        hbir.convert(quantized, "nash-e")


def test_hbir_opt_refuses_a_converted_model_too(qat_bc, tmp_path):
    path = tmp_path / "quantized.mlir"
    hbir.save(hbir.convert(qat_bc, "nash-e"), path)
    res = subprocess.run(
        ["hbir-opt", str(path), "-p", "convert{march=nash-m}"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "already converted for nash-e" in res.stderr


def test_a_float_model_converts_with_a_warning_naming_the_reason():
    model = hbir.Module.parse(FLOAT)
    with pytest.warns(UserWarning, match="no qnt.const_fake_quant") as record:
        quantized = hbir.convert(model, "nash-e")
    message = str(record[0].message)
    assert "every op stays float, on the CPU" in message
    assert "set_fake_quantize(qat, FakeQuantState.VALIDATION)" in message
    assert record[0].filename == __file__  # points at the caller
    assert hbir.statistics(quantized)["forward"] == {"hbir.relu": 1}


ISLAND = """\
func.func @forward(%0: tensor<4xf32>) -> tensor<4xf32> {
  %1 = qnt.const_fake_quant %0 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<4xf32>
  %2 = hbir.relu %1 : tensor<4xf32>
  %3 = qnt.const_fake_quant %2 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<4xf32>
  %4 = hbir.exp %3 : tensor<4xf32>
  func.return %4 : tensor<4xf32>
}
"""


def test_advice_names_each_island_op_by_its_id_not_module(capsys):
    """Regression: advice printed ``<module>: 'hbir.exp'`` for a model without
    source locations, and listed ``func.return``."""
    quantized = hbir.convert(hbir.Module.parse(ISLAND), "nash-e", advice=True)
    lines = capsys.readouterr().out.splitlines()
    asm = quantized.module.get_asm()
    exp_id = next(
        line.split("=")[0].strip() for line in asm.splitlines() if "hbir.exp" in line
    )
    assert lines == [
        f"@forward {exp_id}: 'hbir.exp' runs on the CPU: "
        "no fake quantization around it (float)"
    ]


def test_advice_gives_the_torch_source_line_of_an_exported_op(tmp_path, capsys):
    import zoo_stages

    from hbir.bc_editor import remove_fake_quant
    from hbir.quantization import export

    qat, example = zoo_stages.calibrated("mobilenet", tmp_path)
    qat_bc = export(qat, example)
    asm = qat_bc.module.get_asm().splitlines()
    # The fake quants on both sides of the stem's hardswish.
    lines = [i for i, line in enumerate(asm) if '"hbir.hardswish"' in line]
    hardswish = int(asm[lines[0]].split("=")[0].strip()[1:])
    edited = remove_fake_quant(qat_bc, [[hardswish - 1, hardswish + 1]])
    hbir.convert(edited, "nash-e", advice=True)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "'hbir.hardswish'" in x)
    source = open("tests/zoo.py").read().splitlines()
    row = next(i + 1 for i, t in enumerate(source) if "self.head(self.block(" in t)
    assert line.startswith(f"tests/zoo.py:{row}:")
    assert "(stem.1|hbir.quantization.lut_modules.Hardswish#0)" in line
    assert "<module>" not in out and "func.return" not in out
