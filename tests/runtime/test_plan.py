"""runtime/plan.py and quantized.bc's fast feed compute what the op-by-op loop does.

The fused conv epilogue and the rescaled add (which the compiled program of a
converted model fuses: hbir/fast_feed.py) are checked against independent int64
references (the numpy engine of ``integer_ops`` and ``numerics.requantize``, step
by step with saturation); whole zoo models (qat.bc and quantized.bc) against the
op-by-op loop, bit for bit; and the caches against in-place IR edits.
"""

import numpy as np
import pytest
import torch
import zoo
from xdsl.dialects.builtin import DenseArrayBase, StringAttr, i64
from zoo_stages import calibrated

import hbir
from hbir.fast_feed import engine, simulator
from hbir.quantization import export
from hbir.runtime import integer_ops, kernels, numerics, plan
from hbir.runtime.interpreter import run_function

torch.set_num_threads(1)
RNG = np.random.default_rng(3)


def dense(a: np.ndarray) -> str:
    return f"dense<{a.tolist()}>"


def ints(values) -> str:
    return "array<i64: " + ", ".join(str(int(v)) for v in values) + ">"


def conv_chain(w, bias, left, m, s, size=6) -> str:
    """conv -> requantize (left shift) -> add bias -> requantize -> ReLU clamp,
    the epilogue convert writes (docs/convert.md)."""
    o, c, kh, kw = w.shape
    hw = f"{size}x{size}"
    tx, ty = f"tensor<1x{c}x{hw}xsi8>", f"tensor<1x{o}x{hw}xsi8>"
    acc = f"tensor<1x{o}x{hw}xsi32>"
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


def converted(text: str) -> hbir.Module:
    """``text`` as a model convert made (its march recorded): feed runs its
    compiled program on the simulated NPU."""
    m = hbir.Module.parse(text)
    m.module.op.attributes["hbir.march"] = StringAttr("nash-e")
    assert engine(m) == "npu"
    return m


def npu_steps(m: hbir.Module, name: str) -> list:
    """The simulator's prepared instructions ``name`` of ``m``'s first function."""
    sim = simulator(m.module.op, m[0].name)
    return [step for step in sim.steps if step.name == name]


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
    model = converted(conv_chain(w, bias, left, m, s))
    xs = [RNG.integers(-128, 127, (1, 8, 6, 6), endpoint=True).astype(np.int8)]
    xs.append(np.full((1, 8, 6, 6), -128, np.int8))  # the largest sums
    for x in xs:
        got = model[0].feed({"_input_0": x})["_output_0"]
        np.testing.assert_array_equal(got, chain_reference(x, w, bias, left, m, s))
        assert got.dtype == np.int8
    # npu-fuse made it one conv; its epilogue one requantization unless it saturates
    (conv,) = npu_steps(model, "conv")
    assert not npu_steps(model, "rescale") and not npu_steps(model, "eltwise")
    assert ("_fused" in conv.fields) == fused


def test_compile_hands_its_program_to_quantized_bc_s_feed():
    """hbir.compile made the program feed would build: feed runs it without
    compiling again, until the IR changes."""
    w = RNG.integers(-128, 127, (4, 8, 3, 3), endpoint=True).astype(np.int8)
    bias = RNG.integers(-(2**10), 2**10, 4)
    m, s = numerics.requantize_multipliers(RNG.uniform(2.0**-14, 2.0**-10, 4))
    model = hbir.Module.parse(conv_chain(w, bias, 6, m, s))
    model.module.op.attributes["hbir.march"] = StringAttr("nash-e")
    hbm = hbir.compile(model)
    assert simulator(model.module.op, "forward") is hbm["forward"]._sim
    x = RNG.integers(-128, 127, (1, 8, 6, 6), endpoint=True).astype(np.int8)
    got = model[0].feed({"_input_0": x})["_output_0"]
    np.testing.assert_array_equal(got, chain_reference(x, w, bias, 6, m, s))
    hbir.compile(model, opt=0)  # another program: not the feed's
    assert simulator(model.module.op, "forward") is hbm["forward"]._sim
    last = model[0].op.body.block.last_op.operands[0].owner  # the ReLU clamp
    last.properties["clip"] = DenseArrayBase.from_list(i64, [0, 3])
    assert simulator(model.module.op, "forward") is not hbm["forward"]._sim
    got = model[0].feed({"_input_0": x})["_output_0"]
    expected = np.minimum(chain_reference(x, w, bias, 6, m, s), 3)
    np.testing.assert_array_equal(got, expected)


def test_a_large_conv_takes_onednn_and_blocked_float64_and_stays_exact():
    """A conv of 38M multiply-adds (oneDNN's int8 conv) with 64K outputs (the
    certified float64 requantization, block by block), weights whose sums may
    pass 2**24 in one channel (checked on the result)."""
    c = o = 64
    w = RNG.integers(-128, 127, (o, c, 3, 3), endpoint=True).astype(np.int8)
    w[1] = 127  # 128 * 127 * 576 > 2**24: checked per call
    bias = RNG.integers(-(2**20), 2**20, o)
    real = RNG.uniform(2.0**-20, 2.0**-14, o) * 2.0**-6  # no ties in range
    m, s = numerics.requantize_multipliers(real)
    model = converted(conv_chain(w, bias, 6, m, s, size=32))
    for x in (
        RNG.integers(-128, 127, (1, c, 32, 32), endpoint=True).astype(np.int8),
        np.full((1, c, 32, 32), 127, np.int8),  # channel 1 sums past 2**24
    ):
        got = model[0].feed({"_input_0": x})["_output_0"]
        np.testing.assert_array_equal(got, chain_reference(x, w, bias, 6, m, s))
    convs = npu_steps(model, "conv")  # (tiled to the SRAM: one or more)
    assert all(step.fields["_fused"].path == "nearest" for step in convs)
    assert all(isinstance(s.fields["_packed"], kernels.PackedConv) for s in convs)
    if kernels._onednn_exact():  # (a CPU without VNNI: the float32 engine)
        assert any(step.fields["_packed"].onednn for step in convs)  # oneDNN's


RESCALED_ADD = """
func.func @f(%a: tensor<1x4x5x5xsi8>, %b: tensor<1x4x5x5xsi8>) -> tensor<1x4x5x5xsi8> {
  %ra = qnt.requantize %a {multiplier = array<i64: 1272053632>,
    shift = array<i64: 11>} : tensor<1x4x5x5xsi8> -> tensor<1x4x5x5xsi32>
  %rb = qnt.requantize %b {multiplier = array<i64: 1073741824>,
    shift = array<i64: 9>} : tensor<1x4x5x5xsi8> -> tensor<1x4x5x5xsi32>
  %s = hbir.add %ra, %rb : (tensor<1x4x5x5xsi32>, tensor<1x4x5x5xsi32>)
    -> tensor<1x4x5x5xsi32>
  %y = qnt.requantize %s {multiplier = array<i64: 1931095680>,
    shift = array<i64: 52>, clip = array<i64: 0, 127>}
    : tensor<1x4x5x5xsi32> -> tensor<1x4x5x5xsi8>
  func.return %y : tensor<1x4x5x5xsi8>
}
"""


@pytest.mark.parametrize("mode", numerics.ROUNDING_MODES)
def test_a_rescaled_add_is_one_lookup_equal_to_the_int64_steps(mode):
    """A residual add onto a common grid (ResNet's) runs as one 256 x 256 table
    of its three requantizations and the add; every code pair is checked
    against numerics step by step (the second multiplier makes ties)."""
    model = converted(
        RESCALED_ADD.replace(
            "shift = array<i64: ", f'rounding = "{mode}", shift = array<i64: '
        )
    )
    codes = np.arange(-128, 128)
    a, b = (v.reshape(-1).astype(np.int8) for v in np.meshgrid(codes, codes))
    ra = numerics.requantize(a, [1272053632], [11], 0, -(2**31), 2**31 - 1, mode=mode)
    rb = numerics.requantize(b, [1073741824], [9], 0, -(2**31), 2**31 - 1, mode=mode)
    total = numerics.saturate(ra + rb, 32)
    ref = numerics.requantize(total, [1931095680], [52], 0, 0, 127, mode=mode)
    (add,) = npu_steps(model, "eltwise")  # npu-fuse: one op, as a table
    assert "_pair" in add.fields and not npu_steps(model, "rescale")
    # every pair, 100 per call (the last call wraps around to the first pairs)
    pairs_a = np.resize(a, (a.size // 100 + 1) * 100)
    pairs_b = np.resize(b, pairs_a.size)
    expect = np.resize(ref, pairs_a.size)
    for i in range(0, pairs_a.size, 100):
        xa = pairs_a[i : i + 100].reshape(1, 4, 5, 5)
        xb = pairs_b[i : i + 100].reshape(1, 4, 5, 5)
        y = model[0](xa, xb)
        np.testing.assert_array_equal(y.reshape(-1), expect[i : i + 100])
        (z,) = run_function(model[0].op, [xa, xb], rounding=mode)  # the plan too
        np.testing.assert_array_equal(z, y)


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


ADD = """
func.func @f(%x: tensor<2xsi32>, %z: tensor<2xsi32>) -> tensor<2xsi32> {
  %y = hbir.add %x, %x : (tensor<2xsi32>, tensor<2xsi32>) -> tensor<2xsi32>
  func.return %y : tensor<2xsi32>
}
"""


def test_every_kind_of_edit_in_place_builds_a_new_plan():
    """The cache test reads each op's successor, operands, properties and
    attributes, and the block's arguments: each edit below must miss it."""
    f = hbir.Module.parse(ADD)["f"]
    block = f.op.body.block
    add, ret = list(block.ops)
    x, z = np.int32([1, 2]), np.int32([10, 20])

    def fresh(edit) -> plan.Plan:
        before = plan.prepared(f.op, "half_even")
        assert plan.prepared(f.op, "half_even") is before  # unchanged: a hit
        edit()
        after = plan.prepared(f.op, "half_even")
        assert after is not before
        return after

    assert f(x, z).tolist() == [2, 4]
    fresh(lambda: add.operands.__setitem__(1, block.args[1]))  # an operand
    assert f(x, z).tolist() == [11, 22]
    dead = add.clone()
    assert len(fresh(lambda: block.insert_op_before(dead, ret)).steps) == 2
    assert len(fresh(lambda: block.erase_op(dead)).steps) == 1
    first = add.clone()
    fresh(lambda: block.insert_op_before(first, add))  # a new first op
    fresh(lambda: block.erase_op(first))
    fresh(lambda: add.attributes.__setitem__("note", f.op.sym_name))  # attribute
    fresh(lambda: add.attributes.pop("note"))
    fresh(lambda: block.insert_arg(block.args[0].type, 2))  # a block argument
    assert f.op.__dict__["_hbir_plans"]["half_even"][1].args == tuple(block.args)


def test_feed_follows_an_input_edited_in_place():
    """``feed`` caches the signature it checks inputs against: an edit of the
    function's inputs (here a transpose inserted) must show."""
    f = hbir.Module.parse(
        """
func.func @f(%x: tensor<2x3xsi32>) -> tensor<2x3xsi32> {
  %y = hbir.add %x, %x : (tensor<2x3xsi32>, tensor<2x3xsi32>) -> tensor<2x3xsi32>
  func.return %y : tensor<2x3xsi32>
}
"""
    )["f"]
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert f.feed({"_input_0": x})["_output_0"].tolist() == (2 * x).tolist()
    f.inputs[0].insert_transpose([1, 0])
    got = f.feed({"_input_0": np.ascontiguousarray(x.T)})["_output_0"]
    assert got.tolist() == (2 * x).tolist()
    with pytest.raises(hbir.FeedError, match=r"shape \(2, 3\), expected \(3, 2\)"):
        f.feed({"_input_0": x})
