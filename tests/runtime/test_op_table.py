"""The op table: every layer's view of an op agrees with its one entry.

The end-to-end test takes every torch spelling prepare accepts through prepare,
calibration, pre_export, export, convert and compile: export must emit it
bit-identically to qat.export.pt, convert must bring it to fixed point unless the
table declares its hbir op float, and the model.hbm loaded back from its file must
be bit-identical to quantized.bc, with CPU islands only where a reason is declared.
"""

import operator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo_stages import validated

import hbir
from hbir.compile import lower_to_npu
from hbir.dialects import hbir as hb
from hbir.dialects import npu, qnt
from hbir.passes.fixed_point import ATTR_CPU_REASON, op_device
from hbir.passes.npu_lower import RULES, CompileError
from hbir.quantization import (
    DeQuantStub,
    QuantStub,
    export,
    op_rules,
    pre_export,
)
from hbir.quantization import lut_modules as lut
from hbir.quantization.spellings import resolve
from hbir.runtime import numerics, op_table
from hbir.runtime.interpreter import KERNELS

DIALECT_OPS = {cls.name: cls for d in (hb.HBIR, qnt.QNT) for cls in d.operations}


def test_every_dialect_op_has_one_entry_and_a_kernel():
    assert set(op_table.LOWERING) == set(DIALECT_OPS)
    hbir_kernels = {cls.name for cls in KERNELS if cls.dialect_name() != "npu"}
    assert hbir_kernels == set(DIALECT_OPS)
    # the npu dialect (runtime/npu_kernels.py): every op but the terminator
    npu_ops = {cls for cls in npu.NPU.operations if cls is not npu.YieldOp}
    assert npu_ops == {cls for cls in KERNELS if cls.dialect_name() == "npu"}
    assert set(op_table.LOWERING.values()) <= set(op_table.LOWERINGS)


def test_lut_ops_are_exactly_the_float_unary_ops_and_each_has_a_table():
    float_unary = {
        name for name, cls in DIALECT_OPS.items() if issubclass(cls, hb.FloatUnaryOp)
    }
    assert set(op_table.LUT_TABLES) == float_unary
    assert set(op_table.ops_lowered_as(op_table.LUT)) == float_unary
    tables = {op_table.table_name(name) for name in float_unary}
    tables.add(op_table.table_name("hbir.gelu", "tanh"))
    assert tables == set(numerics.LUT_FUNCTIONS)
    assert set(numerics.DEFAULT_NUM_TABLES) == tables
    assert set(lut.LUT_MODULES) == {e.op for e in op_table.OPS if e.lut}


def test_gemm_set_is_the_table_s():
    names = {cls.name for cls in hb.ops_lowered_as(op_table.GEMM)}
    assert names == {
        "hbir.conv2d",
        "hbir.conv_transpose2d",
        "hbir.linear",
        "hbir.matmul",
    }


def test_prepare_rules_are_exactly_the_table_s_spellings():
    modules, functions, methods = set(), set(), set()
    for entry in op_table.OPS:
        for spelling in entry.torch:
            kind, target = resolve(spelling)
            {"module": modules, "function": functions, "method": methods}[kind].add(
                target
            )
    assert modules == set(op_rules.MODULE_RULES) | set(op_rules.PASSTHROUGH_MODULES)
    assert (
        functions
        == set(op_rules.FUNCTION_RULES)
        | set(op_rules.PASSTHROUGH_FUNCTIONS)
        | set(op_rules.CONDITIONAL_PASSTHROUGH)
        | op_rules.INDEX_FUNCTIONS
    )
    assert (
        methods
        == set(op_rules.METHOD_RULES)
        | op_rules.PASSTHROUGH_METHODS
        | set(op_rules.CONDITIONAL_METHODS)
        | op_rules.INDEX_METHODS
    )


def test_every_dialect_op_is_lowered_to_the_npu_or_placed_on_the_cpu():
    lowered = {cls.name for cls in RULES} | {"hbir.constant"}
    tables = set(op_table.ops_lowered_as(op_table.LUT))  # become hbir.lut in convert
    assert set(DIALECT_OPS) - tables <= lowered | set(op_table.CPU_REASONS)
    declared = {e.hbir for e in op_table.OPS if e.cpu is not None}
    assert not declared & lowered, "an op both lowered and declared CPU"


def test_an_integer_op_with_no_npu_rule_is_a_located_error(monkeypatch):
    text = (
        "func.func @f(%x: tensor<2x4xsi8>) -> tensor<2x8xsi8> {\n"
        "  %y = hbir.concat %x, %x {dim = 1 : i64} : (tensor<2x4xsi8>, "
        "tensor<2x4xsi8>) -> tensor<2x8xsi8>\n"
        "  func.return %y : tensor<2x8xsi8>\n}"
    )
    monkeypatch.delitem(RULES, hb.ConcatOp)
    with pytest.raises(CompileError, match="'hbir.concat' at .* has no npu lowering"):
        lower_to_npu(hbir.Module.parse(text))


def test_unknown_lowering_is_refused():
    with pytest.raises(ValueError, match="unknown lowering 'fast'"):
        op_table.ops_lowered_as("fast")


# ----------------------------------------------------------------- end to end


def _tril(n):
    """A constant mask made inside forward (folded into a graph constant)."""
    return torch.ones(n, n, dtype=torch.bool).tril()


def _const(shape):
    return torch.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape)


def _x4(f):
    """A call on a 1x4x6x6 input."""
    return f, (1, 4, 6, 6)


# spelling -> (call on the quantized input x, input shape). Modules are built per
# call site in ``_Model``.
SAMPLES = {
    "nn.Conv2d": _x4(lambda m, x: m.op(x)),
    "nn.ConvTranspose2d": _x4(lambda m, x: m.op(x)),
    "nn.Linear": (lambda m, x: m.op(x), (2, 4)),
    "F.linear": (lambda m, x: F.linear(x, m.op.weight, m.op.bias), (2, 4)),
    "F.conv2d": _x4(lambda m, x: F.conv2d(x, m.op.weight, m.op.bias, padding=1)),
    "nn.BatchNorm1d": (lambda m, x: m.op(x), (2, 4, 5)),
    "F.batch_norm": _x4(
        lambda m, x: F.batch_norm(
            x, m.op.running_mean, m.op.running_var, m.op.weight, m.op.bias
        )
    ),
    "nn.MultiheadAttention": (lambda m, x: m.op(x, x * 0.5, x)[0], (5, 2, 8)),
    "F.scaled_dot_product_attention": (
        lambda m, x: F.scaled_dot_product_attention(x, x * 0.5, x),
        (1, 2, 5, 8),
    ),
    "operator.matmul": (lambda m, x: operator.matmul(x, x.transpose(1, 2)), (1, 3, 4)),
    "torch.matmul": (lambda m, x: torch.matmul(x, x.transpose(1, 2)), (1, 3, 4)),
    "torch.bmm": (lambda m, x: torch.bmm(x, x.transpose(1, 2)), (1, 3, 4)),
    "Tensor.matmul": (lambda m, x: x.matmul(x.transpose(1, 2)), (1, 3, 4)),
    "operator.add": _x4(lambda m, x: operator.add(x, x * 0.5)),
    "operator.iadd": _x4(lambda m, x: operator.iadd(x * 1.0, x)),
    "torch.add": _x4(lambda m, x: torch.add(x, 0.25)),
    "Tensor.add": _x4(lambda m, x: x.add(x)),
    "Tensor.add_": _x4(lambda m, x: (x * 1.0).add_(x)),
    "operator.sub": _x4(lambda m, x: operator.sub(x, x * 0.5)),
    "operator.isub": _x4(lambda m, x: operator.isub(x * 1.0, x * 0.5)),
    "torch.sub": _x4(lambda m, x: torch.sub(x, 0.25)),
    "Tensor.sub": _x4(lambda m, x: x.sub(x * 0.5)),
    "torch.maximum": _x4(lambda m, x: torch.maximum(x, x * 0.5 - 0.25)),
    "Tensor.maximum": _x4(lambda m, x: x.maximum(torch.sigmoid(x))),
    "torch.minimum": _x4(lambda m, x: torch.minimum(x * 3.0, x.flip(-1))),
    "Tensor.minimum": _x4(lambda m, x: x.minimum(x.mean(-1, keepdim=True))),
    "operator.mul": _x4(lambda m, x: operator.mul(x, 0.5)),
    "operator.imul": _x4(lambda m, x: operator.imul(x * 1.0, x)),
    "torch.mul": _x4(lambda m, x: torch.mul(x, x)),
    "Tensor.mul": _x4(lambda m, x: x.mul(x)),
    "torch.square": _x4(lambda m, x: torch.square(x)),
    "Tensor.square": _x4(lambda m, x: x.square()),
    "nn.BatchNorm2d": _x4(lambda m, x: m.op(x)),
    "operator.truediv": _x4(lambda m, x: operator.truediv(x, 4.0)),
    "torch.div": _x4(lambda m, x: torch.div(x, x * x + 1)),
    "Tensor.div": _x4(lambda m, x: x.div(2.0)),
    "operator.pow": _x4(lambda m, x: operator.pow(x, 2)),
    "torch.pow": _x4(lambda m, x: torch.pow(x * x + 1, 0.5)),
    "Tensor.pow": _x4(lambda m, x: (x * x + 1).pow(-0.5)),
    "operator.neg": _x4(lambda m, x: -x),
    "torch.neg": _x4(lambda m, x: torch.neg(x)),
    "Tensor.neg": _x4(lambda m, x: x.neg()),
    "torch.abs": _x4(lambda m, x: torch.abs(x)),
    "Tensor.abs": _x4(lambda m, x: x.abs()),
    "nn.ReLU": _x4(lambda m, x: m.op(x)),
    "F.relu": _x4(lambda m, x: F.relu(x)),
    "torch.relu": _x4(lambda m, x: torch.relu(x)),
    "Tensor.relu": _x4(lambda m, x: x.relu()),
    "nn.ReLU6": _x4(lambda m, x: m.op(x)),
    "F.relu6": _x4(lambda m, x: F.relu6(x)),
    "nn.Hardtanh": _x4(lambda m, x: m.op(x)),
    "F.hardtanh": _x4(lambda m, x: F.hardtanh(x, -0.5, 0.5)),
    "torch.clamp": _x4(lambda m, x: torch.clamp(x, -0.5, 0.5)),
    "torch.clip": _x4(lambda m, x: torch.clip(x, min=0.0)),
    "Tensor.clamp": _x4(lambda m, x: x.clamp(max=0.5)),
    "Tensor.clip": _x4(lambda m, x: x.clip(-1.0, 1.0)),
    "torch.clamp_min": _x4(lambda m, x: torch.clamp_min(x, -0.5)),
    "Tensor.clamp_min": _x4(lambda m, x: x.clamp_min(0.1)),
    "torch.clamp_max": _x4(lambda m, x: torch.clamp_max(x, 0.5)),
    "Tensor.clamp_max": _x4(lambda m, x: x.clamp_max(-0.1)),
    "nn.Softmax": (lambda m, x: m.op(x), (2, 8)),
    "F.softmax": (lambda m, x: F.softmax(x, -1), (2, 8)),
    "torch.softmax": (lambda m, x: torch.softmax(x, 1), (2, 8)),
    "Tensor.softmax": (lambda m, x: x.softmax(-1), (2, 8)),
    "nn.LayerNorm": (lambda m, x: m.op(x), (2, 3, 8)),
    "nn.GroupNorm": _x4(lambda m, x: m.op(x)),
    "F.group_norm": _x4(lambda m, x: F.group_norm(x, 1, m.op.weight, m.op.bias)),
    "F.normalize": _x4(lambda m, x: F.normalize(x, dim=1)),
    "nn.PReLU": _x4(lambda m, x: m.op(x)),
    "torch.cumsum": _x4(lambda m, x: torch.cumsum(x, 1)),
    "torch.where": _x4(lambda m, x: torch.where(_tril(6), x, x.sigmoid())),
    "Tensor.where": _x4(lambda m, x: x.where(_tril(6), 0.0)),
    "Tensor.masked_fill": _x4(lambda m, x: x.masked_fill(_tril(6).logical_not(), 0)),
    "torch.masked_fill": _x4(lambda m, x: torch.masked_fill(x, _tril(6), 0.0)),
    "Tensor.cumsum": _x4(lambda m, x: x.cumsum(-1)),
    "nn.Conv1d": (lambda m, x: m.op(x), (2, 4, 9)),
    "F.conv1d": (lambda m, x: F.conv1d(x, m.op.weight, m.op.bias, 2, 1), (2, 4, 9)),
    "nn.ConvTranspose1d": (lambda m, x: m.op(x), (2, 4, 5)),
    "nn.MaxPool1d": (lambda m, x: m.op(x), (2, 4, 9)),
    "F.max_pool1d": (lambda m, x: F.max_pool1d(x, 2), (2, 4, 9)),
    "F._max_pool1d": (lambda m, x: F._max_pool1d(x, 3, 1, 1), (2, 4, 9)),
    "nn.AvgPool1d": (lambda m, x: m.op(x), (2, 4, 9)),
    "F.avg_pool1d": (lambda m, x: F.avg_pool1d(x, 3, 2, 1), (2, 4, 9)),
    "nn.AdaptiveAvgPool1d": (lambda m, x: m.op(x), (2, 4, 9)),
    "F.adaptive_avg_pool1d": (lambda m, x: F.adaptive_avg_pool1d(x, 1), (2, 4, 9)),
    "nn.LSTM": (lambda m, x: m.op(x)[0], (2, 3, 6)),
    "nn.GRU": (lambda m, x: m.op(x)[1], (3, 2, 6)),
    "nn.RNN": (lambda m, x: m.op(x)[0], (3, 2, 6)),
    "nn.Conv3d": (lambda m, x: m.op(x), (2, 4, 5, 6, 6)),
    "F.conv3d": (
        lambda m, x: F.conv3d(x, m.op.weight, None, stride=(2, 1, 1), padding=1),
        (1, 4, 5, 4, 4),
    ),
    "F.prelu": _x4(lambda m, x: F.prelu(x, torch.tensor([0.25]))),
    "nn.InstanceNorm1d": (lambda m, x: m.op(x), (2, 4, 6)),
    "nn.InstanceNorm2d": _x4(lambda m, x: m.op(x)),
    "F.instance_norm": _x4(lambda m, x: F.instance_norm(x, eps=1e-3)),
    "nn.LogSoftmax": (lambda m, x: m.op(x), (2, 8)),
    "F.log_softmax": (lambda m, x: F.log_softmax(x, -1), (2, 8)),
    "torch.log_softmax": (lambda m, x: torch.log_softmax(x, 0), (2, 8)),
    "Tensor.log_softmax": _x4(lambda m, x: x.log_softmax(1)),
    "torch.var": _x4(lambda m, x: torch.var(x, dim=(2, 3), keepdim=True)),
    "Tensor.var": _x4(lambda m, x: x.var(1, False)),
    "torch.std": _x4(lambda m, x: torch.std(x, dim=1, correction=0)),
    "Tensor.std": _x4(lambda m, x: x * x.std()),
    "torch.norm": _x4(lambda m, x: torch.norm(x, dim=1, keepdim=True)),
    "Tensor.norm": _x4(lambda m, x: x.norm(2, -1)),
    "torch.linalg.vector_norm": _x4(
        lambda m, x: torch.linalg.vector_norm(x, dim=(2, 3))
    ),
    "torch.addcmul": _x4(lambda m, x: torch.addcmul(x, x, x.sigmoid(), value=0.5)),
    "Tensor.addcmul": _x4(lambda m, x: x.addcmul(x.flip(-1), x)),
    "torch.addmm": (lambda m, x: torch.addmm(x[:, :2], x, x.t()[:, :2]), (3, 4)),
    "Tensor.addmm": (lambda m, x: x[:, :3].addmm(x, x.t(), beta=0.5), (3, 4)),
    "torch.baddbmm": (
        lambda m, x: torch.baddbmm(x[..., :3], x, x.transpose(1, 2), alpha=0.25),
        (2, 3, 4),
    ),
    "Tensor.baddbmm": (
        lambda m, x: x[..., :3].baddbmm(x, x.transpose(1, 2), beta=0.0),
        (2, 3, 4),
    ),
    "torch.einsum": _x4(lambda m, x: torch.einsum("nchw,ndhw->nhcd", x, x.sigmoid())),
    "F.layer_norm": (lambda m, x: F.layer_norm(x, (8,)), (2, 3, 8)),
    "torch.sum": _x4(lambda m, x: torch.sum(x, (2, 3), keepdim=True)),
    "Tensor.sum": _x4(lambda m, x: x.sum(1)),
    "torch.mean": _x4(lambda m, x: torch.mean(x, -1)),
    "Tensor.mean": _x4(lambda m, x: x.mean((2, 3))),
    "nn.AvgPool2d": _x4(lambda m, x: m.op(x)),
    "F.avg_pool2d": _x4(lambda m, x: F.avg_pool2d(x, 3, 3)),
    "nn.AdaptiveAvgPool2d": _x4(lambda m, x: m.op(x)),
    "F.adaptive_avg_pool2d": _x4(lambda m, x: F.adaptive_avg_pool2d(x, (3, 2))),
    "nn.AdaptiveMaxPool2d": _x4(lambda m, x: m.op(x)),
    "F.adaptive_max_pool2d": _x4(lambda m, x: F.adaptive_max_pool2d(x, 1)),
    "F._adaptive_max_pool2d": _x4(lambda m, x: F._adaptive_max_pool2d(x, (2, 3))),
    "nn.MaxPool2d": _x4(lambda m, x: m.op(x)),
    "F.max_pool2d": _x4(lambda m, x: F.max_pool2d(x, 2)),
    "F._max_pool2d": _x4(lambda m, x: F._max_pool2d(x, 2)),
    "F.max_pool2d_with_indices": _x4(
        lambda m, x: F.max_unpool2d(
            *F.max_pool2d_with_indices(x, 3, 2, 1), 3, 2, 1, output_size=(6, 6)
        )
    ),
    "F.adaptive_max_pool2d_with_indices": _x4(
        lambda m, x: F.max_unpool2d(*F.adaptive_max_pool2d_with_indices(x, 2), 3)
    ),
    "nn.MaxUnpool2d": _x4(lambda m, x: m.op(*F.max_pool2d(x, 2, return_indices=True))),
    "F.max_unpool2d": _x4(
        lambda m, x: F.max_unpool2d(
            *F.max_pool2d(x, 3, 1, 1, return_indices=True), 3, 1, 1
        )
    ),
    "torch.amax": _x4(lambda m, x: torch.amax(x, 1)),
    "Tensor.amax": _x4(lambda m, x: x.amax((2, 3), keepdim=True)),
    "torch.amin": _x4(lambda m, x: torch.amin(x, -1)),
    "Tensor.amin": _x4(lambda m, x: x - x.amin((1, 2), keepdim=True)),
    "torch.cat": _x4(lambda m, x: torch.cat([x, x * 0.5], 1)),
    "torch.stack": _x4(lambda m, x: torch.stack([x, x * 0.5], 2)),
    "torch.concat": _x4(lambda m, x: torch.concat([x, x], 2)),
    "torch.concatenate": _x4(lambda m, x: torch.concatenate([x, x], 3)),
    "torch.flatten": _x4(lambda m, x: torch.flatten(x, 1)),
    "torch.reshape": _x4(lambda m, x: torch.reshape(x, (4, 36))),
    "torch.squeeze": _x4(lambda m, x: torch.squeeze(x, 0)),
    "torch.unsqueeze": _x4(lambda m, x: torch.unsqueeze(x, 1)),
    "Tensor.view": _x4(lambda m, x: x.view(1, -1)),
    "Tensor.view_as": _x4(lambda m, x: x.view_as(torch.empty(4, 36))),
    "Tensor.reshape": _x4(lambda m, x: x.reshape(2, 72)),
    "Tensor.reshape_as": _x4(lambda m, x: x.reshape_as(torch.empty(144))),
    "Tensor.flatten": _x4(lambda m, x: x.flatten()),
    "Tensor.unflatten": _x4(lambda m, x: x.unflatten(1, (2, 2))),
    "Tensor.squeeze": _x4(lambda m, x: x.squeeze(0)),
    "Tensor.unsqueeze": _x4(lambda m, x: x.unsqueeze(-1)),
    "torch.permute": _x4(lambda m, x: torch.permute(x, (0, 2, 3, 1))),
    "torch.transpose": _x4(lambda m, x: torch.transpose(x, dim0=1, dim1=3)),
    "torch.swapaxes": _x4(lambda m, x: torch.swapaxes(x, 2, 3)),
    "torch.t": (lambda m, x: torch.t(x), (3, 5)),
    "torch.movedim": _x4(lambda m, x: torch.movedim(x, 1, -1)),
    "Tensor.permute": _x4(lambda m, x: x.permute(0, 3, 1, 2)),
    "Tensor.transpose": _x4(lambda m, x: x.transpose(-1, -2)),
    "Tensor.t": (lambda m, x: x.t(), (3, 5)),
    "Tensor.movedim": _x4(lambda m, x: x.movedim(source=-1, destination=1)),
    "torch.split": _x4(lambda m, x: torch.split(x, 2, 1)[1]),
    "torch.chunk": _x4(lambda m, x: torch.chunk(x, 2, 2)[0]),
    "torch.unbind": _x4(lambda m, x: torch.unbind(x, 1)[3]),
    "Tensor.split": _x4(lambda m, x: x.split([1, 3], 1)[1]),
    "Tensor.chunk": _x4(lambda m, x: x.chunk(3, -1)[2]),
    "Tensor.unbind": _x4(lambda m, x: x.unbind(0)[0]),
    "operator.getitem": _x4(lambda m, x: x[:, 1:3, ::2, -1]),
    "torch.narrow": _x4(lambda m, x: torch.narrow(x, 2, 1, 3)),
    "Tensor.narrow": _x4(lambda m, x: x.narrow(dim=-1, start=0, length=2)),
    "torch.flip": _x4(lambda m, x: torch.flip(x, (1, 3))),
    "Tensor.flip": _x4(lambda m, x: x.flip(-1)),
    "torch.roll": _x4(lambda m, x: torch.roll(x, (1, -2), (2, 3))),
    "Tensor.roll": _x4(lambda m, x: x.roll(3, 1)),
    "nn.ChannelShuffle": _x4(lambda m, x: m.op(x)),
    "F.channel_shuffle": (lambda m, x: F.channel_shuffle(x, 3), (1, 6, 2, 3)),
    "nn.PixelShuffle": _x4(lambda m, x: m.op(x)),
    "nn.PixelUnshuffle": (lambda m, x: m.op(x), (1, 2, 4, 6)),
    "F.pixel_shuffle": (lambda m, x: F.pixel_shuffle(x, 3), (1, 2, 9, 3, 2)),
    "F.pixel_unshuffle": _x4(lambda m, x: F.pixel_unshuffle(x, 3)),
    "Tensor.repeat": _x4(lambda m, x: x.repeat(1, 2, 1, 3)),
    "torch.tile": _x4(lambda m, x: torch.tile(x, (2, 1, 3))),
    "Tensor.tile": _x4(lambda m, x: x.tile((1, 2, 1, 1))),
    "torch.repeat_interleave": _x4(lambda m, x: torch.repeat_interleave(x, 2, 1)),
    "Tensor.repeat_interleave": _x4(lambda m, x: x.repeat_interleave(3, dim=-1)),
    "Tensor.expand": (lambda m, x: x.expand(2, 3, 4), (1, 1, 4)),
    "Tensor.expand_as": (lambda m, x: x.expand_as(torch.empty(2, 3, 4)), (3, 1)),
    "F.pad": _x4(lambda m, x: F.pad(x, (1, 0, 2, 1), mode="reflect")),
    "constant_pad:F.pad": _x4(lambda m, x: F.pad(x, (2, 1, 0, 1), value=0.3)),
    "F.unfold": _x4(lambda m, x: F.unfold(x, (2, 3), padding=(1, 0), stride=2)),
    "F.interpolate": _x4(lambda m, x: F.interpolate(x, scale_factor=2.0)),
    "resize:F.interpolate": _x4(
        lambda m, x: F.interpolate(x, size=(9, 4), mode="bilinear")
    ),
    "torch.clone": _x4(lambda m, x: torch.clone(x)),
    "torch.detach": _x4(lambda m, x: torch.detach(x)),
    "Tensor.contiguous": _x4(lambda m, x: x.contiguous()),
    "Tensor.clone": _x4(lambda m, x: x.clone()),
    "Tensor.detach": _x4(lambda m, x: x.detach()),
    "Tensor.float": _x4(lambda m, x: x.float()),
    "Tensor.to": _x4(lambda m, x: x.to(torch.float32)),
    "Tensor.type_as": _x4(lambda m, x: x.type_as(torch.empty(1))),
    "nn.Dropout": _x4(lambda m, x: m.op(x)),
    "F.dropout": _x4(lambda m, x: F.dropout(x, 0.5, training=False)),
}

MODULES = {
    "nn.Conv2d": lambda: nn.Conv2d(4, 3, 3, padding=1),
    "nn.ConvTranspose2d": lambda: nn.ConvTranspose2d(4, 2, 2, stride=2),
    "nn.Linear": lambda: nn.Linear(4, 3),
    "F.linear": lambda: nn.Linear(4, 3),
    "nn.MultiheadAttention": lambda: nn.MultiheadAttention(8, 2),
    "F.conv2d": lambda: nn.Conv2d(4, 3, 3),
    "nn.BatchNorm1d": lambda: _batch_norm(nn.BatchNorm1d),
    "F.batch_norm": lambda: _batch_norm(),
    "nn.BatchNorm2d": lambda: _batch_norm(),
    "nn.Softmax": lambda: nn.Softmax(-1),
    "nn.LayerNorm": lambda: nn.LayerNorm(8),
    "nn.GroupNorm": lambda: nn.GroupNorm(2, 4),
    "nn.InstanceNorm1d": lambda: nn.InstanceNorm1d(4, affine=True),
    "nn.PReLU": lambda: _prelu(),
    "nn.Conv1d": lambda: nn.Conv1d(4, 6, 3, padding=2, dilation=2),
    "F.conv1d": lambda: nn.Conv1d(4, 3, 3),
    "nn.ConvTranspose1d": lambda: nn.ConvTranspose1d(4, 3, 3, 2, 1, output_padding=1),
    "nn.MaxPool1d": lambda: nn.MaxPool1d(3, 2, 1, ceil_mode=True),
    "nn.MaxUnpool2d": lambda: nn.MaxUnpool2d(2),
    "nn.AvgPool1d": lambda: nn.AvgPool1d(2, count_include_pad=False, padding=1),
    "nn.AdaptiveAvgPool1d": lambda: nn.AdaptiveAvgPool1d(3),
    "nn.LSTM": lambda: nn.LSTM(6, 4, batch_first=True, bidirectional=True),
    "nn.GRU": lambda: nn.GRU(6, 4, num_layers=2),
    "nn.RNN": lambda: nn.RNN(6, 4, bidirectional=True, batch_first=True),
    "nn.Conv3d": lambda: nn.Conv3d(4, 3, (3, 3, 1), padding=(1, 1, 0)),
    "F.conv3d": lambda: nn.Conv3d(4, 3, 3),
    "nn.InstanceNorm2d": lambda: nn.InstanceNorm2d(4),
    "nn.LogSoftmax": lambda: nn.LogSoftmax(-1),
    "F.group_norm": lambda: nn.GroupNorm(1, 4),
    "nn.AvgPool2d": lambda: nn.AvgPool2d(2),
    "nn.AdaptiveAvgPool2d": lambda: nn.AdaptiveAvgPool2d((1, 1)),
    "nn.AdaptiveMaxPool2d": lambda: nn.AdaptiveMaxPool2d((3, None)),
    "nn.MaxPool2d": lambda: nn.MaxPool2d(3, 1, 1),
    "nn.Hardtanh": lambda: nn.Hardtanh(-0.5, 1.0),
    "nn.GELU": lambda: nn.GELU("tanh"),
    "nn.PixelShuffle": lambda: nn.PixelShuffle(2),
    "nn.ChannelShuffle": lambda: nn.ChannelShuffle(2),
    "nn.PixelUnshuffle": lambda: nn.PixelUnshuffle(2),
}

# Selection: the values, and the indices read back (index outputs: tests/hbm).
SAMPLES.update(
    {
        "torch.topk": (lambda m, x: torch.topk(x, 3, dim=1)[0], (2, 8)),
        "Tensor.topk": (lambda m, x: x.topk(2, largest=False).values, (2, 3, 5)),
        "torch.sort": (lambda m, x: torch.sort(x, 1, descending=True)[0], (2, 8)),
        "Tensor.sort": (lambda m, x: x.sort().values, (2, 8)),
        "torch.argsort": (
            lambda m, x: x.gather(1, torch.argsort(x, dim=1)),
            (2, 8),
        ),
        "Tensor.argsort": (
            lambda m, x: x.gather(1, x.argsort(1, descending=True)),
            (2, 8),
        ),
        "torch.argmax": (
            lambda m, x: x.gather(1, torch.argmax(x, 1, keepdim=True)),
            (2, 8),
        ),
        "Tensor.argmax": (
            lambda m, x: x.flatten().index_select(0, x.argmax().reshape(1)),
            (2, 8),
        ),
        "torch.argmin": _x4(lambda m, x: x.gather(1, torch.argmin(x, 1, keepdim=True))),
        "Tensor.argmin": (
            lambda m, x: x.index_select(1, x[0].argmin(0, keepdim=True)),
            (2, 8),
        ),
        "torch.max": (lambda m, x: torch.max(x, 1)[0] + torch.max(x), (2, 8)),
        "Tensor.max": (
            lambda m, x: x.index_select(0, x.max(dim=0).indices[:1]),
            (3, 8),
        ),
        "torch.min": (lambda m, x: torch.min(x, -1, keepdim=True).values, (2, 8)),
        "Tensor.min": (lambda m, x: x.min() + x, (2, 8)),
        "torch.gather": (
            lambda m, x: torch.gather(x, 1, torch.tensor([[3, 0, 3], [1, 1, 7]])),
            (2, 8),
        ),
        "Tensor.gather": (
            lambda m, x: x.gather(0, x.topk(2, dim=0).indices),
            (4, 6),
        ),
        "Tensor.type": _x4(lambda m, x: x.type(torch.float32) * 0.5),
        "Tensor.long": (
            lambda m, x: x.index_select(1, (x[0].argsort() % 3).long()),
            (2, 8),
        ),
        "F.grid_sample": _x4(
            lambda m, x: F.grid_sample(
                x, torch.tanh(x[:, :2]).permute(0, 2, 3, 1) * 1.1, align_corners=True
            )
        ),
        "nn.Embedding": (lambda m, x: m.op(x.argmax(-1)), (2, 3, 8)),
        # index arithmetic: a flat top-k index to its row and column
        "operator.floordiv": (
            lambda m, x: x.index_select(0, x.flatten().topk(3).indices // 8),
            (3, 8),
        ),
        "torch.floor_divide": (
            lambda m, x: x[:, 0].gather(0, torch.floor_divide(x.argmax(1), 2) + 1),
            (4, 6),
        ),
        "Tensor.floor_divide": (
            lambda m, x: x[0].index_select(
                0, (x.flatten().argmax() * 3).floor_divide(9).reshape(1)
            ),
            (3, 8),
        ),
        "operator.mod": (
            lambda m, x: x.index_select(1, x.flatten().topk(4).indices % 8),
            (3, 8),
        ),
        "torch.remainder": (
            lambda m, x: x.gather(1, torch.remainder(x.argsort(1) - 5, 8)),
            (2, 8),
        ),
        "Tensor.remainder": (
            lambda m, x: x[0] + (x.argmax(0).remainder(3) - 1).float(),
            (3, 8),
        ),
        "F.embedding": (
            lambda m, x: F.embedding(x.argmin(-1), m.op.weight) * x[..., :5],
            (2, 3, 8),
        ),
        "torch.index_select": _x4(
            lambda m, x: torch.index_select(x, 2, torch.tensor([5, 0, 0]))
        ),
        "Tensor.index_select": (
            lambda m, x: x.index_select(0, x.sum(1).argsort()),
            (3, 8),
        ),
    }
)

MODULES.update(
    {
        "nn.Embedding": lambda: nn.Embedding(8, 5),
        "F.embedding": lambda: nn.Embedding(8, 5),
    }
)

# Comparisons: a mask of the same grid (a max pool), of a constant, of another
# grid, used as values of scale 1 (each kind in each spelling).
_OTHERS = {
    "eq": lambda x: F.max_pool2d(x, 3, 1, 1),
    "ne": lambda x: F.max_pool2d(x, 3, 1, 1),
    "gt": lambda x: 0.25,
    "ge": lambda x: x.flip(-1) * 0.5,
    "lt": lambda x: -0.125,
    "le": lambda x: x.mean(-1, keepdim=True),
}
for _root in ("operator", "torch", "Tensor"):
    for _kind, _other in _OTHERS.items():
        if _root == "Tensor":
            _call = lambda x, o, k=_kind: getattr(x, k)(o)  # noqa: E731
        else:
            _call = getattr(operator if _root == "operator" else torch, _kind)
        SAMPLES[f"{_root}.{_kind}"] = _x4(
            lambda m, x, c=_call, o=_other: x * c(x, o(x)).float()
        )

# The LUT spellings: a positive input keeps log/sqrt/rsqrt/reciprocal in domain.
for _entry in op_table.OPS:
    if _entry.lut is None:
        continue
    for _spelling in _entry.torch:
        kind, target = resolve(_spelling)
        if kind == "module":
            MODULES.setdefault(_spelling, target)
            SAMPLES[_spelling] = _x4(lambda m, x: m.op(x * x + 0.5))
        elif kind == "method":
            SAMPLES[_spelling] = _x4(
                lambda m, x, name=target: getattr(x * x + 0.5, name)()
            )
        else:
            SAMPLES[_spelling] = _x4(lambda m, x, f=target: f(x * x + 0.5))

# The tables with a parameter: both signs, parameters other than torch's defaults.
MODULES.update(
    {
        "nn.LeakyReLU": lambda: nn.LeakyReLU(0.1),
        "nn.ELU": lambda: nn.ELU(0.5),
        "nn.CELU": lambda: nn.CELU(2.0),
        "nn.Softplus": lambda: nn.Softplus(2.0),
    }
)
SAMPLES.update(
    {
        **{name: _x4(lambda m, x: m.op(x)) for name in ("nn.LeakyReLU", "nn.ELU")},
        **{name: _x4(lambda m, x: m.op(x)) for name in ("nn.CELU", "nn.Softplus")},
        "F.leaky_relu": _x4(lambda m, x: F.leaky_relu(x, 0.2)),
        "F.elu": _x4(lambda m, x: F.elu(x, alpha=0.7)),
        "F.celu": _x4(lambda m, x: F.celu(x, 1.5)),
        "F.softplus": _x4(lambda m, x: F.softplus(x, beta=0.5)),
    }
)


def _prelu():
    prelu = nn.PReLU(4)
    with torch.no_grad():
        prelu.weight.copy_(torch.tensor([0.25, -0.5, 1.5, 0.0]))
    return prelu


def _batch_norm(cls=nn.BatchNorm2d):
    bn = cls(4).eval()
    with torch.no_grad():
        bn.running_mean.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
        bn.running_var.copy_(torch.tensor([1.5, 0.5, 2.0, 1.0]))
        bn.weight.copy_(_const(4))
    return bn


class _Model(nn.Module):
    def __init__(self, spelling: str):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.call = SAMPLES[spelling][0]
        make = MODULES.get(spelling)
        kind, target = resolve(spelling.split(":")[-1])
        if make is None and kind == "module":
            make = target
        self.op = make() if make is not None else nn.Identity()

    def forward(self, x):
        return self.dequant(self.call(self, self.quant(x)))


def _spellings(quantized):
    """Test cases: each spelling, or ``op:spelling`` where another entry has it too
    (``F.interpolate`` is nearest pass-through and bilinear ``resize``)."""
    cases, seen = [], set()
    for entry in op_table.OPS:
        for spelling in entry.torch:
            case = spelling if spelling not in seen else f"{entry.op}:{spelling}"
            seen.add(spelling)
            if entry.quantized in quantized:
                cases.append(case)
    return cases


def test_every_spelling_has_a_sample():
    kinds = (op_table.MODULE, op_table.DECOMPOSED, op_table.PASSTHROUGH, op_table.NONE)
    kinds += (op_table.INDEX,)
    assert set(SAMPLES) == set(_spellings(kinds))


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
@pytest.mark.parametrize(
    "spelling",
    _spellings(
        (op_table.MODULE, op_table.DECOMPOSED, op_table.PASSTHROUGH, op_table.INDEX)
    ),
)
def test_every_op_prepare_accepts_reaches_a_bit_identical_model_hbm(spelling, tmp_path):
    torch.manual_seed(0)
    shape = SAMPLES[spelling][1]
    model = _Model(spelling).eval()
    inputs = [torch.randn(shape) for _ in range(4)]
    qat = validated(model, inputs, tmp_path)
    qat_bc = export(qat, (inputs[0],))
    exported_pt = pre_export(qat)
    for x in inputs:
        with torch.no_grad():
            want = exported_pt(x).numpy()
        got = qat_bc["forward"](x.numpy())  # numpy in, numpy out
        assert got.tobytes() == want.tobytes(), "qat.bc differs from qat.export.pt"
    quantized = hbir.convert(qat_bc, "nash-e")
    left_float = {
        op.name
        for f in quantized.functions
        for op in f.op.walk()
        if op is not f.op
        and op.name != "func.return"
        and op_device(op) == "cpu"
        and ATTR_CPU_REASON not in op.attributes  # check-march named why
    }
    undeclared = {
        name for name in left_float if op_table.LOWERING.get(name) != op_table.FLOAT
    }
    assert not undeclared, f"convert left {undeclared} float (not declared float)"
    hbir.compile(quantized, str(tmp_path / "model.hbm"), "nash-e")
    hbm = hbir.load(str(tmp_path / "model.hbm"))
    for x in inputs:
        feed = {"_input_0": x.numpy()}
        want = quantized["forward"].feed(feed, reference=True)["_output_0"]
        got = hbm["forward"](x.numpy())
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (
            "model.hbm differs from quantized.bc"
        )
    islands = {
        reason
        for op in lower_to_npu(quantized).module.op.walk()
        if isinstance(op, npu.CpuCallOp)
        for reason in op.reason.data.split(", ")
    }
    allowed = {"quantize", "dequantize", *op_table.CPU_REASONS.values()}
    allowed |= {"float"} | _march_reasons(quantized)
    assert islands <= allowed, f"undeclared CPU islands: {islands - allowed}"


def _march_reasons(quantized) -> set[str]:
    """The reasons check-march gave for the ops it placed on the CPU."""
    return {
        op.attributes[ATTR_CPU_REASON].data
        for f in quantized.functions
        for op in f.op.walk()
        if ATTR_CPU_REASON in op.attributes
    }


def test_every_npu_instruction_runs_on_its_opcode_s_unit():
    """The schedule's and the simulator's unit of each npu op is its opcode's
    (views on the DTE): an op missing there would be timed, and counted, as CPU."""
    from hbir.passes.march import get_npu
    from hbir.runtime.hbm_opcodes import BY_NAME

    for march in ("nash-e", "nash-m"):
        model = get_npu(march)
        for cls in npu.NPU.operations:
            if not issubclass(cls, npu.OpcodeOp):
                continue
            spec = BY_NAME[cls.name.removeprefix("npu.")]
            want = "dte" if spec.unit == "view" else spec.unit
            assert model.unit_of(cls.name) == want, (march, cls.name)
