"""export: qat.bc equals qat.export.pt bit for bit, with located ops and errors."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import zoo
from torch import nn
from zoo_stages import calibrated

import hbir
from hbir.quantization import DeQuantStub, QuantStub, prepare
from hbir.quantization.export import ExportError, export
from hbir.quantization.pre_export import pre_export


def _outputs(out):
    out = out if isinstance(out, tuple | list) else (out,)
    return [o.detach().numpy() for o in out]


def _same_bits(a, b) -> bool:
    """(Tensors fed give tensors back: compared as the arrays they hold.)"""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", zoo.NAMES)
def test_qat_bc_is_bit_identical_to_qat_export_pt(name, tmp_path):
    qat, example = calibrated(name, tmp_path, qat_steps=2)
    exported_pt = pre_export(qat)
    qat_bc = export(qat, example)
    assert qat_bc["forward"].statistics().get("qnt.const_fake_quant", 0) > 0
    hbir.save(qat_bc, tmp_path / "qat.bc")
    reloaded = hbir.load(tmp_path / "qat.bc")
    f, g = qat_bc["forward"], reloaded["forward"]
    for seed in range(20):
        inputs = zoo.batches(name, 1, batch=len(example[0]), seed=100 + seed)[0]
        with torch.no_grad():
            want = _outputs(exported_pt(*inputs))
        got = f(*inputs)
        got = list(got) if isinstance(got, tuple) else [got]
        again = g(*inputs)
        again = list(again) if isinstance(again, tuple) else [again]
        for w, x, y in zip(want, got, again, strict=True):
            assert _same_bits(x, w), f"{name}: seed {seed} differs from qat.export.pt"
            assert _same_bits(y, w), f"{name}: seed {seed} differs after save/load"


def test_level_2_model_is_bit_identical(tmp_path):
    qat, example = calibrated("resnet", tmp_path, level=2)
    exported_pt = pre_export(qat)
    qat_bc = export(qat, example)
    assert qat_bc._high_precision_qpp and not qat_bc._fuse_requantize
    inputs = zoo.batches("resnet", 1, batch=len(example[0]), seed=7)[0]
    with torch.no_grad():
        want = _outputs(exported_pt(*inputs))[0]
    assert _same_bits(qat_bc["forward"](*inputs), want)


def test_debug_info_names_module_path_op_and_source_line(tmp_path):
    qat, example = calibrated("resnet", tmp_path)
    asm = export(qat, example).module.get_asm(enable_debug_info=True)
    conv_lines = [line for line in asm.splitlines() if "hbir.conv2d" in line]
    assert conv_lines
    # loc("<module path>|<torch op>#<call index>"("<file>":<line>:<column>)), the
    # file relative to the project root
    pattern = re.compile(
        r'loc\("([\w.]+)\|[\w.]+Conv2d#\d+"\("(tests/zoo\.py)":(\d+):(\d+)\)\)'
    )
    match = pattern.search(conv_lines[0])
    assert match, conv_lines[0]
    path, line, column = match.group(1), int(match.group(3)), int(match.group(4))
    assert path in dict(qat.named_modules())
    root = Path(__file__).resolve().parents[2]
    source = (root / match.group(2)).read_text().splitlines()[line - 1]
    assert source[column - 1 :].startswith("self.")  # the call torch recorded
    assert "loc(" not in export(qat, example).module.get_asm()


@pytest.mark.parametrize("name", ["resnet", "transformer"])
def test_a_whole_saved_qat_pt_keeps_its_source_lines(name, tmp_path):
    # torch.load rebuilds a pickled GraphModule from its generated code, and the
    # rebuilt nodes have no stack traces: export must still name the user's lines.
    import io

    qat, example = calibrated(name, tmp_path)
    buffer = io.BytesIO()
    torch.save(qat, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert not any(n.meta.get("stack_trace") for n in loaded.graph.nodes)
    want = export(qat, example).module.get_asm(enable_debug_info=True)
    got = export(loaded, example).module.get_asm(enable_debug_info=True)
    assert got == want
    assert re.search(r'\("tests/zoo\.py":\d+:\d+\)', got)


class TwoUnsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("offsets", torch.arange(4))  # int64

    def forward(self, x):
        a = torch.cumsum(x, 1)  # no hbir op
        b = x + self.offsets  # an int64 constant meets a graph input
        return a, b


def test_two_unsupported_ops_fail_in_one_error_with_source_lines():
    # Prepare accepts only what export can emit (the op table), so a float model
    # (exported as it is) is where unsupported torch ops can reach export.
    model = TwoUnsupported().eval()
    with pytest.raises(ExportError) as info:
        export(model, (torch.randn(2, 4),))
    text = str(info.value)
    assert "2 unsupported op(s)" in text
    assert text.count("test_export.py:") == 2
    assert "torch.cumsum" in text and "torch.int64 constant of shape (4,)" in text


def test_float_model_exports_with_a_loud_warning():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    with pytest.warns(UserWarning, match="no enabled fake quantization"):
        m = export(model, (torch.randn(2, 4),))
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert _same_bits(m["forward"](x), model(x).numpy())


def test_export_refuses_train_mode_and_running_observers(tmp_path):
    qat, example = calibrated("resnet", tmp_path)
    qat.train()
    with pytest.raises(ExportError, match="needs eval mode"):
        export(qat, example)
    qat.eval()
    from hbir.quantization import FakeQuantState, set_fake_quantize

    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with pytest.raises(ExportError, match="observer enabled"):
        export(qat, example)


def test_names_and_flattened_io(tmp_path):
    qat, example = calibrated("multi_io", tmp_path)
    m = export(
        qat, example, input_names=["img", "vec"], output_names=["logits", "fmap"]
    )
    f = m["forward"]
    assert f.inputs.names == ["img", "vec"] and f.outputs.names == ["logits", "fmap"]
    plain = export(qat, example)["forward"]
    assert plain.inputs.names == ["_input_0", "_input_1"]
    assert plain.outputs.names == ["_output_0", "_output_1"]
    with pytest.raises(ExportError, match="input_names has 1 names for 2 inputs"):
        export(qat, example, input_names=["img"])


def test_module_flags_read_back(tmp_path):
    from hbir.quantization import set_round_mode

    qat, example = calibrated("resnet", tmp_path, level=0)
    m = export(qat, example)
    assert m._high_precision_qpp and not m._fuse_requantize and not m._legacy_round
    set_round_mode("half_up")
    try:
        assert export(qat, example)._legacy_round
    finally:
        set_round_mode("half_even")


class DictIO(nn.Module):
    def __init__(self):
        super().__init__()
        self.qa, self.qb = QuantStub(), QuantStub()
        self.fc = nn.Linear(4, 4)
        self.dequant = DeQuantStub()

    def forward(self, inputs):
        a, b = self.qa(inputs["a"]), self.qb(inputs["b"])
        s = self.fc(a) + b
        return {"sum": self.dequant(s), "pair": (self.dequant(a), self.dequant(b))}


def test_dict_inputs_and_nested_outputs_flatten(tmp_path):
    from hbir.quantization import FakeQuantState, set_fake_quantize

    example = ({"a": torch.randn(2, 4), "b": torch.randn(2, 4)},)
    qat = prepare(DictIO().eval(), example, out_dir=tmp_path)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    qat(*example)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    m = export(qat, example)
    f = m["forward"]
    assert f.inputs.names == ["_input_0", "_input_1"]
    assert f.outputs.names == ["_output_0", "_output_1", "_output_2"]
    x = {"a": torch.randn(2, 4), "b": torch.randn(2, 4)}
    with torch.no_grad():
        want = qat(x)
    got = f(x["a"], x["b"])
    flat = [want["sum"], *want["pair"]]
    for g, w in zip(got, flat, strict=True):
        assert _same_bits(g, w.numpy())


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
def test_hbir_opt_reads_every_exported_zoo_model(tmp_path):
    from cli_runs import run_main

    from hbir.tools import hbir_opt

    def opt(*args):  # in this process (tests/tools start hbir-opt as a process)
        res = run_main(hbir_opt.main, *args)
        assert res.returncode == 0, res.stderr
        return res.stdout

    for name in zoo.NAMES:
        qat, example = calibrated(name, tmp_path)
        model = export(qat, example)
        path = tmp_path / f"{name}.bc"
        hbir.save(model, path)
        assert opt(str(path)) == model.module.get_asm(pretty=True) + "\n"
        cleaned = hbir.Module.parse(opt(str(path), "-p", "cleanup"))
        want = model["forward"](*example)
        got = cleaned["forward"](*example)
        for w, g in zip(_as_list(want), _as_list(got), strict=True):
            assert _same_bits(g, w), name


def _as_list(out):
    return list(out) if isinstance(out, tuple) else [out]
