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

import hbir
from hbir.dialects import qnt
from hbir.quantization import (
    ConsistencyStrategy,
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    export,
    float_validation,
    prepare,
    set_fake_quantize,
)


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


def _reference_codes(acc, bias, s_x, s_w, s_y, terms, bits=8):
    """The output codes of the int64 accumulators ``acc`` (channels in dim 1) with
    a float bias, by the integer pipeline written out in Python ints."""
    qmax = 2 ** (bits - 1) - 1
    bound = terms * 2**7 * 2**7
    out = np.zeros(acc.shape, np.int64)
    for c in range(acc.shape[1]):
        acc_scale = Fraction(float(np.float32(s_x))) * Fraction(float(s_w[c]))
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


@pytest.mark.parametrize("level", [None, 0, 1], ids=["default", "level0", "level1"])
def test_avg_pool_in_validation_is_the_integer_pipeline(level, tmp_path):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(2, 3, 16, 16, generator=g) for _ in range(4)]
    ConsistencyStrategy.set_consistency_level(level)
    try:
        qat = prepare(Pools().eval(), (batches[0],), out_dir=tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for b in batches:
            qat(b)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
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
