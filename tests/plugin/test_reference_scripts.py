"""A J6 user's scripts run unchanged but for the package prefix.

The scripts below are the reference toolchain's own code, as its documentation
gives it (the canonical pipeline template of the hbdk-generating skill, and the
consistency guide's steps: ConsistencyStrategy, pre_export, the three
QuantAnalysis comparisons, feed, remove_io_op, compile, hb_verifier), written
with the reference's package names. The test applies the one fixed prefix swap
(``horizon_plugin_pytorch`` -> ``hbir.plugin``, ``horizon_plugin_profiler`` ->
``hbir.profiler``, ``hbdk4.compiler`` -> ``hbir``) and runs them on a small real
model: scikit-learn's handwritten digits, trained in float first.
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hbir.default_march import set_default_march
from hbir.quantization import ConsistencyStrategy

datasets = pytest.importorskip("sklearn.datasets")
pytestmark = pytest.mark.slow  # trains a model and compiles it twice

PREFIXES = {
    "horizon_plugin_pytorch": "hbir.plugin",
    "horizon_plugin_profiler": "hbir.profiler",
    "hbdk4.compiler": "hbir",
}


def swap(script: str) -> str:
    """The only edit a user makes: the package prefixes."""
    for reference, ours in PREFIXES.items():
        script = script.replace(reference, ours)
    return script


# The reference's full-pipeline template, verbatim (reference notes, section 2).
PIPELINE_TEMPLATE = """\
from horizon_plugin_pytorch import set_march
from horizon_plugin_pytorch.quantization import prepare, set_fake_quantize, FakeQuantState, QconfigSetter, get_qconfig, qint8
from horizon_plugin_pytorch.quantization.hbdk4 import export
from horizon_plugin_pytorch.quantization.observer_v2 import HistogramObserver, MinMaxObserver
from horizon_plugin_pytorch.quantization.qconfig_setter import ModuleNameTemplate, ConvDtypeTemplate, MatmulDtypeTemplate
from hbdk4.compiler import convert, compile, statistics, save
set_march("nash-e")
setter = QconfigSetter(get_qconfig(observer=HistogramObserver), templates=[
    ModuleNameTemplate({"": qint8}), ConvDtypeTemplate(input_dtype=qint8, weight_dtype=qint8),
    MatmulDtypeTemplate(input_dtypes=[qint8, qint8])])
calib_net = prepare(model, (x,), qconfig_setter=setter)
calib_net.eval(); set_fake_quantize(calib_net, FakeQuantState.CALIBRATION); calib_net(x)
# QAT: re-prepare float model with MinMaxObserver, .train(), FakeQuantState.QAT, train
net.eval(); set_fake_quantize(net, FakeQuantState.VALIDATION)
qat_bc = export(net, x)
quantized = convert(qat_bc, "nash-e"); save(quantized, "quantized.bc")
func = quantized.functions[0]; func.remove_io_op(op_types=["Dequantize", "Quantize"])
statistics(quantized)  # "hbtl" entries == CPU ops
compile(quantized, "model.hbm", "nash-e", opt=2, jobs=64, progress_bar=True, debug=False)
"""

# The template's QAT comment, spelled out with the reference's API.
QAT_STEP = """\
net = prepare(model, (x,), qconfig_setter=QconfigSetter(get_qconfig(observer=MinMaxObserver), templates=[
    ModuleNameTemplate({"": qint8}), ConvDtypeTemplate(input_dtype=qint8, weight_dtype=qint8)]))
net.train(); set_fake_quantize(net, FakeQuantState.QAT)
train(net)
"""

# The consistency guide's recipe (reference notes, sections 2, 3.2 and 7): level
# before prepare, the stage artifacts, one QuantAnalysis per stage pair, the
# model-level feed, head/tail node removal, compile, hb_verifier.
CONSISTENCY_RECIPE = """\
from horizon_plugin_pytorch.march import set_march, get_march
from horizon_plugin_pytorch.qat_mode import ConsistencyStrategy
from horizon_plugin_pytorch.quantization import prepare, set_fake_quantize, FakeQuantState, pre_export
from horizon_plugin_pytorch.quantization.hbdk4 import export
from horizon_plugin_pytorch.quantization.qconfig_setter import QconfigSetter, ModuleNameTemplate
from horizon_plugin_pytorch.quantization.qconfig import get_qconfig
from horizon_plugin_pytorch.dtype import qint8, qint16
from horizon_plugin_profiler import QuantAnalysis
from hbdk4.compiler import convert, compile, save, load, Hbm
set_march("nash-e")
march = get_march()
ConsistencyStrategy.set_consistency_level(1)   # MUST be called before prepare()
qat_pt = prepare(float_model, example_inputs, qconfig_setter=QconfigSetter(get_qconfig(), templates=[ModuleNameTemplate({"": qint8, "fc": qint16})]))
qat_pt.eval(); set_fake_quantize(qat_pt, FakeQuantState.CALIBRATION)
for batch in calib_data: qat_pt(*batch)
qat_pt.eval(); set_fake_quantize(qat_pt, FakeQuantState.VALIDATION)
qat_export_pt = pre_export(qat_pt)
qat_bc = export(qat_pt, example_inputs)
print(qat_bc._high_precision_qpp); print(qat_bc._fuse_requantize)
quantized_bc = convert(qat_bc, march)
for baseline, analysis, kind in [(qat_pt, qat_export_pt, "pre_export"), (qat_export_pt, qat_bc, "export"), (qat_bc, quantized_bc, "convert")]:
    qa = QuantAnalysis(baseline, analysis, kind, out_dir=f"qa_{kind}")
    qa.auto_find_bad_case(calib_data, num_steps=2)
    qa.run()
    qa.compare_per_layer()
output = quantized_bc["forward"].feed({"_input_0": image})["_output_0"]
save(quantized_bc, "quantized.bc")
quantized_remove = load("quantized.bc")
quantized_remove.functions[0].remove_io_op(op_types=["Dequantize", "Quantize"])
save(quantized_remove, "quantized_remove.bc")
compile(quantized_remove, "model.hbm", march)
hbm = Hbm("model.hbm")
hbm_output = hbm[0].feed({"_input_0": image_codes})
"""


class DigitsNet(nn.Module):
    def __init__(self, quant_stub, dequant_stub):
        super().__init__()
        self.quant = quant_stub()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)
        self.dequant = dequant_stub()

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(self.quant(x))))
        x = F.relu(self.conv2(x))
        return self.dequant(self.fc(x.flatten(1)))


def _digits():
    digits = datasets.load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
    y = torch.tensor(digits.target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    split = int(0.75 * len(y))
    return (x[:split], y[:split]), (x[split:], y[split:])


def _fit(model, data, epochs, lr):
    x, y = data
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(1)
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=g).split(64):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def _accuracy(logits, y) -> float:
    return float((torch.as_tensor(np.asarray(logits)).argmax(1) == y).float().mean())


@pytest.fixture
def float_digits(monkeypatch, tmp_path):
    """A float digits model trained a few epochs; the script runs in tmp_path,
    and the process defaults it sets (march, consistency level) are reset."""
    from hbir.plugin.quantization import DeQuantStub, QuantStub

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    train, test = _digits()
    model = DigitsNet(QuantStub, DeQuantStub)
    _fit(model, train, epochs=4, lr=3e-3)
    model.eval()
    yield model, train, test
    set_default_march(None)
    ConsistencyStrategy.set_consistency_level(None)


def test_pipeline_template_runs_with_the_prefix_swapped(float_digits, tmp_path):
    model, train, test = float_digits
    head, tail = PIPELINE_TEMPLATE.split(
        "# QAT: re-prepare float model with MinMaxObserver, .train(), "
        "FakeQuantState.QAT, train\n"
    )
    script = swap(head + QAT_STEP + tail)
    assert not any(prefix in script for prefix in PREFIXES)
    x = train[0][:32]
    namespace = {
        "model": model,
        "x": x,
        "train": lambda net: _fit(net, train, epochs=1, lr=1e-4),
    }
    exec(compile(script, "pipeline_template.py", "exec"), namespace)  # noqa: S102

    import hbir

    assert os.path.isfile(tmp_path / "quantized.bc")
    assert os.path.isfile(tmp_path / "model.hbm")
    net, quantized = namespace["net"], namespace["quantized"]
    # the quantized model keeps the QAT model's accuracy on held-out digits
    with torch.no_grad():
        float_acc = _accuracy(model(test[0]), test[1])
        qat_acc = _accuracy(net(test[0]), test[1])
    assert qat_acc >= float_acc - 0.03, (qat_acc, float_acc)
    # io removed: int8 codes in, int codes out; model.hbm computes exactly what
    # quantized.bc does
    func = quantized.functions[0]
    (arg,) = func.inputs
    scale = arg.quant_info.scales[0] if hasattr(arg, "quant_info") else None
    hbm = hbir.load(str(tmp_path / "model.hbm"))
    source = test[0][:32].numpy()
    if scale is not None:
        codes = np.clip(np.rint(source / scale), -128, 127).astype(np.int8)
    else:
        codes = source
    feed = {arg.name: codes}
    want = list(func.feed(feed, reference=True).values())
    got = list(hbm[0].feed(feed).values())
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_consistency_recipe_runs_with_the_prefix_swapped(float_digits, tmp_path):
    model, train, test = float_digits
    script = swap(CONSISTENCY_RECIPE)
    assert not any(prefix in script for prefix in PREFIXES)
    image = test[0][:32].numpy()
    calib = [(train[0][i : i + 32],) for i in range(0, 256, 32)]
    namespace = {
        "float_model": model,
        "example_inputs": (train[0][:32],),
        "calib_data": calib,
        "image": image,
    }
    # quantized_remove.bc takes int8 codes: the input scale is known only after
    # export, so the recipe's last step gets them from the qat.bc's input grid
    head, last = script.rsplit("hbm_output = ", 1)
    exec(compile(head, "consistency_recipe.py", "exec"), namespace)  # noqa: S102
    (arg,) = namespace["quantized_remove"].functions[0].inputs
    scale = np.float32(arg.quant_info.scales[0])
    namespace["image_codes"] = np.clip(np.rint(image / scale), -128, 127).astype(
        np.int8
    )
    exec("hbm_output = " + last, namespace)  # noqa: S102

    qat_pt, qat_bc = namespace["qat_pt"], namespace["qat_bc"]
    assert qat_bc._high_precision_qpp is True and qat_bc._fuse_requantize is False
    assert qat_bc.prepared_march == "nash-e"
    # the artifacts of the three comparisons
    for kind in ("pre_export", "export", "convert"):
        assert (tmp_path / f"qa_{kind}" / "compare_per_layer_out.txt").is_file()
    # qat.pt in VALIDATION, quantized.bc and model.hbm agree bit for bit
    with torch.no_grad():
        want = qat_pt(torch.from_numpy(image)).numpy()
    np.testing.assert_array_equal(np.asarray(namespace["output"]), want)
    (hbm_codes,) = namespace["hbm_output"].values()
    removed = namespace["quantized_remove"].functions[0]
    (out,) = removed.outputs
    out_scale = np.float32(out.quant_info.scales[0])
    np.testing.assert_array_equal(
        np.asarray(hbm_codes).astype(np.float32) * out_scale, want
    )


def test_a_reference_script_kept_apart_runs_in_its_own_process(tmp_path):
    """A script file outside the project, run by a fresh interpreter after the
    prefix swap: the module paths import, and set_march is the default march of
    convert."""
    script = swap(
        "from horizon_plugin_pytorch.march import set_march, get_march, March\n"
        "from horizon_plugin_pytorch.quantization import qconfig_template\n"
        "from horizon_plugin_pytorch.quantization.qconfig_template import "
        "default_qat_8bit_fake_quant_qconfig\n"
        "from horizon_plugin_pytorch.quantization.fake_quantize import FakeQuantize\n"
        "from horizon_plugin_pytorch.quantization.stubs import QuantStub\n"
        "from horizon_plugin_pytorch.quantization.observer_v2 import "
        "MSEObserver, ClipObserver, FixedScaleObserver\n"
        "from horizon_plugin_pytorch.nn import BgrToYuv444\n"
        "from horizon_plugin_pytorch.nn.functional import bgr_to_yuv444\n"
        "from hbdk4.compiler import convert, compile, load, save, statistics, "
        "hbm_perf, March as HbdkMarch\n"
        "set_march(March.NASH_M)\n"
        "assert get_march() == 'nash-m'\n"
        "print('ok', get_march())\n"
    )
    path = tmp_path / "user_script.py"
    path.write_text(script)
    import subprocess

    root = str(Path(__file__).parents[2])  # this checkout's hbir
    env = {**os.environ, "PYTHONPATH": root}
    res = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok nash-m"
