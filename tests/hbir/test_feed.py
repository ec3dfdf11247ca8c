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
