"""torch.max / torch.min rewritten after tracing to the op each call is."""

import pytest
import torch
from torch import nn

from hbir.quantization import QuantStub, UnsupportedOpError, prepare
from hbir.quantization.tracing import trace


class Extremes(nn.Module):
    def forward(self, x):
        a = torch.max(x, 1)[0]  # values along a dim
        b = x.min(dim=2).values
        c = torch.max(x)  # over everything
        d = torch.min(x, x * 2)  # against a tensor
        v, _ = x.max(1, keepdim=True)  # indices unpacked, never read
        return a.sum() + b.sum() + c + d.sum() + v.sum()


def test_each_call_becomes_the_op_it_is():
    x = torch.randn(2, 3, 4)
    gm = trace(Extremes(), (x,))
    targets = [n.target for n in gm.graph.nodes if n.op != "placeholder"]
    assert torch.max not in targets and torch.min not in targets
    assert "max" not in targets and "min" not in targets
    assert targets.count(torch.amax) == 3 and targets.count(torch.amin) == 1
    assert targets.count(torch.minimum) == 1
    assert torch.equal(gm(x), Extremes()(x))


def test_a_call_whose_indices_are_computed_with_is_refused_at_prepare(tmp_path):
    class ArgMax(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = QuantStub()

        def forward(self, x):
            values, indices = self.quant(x).max(1)
            return values + indices

    # (reading with them, or casting them to values, is fine:
    # tests/hbm/test_index_ops.py)
    with pytest.raises(UnsupportedOpError, match="computes with integer indices"):
        prepare(ArgMax(), (torch.randn(2, 3),), out_dir=tmp_path)
