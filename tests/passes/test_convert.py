"""convert: qat.bc -> quantized.bc on the zoo, hbir-opt equality, march, islands."""

import re
import subprocess
from fractions import Fraction

import numpy as np
import pytest
import zoo
from xdsl.dialects.builtin import DenseArrayBase, f64
from zoo_stages import calibrated, validated

import hbir
from hbir.dialects import qnt
from hbir.passes.fixed_point import FixedPointError
from hbir.quantization import export, pre_export, set_round_mode

SEEDS = 5


def _outputs(f, inputs):
    out = f(*inputs)  # (tensors in: tensors out)
    return [np.asarray(y) for y in (out if isinstance(out, tuple) else [out])]


def _output_scales(quantized):
    """Each output's LSB: its dequantize's scale; 1 for integer outputs (indices)."""
    ret = list(quantized["forward"].op.body.block.ops)[-1]
    return [
        float(v.owner.scales.get_values()[0])
        if isinstance(v.owner, qnt.DequantizeOp)
        else 1.0
        for v in ret.operands
    ]


def _compare(name, tmp_path, level):
    qat, example = calibrated(name, tmp_path, level=level, qat_steps=2)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    scales = _output_scales(quantized)
    worst, same, total = 0, 0, 0
    for seed in range(SEEDS):
        inputs = zoo.batches(name, 1, batch=len(example[0]), seed=100 + seed)[0]
        want = _outputs(qat_bc["forward"], inputs)
        got = _outputs(quantized["forward"], inputs)
        for w, g, s in zip(want, got, scales, strict=True):
            lsb = np.rint(np.abs(w.astype(np.float64) - g.astype(np.float64)) / s)
            worst = max(worst, int(lsb.max()))
            same += int((w == g).sum())
            total += w.size
    return worst, same / total


@pytest.mark.parametrize(
    "level", [None, 0, 1, 2], ids=["default", "level0", "level1", "level2"]
)
@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_is_bit_identical_at_every_level(name, level, tmp_path):
    # Pinned to what is measured (docs/contract.md), not to a looser per-op
    # bound: a regression shows as the first differing element.
    worst, identical = _compare(name, tmp_path, level)
    assert worst == 0 and identical == 1.0


@pytest.mark.parametrize("level", [None, 1], ids=["default", "level1"])
@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_is_bit_identical_with_legacy_rounding(name, level, tmp_path):
    # Half-up rounding (legacy_round) reaches every op the fixed-point VALIDATION
    # forward marks qnt.exact: the interpreter must round them half up too
    # (power-of-two scales at level 1 make exact ties common).
    set_round_mode("half_up")
    try:
        qat, example = calibrated(name, tmp_path, level=level, qat_steps=2)
        qat_export = pre_export(qat)
        qat_bc = export(qat, example)
        quantized = hbir.convert(qat_bc, "nash-e")
        for seed in range(2):
            inputs = zoo.batches(name, 1, batch=len(example[0]), seed=200 + seed)[0]
            want = qat_export(*inputs)
            want = list(want) if isinstance(want, tuple | list) else [want]
            bc = _outputs(qat_bc["forward"], inputs)
            got = _outputs(quantized["forward"], inputs)
            for w, b, g in zip(want, bc, got, strict=True):
                np.testing.assert_array_equal(b, w.detach().numpy())
                np.testing.assert_array_equal(g, b)
    finally:
        set_round_mode("half_even")


def test_hbir_opt_convert_equals_hbir_convert(tmp_path):
    qat, example = calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    hbir.save(qat_bc, tmp_path / "qat.mlir")
    quantized = hbir.convert(qat_bc, "nash-e")
    for args in (["-p", "convert{march=nash-e}"], ["--compile-to=convert"]):
        out = subprocess.run(
            ["hbir-opt", str(tmp_path / "qat.mlir"), *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        pretty = quantized.module.get_asm(pretty=True)  # hbir-opt's form
        assert out.rstrip("\n") == pretty.rstrip("\n")


def test_quantized_feeds_and_round_trips_save_load(tmp_path):
    qat, example = calibrated("multi_io", tmp_path)
    quantized = hbir.convert(export(qat, example), "nash-e")
    stats = hbir.statistics(quantized)["forward"]
    assert "qnt.const_fake_quant" not in stats and stats["qnt.requantize"] > 0
    hbir.save(quantized, tmp_path / "quantized.bc")
    again = hbir.load(tmp_path / "quantized.bc")
    assert again.module.get_asm() == quantized.module.get_asm()
    feed = {
        a.name: x.numpy() for a, x in zip(quantized[0].inputs, example, strict=True)
    }
    want = quantized["forward"].feed(feed)
    got = again["forward"].feed(feed)
    assert want.keys() == got.keys()
    assert all(np.array_equal(want[k], got[k]) for k in want)


def test_unknown_march_is_a_clear_error(tmp_path):
    qat, example = calibrated("multi_io", tmp_path)
    with pytest.raises(hbir.HbirError, match="unknown march 'nash-x'"):
        hbir.convert(export(qat, example), "nash-x")


# ---------------------------------------------------------------- hand-written IR

LINEAR16 = """
builtin.module {
  func.func @forward(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
    %xq = qnt.const_fake_quant %x {min = array<f64: -1.0>, max = array<f64:
      0.999969482421875>, bits = 16 : i64} : tensor<2x4xf32>
    %w = hbir.constant dense<[[0.5, -0.25, 0.125, 1.0], [0.3, 0.2, -0.1, 0.0],
      [1.0, 1.0, 1.0, 1.0]]> : tensor<3x4xf32>
    %wq = qnt.const_fake_quant %w {min = array<f64: -1.0>, max = array<f64:
      0.999969482421875>, bits = BITS : i64} : tensor<3x4xf32>
    %y = hbir.linear %xq, %wq : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
    %r = hbir.relu %y : tensor<2x3xf32>
    %yq = qnt.const_fake_quant %r {min = array<f64: -4.0>, max = array<f64:
      3.96875>, bits = 8 : i64} : tensor<2x3xf32>
    func.return %yq : tensor<2x3xf32>
  }
}
"""


def _linear(bits, attrs=""):
    text = LINEAR16.replace("BITS", str(bits))
    if attrs:
        text = text.replace(
            "builtin.module {", f"builtin.module attributes {{{attrs}}} {{"
        )
    return hbir.Module.parse(text)


def test_int16_by_int16_linear_is_a_cpu_island_with_advice(capsys):
    quantized = hbir.convert(_linear(16), "nash-e", advice=True)
    advice = capsys.readouterr().out
    assert "'hbir.linear' runs on the CPU" in advice
    assert "input and weight cannot both be int16 on nash-e" in advice
    by_device = hbir.statistics(quantized, by_device=True)["forward"]
    assert by_device["cpu"] == {"hbir.linear": 1, "hbir.relu": 1}
    assert "hbir.linear" not in by_device["npu"]
    # The island is fenced: dequantize before, quantize after.
    assert by_device["npu"]["qnt.dequantize"] >= 2
    assert by_device["npu"]["qnt.quantize"] >= 2


def _reference_linear(x, s_out=2**-5):
    """Independent integer reference: Fraction arithmetic, half-even, relu."""
    s_x, s_w = Fraction(1, 2**15), Fraction(1, 2**15)
    w = np.array([[0.5, -0.25, 0.125, 1.0], [0.3, 0.2, -0.1, 0.0], [1.0] * 4])
    w_codes = [[round(Fraction(float(np.float32(v))) / s_w) for v in row] for row in w]
    w_codes = [[min(max(c, -32768), 32767) for c in row] for row in w_codes]
    out = np.zeros((2, 3), np.int64)
    for i in range(2):
        x_codes = [
            min(max(round(Fraction(float(v)) / s_x), -32768), 32767) for v in x[i]
        ]
        for j in range(3):
            acc = sum(a * b for a, b in zip(x_codes, w_codes[j], strict=True))
            out[i, j] = min(max(round(acc * s_x * s_w / Fraction(s_out)), 0), 127)
    return out


def test_cpu_island_numbers_match_an_independent_integer_reference():
    quantized = hbir.convert(_linear(16), "nash-e")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
    got = quantized["forward"](x)
    want = _reference_linear(x).astype(np.float64) * 2**-5
    assert np.array_equal(got.astype(np.float64), want)


def test_legacy_round_requantizes_half_up():
    quantized = hbir.convert(_linear(8, "hbir.legacy_round = true"), "nash-e")
    asm = quantized.module.get_asm()
    assert 'rounding = "half_up"' in asm
    assert "half_even" not in asm


def test_level_0_keeps_clip_apart_with_the_same_numbers():
    fused = hbir.convert(_linear(8), "nash-e")
    unfused = hbir.convert(
        _linear(8, "hbir.high_precision_qpp = true, hbir.fuse_requantize = false"),
        "nash-e",
    )
    assert "hbir.clip" in unfused.module.get_asm()
    assert "hbir.clip" not in fused.module.get_asm()
    x = np.random.default_rng(1).uniform(-1, 1, (2, 4)).astype(np.float32)
    assert np.array_equal(fused["forward"](x), unfused["forward"](x))


# ----------------------------------------------------------------- level-2 bugs

_MEAN_96 = """
builtin.module attributes {{hbir.consistency_level = 2 : i64, hbir.legacy_round = {legacy}}} {{
func.func @forward(%x: tensor<1x96xf32>) -> tensor<1xf32> {{
  %a = qnt.const_fake_quant %x {{min = array<f64: -128.0>, max = array<f64: {hi}>, bits = 16 : i64}} : tensor<1x96xf32>
  %m = hbir.reduce_mean %a {{dims = array<i64: 1>, keepdim = false}} : tensor<1x96xf32> -> tensor<1xf32>
  %q = qnt.const_fake_quant %m {{min = array<f64: -128.0>, max = array<f64: {hi}>, bits = 16 : i64}} : tensor<1xf32>
  func.return %q : tensor<1xf32>
}}
}}
"""


def _rounded(value: Fraction, legacy: bool) -> int:
    """Half to even, or half up (``floor(v + 1/2)``) for legacy_round models."""
    low = value.numerator // value.denominator
    rest = value - low
    tie_up = legacy or low % 2 == 1
    return low + (rest > Fraction(1, 2) or (rest == Fraction(1, 2) and tie_up))


@pytest.mark.parametrize("legacy", [False, True], ids=["half_even", "legacy_round"])
def test_level_2_mean_over_96_rounds_an_exact_tie_exactly(legacy, tmp_path):
    """A variance over 96 channels: 93642 / 96 = 7803.5 must round to 7804 (the
    truncated multiplier floor(2**32 / 3) gave 7803), half up as well."""
    scale = 2.0**-8
    text = _MEAN_96.format(hi=32767 * scale, legacy=str(legacy).lower())
    (tmp_path / "mean.mlir").write_text(text)
    qat_bc = hbir.load(tmp_path / "mean.mlir")
    quantized = hbir.convert(qat_bc, "nash-e")
    tie = np.array([976] * 42 + [975] * 54, np.int64)
    assert tie.sum() == 93642
    rng = np.random.default_rng(0)
    cases = [tie] + [rng.integers(-32768, 32768, 96) for _ in range(200)]
    cases += [rng.integers(0, 4, 96) for _ in range(200)]  # small sums: many ties
    for codes in cases:
        x = (codes * scale).astype(np.float32)[None]
        want = _rounded(Fraction(int(codes.sum()), 96), legacy) * scale
        got_bc, got_q = qat_bc["forward"](x), quantized["forward"](x)
        assert got_bc[0] == want and got_q[0] == want, codes.sum()


def test_level_2_check_march_sees_conv_operands_behind_the_float64_cast(tmp_path):
    """At level 2 gemm operands are cast to f64 before the conv: a dilation beyond
    the march must still send the conv to the CPU (DeepLabV3's ASPP)."""
    import torch
    from torch import nn

    from hbir.passes.fixed_point import ATTR_CPU_REASON, op_device
    from hbir.passes.march import get_march
    from hbir.quantization import (
        ConsistencyStrategy,
        DeQuantStub,
        FakeQuantState,
        QuantStub,
        prepare,
        set_fake_quantize,
    )

    dilation = get_march("nash-e").max_dilation + 1
    model = nn.Sequential(
        QuantStub(),
        nn.Conv2d(2, 2, 3, padding=dilation, dilation=dilation),
        DeQuantStub(),
    ).eval()
    x = torch.randn(1, 2, 2 * dilation + 3, 2 * dilation + 3)
    ConsistencyStrategy.set_consistency_level(2)
    try:
        qat = prepare(model, (x,), out_dir=tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(x)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    quantized = hbir.convert(export(qat, (x,)), "nash-e")
    convs = [op for op in quantized["forward"].op.walk() if op.name == "hbir.conv2d"]
    assert len(convs) == 1 and op_device(convs[0]) == "cpu"
    assert "dilation" in convs[0].attributes[ATTR_CPU_REASON].data
    np.testing.assert_array_equal(
        quantized["forward"](x), export(qat, (x,))["forward"](x)
    )


@pytest.mark.parametrize(
    "call",
    [
        {"scale_factor": 2.0},
        {"size": (9, 4)},
        {"size": (7, 11), "align_corners": True},
        {"scale_factor": (1.5, 0.5)},
        "like-skip",
    ],
    ids=["x2", "size", "corners", "odd-scales", "size-from-graph"],
)
@pytest.mark.parametrize("dtype", ["qint8", "qint16"])
def test_bilinear_resize_runs_on_the_npu_bit_identically(call, dtype, tmp_path):
    """Bilinear F.interpolate: integer weights on the NPU, the same weights in the
    QAT forward; quantized.bc == qat.bc == qat.export.pt bit for bit."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from hbir.conversion import cpu_advice
    from hbir.quantization import (
        DeQuantStub,
        QConfig,
        QuantStub,
        get_qconfig,
        pre_export,
        qint8,
        qint16,
    )

    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()

        def forward(self, x):
            x = self.quant(x)
            if call == "like-skip":  # FPN / UNet: the size of another tensor
                skip = x[:, :, ::2, 1:]
                return self.dequant(
                    F.interpolate(skip, size=x.shape[2:], mode="bilinear") + x
                )
            return self.dequant(F.interpolate(x, mode="bilinear", **call))

    torch.manual_seed(0)
    inputs = [torch.randn(2, 3, 6, 8) for _ in range(4)]
    qconfig = get_qconfig(out_dtype=qint16 if dtype == "qint16" else qint8)
    assert isinstance(qconfig, QConfig)
    qat = validated(Up(), inputs, tmp_path, qconfig)
    qat_bc = export(qat, (inputs[0],))
    quantized = hbir.convert(qat_bc, "nash-e")
    assert cpu_advice(quantized) == []
    names = [op.name for op in quantized["forward"].op.walk()]
    assert "hbir.resize2d" in names and "qnt.requantize" in names
    exported_pt = pre_export(qat)
    for x in inputs:
        with torch.no_grad():
            want = exported_pt(x).numpy()
        assert (
            np.asarray(qat_bc["forward"](x)).tobytes() == want.tobytes()
        )  # (a tensor)
        np.testing.assert_array_equal(quantized["forward"](x), want)


def test_the_pass_docstring_example_is_what_the_pass_produces():
    """The Before ops of passes/convert.py's docstring, converted, give its After."""
    from hbir.passes import convert as convert_pass

    flat = re.sub(r"\s+", " ", convert_pass.__doc__)
    before = flat.split("Before:: ")[1].split(" After::")[0]
    after = flat.split("After:: ")[1]
    ops = re.sub(r" (%\d+ = )", r"\n  \1", before)  # one op per line
    text = (
        f"func.func @f(%0: tensor<4xf32>) -> tensor<4xf32> {{\n  {ops}\n"
        "  func.return %3 : tensor<4xf32>\n}"
    )
    quantized = hbir.convert(hbir.Module.parse(text), "nash-e")
    printed = re.sub(r"\s+", " ", quantized.module.get_asm(pretty=True))
    requantize = re.search(r"qnt.requantize %1 (\{[^}]*\})", after)
    assert requantize and requantize[1] in printed, printed
    # The numbers themselves: the scale ratio (1/128) / (1/64) as multiplier/2**shift.
    m, s = re.search(
        r"multiplier = array<i64: (\d+)>, shift = array<i64: (\d+)>", after
    ).groups()
    assert Fraction(int(m), 2 ** int(s)) == Fraction(1, 128) / Fraction(1, 64)


def test_a_degenerate_range_is_refused_at_its_torch_line(tmp_path):
    # IR that verifies but has no fixed-point form: an activation range whose
    # float32 scale is 0. expand-fake-quant refuses it, naming the torch line.
    qat, example = calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    fq = next(
        op
        for op in qat_bc["forward"].op.walk()
        if isinstance(op, qnt.ConstFakeQuantOp) and op.axis is None
    )
    fq.properties["min"] = DenseArrayBase.from_list(f64, [-1e-45])
    fq.properties["max"] = DenseArrayBase.from_list(f64, [1e-45])
    with pytest.raises(FixedPointError, match=r"zoo\.py:\d+:\d+: error: .*scale 0\.0"):
        hbir.convert(qat_bc, "nash-e")
