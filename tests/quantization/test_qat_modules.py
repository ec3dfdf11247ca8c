"""QAT module behaviour against plain torch references."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hbir.quantization import FakeQuantize, MinMaxObserver, get_qconfig, qint8
from hbir.quantization import qat_modules as qat


def _float_mode(module):
    for m in module.modules():
        if isinstance(m, FakeQuantize):
            m.enable_fake_quant(False).enable_observer(False)
    return module


def test_conv_from_float_shares_parameters_and_hyperparameters():
    conv = nn.Conv2d(
        4, 6, 3, stride=2, padding=1, dilation=1, groups=2, padding_mode="reflect"
    )
    q = qat.Conv2d.from_float(conv, get_qconfig(), fused_relu="relu6")
    assert q.weight is conv.weight and q.bias is conv.bias
    assert (q.stride, q.padding, q.groups, q.padding_mode) == (
        (2, 2),
        (1, 1),
        2,
        "reflect",
    )
    assert q.weight_fake_quant.scale.shape == (6,) and q.weight_fake_quant.ch_axis == 0
    x = torch.randn(2, 4, 7, 7)
    torch.testing.assert_close(_float_mode(q)(x), F.relu6(conv(x)))
    assert "fused_relu=relu6" in repr(q)


def test_conv_weight_is_fake_quantized_per_output_channel():
    conv = nn.Conv2d(3, 5, 3)
    q = qat.Conv2d.from_float(conv, get_qconfig())
    q.activation_post_process.enable_fake_quant(False)
    x = torch.randn(1, 3, 6, 6)
    out = q(x)
    absmax = conv.weight.detach().abs().amax(dim=(1, 2, 3))
    scale = absmax / 127.5
    w = torch.fake_quantize_per_channel_affine(
        conv.weight, scale, torch.zeros(5, dtype=torch.int32), 0, -128, 127
    )
    torch.testing.assert_close(out, F.conv2d(x, w, conv.bias), rtol=0, atol=1e-6)


def test_conv_transpose_quantizes_weights_along_axis_1():
    convt = nn.ConvTranspose2d(4, 6, 2, stride=2, groups=2)
    q = qat.ConvTranspose2d.from_float(convt, get_qconfig())
    assert q.weight_fake_quant.ch_axis == 1 and q.weight_fake_quant.scale.shape == (3,)
    x = torch.randn(2, 4, 3, 3)
    q(x)
    expected = convt.weight.detach().abs().amax(dim=(0, 2, 3)) / 127.5
    assert torch.equal(q.weight_fake_quant.scale, expected)
    assert q._bias_scale().tolist() == expected.repeat(2).tolist()
    torch.testing.assert_close(_float_mode(q)(x), convt(x))


def test_linear_with_fused_relu():
    fc = nn.Linear(5, 3)
    q = _float_mode(qat.Linear.from_float(fc, get_qconfig(), fused_relu="relu"))
    x = torch.randn(4, 5)
    torch.testing.assert_close(q(x), F.relu(fc(x)))


def test_weight_layers_need_a_weight_qconfig():
    with pytest.raises(ValueError, match="weight qconfig"):
        qat.Linear(3, 3, qconfig=get_qconfig(weight_dtype=None))


def test_exact_bias_is_on_the_int32_grid_of_input_times_weight_scale():
    fc = nn.Linear(4, 3)
    fc.bias.data = torch.tensor([0.3, -1.7, 12.25])
    q = qat.Linear.from_float(fc, get_qconfig())
    producer = FakeQuantize(MinMaxObserver, qint8)
    producer(torch.tensor([-2.0, 1.0]))
    q.producer_fake_quants = (producer,)
    q.weight_fake_quant(fc.weight)
    bias = q._exact_bias()
    grid = (producer.scale * q.weight_fake_quant.scale).double()
    codes = bias / grid
    assert bias.dtype == torch.float64
    assert torch.equal(codes, torch.round(codes))
    assert torch.equal(torch.round(codes), torch.round(fc.bias.double() / grid))


def test_affine_from_batch_norm_equals_batch_norm_in_eval():
    bn = nn.BatchNorm2d(4).eval()
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.uniform_(0.5, 2)
    bn.bias.data.normal_()
    affine = _float_mode(qat.QuantAffine.from_batch_norm(bn, get_qconfig()))
    x = torch.randn(2, 4, 3, 3)
    torch.testing.assert_close(affine(x), bn(x))


def test_clamp_family_bounds():
    x = torch.linspace(-10, 10, 41)
    assert torch.equal(_float_mode(qat.ReLU(get_qconfig()))(x), F.relu(x))
    assert torch.equal(_float_mode(qat.ReLU6(get_qconfig()))(x), F.relu6(x))
    assert torch.equal(
        _float_mode(qat.Clamp(get_qconfig(), -2.0, 3.0))(x), x.clamp(-2, 3)
    )


def test_binary_ops_accept_numbers_and_quantize_the_result():
    add = qat.QuantAdd(get_qconfig())
    x = torch.randn(10)
    out = add(1.5, x)
    fq = add.activation_post_process
    expected = torch.fake_quantize_per_tensor_affine(
        1.5 + x, fq.scale, fq.zero_point.int(), -128, 127
    )
    assert torch.equal(out, expected)
    assert torch.equal(_float_mode(qat.QuantSub(get_qconfig()))(1.0, x), 1.0 - x)


def test_exact_binary_ops_compute_in_float64():
    mul = qat.QuantMul(get_qconfig(out_dtype=qint8))
    mul.exact = True
    a = torch.tensor([3.0 * 2**-7, 5.0 * 2**-7])
    out = _float_mode(mul)(a, a)
    assert out.dtype == torch.float32
    assert np.array_equal(out.numpy(), (a.double() * a.double()).float().numpy())


def test_cat_mean_and_sum_reduce_as_torch_does():
    x, y = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    cat = _float_mode(qat.QuantCat(get_qconfig(), dim=1))
    assert torch.equal(cat([x, y]), torch.cat([x, y], 1))
    mean = _float_mode(qat.QuantMean(get_qconfig(), [0, 2], keepdim=True))
    assert mean.dim == (0, 2) and torch.equal(mean(x), x.mean((0, 2), True))
    assert torch.equal(_float_mode(qat.QuantSum(get_qconfig()))(x), x.sum())


def test_pooling_modules_match_torch():
    x = torch.randn(2, 3, 8, 8)
    pools = [
        (
            qat.MaxPool2d.from_float(nn.MaxPool2d(3, 2, 1), get_qconfig()),
            nn.MaxPool2d(3, 2, 1),
        ),
        (qat.AvgPool2d.from_float(nn.AvgPool2d(2), get_qconfig()), nn.AvgPool2d(2)),
        (
            qat.AdaptiveAvgPool2d.from_float(nn.AdaptiveAvgPool2d(1), get_qconfig()),
            nn.AdaptiveAvgPool2d(1),
        ),
    ]
    for q, ref in pools:
        assert torch.equal(_float_mode(q)(x), ref(x))
    with_indices = qat.MaxPool2d(3, 2, 1, return_indices=True, qconfig=get_qconfig())
    (values, indices), (want_v, want_i) = (
        _float_mode(with_indices)(x),
        F.max_pool2d(x, 3, 2, 1, return_indices=True),
    )
    assert torch.equal(values, want_v) and torch.equal(indices, want_i)


def test_quant_stub_with_a_fixed_scale():
    from hbir.quantization import QuantStub

    stub = qat.QuantStub.from_float(QuantStub(scale=1 / 64), get_qconfig())
    out = stub(torch.tensor([0.5, 3.0, -0.0078125]))
    assert stub.activation_post_process.scale.item() == 1 / 64
    assert out.tolist() == [0.5, 127 / 64, 0.0]


def test_exact_inputs_mean_computes_from_the_exact_dequantized_codes():
    # A non-power-of-two input scale: fl32(q * s) is rounded; the exact forward
    # recovers q * s in float64 before reducing (the integer kernel's sum).
    producer = get_qconfig(out_dtype=qint8).activation()
    producer.scale.fill_(0.0265391376)
    producer.enable_observer(False)
    mean = qat.QuantMean(get_qconfig(out_dtype=qint8), [-1], keepdim=True)
    mean.producer_fake_quants = (producer,)
    mean.exact_inputs = True
    _float_mode(mean)
    codes = torch.tensor([[2.0, 19.0, 5.0, 1.0, 1.0, 0.0, 7.0, 31.0]])
    s = producer.scale.double()
    x = (codes.double() * s).float()
    out = mean(x)
    assert out.dtype == torch.float32
    assert torch.equal(out, ((codes.double() * s).mean(-1, keepdim=True)).float())
    assert "exact_inputs=True" in repr(mean)
