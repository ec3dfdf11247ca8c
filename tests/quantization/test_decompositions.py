"""Softmax, layer norm, division and the other decomposed ops as chains of QAT
modules."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hbir.quantization import (
    DeQuantStub,
    FakeQuantState,
    QconfigSetter,
    QuantStub,
    prepare,
    qint8,
    qint16,
    set_fake_quantize,
)
from hbir.quantization import lut_modules as lut
from hbir.quantization import qat_modules as qat
from hbir.quantization.decompositions import (
    LayerNormDecomposition,
    SoftmaxDecomposition,
    einsum_plan,
)


class Net(nn.Module):
    def __init__(self, affine=True):
        super().__init__()
        self.quant = QuantStub()
        self.norm = nn.LayerNorm(16, elementwise_affine=affine)
        self.softmax = nn.Softmax(dim=-1)
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.softmax(self.norm(self.quant(x)) * 2.0))


def _data(seed=0, n=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, 16, generator=g) * 3 + 1


def _prepared(tmp_path, affine=True, qconfig=None):
    torch.manual_seed(0)
    model = Net(affine).eval()
    if affine:
        model.norm.weight.data.uniform_(0.5, 1.5)
        model.norm.bias.data.normal_()
    return model, prepare(model, _data(), qconfig, out_dir=tmp_path)


def _calibrate(qat_model):
    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for seed in range(4):
            qat_model(_data(seed))
    set_fake_quantize(qat_model, FakeQuantState.VALIDATION)


@pytest.mark.parametrize("affine", [True, False])
def test_steps_are_separate_call_modules(tmp_path, affine):
    _, qat_model = _prepared(tmp_path, affine)
    calls = [n.target for n in qat_model.graph.nodes if n.op == "call_module"]
    ln_steps = [
        "norm.mean",
        "norm.sub",
        "norm.square",
        "norm.var",
        "norm.add_eps",
        "norm.rsqrt",
        "norm.mul",
    ]
    softmax_steps = [
        "softmax.sub",
        "softmax.exp",
        "softmax.sum",
        "softmax.reciprocal",
        "softmax.mul",
    ]
    expected = ln_steps + (["norm.affine"] if affine else [])
    assert [c for c in calls if c.startswith("norm.")] == expected
    assert [c for c in calls if c.startswith("softmax.")] == softmax_steps
    assert isinstance(qat_model.norm, LayerNormDecomposition)
    assert isinstance(qat_model.softmax, SoftmaxDecomposition)
    assert isinstance(qat_model.softmax.exp, lut.Exp)
    assert isinstance(qat_model.norm.rsqrt, lut.Rsqrt)
    assert qat_model.norm.eps == 1e-5  # added by norm.add_eps, before the table
    amax = [n for n in qat_model.graph.nodes if n.target is torch.amax]
    assert len(amax) == 1  # the row maximum, a pass-through


def test_internal_steps_are_int16_and_the_last_step_has_the_output_dtype(tmp_path):
    _, qat_model = _prepared(tmp_path)
    for name in (
        "norm.mean",
        "norm.var",
        "norm.rsqrt",
        "norm.mul",
        "softmax.exp",
        "softmax.sum",
        "softmax.reciprocal",
    ):
        assert qat_model.get_submodule(name).activation_post_process.dtype == qint16
    for name in ("norm.affine", "softmax.mul"):
        assert qat_model.get_submodule(name).activation_post_process.dtype == qint8
    check = (tmp_path / "model_check_result.txt").read_text()
    assert "default (int16: decomposition step)" in check


def test_a_step_can_be_overridden_by_name(tmp_path):
    setter = QconfigSetter(module_name={"softmax.exp": qint8, "norm": qint16})
    _, qat_model = _prepared(tmp_path, qconfig=setter)
    assert qat_model.softmax.exp.activation_post_process.dtype == qint8
    assert qat_model.norm.affine.activation_post_process.dtype == qint16


@pytest.mark.parametrize("affine", [True, False])
def test_float_mode_equals_torch_layer_norm_and_softmax(tmp_path, affine):
    model, qat_model = _prepared(tmp_path, affine)
    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState._FLOAT)
    x = _data(seed=9)
    with torch.no_grad():
        torch.testing.assert_close(qat_model(x), model(x), atol=1e-6, rtol=1e-5)
        y = qat_model.norm(x)
        torch.testing.assert_close(
            y,
            F.layer_norm(x, (16,), model.norm.weight, model.norm.bias),
            atol=1e-5,
            rtol=1e-5,
        )


def test_validation_is_close_to_fake_quantized_torch_softmax(tmp_path):
    _, qat_model = _prepared(tmp_path)
    _calibrate(qat_model)
    x = _data(seed=11)
    with torch.no_grad():
        logits = qat_model.norm(qat_model.quant(x)) * 2.0
        out = qat_model(x)
    s_out = qat_model.softmax.mul.activation_post_process.scale.item()
    reference = F.softmax(logits, dim=-1)
    assert (out - reference).abs().max().item() <= 2 * s_out


def test_inlined_graph_equals_the_container_forward(tmp_path):
    _, qat_model = _prepared(tmp_path)
    _calibrate(qat_model)
    x = _data(seed=5)
    with torch.no_grad():
        direct = qat_model.softmax(
            qat_model.get_submodule("_generated_mul_0")(
                qat_model.norm(qat_model.quant(x)), 2.0
            )
        )
        assert torch.equal(qat_model(x), direct)


def test_division_by_a_tensor_is_reciprocal_then_mul(tmp_path):
    class Div(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = QuantStub()

        def forward(self, x):
            x = self.quant(x)
            return x / (x * x + 1.0)

    qat_model = prepare(Div(), torch.randn(4, 5), out_dir=tmp_path)
    div = qat_model.get_submodule("_generated_div_0")
    assert isinstance(div.reciprocal, lut.Reciprocal) and isinstance(
        div.mul, qat.QuantMul
    )
    set_fake_quantize(qat_model.eval(), FakeQuantState._FLOAT)
    x = torch.randn(4, 5)
    torch.testing.assert_close(qat_model(x), x / (x * x + 1.0))


class _Call(nn.Module):
    def __init__(self, call, module=None):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.call, self.op = call, module

    def forward(self, x):
        return self.dequant(self.call(self, self.quant(x)))


# op -> (call on the quantized input, input shape); each prepared as a chain of steps
FLOAT_EQUAL = {
    "log_softmax": (lambda m, x: F.log_softmax(x, -1), (3, 8)),
    "prelu": (lambda m, x: m.op(x), (2, 3, 4, 5)),
    "conv1d": (lambda m, x: m.op(x), (2, 3, 9)),
    "conv3d": (lambda m, x: m.op(x), (2, 3, 5, 6, 7)),
    "conv3d-dilated-strided": (lambda m, x: m.op(x), (1, 3, 9, 5, 5)),
    "rnn-relu": (lambda m, x: m.op(x)[0], (2, 4, 3)),
    "cumsum": (lambda m, x: x.cumsum(1), (2, 5, 3)),
    "sdpa-causal": (
        lambda m, x: F.scaled_dot_product_attention(x, x, x, is_causal=True),
        (2, 2, 5, 4),
    ),
    "sdpa-bool-mask": (
        lambda m, x: F.scaled_dot_product_attention(
            x, x * 2, x, attn_mask=torch.ones(5, 5, dtype=torch.bool).triu()
        ),
        (2, 2, 5, 4),
    ),
    "sdpa-learned-bias": (
        lambda m, x: F.scaled_dot_product_attention(
            x, x, x, attn_mask=m.op.weight * 0.5
        ),
        (2, 2, 5, 4),
    ),
    "mha-causal-mask": (
        lambda m, x: m.op(
            x,
            x,
            x,
            attn_mask=nn.Transformer.generate_square_subsequent_mask(x.shape[1]),
        )[0],
        (2, 5, 8),
    ),
    "mha-mask-made-from-sizes": (
        lambda m, x: m.op(
            x,
            x,
            x,
            attn_mask=torch.ones(x.shape[1], x.shape[1]).tril() == 0,
            need_weights=False,
        )[0],
        (2, 5, 8),
    ),
    "where": (
        lambda m, x: torch.where(torch.ones(4, 5).tril().bool(), x, x * 2),
        (2, 3, 4, 5),
    ),
    "masked-fill": (
        lambda m, x: x.masked_fill(torch.ones(5).bool().logical_not(), 0.0),
        (2, 5),
    ),
    "max-pool1d": (lambda m, x: F.max_pool1d(x, 3, 2, 1), (2, 3, 9)),
    "avg-pool1d": (lambda m, x: F.avg_pool1d(x, 2), (2, 3, 9)),
    "prelu-one-slope": (lambda m, x: F.prelu(x, torch.tensor([-0.3])), (2, 3, 4)),
    "var": (lambda m, x: torch.var(x, dim=(1, 2), keepdim=True), (2, 3, 4, 5)),
    "var-biased": (lambda m, x: x.var(1, False), (2, 3, 4, 5)),
    "std-all": (lambda m, x: x * x.std(), (2, 3, 4, 5)),
    "std-correction": (lambda m, x: torch.std(x, 0, correction=2), (6, 5)),
    "norm": (lambda m, x: x.norm(dim=-1, keepdim=True), (2, 3, 4)),
    "instance-norm": (lambda m, x: m.op(x), (2, 3, 4, 5)),
    "addcmul": (lambda m, x: torch.addcmul(x, x, x.flip(-1), value=-0.5), (2, 6)),
    "baddbmm": (
        lambda m, x: torch.baddbmm(x[..., :3], x, x.transpose(1, 2), beta=2, alpha=-1),
        (2, 3, 4),
    ),
    "einsum": (lambda m, x: torch.einsum("bij,bkj->bki", x, x * 2), (2, 3, 4)),
    "einsum-outer": (lambda m, x: torch.einsum("bi,bj->bji", x, x), (2, 5)),
    "einsum-permutation": (lambda m, x: torch.einsum("abc->cab", x), (2, 3, 4)),
}
MODULES = {
    "instance-norm": lambda: nn.InstanceNorm2d(3, affine=True),
    "prelu": lambda: nn.PReLU(3),
    "conv1d": lambda: nn.Conv1d(3, 4, 3, stride=2, padding=1, groups=1),
    "conv3d": lambda: nn.Conv3d(3, 4, 3, padding=1),
    "conv3d-dilated-strided": lambda: nn.Conv3d(
        3, 2, (3, 3, 1), stride=(2, 1, 1), padding=(2, 1, 0), dilation=(2, 1, 1)
    ),
    "rnn-relu": lambda: nn.RNN(3, 4, nonlinearity="relu", batch_first=True),
    "mha-causal-mask": lambda: nn.MultiheadAttention(8, 2, batch_first=True),
    "sdpa-learned-bias": lambda: nn.Linear(5, 5),
    "mha-mask-made-from-sizes": lambda: nn.MultiheadAttention(8, 2, batch_first=True),
}


@pytest.mark.parametrize("name", sorted(FLOAT_EQUAL))
def test_new_decompositions_compute_the_torch_op_in_float_mode(name, tmp_path):
    call, shape = FLOAT_EQUAL[name]
    torch.manual_seed(0)
    module = MODULES.get(name, lambda: None)()
    if module is not None and hasattr(module, "weight"):
        module.weight.data.uniform_(-0.5, 1.5)
        if getattr(module, "bias", None) is not None:
            module.bias.data.normal_()
    model = _Call(call, module).eval()
    x = torch.randn(shape)
    qat_model = prepare(model, x, out_dir=tmp_path)
    generated = [n for n, _ in qat_model.named_modules() if n.startswith("_generated")]
    assert generated or module is not None, "nothing was prepared"
    set_fake_quantize(qat_model, FakeQuantState._FLOAT)
    with torch.no_grad():
        torch.testing.assert_close(qat_model(x), model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "equation, shapes, message",
    [
        ("...ij,...jk->...ik", [(2, 3), (3, 4)], "'...'"),
        ("ii,ij->j", [(3, 3), (3, 4)], "repeated label"),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "3 operands"),
        ("ij,kl->i", [(2, 3), (4, 5)], "summed in one operand"),
        ("ij->i", [(2, 3)], "sums"),
    ],
)
def test_einsums_without_a_matmul_form_are_refused(equation, shapes, message):
    with pytest.raises(ValueError, match=message):
        einsum_plan(equation, shapes)
