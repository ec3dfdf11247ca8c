"""ConsistencyStrategy levels: flags, power-of-two scales, and level-2 bit exactness.

The level-2 tests run an independent integer pipeline in numpy (int64 conv / linear /
matmul, int32 bias, ``hbir.runtime.numerics.requantize`` with the power-of-two shift)
and require every output code of the fake-quant model to match it.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from numpy.lib.stride_tricks import sliding_window_view
from torch import nn

from hbir.quantization import (
    ConsistencyStrategy,
    DeQuantStub,
    FakeQuantize,
    FakeQuantState,
    QuantStub,
    prepare,
    qint16,
    set_fake_quantize,
)
from hbir.quantization.qat_modules import QATModule
from hbir.runtime import numerics


@pytest.fixture(autouse=True)
def _reset_level():
    yield
    ConsistencyStrategy.set_consistency_level(None)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 6, 3, stride=2, padding=1)
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.conv2(self.relu(self.conv1(self.quant(x)))))


class LinearMatmulNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant_x = QuantStub()
        self.quant_y = QuantStub()
        self.fc = nn.Linear(24, 12)
        self.dequant = DeQuantStub()

    def forward(self, x, y):
        return self.dequant(torch.matmul(self.fc(self.quant_x(x)), self.quant_y(y)))


def _is_pot(scale: torch.Tensor) -> bool:
    exponent = np.log2(scale.numpy().astype(np.float64))
    return bool(np.all(exponent == np.round(exponent)))


def _calibrated(model, inputs, tmp_path, qconfig=None):
    qat = prepare(model, inputs[0], qconfig, out_dir=tmp_path)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in inputs:
            qat(*batch)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat


def _conv_inputs(count=3):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(2, 3, 10, 10, generator=g) * 2,) for _ in range(count)]


def _fake_quants(model, name):
    return [
        m for n, m in model.named_modules() if isinstance(m, FakeQuantize) and name(n)
    ]


def test_no_level_keeps_defaults(tmp_path):
    qat = _calibrated(ConvNet().eval(), _conv_inputs(), tmp_path)
    assert qat._consistency_level is None
    assert qat._high_precision_qpp is False and qat._fuse_requantize is True
    assert not any(fq.pot for fq in _fake_quants(qat, lambda n: True))
    assert (
        "Consistency level: not set"
        in (tmp_path / "model_check_result.txt").read_text()
    )


def test_level_0_statistical_scales_with_high_precision_flags(tmp_path):
    ConsistencyStrategy.set_consistency_level(0)
    qat = _calibrated(ConvNet().eval(), _conv_inputs(), tmp_path)
    assert qat._consistency_level == 0
    assert qat._high_precision_qpp is True and qat._fuse_requantize is False
    activations = _fake_quants(qat, lambda n: n.endswith("activation_post_process"))
    assert not all(_is_pot(fq.scale) for fq in activations)


def test_level_1_pot_activations_only(tmp_path):
    ConsistencyStrategy.set_consistency_level(1)
    qat = _calibrated(ConvNet().eval(), _conv_inputs(), tmp_path)
    activations = _fake_quants(qat, lambda n: n.endswith("activation_post_process"))
    weights = _fake_quants(qat, lambda n: n.endswith("weight_fake_quant"))
    assert len(activations) == 3 and len(weights) == 2
    assert all(_is_pot(fq.scale) for fq in activations)
    assert not any(_is_pot(fq.scale) for fq in weights)
    assert not any(m.exact for m in qat.modules() if isinstance(m, QATModule))
    assert qat._high_precision_qpp is True and qat._fuse_requantize is False


def test_level_2_pot_everywhere_and_exact_modules(tmp_path):
    ConsistencyStrategy.set_consistency_level(2)
    qat = _calibrated(ConvNet().eval(), _conv_inputs(), tmp_path)
    for fq in _fake_quants(qat, lambda n: True):
        assert fq.pot and _is_pot(fq.scale)
    assert qat.conv1.exact and qat.conv2.exact and not qat.quant.exact
    check = (tmp_path / "model_check_result.txt").read_text()
    assert "Consistency level: 2" in check and "MinMaxObserver (pot)" in check


def test_invalid_level_is_rejected():
    with pytest.raises(ValueError, match="0, 1, 2"):
        ConsistencyStrategy.set_consistency_level(3)


# ----------------------------------------------------------------- level 2 bit exactness


def _codes(t: torch.Tensor, fq: FakeQuantize) -> np.ndarray:
    """Integer codes of a fake-quantized tensor; asserts it is on the grid."""
    q = t.detach().double().numpy() / fq.scale.double().numpy()
    assert np.array_equal(q, np.round(q))
    return np.round(q).astype(np.int64)


def _int_conv(x, w, stride, padding):
    """int64 NCHW conv: x [N, C, H, W], w [O, C, kh, kw]."""
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = sliding_window_view(x, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", windows, w)


def _requant(acc, real, out_fq, lo=None):
    """numerics.requantize with the power-of-two multiplier/shift of ``real``."""
    pairs = [numerics.quantize_multiplier(float(r)) for r in np.atleast_1d(real)]
    mult, shift = np.array(pairs).T
    qmin = out_fq.quant_min if lo is None else lo
    axis = 1 if np.size(real) > 1 else None
    return numerics.requantize(acc, mult, shift, 0, qmin, out_fq.quant_max, axis)


def _int_weight_layer(module, x_codes, s_in, conv=None):
    """(acc, s_w) of a conv/linear in int64 with the int32 bias, numerics semantics."""
    fq_w = module.weight_fake_quant
    s_w = fq_w.scale.numpy()
    w = module.weight.detach().numpy()
    w_codes = numerics.quantize(
        w, s_w, np.zeros_like(s_w, np.int64), fq_w.quant_min, fq_w.quant_max, axis=0
    )
    s_bias = (np.float32(s_in) * s_w).astype(np.float32)
    b_codes = numerics.quantize(
        module.bias.detach().numpy(),
        s_bias,
        np.zeros(len(s_w), np.int64),
        -(2**31),
        2**31 - 1,
        axis=0,
    )
    if conv is None:
        acc = x_codes @ w_codes.T + b_codes
    else:
        acc = _int_conv(x_codes, w_codes, *conv) + b_codes.reshape(1, -1, 1, 1)
    return acc, s_w


@pytest.mark.parametrize("out_dtype", ["qint8", "qint16"])
def test_level_2_conv_chain_equals_integer_pipeline(tmp_path, out_dtype):
    ConsistencyStrategy.set_consistency_level(2)
    from hbir.quantization import QconfigSetter, get_qconfig

    qconfig = get_qconfig(out_dtype=qint16) if out_dtype == "qint16" else None
    qat = _calibrated(
        ConvNet().eval(), _conv_inputs(), tmp_path, qconfig and QconfigSetter(qconfig)
    )
    x = torch.randn(4, 3, 10, 10, generator=torch.Generator().manual_seed(7)) * 2
    with torch.no_grad():
        out = qat(x)

    fq_x = qat.quant.activation_post_process
    s_x = fq_x.scale.numpy()[0]
    x_codes = numerics.quantize(x.numpy(), s_x, 0, fq_x.quant_min, fq_x.quant_max)

    fq1 = qat.conv1.activation_post_process
    acc1, s_w1 = _int_weight_layer(qat.conv1, x_codes, s_x, conv=(1, 1))
    h_codes = _requant(acc1, s_x * s_w1 / fq1.scale.numpy()[0], fq1, lo=0)  # fused relu

    fq2 = qat.conv2.activation_post_process
    s_h = fq1.scale.numpy()[0]
    acc2, s_w2 = _int_weight_layer(qat.conv2, h_codes, s_h, conv=(2, 1))
    expected = _requant(acc2, s_h * s_w2 / fq2.scale.numpy()[0], fq2)

    got = _codes(out, fq2)
    assert np.abs(acc2).max() > 2**10  # a real accumulation, not a trivial one
    assert len(np.unique(got)) > 20
    assert np.count_nonzero(got != expected) == 0


def test_level_2_linear_and_matmul_equal_integer_pipeline(tmp_path):
    ConsistencyStrategy.set_consistency_level(2)
    g = torch.Generator().manual_seed(3)
    inputs = [
        (torch.randn(5, 24, generator=g), torch.randn(12, 7, generator=g))
        for _ in range(3)
    ]
    qat = _calibrated(LinearMatmulNet().eval(), inputs, tmp_path)
    x, y = torch.randn(5, 24, generator=g), torch.randn(12, 7, generator=g)
    with torch.no_grad():
        out = qat(x, y)

    fq_x, fq_y = (
        qat.quant_x.activation_post_process,
        qat.quant_y.activation_post_process,
    )
    s_x, s_y = fq_x.scale.numpy()[0], fq_y.scale.numpy()[0]
    x_codes = numerics.quantize(x.numpy(), s_x, 0, fq_x.quant_min, fq_x.quant_max)
    y_codes = numerics.quantize(y.numpy(), s_y, 0, fq_y.quant_min, fq_y.quant_max)

    fq_fc = qat.fc.activation_post_process
    acc, s_w = _int_weight_layer(qat.fc, x_codes, s_x)
    s_h = fq_fc.scale.numpy()[0]
    h_codes = numerics.requantize(
        acc,
        *np.array([numerics.quantize_multiplier(float(r)) for r in s_x * s_w / s_h]).T,
        0,
        fq_fc.quant_min,
        fq_fc.quant_max,
        axis=1,
    )
    matmul = next(
        m for n, m in qat.named_modules() if n.startswith("_generated_matmul")
    )
    fq_out = matmul.activation_post_process
    real = float(s_h * s_y / fq_out.scale.numpy()[0])
    mult, shift = numerics.quantize_multiplier(real)
    expected = numerics.requantize(
        h_codes @ y_codes, mult, shift, 0, fq_out.quant_min, fq_out.quant_max
    )
    got = _codes(out, fq_out)
    assert len(np.unique(got)) > 20
    assert np.count_nonzero(got != expected) == 0


class SharedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant_a = QuantStub()
        self.quant_b = QuantStub()
        self.fc = nn.Linear(4, 4)

    def forward(self, a, b):
        return self.fc(self.quant_a(a)) + self.fc(self.quant_b(b))


def _validated(model, batches, tmp_path, options=None):
    """``model`` prepared on ``batches[0]`` (tuples of inputs), calibrated on all
    of them, in VALIDATION."""
    qat = prepare(model.eval(), batches[0], out_dir=tmp_path, options=options)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for inputs in batches:
            qat(*inputs)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat


def _assert_three_stages_agree(qat, batches):
    """qat.pt (VALIDATION), qat.bc and quantized.bc, bit for bit on every batch;
    returns qat.bc."""
    import hbir
    from hbir.quantization import export

    qat_bc = export(qat, batches[0])
    quantized = hbir.convert(qat_bc, "nash-e")
    names = qat_bc.functions[0].inputs.names
    for inputs in batches:
        with torch.no_grad():
            expected = qat(*inputs).numpy()
        feed = dict(zip(names, (x.numpy() for x in inputs), strict=True))
        (got_bc,) = qat_bc.functions[0].feed(feed, reference=True).values()
        (got_q,) = quantized.functions[0].feed(feed, reference=True).values()
        np.testing.assert_array_equal(got_bc, expected)
        np.testing.assert_array_equal(got_q, got_bc)
    return qat_bc


@pytest.mark.parametrize("level", [None, 0, 1, 2])
def test_a_weight_module_shared_across_input_scales_is_exact_at_every_level(
    tmp_path, level
):
    """One rule at every level: each call of ``fc`` gets its own QAT module (own
    input and output scales, the one weight), and qat.pt, qat.bc and quantized.bc
    agree bit for bit although the calls' inputs differ 8x in range."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 4, generator=g), 8 * torch.randn(4, 4, generator=g))
               for _ in range(4)]  # fmt: skip
    ConsistencyStrategy.set_consistency_level(level)
    qat = _validated(SharedLinear(), batches, tmp_path)
    first, second = qat.get_submodule("fc"), qat.get_submodule("fc_1")
    assert first.weight is second.weight
    assert first.weight_fake_quant is second.weight_fake_quant
    assert first.activation_post_process is not second.activation_post_process
    scales = [float(m.activation_post_process.scale) for m in (first, second)]
    assert scales[1] >= 2 * scales[0]  # each call its own output grid
    _assert_three_stages_agree(qat, batches)


class ConstantBeforeTables(nn.Module):
    """A float constant added to / subtracted from / multiplied with quantized
    values, before table ops: ``log(|x| + 0.1)``, ``rsqrt(|x| + 0.1)``."""

    def forward(self, x):
        y = x.abs() + 0.1
        return torch.cat([torch.log(y), torch.rsqrt(y), 0.1 - x, x * 0.3], 1)


@pytest.mark.parametrize("level", [None, 2])
def test_a_float_constant_operand_is_on_the_integer_grid_at_every_level(
    tmp_path, level
):
    """0.1 is on no power-of-two grid: at level 2 too the QAT add puts it on the
    grid the integer add accumulates on (3 codes of 2**-5 here, not 0.1), so the
    table index is the same in qat.pt, qat.bc and quantized.bc."""
    g = torch.Generator().manual_seed(0)
    # |x| up to 3.9: the add's input on 2**-5, its output (up to 4.0) on 2**-4
    batches = [(3.9 * (2 * torch.rand(1, 3, 8, 8, generator=g) - 1),) for _ in range(3)]
    batches[0][0][0, 0, 0, :2] = torch.tensor([3.9, -3.9])
    ConsistencyStrategy.set_consistency_level(level)
    qat = _validated(ConstantBeforeTables(), batches, tmp_path)
    _assert_three_stages_agree(qat, batches)


class Upsample(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        up = F.interpolate(y, scale_factor=2, mode="bilinear")
        size = F.interpolate(y, size=(13, 11), mode="bilinear", align_corners=True)
        return torch.cat([up.flatten(1), size.flatten(1)], 1)


@pytest.mark.parametrize("rounding", ["half_even", "half_up"])
def test_a_bilinear_resize_computes_the_integer_pipeline_in_validation(
    tmp_path, rounding
):
    """VALIDATION's resize is ``numerics.fixed_point_resize`` (the exact integer
    sum, one 31-bit requantization in the model's rounding), marked qnt.exact in
    qat.bc: no tie can round differently in quantized.bc."""
    from hbir.dialects import qnt
    from hbir.quantization import QuantOptions

    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(1, 3, 8, 8, generator=g),) for _ in range(3)]
    options = QuantOptions(rounding=rounding)
    qat = _validated(Upsample(), batches, tmp_path, options)
    qat_bc = _assert_three_stages_agree(qat, batches)
    resizes = [op for op in qat_bc.module.op.walk() if op.name == "hbir.resize2d"]
    assert len(resizes) == 2 and all(qnt.EXACT in op.attributes for op in resizes)
