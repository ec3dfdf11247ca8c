"""The fixed-point VALIDATION forward below level 2 (docs/contract.md).

A conv / linear in VALIDATION must give the codes an independent integer pipeline
gives: integer accumulation (Python ints), the bias on the grid ``2**-fine`` of the
accumulator, and one requantization by ``multiplier / 2**shift`` rounded half to even
in exact rationals (``fractions.Fraction``), with the multiplier split of the
float64 factor ``s_x * s_w[c] * 2**-fine * fl32(1/s_y)`` done by the test itself.
The float forward (``float_validation``) is the control: it may differ near ties.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import hbir
from hbir.dialects import qnt
from hbir.quantization import (
    ConsistencyStrategy,
    DeQuantStub,
    FakeQuantState,
    QconfigSetter,
    QuantStub,
    export,
    float_validation,
    get_qconfig,
    prepare,
    qint16,
    set_fake_quantize,
)
from hbir.runtime import numerics, winograd
from hbir.runtime.requantizer import loops


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.dequant = DeQuantStub()

    def forward(self, x):
        y = self.conv(self.quant(x))
        return self.dequant(self.fc(y.flatten(1)))


def _validated(tmp_path):
    torch.manual_seed(0)
    model = Head().eval()
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(2, 3, 6, 6, generator=g) for _ in range(4)]
    qat = prepare(model, (batches[0],), out_dir=tmp_path)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for b in batches:
            qat(b)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat, torch.randn(2, 3, 6, 6, generator=g)


def _split(real: float) -> tuple[int, int]:
    """multiplier in [2**30, 2**31) and shift with multiplier / 2**shift ~= real,
    the multiplier rounded half up from the exact binary value (written here)."""
    exact = Fraction(real)
    shift = 0
    while exact * 2**shift < 2**30:
        shift += 1
    while exact * 2**shift >= 2**31:
        shift -= 1
    m = math.floor(exact * 2**shift + Fraction(1, 2))
    if m == 2**31:
        m, shift = m // 2, shift - 1
    return m, shift


def _round_half_even(v: Fraction) -> int:
    floor = math.floor(v)
    rest = v - floor
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2):
        return floor + 1
    return floor


def _reference_codes(acc, bias, s_x, s_w, s_y, terms, bits=8, x_bits=8, x_shift=0):
    """The output codes of the int64 accumulators ``acc`` (channels in dim 1) with
    a float bias, by the integer pipeline written out in Python ints; ``acc`` sums
    input codes divided by ``2**x_shift``."""
    qmax = 2 ** (bits - 1) - 1
    bound = terms * 2 ** (x_bits - 1 - x_shift) * 2**7
    out = np.zeros(acc.shape, np.int64)
    for c in range(acc.shape[1]):
        acc_scale = (
            Fraction(float(np.float32(s_x))) * Fraction(float(s_w[c])) * 2**x_shift
        )
        lsb = Fraction(float(bias[c])) / acc_scale
        headroom = 30 - math.ceil(math.log2(bound + abs(float(lsb)) + 1))
        fine = max(0, min(16, headroom))
        b = _round_half_even(lsb * 2**fine)
        inv = float(np.float32(1.0) / np.float32(s_y))
        real = float(np.float64(float(acc_scale)) * 2.0**-fine * inv)
        m, shift = _split(real)
        for idx in np.ndindex(*acc[:, c].shape):
            full = (idx[0], c) + idx[1:]
            total = int(acc[full]) * 2**fine + b
            code = _round_half_even(Fraction(total * m, 2**shift))
            out[full] = max(-qmax - 1, min(qmax, code))
    return out


def test_conv_in_validation_gives_the_integer_pipelines_codes(tmp_path):
    qat, x = _validated(tmp_path)
    conv = qat.conv
    s_x = float(conv.input_fake_quants()[0].scale)
    s_w = conv.weight_fake_quant.scale.detach().numpy()
    s_y = float(conv.activation_post_process.scale)
    with torch.no_grad():
        xq = torch.round(qat.quant(x) / s_x).double()
        w = conv.weight_fake_quant(conv.weight)
        wq = torch.round(w / torch.tensor(s_w).reshape(-1, 1, 1, 1)).double()
        acc = torch.nn.functional.conv2d(xq, wq, None, 1, 1).round().long().numpy()
        got = torch.round(conv(qat.quant(x)) / s_y).long().numpy()
    terms = conv.weight[0].numel()
    want = _reference_codes(acc, conv.bias.detach().numpy(), s_x, s_w, s_y, terms)
    assert np.array_equal(got, want)


class Wide(nn.Module):
    """A 3x3 stride-1 conv of 16 channels behind a first conv: the runtime's
    exact Winograd transform takes its sums in VALIDATION."""

    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.stem = nn.Conv2d(3, 16, 1)
        self.conv = nn.Conv2d(16, 16, 3, padding=1)
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.conv(self.stem(self.quant(x))))


def test_a_3x3_conv_in_validation_sums_by_winograd_to_the_same_codes(
    tmp_path, monkeypatch
):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    qat = prepare(Wide().eval(), (torch.randn(1, 3, 9, 7),), out_dir=tmp_path)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for _ in range(3):
            qat(torch.randn(2, 3, 9, 7, generator=g))
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    calls = []
    sums = winograd.sums
    monkeypatch.setattr(winograd, "sums", lambda *a: calls.append(1) or sums(*a))
    conv, x = qat.conv, torch.randn(2, 3, 9, 7, generator=g)
    s_x = float(conv.input_fake_quants()[0].scale)
    s_y = float(conv.activation_post_process.scale)
    for step in range(2):  # the second after a weight update: transformed again
        s_w = conv.weight_fake_quant.scale.detach().numpy()
        with torch.no_grad():
            xin = qat.stem(qat.quant(x))
            xq = torch.round(xin / s_x).double()
            w = conv.weight_fake_quant(conv.weight)
            wq = torch.round(w / torch.tensor(s_w).reshape(-1, 1, 1, 1)).double()
            acc = torch.nn.functional.conv2d(xq, wq, None, 1, 1).round().long()
            got = torch.round(conv(xin) / s_y).long().numpy()
        want = _reference_codes(
            acc.numpy(), conv.bias.detach().numpy(), s_x, s_w, s_y, 16 * 9
        )
        assert np.array_equal(got, want)
        if loops() is not None:  # (HBIR_JIT=0: no compiled transform)
            assert len(calls) == step + 1  # the transform summed them
        with torch.no_grad():
            conv.weight.mul_(-0.75)


def test_float_validation_is_the_float_forward_within_one_code(tmp_path):
    qat, x = _validated(tmp_path)
    s_y = float(qat.conv.activation_post_process.scale)
    with torch.no_grad():
        fixed = qat.conv(qat.quant(x))
        with float_validation():
            floating = qat.conv(qat.quant(x))
            expected = qat.conv.activation_post_process(
                qat.conv._conv_forward(
                    qat.quant(x),
                    qat.conv.weight_fake_quant(qat.conv.weight),
                    qat.conv.bias,
                )
            )
    assert torch.equal(floating, expected)
    assert float((fixed - floating).abs().max()) <= s_y * 1.0001


def test_validation_with_gradients_keeps_the_values_and_passes_gradients(tmp_path):
    qat, x = _validated(tmp_path)
    with torch.no_grad():
        want = qat(x)
    got = qat(x)
    assert torch.equal(got, want)
    got.sum().backward()
    assert qat.conv.weight.grad is not None
    assert float(qat.conv.weight.grad.abs().sum()) > 0


def test_weight_codes_follow_the_weight_version(tmp_path):
    qat, x = _validated(tmp_path)
    with torch.no_grad():
        before = qat(x)
        qat.conv.weight.mul_(0.5)  # an in-place update bumps the tensor's version
        after = qat(x)
    assert not torch.equal(before, after)


class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AvgPool2d(2)
        self.pool2 = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)
        self.fc = nn.Linear(4 * 5 * 5, 5)
        self.dequant = DeQuantStub()

    def forward(self, x):
        y = self.pool2(self.pool(self.conv(self.quant(x))))
        return self.dequant(self.fc(y.flatten(1)))


def _pool_reference(xq, pool: nn.AvgPool2d, s_x, s_y, fine=22, bits=8):
    """An average pool's output codes by the integer pipeline in Python ints: the
    codes on the grid 2**-fine, each window average rounded half to even, one
    requantization by ``s_x * 2**-fine * fl32(1/s_y)``."""
    window = (pool.kernel_size, pool.stride, pool.padding, pool.ceil_mode)
    ones = torch.ones_like(xq)
    with torch.no_grad():
        sums = nn.functional.avg_pool2d(xq, *window, divisor_override=1)
        # The count torch divides by: real elements / (their average of ones).
        real = nn.functional.avg_pool2d(ones, *window, divisor_override=1)
        counts = torch.round(
            real / nn.functional.avg_pool2d(ones, *window, pool.count_include_pad)
        )
    inv = float(np.float32(1.0) / np.float32(s_y))
    m, shift = _split(float(np.float64(np.float32(s_x)) * 2.0**-fine * inv))
    qmax = 2 ** (bits - 1) - 1
    out = np.zeros(sums.shape, np.int64)
    for idx in np.ndindex(*sums.shape):
        avg = _round_half_even(Fraction(int(sums[idx]) * 2**fine, int(counts[idx])))
        code = _round_half_even(Fraction(avg * m, 2**shift))
        out[idx] = max(-qmax - 1, min(qmax, code))
    return out


def _calibrated(model, batches, level, qconfig, tmp_path):
    """``model`` prepared at consistency ``level``, calibrated on ``batches``,
    in VALIDATION."""
    ConsistencyStrategy.set_consistency_level(level)
    try:
        qat = prepare(model, (batches[0],), qconfig, out_dir=tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for b in batches:
            qat(b)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat


@pytest.mark.parametrize("level", [None, 0, 1], ids=["default", "level0", "level1"])
def test_avg_pool_in_validation_is_the_integer_pipeline(level, tmp_path):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(2, 3, 16, 16, generator=g) for _ in range(4)]
    qat = _calibrated(Pools().eval(), batches, level, None, tmp_path)
    # Output grid = input grid: a window average of codes is an exact tie whenever
    # its sum is 2 mod 4, where float32 arithmetic breaks the tie either way (the
    # densenet121 transitions at level 0 hit this).
    for pool in (qat.pool, qat.pool2):
        pool.activation_post_process.scale.copy_(pool.input_fake_quants()[0].scale)
    x = torch.randn(2, 3, 16, 16, generator=g)
    float_mismatches = 0
    with torch.no_grad():
        y = qat.conv(qat.quant(x))
        for pool in (qat.pool, qat.pool2):
            s_x = float(pool.input_fake_quants()[0].scale)
            s_y = float(pool.activation_post_process.scale)
            z = pool(y)
            want = _pool_reference(torch.round(y / s_x).double(), pool, s_x, s_y)
            assert np.array_equal(torch.round(z / s_y).long().numpy(), want)
            with float_validation():
                floating = torch.round(pool(y) / s_y).long().numpy()
            float_mismatches += int((floating != want).sum())
            y = z
        out = qat(x).numpy()
    if level != 1:  # the control: the float forward misses ties (59 + 9 here)
        assert float_mismatches > 0
    qat_bc = export(qat, (x,))
    marked = [
        op for op in qat_bc["forward"].op.body.block.ops if op.name == "hbir.avg_pool2d"
    ]
    assert len(marked) == 2 and all(qnt.EXACT in op.attributes for op in marked)
    quantized = hbir.convert(qat_bc, "nash-e")
    np.testing.assert_array_equal(qat_bc["forward"](x.numpy()), out)
    np.testing.assert_array_equal(quantized["forward"](x.numpy()), out)


class WideConv(nn.Module):
    """An int16-input 3x3 conv over 64 channels: 576 terms, beyond the 511 whose
    int16 x int8 sums always fit a 32-bit accumulator."""

    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(64, 3, 3, padding=1)
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.conv(self.quant(x)))


def _round_shift(q: int, n: int) -> int:
    return _round_half_even(Fraction(q, 2**n))


def test_operand_shifts_keep_every_accumulator_within_32_bits():
    assert numerics.gemm_operand_shifts(511, 16, 8) == (0, 0)
    assert numerics.gemm_operand_shifts(512, 16, 8) == (1, 0)  # 512 * 2**22 = 2**31
    assert numerics.gemm_operand_shifts(4608, 16, 8) == (4, 0)  # 3x3x512
    assert numerics.gemm_operand_shifts(576, 8, 16) == (0, 1)  # the wider operand
    assert numerics.gemm_operand_shifts(131071, 8, 8) == (0, 0)
    assert numerics.gemm_operand_shifts(131072, 8, 8) == (1, 0)
    for terms, xb, wb in [(576, 16, 8), (4608, 16, 8), (10**6, 16, 8)]:
        xs, ws = numerics.gemm_operand_shifts(terms, xb, wb)
        worst = terms * 2 ** (xb - 1 - xs) * 2 ** (wb - 1 - ws)
        assert worst <= 2**31 - 1 < 2 * worst
    with pytest.raises(ValueError, match="cannot fit"):
        numerics.gemm_operand_shifts(2**40, 16, 8)


@pytest.mark.parametrize("level", [None, 2], ids=["default", "level2"])
def test_int16_conv_over_a_long_reduction_never_saturates(level, tmp_path):
    """The accumulator limit reached: every input code at its maximum and every
    weight code at 127 sums to 576 * 32767 * 127 > 2**31 exactly. Convert shifts
    the int16 input right by one bit (``gemm_operand_shifts``); VALIDATION, qat.bc
    and quantized.bc all compute that pipeline, which a Python-int reference
    confirms, and no accumulator saturates."""
    torch.manual_seed(0)
    model = WideConv().eval()
    with torch.no_grad():
        # 127 codes of 2**-14 (the power-of-two scale of level 2): code 127 at
        # every level.
        model.conv.weight.fill_(127 / 2**14)
        model.conv.weight[1, ::2] *= -1  # channel 1: half the terms cancel
        model.conv.weight[2].copy_(torch.randn(64, 3, 3) * 0.01)
    g = torch.Generator().manual_seed(1)
    extreme = torch.full((1, 64, 6, 6), 4.0)
    batches = [extreme, -extreme, torch.randn(1, 64, 6, 6, generator=g)]
    setter = QconfigSetter(get_qconfig(), module_name={"quant": qint16})
    qat = _calibrated(model, batches, level, setter, tmp_path)
    conv = qat.conv
    s_x = float(conv.input_fake_quants()[0].scale)
    s_w = conv.weight_fake_quant.scale.detach().numpy()
    s_y = float(conv.activation_post_process.scale)
    # 3x the calibrated maximum: every input code clips to 32767.
    x = torch.cat([3 * extreme, torch.randn(1, 64, 6, 6, generator=g) * 2])
    with torch.no_grad():
        xq = torch.round(qat.quant(x) / s_x).long()
        wq = torch.round(
            conv.weight_fake_quant(conv.weight) / torch.tensor(s_w).reshape(-1, 1, 1, 1)
        ).long()
        got = torch.round(conv(qat.quant(x)) / s_y).long().numpy()
        out = qat(x).numpy()
    assert int(xq.max()) == 32767 and int(wq[0].min()) == 127
    exact = F.conv2d(xq.double(), wq.double(), None, 1, 1)
    assert float(exact.max()) > 2**31 - 1  # the unshifted sum overflows si32
    shifted = xq.apply_(lambda q: _round_shift(q, 1))
    acc = F.conv2d(shifted.double(), wq.double(), None, 1, 1).round().long().numpy()
    assert np.abs(acc).max() <= 2**31 - 1
    bias = conv._exact_bias() if level == 2 else conv.bias
    want = _reference_codes(
        acc, bias.detach().numpy(), s_x, s_w, s_y, 576, x_bits=16, x_shift=1
    )
    assert np.array_equal(got, want)
    qat_bc = export(qat, (x,))
    quantized = hbir.convert(qat_bc, "nash-e")
    shifts = [
        op
        for op in quantized["forward"].op.body.block.ops
        if op.name == "qnt.requantize" and list(op.shift.get_values()) == [1]
    ]
    assert len(shifts) == 1  # the input, before the conv
    np.testing.assert_array_equal(qat_bc["forward"](x.numpy()), out)
    np.testing.assert_array_equal(quantized["forward"](x.numpy()), out)
