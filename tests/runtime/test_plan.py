"""runtime/plan.py: prepared execution computes what the op-by-op loop computes.

The fused conv epilogue is checked against an independent int64 reference (the
numpy engine of ``integer_ops`` and ``numerics.requantize``, step by step with
saturation); whole zoo models (qat.bc and quantized.bc) against the op-by-op
loop, bit for bit; and the cache against in-place IR edits.
"""

import numpy as np
import pytest
import torch
import zoo
from xdsl.dialects.builtin import DenseArrayBase, i64
from zoo_stages import calibrated

import hbir
from hbir.quantization import export
from hbir.runtime import integer_ops, numerics, plan
from hbir.runtime.interpreter import run_function

torch.set_num_threads(1)
RNG = np.random.default_rng(3)


def dense(a: np.ndarray) -> str:
    return f"dense<{a.tolist()}>"


def ints(values) -> str:
    return "array<i64: " + ", ".join(str(int(v)) for v in values) + ">"


def conv_chain(w, bias, left, m, s) -> str:
    """conv -> requantize (left shift) -> add bias -> requantize -> ReLU clamp,
    the epilogue convert writes (docs/convert.md)."""
    o, c, kh, kw = w.shape
    tx, ty = f"tensor<1x{c}x6x6xsi8>", f"tensor<1x{o}x6x6xsi8>"
    acc = f"tensor<1x{o}x6x6xsi32>"
    return f"""
func.func @forward(%x: {tx}) -> {ty} {{
  %w = hbir.constant {dense(w)} : tensor<{o}x{c}x{kh}x{kw}xsi8>
  %c = hbir.conv2d %x, %w {{stride = array<i64: 1, 1>, padding = array<i64: 1, 1>,
    dilation = array<i64: 1, 1>}} : ({tx}, tensor<{o}x{c}x{kh}x{kw}xsi8>) -> {acc}
  %s = qnt.requantize %c {{multiplier = array<i64: 1>, shift = array<i64: {-left}>}}
    : {acc} -> {acc}
  %b = hbir.constant {dense(bias.reshape(o, 1, 1))} : tensor<{o}x1x1xsi32>
  %a = hbir.add %s, %b : ({acc}, tensor<{o}x1x1xsi32>) -> {acc}
  %q = qnt.requantize %a {{multiplier = {ints(m)}, shift = {ints(s)}, axis = 1 : i64}}
    : {acc} -> {ty}
  %r = qnt.requantize %q {{multiplier = array<i64: 1073741824>,
    shift = array<i64: 30>, clip = array<i64: 0, 127>}} : {ty} -> {ty}
  func.return %r : {ty}
}}
"""


def chain_reference(x, w, bias, left, m, s):
    """The chain step by step in int64, saturating where each op does."""
    acc = integer_ops.conv2d(x, w, None, (1, 1), (1, 1), (1, 1), 1)  # int64 engine
    acc = numerics.requantize(acc, [1], [-left], 0, -(2**31), 2**31 - 1)
    acc = numerics.saturate(acc + bias.reshape(1, -1, 1, 1), 32)
    q = numerics.requantize(acc, m, s, 0, -128, 127, axis=1)
    return np.clip(q, 0, 127).astype(np.int8)


@pytest.mark.parametrize(
    "left, fused",
    [(6, True), (20, False)],  # 2**20 times the conv bound saturates si32
)
def test_conv_epilogue_equals_the_int64_reference(left, fused):
    w = RNG.integers(-128, 127, (16, 8, 3, 3), endpoint=True).astype(np.int8)
    bias = RNG.integers(-(2**24), 2**24, 16)
    real = RNG.uniform(2.0**-20, 2.0**-12, 16) * 2.0**-left
    real[0] = 2.0 ** -(left + 9)  # a factor with ties
    m, s = numerics.requantize_multipliers(real)
    f = hbir.Module.parse(conv_chain(w, bias, left, m, s))[0]
    xs = [RNG.integers(-128, 127, (1, 8, 6, 6), endpoint=True).astype(np.int8)]
    xs.append(np.full((1, 8, 6, 6), -128, np.int8))  # the largest sums
    for x in xs:
        got = f.feed({"_input_0": x})["_output_0"]
        np.testing.assert_array_equal(got, chain_reference(x, w, bias, left, m, s))
        assert got.dtype == np.int8
    steps = plan.prepared(f.op, "half_even").steps
    assert (len(steps) == 1) == fused  # one fused step, or the chain kept apart


def test_zoo_plans_equal_the_op_by_op_loop(tmp_path):
    """Every zoo model, qat.bc and quantized.bc, half-even and half-up."""
    for name in zoo.NAMES:
        qat, example = calibrated(name, tmp_path / name)
        qat_bc = export(qat, example)
        quantized = hbir.convert(qat_bc, "nash-e")
        inputs = [x.numpy() for x in zoo.batches(name, 1, batch=2, seed=7)[0]]
        for module in (qat_bc, quantized):
            f = module[0]
            for rounding in numerics.ROUNDING_MODES:
                fast = run_function(f.op, inputs, rounding=rounding)
                slow = run_function(
                    f.op, inputs, rounding=rounding, on_op=print_nothing
                )
                for a, b in zip(fast, slow, strict=True):
                    assert a.dtype == b.dtype and a.shape == b.shape, name
                    assert a.tobytes() == b.tobytes(), (name, rounding)


def print_nothing(op, results):
    pass


CONST_FQ = """
func.func @f(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %c = hbir.constant dense<[0.3, -1.26, 5.0]> : tensor<3xf32>
  %q = qnt.const_fake_quant %c {min = array<f64: -1.28>, max = array<f64: 1.27>,
    bits = 8 : i64} : tensor<3xf32>
  %y = hbir.add %x, %q : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %y, %q : tensor<3xf32>, tensor<3xf32>
}
"""


def test_constants_fold_once_and_come_back_as_copies():
    f = hbir.Module.parse(CONST_FQ)["f"]
    x = np.zeros(3, np.float32)
    first = f.feed({"_input_0": x})
    c = np.float32([0.3, -1.26, 5.0])
    expect = numerics.const_fake_quant(c, np.array([-1.28]), np.array([1.27]), 8)
    assert expect[2] == np.float32(1.27)  # saturated
    np.testing.assert_array_equal(first["_output_1"], expect)
    assert [s.op.name for s in plan.prepared(f.op, "half_even").steps] == ["hbir.add"]
    first["_output_1"][:] = 99  # must not change the folded constant
    np.testing.assert_array_equal(f.feed({"_input_0": x})["_output_1"], expect)


def test_on_op_still_reports_every_op():
    f = hbir.Module.parse(CONST_FQ)["f"]
    seen = []
    f.feed({"_input_0": np.zeros(3, np.float32)}, on_op=lambda op, r: seen.append(op))
    assert [op.name for op in seen] == [
        "hbir.constant",
        "qnt.const_fake_quant",
        "hbir.add",
    ]


REQUANT = """
func.func @f(%x: tensor<4xsi32>) -> tensor<4xsi8> {
  %y = qnt.requantize %x {multiplier = array<i64: 1073741824>, shift = array<i64: 31>}
    : tensor<4xsi32> -> tensor<4xsi8>
  func.return %y : tensor<4xsi8>
}
"""


def test_the_plan_is_cached_and_rebuilt_after_an_edit_in_place():
    f = hbir.Module.parse(REQUANT)["f"]
    x = np.array([3, 5, -7, 400], np.int32)
    assert f(x).tolist() == [2, 2, -4, 127]  # x / 2, ties to even
    assert plan.prepared(f.op, "half_even") is plan.prepared(f.op, "half_even")
    requantize = next(iter(f.op.body.block.ops))
    requantize.properties["shift"] = DenseArrayBase.from_list(i64, [32])
    assert f(x).tolist() == [1, 1, -2, 100]  # x / 4 now
