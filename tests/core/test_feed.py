"""``Function.feed`` on every kind of wrong input: one ``FeedError`` naming the fix
(issue 16 item 3, issue 17 item 4)."""

import numpy as np
import pytest
import torch

import hbir
from hbir.module import FeedError

IDENTITY = """
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  func.return %x : tensor<2xf32>
}
"""


@pytest.fixture
def identity():
    return hbir.Module.parse(IDENTITY)["f"]


def test_rank0_input_runs():
    m = hbir.Module.parse(
        "func.func @f(%x: tensor<f32>) -> tensor<f32> {\n"
        "  %y = hbir.relu %x : tensor<f32>\n"
        "  func.return %y : tensor<f32>\n}"
    )
    for x in (np.float32(-2.0), np.array(3.0, np.float32), torch.tensor(5.0)):
        y = m["f"].feed({"_input_0": x})["_output_0"]
        assert y.shape == () and y == max(float(x), 0.0)


@pytest.mark.parametrize(
    "value", [[np.ones(2, np.float32)], 5, torch.ones(2), np.ones(2, np.float32)]
)
def test_feed_without_a_dict_names_the_dict_form(identity, value):
    with pytest.raises(FeedError) as info:
        identity.feed(value)  # was torch's Tensor.__contains__ error, or TypeError
    message = str(info.value)
    assert "feed takes a dict of named inputs, {'_input_0': x0}" in message
    assert "call the function: f(x)" in message


def test_wrong_output_name_lists_the_outputs(identity):
    out = identity.feed({"_input_0": np.ones(2, np.float32)})
    with pytest.raises(
        FeedError,
        match=r"no output named '_output_1'; the outputs "
        r"are \['_output_0'\]",
    ):
        out["_output_1"]  # was a bare KeyError
    with pytest.raises(KeyError):  # still a KeyError for code that catches one
        out["y"]


def test_bfloat16_tensor_for_a_float32_input(identity):
    x = torch.ones(2, dtype=torch.bfloat16)
    with pytest.raises(
        FeedError,
        match=r"torch.bfloat16, expected float32 .*"
        r"\.to\(torch.float32\)",
    ):
        identity.feed({"_input_0": x})  # was TypeError from .numpy()


def test_bfloat16_tensor_for_a_bf16_input():
    m = hbir.Module.parse(
        "func.func @f(%x: tensor<2xbf16>) -> tensor<2xbf16> {\n"
        "  %y = hbir.neg %x : tensor<2xbf16>\n  func.return %y : tensor<2xbf16>\n}"
    )
    x = torch.tensor([1.5, -3.0], dtype=torch.bfloat16)
    y = m["f"].feed({"_input_0": x})["_output_0"]
    assert y.tolist() == (-x).float().tolist()


def test_meta_tensor(identity):
    with pytest.raises(FeedError, match="a meta tensor holds no data"):
        identity.feed({"_input_0": torch.ones(2, device="meta")})


def test_ragged_list(identity):
    with pytest.raises(FeedError, match="input '_input_0': not an array"):
        identity.feed({"_input_0": [[1.0], [1.0, 2.0]]})


@pytest.mark.parametrize("make", [np.ones, torch.ones])
def test_identity_function_returns_a_copy(identity, make):
    x = make(2, dtype=np.float32 if make is np.ones else torch.float32)
    y = identity.feed({"_input_0": x})["_output_0"]
    assert not np.shares_memory(y, np.asarray(x))
    y[0] = 7.0
    assert float(x[0]) == 1.0  # the caller's array is untouched


def test_interpreter_errors_are_hbir_errors():
    from hbir.runtime.interpreter import InterpreterError

    assert issubclass(InterpreterError, hbir.HbirError)


# ---- batches (issue 15): a batch-1 function fed N samples at once

BATCH1 = """
func.func @f(%x: tensor<1x3xf32>, %y: tensor<1x3xf32>) -> tensor<1x3xf32> {
  %s = hbir.mul %x, %y : (tensor<1x3xf32>, tensor<1x3xf32>) -> tensor<1x3xf32>
  func.return %s : tensor<1x3xf32>
}
"""


def test_a_batch_runs_sample_by_sample_and_stacks_the_outputs():
    f = hbir.Module.parse(BATCH1)["f"]
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    y = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    out = f.feed({"_input_0": x, "_input_1": torch.from_numpy(y)})["_output_0"]
    assert out.shape == (4, 3)
    np.testing.assert_array_equal(out, x * y)


def test_a_batch_must_batch_every_input_alike():
    f = hbir.Module.parse(BATCH1)["f"]
    x = np.ones((4, 3), np.float32)
    with pytest.raises(FeedError, match="every input batched the same way"):
        f.feed({"_input_0": x, "_input_1": np.ones((1, 3), np.float32)})
    with pytest.raises(FeedError, match="every input batched the same way"):
        f.feed({"_input_0": x, "_input_1": np.ones((2, 3), np.float32)})


def test_a_wrong_shape_names_the_batch_form():
    f = hbir.Module.parse(BATCH1)["f"]
    with pytest.raises(
        FeedError, match=r"expected \(1, 3\) \(or a batch: \('N', 3\)\)"
    ):
        f.feed({"_input_0": np.ones((4, 2), np.float32), "_input_1": np.ones((1, 3))})


def test_a_batch_needs_batch_1_outputs():
    f = hbir.Module.parse(
        "func.func @f(%x: tensor<1x3xf32>) -> tensor<3xf32> {\n"
        "  %r = hbir.reshape %x : tensor<1x3xf32> -> tensor<3xf32>\n"
        "  func.return %r : tensor<3xf32>\n}"
    )["f"]
    with pytest.raises(FeedError, match="output '_output_0' has shape \\(3,\\)"):
        f.feed({"_input_0": np.ones((2, 3), np.float32)})


def test_run_dataset_streams_items_of_every_form():
    m = hbir.Module.parse(BATCH1)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    items = [
        {"_input_0": x[:1], "_input_1": x[:1]},
        (x, x),  # a batch of 2, in input order
    ]
    outs = list(hbir.run_dataset(m, items, progress=False))
    np.testing.assert_array_equal(outs[0]["_output_0"], x[:1] ** 2)
    np.testing.assert_array_equal(outs[1]["_output_0"], x**2)


def test_run_dataset_is_lazy_and_shows_progress(capsys):
    f = hbir.Module.parse(IDENTITY)["f"]

    def loader():
        yield np.ones(2, np.float32)
        raise RuntimeError("the loader broke after one item")

    results = hbir.run_dataset(f, loader(), progress=True)
    first = next(results)  # computed before the loader is read again
    np.testing.assert_array_equal(first["_output_0"], np.ones(2, np.float32))
    with pytest.raises(RuntimeError, match="broke after one item"):
        next(results)
    assert "@f" in capsys.readouterr().err  # the tqdm bar


def test_run_dataset_names_a_wrong_item():
    f = hbir.Module.parse(BATCH1)["f"]
    one = np.ones((1, 3), np.float32)
    with pytest.raises(FeedError, match="run_dataset item 0: one array for a function"):
        next(hbir.run_dataset(f, [one], progress=False))
    with pytest.raises(FeedError, match="item 0: has 1 arrays, the function takes 2"):
        next(hbir.run_dataset(f, [(one,)], progress=False))


# ---- the outputs' kind (issue 30 item 3): tensors in, tensors out


def test_outputs_take_the_inputs_kind():
    f = hbir.Module.parse(BATCH1)["f"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), -2, np.float32)
    as_numpy = f.feed({"_input_0": x, "_input_1": y})["_output_0"]
    assert type(as_numpy) is np.ndarray
    for a, b in ((torch.from_numpy(x), y), (x, torch.from_numpy(y))):
        out = f.feed({"_input_0": a, "_input_1": b})["_output_0"]
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
        torch.testing.assert_close(out, torch.from_numpy(x * y), rtol=0, atol=0)
    assert isinstance(f(torch.from_numpy(x[:1]), torch.from_numpy(y[:1])), torch.Tensor)
    assert type(f(x[:1], y[:1])) is np.ndarray


def test_a_bf16_output_comes_back_as_a_bf16_tensor():
    m = hbir.Module.parse(
        "func.func @f(%x: tensor<2xbf16>) -> tensor<2xbf16> {\n"
        "  %y = hbir.neg %x : tensor<2xbf16>\n  func.return %y : tensor<2xbf16>\n}"
    )
    x = torch.tensor([1.5, -3.0], dtype=torch.bfloat16)
    y = m["f"].feed({"_input_0": x})["_output_0"]
    assert y.dtype == torch.bfloat16 and torch.equal(y, -x)


def test_a_constant_output_is_a_writable_tensor_of_its_own():
    m = hbir.Module.parse(
        "func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %c = hbir.constant dense<[1.0, 2.0]> : tensor<2xf32>\n"
        "  func.return %c : tensor<2xf32>\n}"
    )
    y = m["f"].feed({"_input_0": torch.zeros(2)})["_output_0"]
    y[0] = 5.0  # no warning, no error: not the constant's bytes
    again = m["f"].feed({"_input_0": torch.zeros(2)})["_output_0"]
    assert again.tolist() == [1.0, 2.0]


def test_run_dataset_gives_each_item_its_kind():
    m = hbir.Module.parse(BATCH1)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    items = [(x, x), (torch.from_numpy(x), torch.from_numpy(x))]
    outs = [o["_output_0"] for o in hbir.run_dataset(m, items, progress=False)]
    assert type(outs[0]) is np.ndarray and isinstance(outs[1], torch.Tensor)
    np.testing.assert_array_equal(outs[1].numpy(), x**2)
