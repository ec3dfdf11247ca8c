"""fp16 end to end: ``FakeCast``, the float16 qconfig, ``f16`` in HBIR, convert on
a march with fp16 (nash-p, nash-h) and the refusal on one without (nash-e), and
bit identity qat.export.pt -> qat.bc -> quantized.bc -> model.hbm."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo_stages import validated

import hbir
from hbir.compile import lower_to_npu
from hbir.passes.check_march import Float16MarchError
from hbir.passes.npu_lower import FP16_REASON
from hbir.quantization import (
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    export,
    get_qconfig,
    pre_export,
    prepare,
    set_fake_quantize,
)
from hbir.quantization.fake_cast import FakeCast
from hbir.quantization.prepare import UnsupportedOpError
from hbir.quantization.qconfig import QconfigSetter
from hbir.quantization.templates import (
    ConvDtypeTemplate,
    ModuleNameTemplate,
    TemplateError,
)

FP16 = torch.float16


def _float32_patterns() -> np.ndarray:
    """float32 values around every binary16 case: ties (half-way between two
    halves), subnormals, the largest half and overflow, random bit patterns."""
    rng = np.random.default_rng(0)
    halves = np.arange(0, 0x7C00, 7, dtype=np.uint16).view(np.float16)
    h32 = halves.astype(np.float64)
    nxt = np.nextafter(halves, np.float16(np.inf)).astype(np.float64)
    ties = (h32 + nxt) / 2  # exact in float32: one more bit than binary16
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    randoms = bits.view(np.float32)
    special = [65504.0, 65519.99, 65520.0, 1e6, 2.0**-24, 2.0**-25, 2.0**-26]
    values = np.concatenate([h32, ties, ties * (1 + 2**-20), special]).astype(
        np.float32
    )
    values = np.concatenate([values, -values, randoms[np.isfinite(randoms)]])
    return values


def test_fake_cast_rounds_as_ieee_binary16_with_a_straight_through_gradient():
    x = torch.from_numpy(_float32_patterns()).requires_grad_()
    y = FakeCast()(x)
    with np.errstate(over="ignore"):  # to inf, as IEEE says
        want = x.detach().numpy().astype(np.float16).astype(np.float32)  # RNE
    assert y.detach().numpy().tobytes() == want.tobytes()
    assert np.isinf(want).any() and (np.abs(want[np.isfinite(want)]) < 2**-14).any()
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))


def test_hbir_cast_to_f16_is_the_same_rounding_in_every_engine():
    """The interpreter's ``hbir.cast`` f32 -> f16 -> f32 (qat.bc and quantized.bc)
    against torch's ``.half()``."""
    from hbir.runtime.interpreter import run_function

    values = _float32_patterns()
    n = values.size
    text = (
        f"func.func @f(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n"
        f"  %h = hbir.cast %x : tensor<{n}xf32> -> tensor<{n}xf16>\n"
        f"  %y = hbir.cast %h : tensor<{n}xf16> -> tensor<{n}xf32>\n"
        f"  func.return %y : tensor<{n}xf32>\n}}\n"
    )
    m = hbir.Module.parse(text)
    (got,) = run_function(m.functions[0].op, [values])
    want = torch.from_numpy(values).half().float().numpy()
    assert np.asarray(got).tobytes() == want.tobytes()


class _Mixed(nn.Module):
    """int8 convs around fp16 sigmoid / mul / layer norm / silu / softmax / add."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1)
        self.head = _Head()

    def forward(self, x):
        return self.dequant(self.c2(self.head(self.c1(self.quant(x)))))


class _Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.act = nn.LayerNorm(8), nn.SiLU()
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.2, 0.2)

    def forward(self, y):
        y = torch.sigmoid(y) * y
        y = self.ln(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return torch.softmax(self.act(y), 1) + F.gelu(y)


def _fp16_head():
    return QconfigSetter(get_qconfig(), templates=[ModuleNameTemplate({"head": FP16})])


def _prepared(tmp_path, march="nash-p"):
    torch.manual_seed(0)
    inputs = [torch.randn(2, 3, 6, 6) for _ in range(4)]
    return validated(_Mixed(), inputs, tmp_path, _fp16_head()), inputs


def test_the_float16_qconfig_places_fake_casts_around_the_fp16_ops(tmp_path):
    qat, _ = _prepared(tmp_path)
    casts = [n for n, m in qat.named_modules() if isinstance(m, FakeCast)]
    # one on the conv's output (the fp16 ops' input), one per fp16 op's output
    assert len(casts) == 1 + 7, casts
    text = (tmp_path / "model_check_result.txt").read_text()
    assert "ModuleNameTemplate['head']" in text
    assert "fp16 value used by an integer op" in text  # c2's generated QuantStub


@pytest.mark.parametrize("march", ["nash-p", "nash-h"])
def test_fp16_ops_are_bit_identical_through_every_stage(tmp_path, march):
    qat, inputs = _prepared(tmp_path)
    qat_bc = export(qat, (inputs[0],))
    asm = qat_bc.module.get_asm()
    assert asm.count("xf16>") >= 14  # each FakeCast: a cast to f16 and back
    exported = pre_export(qat)
    quantized = hbir.convert(qat_bc, march)
    # the fp16 ops on f16 values (convert-fp16), one cast back before c2's quantize
    fp16_ops = {
        op.name
        for op in quantized.module.op.walk()
        if op.results and str(op.results[0].type).endswith("xf16>")
    }
    assert fp16_ops >= {"hbir.sigmoid", "hbir.mul", "hbir.layer_norm", "hbir.silu"}
    assert fp16_ops >= {"hbir.softmax", "hbir.add", "hbir.gelu", "hbir.transpose"}
    npu_asm = lower_to_npu(quantized, march).module.get_asm()
    # sigmoid, silu and gelu run on the NPU (npu.fp16_map), the rest in CPU
    # islands that say why
    functions = re.findall(r'"npu.fp16_map"\(%\d+\) <\{function = "(\w+)"', npu_asm)
    assert sorted(functions) == ["gelu", "sigmoid", "silu"]
    assert FP16_REASON in npu_asm
    hbir.compile(quantized, str(tmp_path / "model.hbm"), march)
    hbm = hbir.load(str(tmp_path / "model.hbm"))
    for x in inputs:
        feed = {"_input_0": x.numpy()}
        with torch.no_grad():
            want = exported(x).numpy()
        stages = {
            "qat.bc": qat_bc["forward"].feed(feed)["_output_0"],
            "quantized.bc": quantized["forward"].feed(feed, reference=True)[
                "_output_0"
            ],
            "quantized.bc fast feed": quantized[0].feed(feed)["_output_0"],
            "model.hbm": hbm["forward"].feed(feed)["_output_0"],
        }
        for stage, got in stages.items():
            assert np.asarray(got).tobytes() == want.tobytes(), stage


def test_fp16_values_are_binary16_in_qat_bc(tmp_path):
    """Every value a FakeCast made is a binary16 (an f16 round trip leaves it),
    and an fp16 op's output is its float32 kernel rounded once to binary16:
    torch's float16 rounding of the float64 sigmoid of the same input, which
    agrees except on double-rounding ties (none here)."""
    qat, inputs = _prepared(tmp_path)
    seen = {}

    def keep(module, args, out):
        seen[module] = (args[0].detach().clone(), out.detach().clone())

    for m in qat.modules():
        if isinstance(m, FakeCast):
            m.register_forward_hook(keep)
    with torch.no_grad():
        qat(inputs[0])
    for _, y in seen.values():
        assert torch.equal(y, y.half().float())
    first_in = seen[qat.get_submodule("head._generated_input_fake_cast_0")][1]
    sig = seen[qat.get_submodule("head._generated_fake_cast_0")][1]
    want = torch.sigmoid(first_in.double()).half().float()
    assert torch.equal(sig, want)


def test_a_march_without_fp16_refuses_naming_the_op_and_march(tmp_path):
    qat, inputs = _prepared(tmp_path)
    qat_bc = export(qat, (inputs[0],))
    for march in ("nash-e", "nash-m"):
        with pytest.raises(Float16MarchError) as e:
            hbir.convert(qat_bc, march)
        message = str(e.value)
        assert "'hbir.sigmoid' op runs in fp16" in message, message
        assert f"{march} has no fp16" in message
        assert "test_fp16.py" in message  # the torch line of the sigmoid


def test_f16_in_qat_bc_and_quantized_bc_prints_parses_and_saves(tmp_path):
    qat, inputs = _prepared(tmp_path)
    qat_bc = export(qat, (inputs[0],))
    quantized = hbir.convert(qat_bc, "nash-p")
    feed = {"_input_0": inputs[1].numpy()}
    for name, m in {"qat.bc": qat_bc, "quantized.bc": quantized}.items():
        text = m.module.get_asm()
        assert hbir.Module.parse(text).module.get_asm() == text, name
        hbir.save(m, str(tmp_path / name))
        loaded = hbir.load(str(tmp_path / name))
        assert loaded.module.get_asm() == text, name
        a = m["forward"].feed(feed, reference=True)["_output_0"]
        b = loaded["forward"].feed(feed, reference=True)["_output_0"]
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), name


def test_float16_on_an_op_without_an_fp16_form_is_refused_by_name(tmp_path):
    torch.manual_seed(0)
    inputs = [torch.randn(1, 3, 6, 6)]
    setter = QconfigSetter(get_qconfig(), module_type={nn.Conv2d: FP16})
    with pytest.raises(UnsupportedOpError, match="'conv2d' has none"):
        validated(_Mixed(), inputs, tmp_path, setter)


def test_gemm_templates_refuse_float16():
    with pytest.raises(TemplateError, match="gemm operands are int8 or int16"):
        ConvDtypeTemplate(input_dtype=FP16)


def test_get_qconfig_float16_makes_fake_casts():
    qconfig = get_qconfig(out_dtype=FP16)
    assert isinstance(qconfig.activation(), FakeCast)
    assert str(qconfig.activation) == "float16 FakeCast"


# Measured over every finite binary16 input: how often the fp16 kernel (float32,
# rounded once) and float64 rounded once to binary16 disagree, and by how many
# binary16 steps at most: float32's own error near a binary16 tie (gelu's erf in
# float32 also loses the far negative tail, in binary16's subnormal range).
F64_AGREEMENT = {
    "sigmoid": (7, 1),
    "tanh": (0, 0),
    "exp": (2, 1),
    "silu": (1, 1),
    "gelu_tanh": (274, 3),
}


@pytest.mark.parametrize("function", sorted(F64_AGREEMENT) + ["gelu"])
def test_fp16_map_against_float64_rounded_to_binary16(function):
    from hbir.runtime import kernels

    h = np.arange(0x10000, dtype=np.uint32).astype(np.uint16).view(np.float16)
    h = h[np.isfinite(h)]
    got = kernels.fp16_unary(function, h)
    fn = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}.get(
        function, getattr(torch, function, None) or getattr(F, function, None)
    )
    with np.errstate(over="ignore"):
        want = fn(torch.from_numpy(h.astype(np.float64))).numpy().astype(np.float16)
    assert got.dtype == np.float16
    bad = got.astype(np.float64) != want.astype(np.float64)  # -0 == +0
    steps = np.abs(got.view(np.int16).astype(int) - want.view(np.int16).astype(int))
    if function == "gelu":  # 254 in the subnormal tail (signs there too), 204 normal
        normal = bad & (np.abs(want.astype(np.float64)) >= 2.0**-14)
        assert (bad.sum(), normal.sum(), steps[normal].max()) == (458, 204, 2)
        return
    count, most = F64_AGREEMENT[function]
    assert bad.sum() == count
    assert steps[bad].max(initial=0) == most


class _DigitsSilu(nn.Module):
    """Two convs and a linear with SiLU and layer-norm'd features between."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.act1, self.act2 = nn.SiLU(), nn.SiLU()
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = self.act1(self.conv1(self.quant(x)))
        x = self.act2(self.conv2(x))
        return self.dequant(self.fc(x.flatten(1)))


def test_digits_with_fp16_activations_is_at_least_as_accurate_as_int8(tmp_path):
    """Real data (scikit-learn's digits): the activations in fp16 (the J6 guide's
    advice for J6P / J6H) against int8 tables, after the same calibration and
    QAT; the fp16 model then converts for nash-p and equals its qat.bc."""
    import importlib.util
    from pathlib import Path

    pytest.importorskip("sklearn.datasets")
    path = Path(__file__).with_name("test_digits.py")  # its data and training loop
    spec = importlib.util.spec_from_file_location("digits_helpers", path)
    digits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digits)
    train, test = digits._data()
    torch.manual_seed(0)
    model = _DigitsSilu()
    digits._train(model.train(), train, epochs=10, lr=3e-3, seed=1)
    accuracy = {}
    fp16_acts = ModuleNameTemplate({"act1": FP16, "act2": FP16})
    setters = {"int8": QconfigSetter(get_qconfig())}
    setters["fp16"] = QconfigSetter(get_qconfig(), templates=[fp16_acts])
    for name, setter in setters.items():
        qat = prepare(model, train[0][:8], setter, out_dir=tmp_path)
        qat.eval()
        set_fake_quantize(qat, FakeQuantState.CALIBRATION)
        with torch.no_grad():
            for batch in train[0].split(128):
                qat(batch)
        qat.train()
        set_fake_quantize(qat, FakeQuantState.QAT)
        digits._train(qat, train, epochs=2, lr=1e-4, seed=2)
        qat.eval()
        set_fake_quantize(qat, FakeQuantState.VALIDATION)
        accuracy[name] = digits._accuracy(qat, test)
    print(f"digits: {accuracy}")
    assert accuracy["fp16"] >= accuracy["int8"]
    qat_bc = export(qat, (test[0][:1],))
    quantized = hbir.convert(qat_bc, "nash-p")
    feed = {"_input_0": test[0][:64].numpy()}  # a batch of the exported 1
    a = qat_bc["forward"].feed(feed)["_output_0"]
    b = quantized["forward"].feed(feed)["_output_0"]
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
