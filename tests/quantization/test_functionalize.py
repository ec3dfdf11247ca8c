"""In-place writes in a forward are captured as values (functionalize.py), checked
against the eager float model."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hbir.quantization import PrepareError, prepare
from hbir.quantization.prepare import UnsupportedOpError
from hbir.quantization.tracing import trace


class AddInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x)
        y.add_(self.b(x))  # the result unused: y itself is the sum
        return y


class ReluInPlaceWithAlias(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        z = F.relu(y, inplace=True)
        return y + z  # eager: y was rectified too


class Canvas(nn.Module):
    """A PointPillars-style canvas: zeros made in forward, filled by index."""

    def __init__(self):
        super().__init__()
        self.register_buffer("idx", torch.tensor([0, 5, 9, 14]))

    def forward(self, feats):
        canvas = torch.zeros(3, 16)
        canvas[:, self.idx] = feats.t()
        canvas[0] += 1.0
        return canvas.view(1, 3, 4, 4) * 2.0


class SliceWrites(nn.Module):
    """YOLO-style decode: slices of the head's output rewritten in place, and a
    zero canvas padded by slice assignment (both become concatenations)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)

    def forward(self, x):
        y = self.fc(x).sigmoid()
        y[..., 0:2] = y[..., 0:2] * 2.0 - 0.5
        y[:, 3:] = y[:, 3:] ** 2
        canvas = torch.zeros(x.shape[0] + 2, 8)
        canvas[1:-1, 1:-1] = y
        return canvas


class Positions(nn.Module):
    """A table made in forward from factories only: folded into a constant."""

    def forward(self, x):
        table = torch.ones(4) * 0.5 + torch.zeros(4)
        return x + table


@pytest.mark.parametrize(
    "cls", [AddInPlace, ReluInPlaceWithAlias, Canvas, SliceWrites, Positions]
)
def test_the_traced_graph_computes_what_the_eager_model_computes(cls):
    torch.manual_seed(0)
    model = cls().eval()
    width = 3 if cls is Canvas else 4
    example = torch.randn(4, width)
    gm = trace(model, (example,))
    for seed in range(3):  # a write on one call must not leak into the next
        x = torch.randn(4, width, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)
    written = {"setitem", "__setitem__", "add_", "iadd"}
    assert not any(str(n.target) in written for n in gm.graph.nodes)


def test_slice_writes_become_concatenations_of_slices():
    gm = trace(SliceWrites().eval(), (torch.randn(4, 4),))
    targets = [n.target for n in gm.graph.nodes]
    assert targets.count(torch.cat) == 4  # two for y's slices, two for the canvas
    assert not any(callable(t) and t.__name__ == "index_assign" for t in targets)


def test_factories_left_unwritten_are_graph_constants():
    gm = trace(Positions().eval(), (torch.randn(2, 4),))
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.zeros not in calls and torch.ones not in calls
    assert any(n.op == "get_attr" for n in gm.graph.nodes)


def test_a_constant_canvas_is_never_written(tmp_path):
    gm = trace(Canvas().eval(), (torch.randn(4, 3),))
    before = {k: v.clone() for k, v in gm.named_buffers()}
    gm(torch.randn(4, 3))
    after = dict(gm.named_buffers())
    assert before.keys() == after.keys() and before
    for k in before:
        torch.testing.assert_close(after[k], before[k], rtol=0, atol=0)


@pytest.mark.parametrize(
    "canvas, why",
    [
        ("ones", "not a zero canvas"),
        ("two_indices", "one index tensor among full slices"),
    ],
)
def test_a_quantized_indexed_write_it_cannot_keep_exact_is_located(
    canvas, why, tmp_path
):
    """A write into zeros at one index tensor is PointPillars' scatter (to
    model.hbm: tests/hbm/test_index_ops.py); into ones, or at two index tensors,
    the written values would not keep their grid: refused with the line."""

    class QuantizedCanvas(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.register_buffer("idx", torch.tensor([0, 5, 9, 14]))

        def forward(self, x):
            if canvas == "ones":
                c = torch.ones(3, 16)
                c[:, self.idx] = self.fc(x).t()
            else:
                c = torch.zeros(16, 16)
                c[self.idx, self.idx] = self.fc(x)[:, 0]
            return c

    with pytest.raises(
        UnsupportedOpError, match=r"test_functionalize.py:\d+: +c\["
    ) as e:
        prepare(QuantizedCanvas().eval(), (torch.randn(4, 4),), out_dir=tmp_path)
    assert why in str(e.value)


class CountsCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return x * 2


class WritesThroughView(nn.Module):
    def forward(self, x):
        y = x * 2
        v = y.view(-1)
        y[0] = 0.0
        return v + 1  # eager: v sees the write


@pytest.mark.parametrize(
    "cls, message",
    [
        (CountsCalls, r"writes into the model's buffer 'calls' in place"),
        (WritesThroughView, r"read afterwards through a view"),
    ],
)
def test_writes_that_cannot_be_values_are_refused_with_the_line(tmp_path, cls, message):
    with pytest.raises(PrepareError, match=message) as error:
        prepare(cls().eval(), (torch.randn(2, 4),), out_dir=tmp_path)
    assert "test_functionalize.py:" in str(error.value)
