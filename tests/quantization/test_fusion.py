"""Conv+bn(+relu) folding and the patterns left unfused, with their reasons."""

import torch
import torch.nn.functional as F
from torch import nn

from hbir.quantization.fusion import fuse
from hbir.quantization.tracing import trace


def _fused(model):
    gm = trace(model.eval(), (torch.randn(2, 2, 5, 5),))
    return gm, fuse(gm)


def _modules(gm):
    return [
        type(gm.get_submodule(n.target)).__name__
        for n in gm.graph.nodes
        if n.op == "call_module"
    ]


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = F.hardtanh(self.bn(self.conv(x)), 0.0, 6.0)
        return F.relu(self.fc(y.mean((2, 3))))


def test_conv_bn_relu6_and_linear_relu_fuse():
    model = Chain()
    model.bn.running_mean.normal_()
    model.bn.running_var.uniform_(0.5, 2)
    gm, unfused = _fused(model)
    assert _modules(gm) == ["Conv2d", "Linear"]
    conv_node = next(n for n in gm.graph.nodes if n.target == "conv")
    fc_node = next(n for n in gm.graph.nodes if n.target == "fc")
    assert conv_node.meta["hbir_fused_relu"] == "relu6"
    assert fc_node.meta["hbir_fused_relu"] == "relu"
    assert unfused == []
    x = torch.randn(2, 2, 5, 5)
    conv_out = F.relu6(gm.conv(x))  # the folded conv plus the fused activation
    torch.testing.assert_close(conv_out, F.hardtanh(model.bn(model.conv(x)), 0.0, 6.0))


class Branches(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)
        self.bn = nn.BatchNorm2d(2)
        self.lone_bn = nn.BatchNorm2d(2)
        self.shared = nn.Conv2d(2, 2, 1)
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.conv(x)
        z = self.bn(y) + y  # the conv output is also used elsewhere
        w = self.relu(self.shared(self.shared(z)))  # a conv called twice
        return self.lone_bn(w)


def test_unfusable_patterns_are_reported_with_reasons():
    gm, unfused = _fused(Branches())
    reasons = {u.names: u.reason for u in unfused}
    assert reasons[("conv", "bn")] == "the output of 'conv' is also used elsewhere"
    assert reasons[("shared", "relu")] == "'shared' is called 2 times"
    assert (
        reasons[("lone_bn",)] == "not after a conv: quantized as a per-channel affine"
    )
    assert _modules(gm).count("BatchNorm2d") == 2 and "ReLU" in _modules(gm)


class ConvBNAct(nn.Module):
    """timm's ``BatchNormAct2d`` form: a functional batch norm on module attributes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        bn = self.bn
        x = F.batch_norm(
            self.conv(x),
            bn.running_mean,
            bn.running_var,
            bn.weight,
            bn.bias,
            False,
            0.1,
            bn.eps,
        )
        return F.relu(x)


def test_a_functional_batch_norm_after_a_conv_folds_like_the_module():
    model = ConvBNAct().eval()
    model.bn.running_mean.normal_()
    model.bn.running_var.uniform_(0.5, 2)
    model.bn.weight.data.uniform_(0.5, 1.5)
    gm, unfused = _fused(model)
    assert F.batch_norm not in [n.target for n in gm.graph.nodes]
    assert not [n for n in gm.graph.nodes if n.op == "get_attr"]
    assert unfused == []
    conv = next(n for n in gm.graph.nodes if n.target == "conv")
    assert conv.meta["hbir_fused_relu"] == "relu"
    gm.recompile()
    x = torch.randn(2, 2, 5, 5)
    torch.testing.assert_close(F.relu(gm(x)), model(x))  # plus the fused relu


class FrozenBN(nn.Module):
    """detectron2's FrozenBatchNorm2d form: all four tensors are buffers."""

    def __init__(self, n):
        super().__init__()
        for name, value in (("weight", 1.5), ("bias", 0.1), ("mean", 0.2)):
            self.register_buffer(name, torch.full((n,), value))
        self.register_buffer("var", torch.full((n,), 2.0))

    def forward(self, x):
        return F.batch_norm(x, self.mean, self.var, self.weight, self.bias, False)


def test_a_frozen_batch_norm_of_buffers_folds():
    model = nn.Sequential(nn.Conv2d(2, 4, 3), FrozenBN(4)).eval()
    gm, unfused = _fused(model)
    assert unfused == [] and F.batch_norm not in [n.target for n in gm.graph.nodes]
    gm.recompile()
    x = torch.randn(2, 2, 5, 5)
    torch.testing.assert_close(gm(x), model(x))
