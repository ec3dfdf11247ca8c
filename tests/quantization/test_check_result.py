"""The text artifacts of prepare: model_check_result.txt and fx_graph.txt."""

import pytest
import torch
from torch import nn

from hbir.quantization import DeQuantStub, QconfigSetter, QuantStub, prepare, qint16
from hbir.quantization.check_result import format_table


def test_format_table_is_psql_style():
    text = format_table(["a", "long header"], [[1, "x"], ["wide cell", None]])
    assert text.splitlines() == [
        "+-----------+-------------+",
        "| a         | long header |",
        "+-----------+-------------+",
        "| 1         | x           |",
        "| wide cell | None        |",
        "+-----------+-------------+",
    ]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.Hardswish()
        self.head = nn.Conv2d(4, 2, 1)
        self.dequant = DeQuantStub()
        self.register_buffer("bias_map", torch.ones(1, 2, 1, 1))

    def forward(self, x):
        y = self.conv(self.quant(x))
        y = self.act(self.bn(y) + y)  # conv output used twice: bn cannot fold
        y = self.act(self.head(y)) + self.bias_map
        return self.dequant(y).softmax(dim=1)


def _prepare(tmp_path):
    torch.manual_seed(0)
    setter = QconfigSetter(
        module_name={"head": qint16}, module_type={nn.Linear: qint16}
    )
    with pytest.warns(UserWarning, match=r"module_type\[Linear\] applied to no module"):
        return prepare(Net().eval(), torch.randn(1, 3, 5, 5), setter, out_dir=tmp_path)


def _section(text, title):
    return text.split(title)[1].split("\n\n")[0]


def test_model_check_result_has_every_section(tmp_path):
    qat_model = _prepare(tmp_path)
    text = (tmp_path / "model_check_result.txt").read_text()
    titles = [
        "Consistency level: not set",
        "Fusable modules are listed below:",
        "Each module called times:",
        "Qconfig overrides and the modules they set:",
        "Each layer out qconfig:",
        "Weight qconfig:",
        "input/output dtype statistics:",
        "Generated QuantStubs:",
        "Ops left unquantized (run in float):",
        "Please check if these OPs qconfigs are expected.",
    ]
    positions = [text.index(t) for t in titles]
    assert positions == sorted(positions)

    fusable = _section(text, "Fusable modules are listed below:")
    assert (
        "| conv + bn | Conv2d + BatchNorm2d | the output of 'conv' is also used elsewhere |"
        in fusable
    )
    assert "| act  | Hardswish | 2" in _section(text, "Each module called times:")

    overrides = _section(text, "Qconfig overrides and the modules they set:")
    assert "| module_name['head'] | head" in overrides
    assert "| module_type[Linear] | WARNING: applied to no module |" in overrides

    layers = _section(text, "Each layer out qconfig:")
    names = [line.split("|")[1].strip() for line in layers.splitlines()[4:-1]]
    modules = [
        n.target
        for n in qat_model.graph.nodes
        if n.op == "call_module"
        and hasattr(qat_model.get_submodule(n.target), "activation_post_process")
    ]
    assert names == list(dict.fromkeys(modules))
    head_row = next(line for line in layers.splitlines() if line.startswith("| head "))
    assert [c.strip() for c in head_row.split("|")[2:8]] == [
        "Conv2d",
        "qint8",
        "qint16",
        "-1",
        "MinMaxObserver",
        "module_name['head']",
    ]

    weights = _section(text, "Weight qconfig:")
    assert (
        "| conv        | Conv2d      | qint8        | 0       | PerChannelMinMaxObserver |"
        in weights
    )
    assert "| Conv2d " in _section(text, "input/output dtype statistics:")
    assert "bias_map" in _section(text, "Generated QuantStubs:")
    unquantized = _section(text, "Ops left unquantized (run in float):")
    assert "| softmax | Tensor.softmax |" in unquantized


def test_fx_graph_lists_every_node(tmp_path):
    qat_model = _prepare(tmp_path)
    lines = (tmp_path / "fx_graph.txt").read_text().splitlines()
    assert [c.strip() for c in lines[1].split("|")[1:-1]] == [
        "opcode",
        "name",
        "target",
        "args",
        "kwargs",
    ]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in lines[3:-1]]
    nodes = list(qat_model.graph.nodes)
    assert len(rows) == len(nodes)
    for row, node in zip(rows, nodes, strict=True):
        assert row[0] == node.op and row[1] == node.name
        assert row[3] == str(node.args) and row[4] == str(node.kwargs)
    assert ["call_module", "head", "head"] == next(
        r[:3] for r in rows if r[1] == "head"
    )
