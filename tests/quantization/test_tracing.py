"""Tracing helpers: user source lines and positions, recorded values."""

import copy
import os
from pathlib import Path

import pytest
import torch
from torch import nn

from hbir.quantization import QuantStub
from hbir.quantization.tracing import (
    SOURCE_POSITION,
    ConcreteTracer,
    PrepareError,
    record_values,
    set_source_root,
    source_location,
    source_path,
    trace,
    user_frame,
    value_of,
)

TORCH_FILE = torch.__file__
ROOT = Path(__file__).resolve().parents[2]  # the project root (pyproject.toml)


def test_user_frame_skips_torch_and_hbir_frames():
    stack = (
        'File "/home/me/model.py", line 10, in forward\n    y = self.block(x)\n'
        f'  File "{TORCH_FILE}", line 1, in _call_impl\n    return forward_call()\n'
        'File "/home/me/blocks.py", line 42, in forward\n    return torch.erf(x)\n'
        f'  File "{TORCH_FILE}", line 2, in create_proxy\n    node = create_node()\n'
    )
    assert user_frame(stack) == "/home/me/blocks.py:42: return torch.erf(x)"
    assert user_frame(None) is None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        y = self.fc(self.quant(x))
        return y, y.shape[0]


def test_stubs_stay_leaves_and_values_are_recorded():
    gm = trace(Net(), (torch.randn(2, 3),))
    record_values(gm, (torch.randn(2, 3),))
    nodes = {n.name: n for n in gm.graph.nodes}
    assert nodes["quant"].op == "call_module"
    assert value_of(nodes["fc"]).is_float_tensor and value_of(nodes["fc"]).shape == (
        2,
        3,
    )
    assert not value_of(nodes["getitem"]).is_tensor
    assert "y = self.fc(self.quant(x))" in user_frame(nodes["fc"].stack_trace)


@torch.fx.wrap
def _pad_to_multiple(x, multiple: int):
    """A helper torch.fx cannot see into symbolically (as timm's are)."""
    pad = (multiple - x.shape[-1] % multiple) % multiple
    if pad:  # shape-dependent control flow
        x = torch.nn.functional.pad(x, (0, pad))
    return x


class ShapeBranches(nn.Module):
    def forward(self, x):
        if x.shape[-1] != x.shape[-2]:
            x = x.transpose(-1, -2)
        return _pad_to_multiple(x, 4) * x.size(0)


def test_shape_dependent_code_and_wrapped_helpers_trace_on_the_example():
    x = torch.randn(2, 3, 5, 6)
    gm = trace(ShapeBranches(), (x,))
    targets = [n.target for n in gm.graph.nodes if n.op != "placeholder"]
    assert _pad_to_multiple not in targets  # traced into, not an opaque call
    assert torch.nn.functional.pad in targets and "transpose" in targets
    torch.testing.assert_close(gm(x), ShapeBranches()(x))
    # sizes stay graph values: another batch size runs the same graph
    y = torch.randn(3, 3, 5, 6)
    torch.testing.assert_close(gm(y), ShapeBranches()(y))


class MyBN(nn.BatchNorm2d):
    pass


class MyLinear(nn.Linear):
    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight, self.bias) * 2


def test_subclasses_keep_their_base_rule_unless_they_override_forward():
    from hbir.quantization.op_rules import MODULE_RULES, module_rule

    assert module_rule(MyBN(3)) is MODULE_RULES[nn.BatchNorm2d]
    assert module_rule(MyLinear(3, 3)) is None
    model = nn.Sequential(MyBN(3), nn.Flatten(), MyLinear(48, 2)).eval()
    gm = trace(model, (torch.randn(1, 3, 4, 4),))
    ops = [n.op for n in gm.graph.nodes]
    assert ops.count("call_module") == 2  # MyBN is a leaf; MyLinear is traced into
    assert torch.nn.functional.linear in [n.target for n in gm.graph.nodes]


class WSConv(nn.Conv2d):
    """Overrides a helper of forward (weight standardisation), not forward."""

    def _conv_forward(self, input, weight, bias):
        w = (weight - weight.mean((1, 2, 3), keepdim=True)) * 2
        return super()._conv_forward(input, w, bias)


def test_a_subclass_overriding_a_helper_is_not_its_base():
    from hbir.quantization.op_rules import module_rule

    assert module_rule(WSConv(2, 2, 1)) is None


# ---- source locations (what export writes into loc(...))


class Columns(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))  # two calls on one line


def _line_of(code: str) -> tuple[int, str]:
    lines = open(__file__).read().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if code in line)
    return number, lines[number - 1]


def test_source_location_has_the_real_column_and_a_relative_path():
    gm = trace(Columns(), (torch.randn(2, 3),))
    nodes = {n.name: n for n in gm.graph.nodes}
    line, text = _line_of("return torch.sigmoid(self.fc(x))  # two calls")
    here = os.path.relpath(__file__, ROOT).replace(os.sep, "/")
    # Columns count from 1, as MLIR's do.
    assert source_location(nodes["fc"]) == (here, line, text.index("self.fc") + 1)
    assert source_location(nodes["sigmoid"]) == (
        here,
        line,
        text.index("torch.sigmoid") + 1,
    )
    assert source_location(nodes["x"]) is None  # a placeholder has no user code
    # Without the recorded position (a graph traced by plain torch.fx): the stack
    # trace's line, column unknown (0).
    del nodes["fc"].meta[SOURCE_POSITION]
    assert source_location(nodes["fc"]) == (here, line, 0)


def test_source_paths_are_relative_to_the_project_root_or_the_option(tmp_path):
    project = tmp_path / "proj"
    (project / "models").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    script = project / "models" / "net.py"
    assert source_path(str(script)) == "models/net.py"
    try:
        set_source_root(project / "models")
        assert source_path(str(script)) == "net.py"
        set_source_root(tmp_path)
        assert source_path(str(script)) == "proj/models/net.py"
    finally:
        set_source_root(None)
    assert source_path(str(script)) == "models/net.py"


def test_a_library_file_is_relative_to_its_site_packages(tmp_path, monkeypatch):
    site = tmp_path / "venv" / "lib" / "site-packages"
    (site / "lib_x" / "layers").mkdir(parents=True)
    (tmp_path / "venv" / ".git").mkdir()  # a project marker above site-packages
    block = site / "lib_x" / "layers" / "block.py"
    assert source_path(str(block)) == "lib/site-packages/lib_x/layers/block.py"
    monkeypatch.syspath_prepend(str(site))
    assert source_path(str(block)) == "lib_x/layers/block.py"
    try:
        set_source_root(tmp_path)  # the user's choice is for their own files
        assert source_path(str(block)) == "lib_x/layers/block.py"
    finally:
        set_source_root(None)


def test_prepare_keeps_the_source_positions(tmp_path):
    from hbir.quantization import prepare

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = QuantStub()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(self.quant(x))

    qat = prepare(Net(), (torch.randn(2, 3),), out_dir=tmp_path)
    fc = next(n for n in qat.graph.nodes if n.target == "fc")
    line, text = _line_of("return self.fc(self.quant(x))")
    assert source_location(fc)[1:] == (line, text.index("self.fc") + 1)


# ---------------------------------------------------------------- real-model idioms


class BufferExpand(nn.Module):
    """BERT / ConViT: a buffer expanded to traced sizes."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("pos", torch.randn(1, 4, 8))

    def forward(self, x):
        return self.fc(x + self.pos.expand(x.shape[0], -1, -1))


class UnpackQkv(nn.Module):
    """``q, k, v = qkv`` along a dim of 3 (not the batch)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        qkv = self.qkv(x).reshape(x.shape[0], 4, 3, 8).permute(2, 0, 1, 3)
        q, k, v = qkv
        return (q @ k.transpose(-1, -2)).softmax(-1) @ v


class ShiftedWindowMask(nn.Module):
    """torchvision's Swin: a mask built by item assignment on zeros of fixed size."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        mask = torch.zeros((1, 4, 2, 1))
        count = 0
        for h in (slice(0, 2), slice(2, 4)):
            for w in (slice(0, 1), slice(1, 2)):
                mask[:, h, w, :] = count
                count += 1
        return self.fc(x) + mask.reshape(1, 1, 8)


class SharedGroupNorm(nn.Module):
    """torchvision's FCOS head: one GroupNorm applied to two levels."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.down = nn.Conv2d(8, 8, 3, 2, 1)

    def forward(self, x):
        x = x.reshape(x.shape[0], 8, 2, 2).repeat(1, 1, 2, 2)
        a, b = self.gn(self.conv(x)), self.gn(self.conv(self.down(x) * 3))
        return torch.cat([a.flatten(1), b.flatten(1)], 1)


class TensorOfSizes(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        sizes = torch.tensor([x.shape[1], x.shape[2]], dtype=torch.float32)
        return self.fc(x) / sizes.max()


class ModuleMadeInForward(nn.Module):
    """``nn.SiLU()(x)``: a module built inside forward, traced into."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return nn.SiLU()(self.fc(x)) + nn.ReLU()(x)


IDIOMS = [BufferExpand, UnpackQkv, ShiftedWindowMask, SharedGroupNorm, TensorOfSizes]
IDIOMS += [ModuleMadeInForward]


@pytest.mark.parametrize("cls", IDIOMS, ids=lambda c: c.__name__)
def test_real_model_idioms_trace_and_stay_exact_to_quantized_bc(cls, tmp_path):
    import numpy as np
    from zoo_stages import validated

    import hbir
    from hbir.quantization import export

    torch.manual_seed(0)
    model = cls().eval()
    inputs = [torch.randn(2, 4, 8) for _ in range(3)]
    gm = trace(copy.deepcopy(model), (inputs[0],))
    with torch.no_grad():
        torch.testing.assert_close(gm(inputs[1]), model(inputs[1]), rtol=0, atol=0)
    qat = validated(model, inputs, tmp_path)
    qat_bc = export(qat, (inputs[0],))
    quantized = hbir.convert(qat_bc, "nash-e")
    for x in inputs:
        with torch.no_grad():
            want = qat(x).numpy()
        feed = {"_input_0": x.numpy()}
        (got_bc,) = qat_bc["forward"].feed(feed, reference=True).values()
        (got_q,) = quantized["forward"].feed(feed, reference=True).values()
        np.testing.assert_array_equal(got_bc, want)
        np.testing.assert_array_equal(got_q, got_bc)


def test_iterating_over_the_batch_dim_is_still_refused():
    class OverBatch(nn.Module):
        def forward(self, x):
            return torch.stack([row * 2 for row in x])

    with pytest.raises(PrepareError, match="reads its batch size"):
        trace(OverBatch(), (torch.randn(2, 4),))


class _Attributes(nn.Module):
    """Parameters and buffers read in ``forward``: one shared under two names,
    one read twice, a buffer registered while tracing, a plain tensor."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight  # shared: the first name is "a.weight"
        self.scale = nn.Parameter(torch.full((4,), 2.0))
        self.register_buffer("shift", torch.arange(4.0))
        self.plain = torch.ones(4)  # neither: a constant of the graph

    def forward(self, x):
        if not hasattr(self, "late"):
            self.register_buffer("late", torch.full((4,), 3.0))
        y = x @ self.b.weight.t() * self.scale + self.shift
        return y * self.scale + self.late + self.plain


def test_attributes_read_in_forward_are_the_nodes_torch_fx_makes(monkeypatch):
    """The tracer finds a read attribute's name in a table of the root's
    tensors (not by walking every module per read): the graph is the one
    torch.fx's own search makes (a shared parameter under its first name, a
    buffer registered while tracing, a plain tensor as a constant)."""
    x = torch.randn(2, 4)
    want = _Attributes().eval()(x)
    graph = trace(_Attributes().eval(), (x,))  # (registers "late" while tracing)
    targets = [n.target for n in graph.graph.nodes if n.op == "get_attr"]
    assert {"a.weight", "scale", "shift", "plain"} <= set(targets)
    assert targets.count("scale") == 1  # one node per name, read twice
    torch.testing.assert_close(graph(x), want, rtol=0, atol=0)

    def torch_search(self, attr, attr_val, cache):
        if self._computing:
            return attr_val
        return torch.fx.Tracer.getattr(self, attr, attr_val, cache)

    monkeypatch.setattr(ConcreteTracer, "getattr", torch_search)
    reference = trace(_Attributes().eval(), (x,))
    assert graph.code == reference.code
