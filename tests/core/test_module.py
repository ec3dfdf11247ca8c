"""The Module / Function API: lookup, signature, feed validation, statistics."""

import numpy as np
import pytest
import torch

import hbir

MODEL = """
func.func @forward(%x: tensor<2x4xf32>, %y: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2xf32>) {
  %s = hbir.add %x, %y : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> loc("net.py":3:9)
  %r = hbir.relu %s : tensor<2x4xf32>
  %m = hbir.reduce_sum %r {dims = array<i64: 1>} : tensor<2x4xf32> -> tensor<2xf32>
  func.return %r, %m : tensor<2x4xf32>, tensor<2xf32>
}

func.func @named(%img: tensor<1x3xf32> {hbir.name = "img"}) -> (tensor<1x3xf32> {hbir.name = "pred"}) {
  %n = hbir.neg %img : tensor<1x3xf32>
  func.return %n : tensor<1x3xf32>
}
"""


@pytest.fixture
def model():
    return hbir.Module.parse(MODEL, "model.mlir")


def test_function_lookup(model):
    assert [f.name for f in model.functions] == ["forward", "named"]
    assert model["forward"].name == "forward"
    assert model[1].name == "named"
    with pytest.raises(
        KeyError, match=r"no function @missing; have \['forward', 'named'\]"
    ):
        model["missing"]


def test_signature(model):
    f = model["forward"]
    assert f.inputs.names == ["_input_0", "_input_1"]
    assert f.outputs.names == ["_output_0", "_output_1"]
    assert f.inputs[0].shape == (2, 4)
    assert f.outputs["_output_1"].shape == (2,)
    assert f.inputs[0].dtype == np.float32
    g = model["named"]
    assert g.inputs.names == ["img"] and g.outputs.names == ["pred"]


def test_feed_matches_numpy(model):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    y = rng.standard_normal((2, 4)).astype(np.float32)
    out = model["forward"].feed({"_input_0": x, "_input_1": torch.from_numpy(y)})
    expected = np.maximum(x + y, 0)
    np.testing.assert_array_equal(out["_output_0"], expected)
    np.testing.assert_allclose(out["_output_1"], expected.sum(1), rtol=1e-6)
    r, m = model["forward"](x, y)
    np.testing.assert_array_equal(r, expected)
    np.testing.assert_array_equal(model["named"](x[:1, :3]), -x[:1, :3])


def test_feed_names_every_problem(model):
    f = model["forward"]
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(hbir.FeedError, match=r"missing inputs \['_input_1'\]"):
        f.feed({"_input_0": x})
    with pytest.raises(hbir.FeedError, match=r"unexpected inputs \['img'\]"):
        f.feed({"_input_0": x, "_input_1": x, "img": x})
    with pytest.raises(
        hbir.FeedError, match=r"'_input_1' has shape \(4, 2\), expected \(2, 4\)"
    ):
        f.feed({"_input_0": x, "_input_1": x.T})
    with pytest.raises(
        hbir.FeedError, match="'_input_0' has dtype float64, expected float32"
    ):
        f.feed({"_input_0": x.astype(np.float64), "_input_1": x})
    with pytest.raises(hbir.FeedError, match="takes 2 inputs"):
        f(x)


def test_get_asm_and_debug_info(model):
    asm = model.module.get_asm()
    assert '%0 = "hbir.add"(%arg0, %arg1)' in asm and "loc(" not in asm
    assert 'loc("net.py":3:9)' in model.module.get_asm(enable_debug_info=True)
    assert model.module.operation.get_asm() == asm
    # The reference's spelling of the debug-info call.
    debug = model.module.operation.get_asm(
        enable_debug_info=True, pretty_debug_info=True
    )
    assert debug == model.module.get_asm(enable_debug_info=True)
    assert "hbir.add %x, %y" in model.module.get_asm(pretty=True)
    assert '"func.return"' in model.module.get_asm(generic=True)


def test_clone_is_independent(model):
    copy = model.clone()
    relu = next(op for op in copy["forward"].op.walk() if op.name == "hbir.relu")
    relu.results[0].replace_all_uses_with(relu.operands[0])
    relu.detach()
    relu.erase()
    assert "hbir.relu" not in copy.module.get_asm()
    assert "hbir.relu" in model.module.get_asm()


def test_statistics(model, capsys):
    stats = hbir.statistics(model)
    assert stats == {
        "forward": {"hbir.add": 1, "hbir.reduce_sum": 1, "hbir.relu": 1},
        "named": {"hbir.neg": 1},
    }
    # Printed as the reference toolchain prints it, per function.
    assert capsys.readouterr().out.splitlines() == [
        "ops encountered in func @forward",
        "\t hbir.add : 1",
        "\t hbir.reduce_sum : 1",
        "\t hbir.relu : 1",
        "ops encountered in func @named",
        "\t hbir.neg : 1",
    ]


def test_module_flags_default_and_read_back():
    m = hbir.Module.parse(
        "builtin.module attributes {hbir.legacy_round = true, "
        'hbir.march = "nash-e", hbir.high_precision_qpp = true, '
        "hbir.fuse_requantize = false} {}"
    )
    assert m._legacy_round and m._high_precision_qpp and not m._fuse_requantize
    assert m.march == "nash-e" and m.rounding == "half_up"
    plain = hbir.Module.parse("builtin.module {}")
    assert not plain._legacy_round and plain._fuse_requantize
    assert plain.rounding == "half_even"
