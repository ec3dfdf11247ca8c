"""prepare: graph structure, fusion, functional ops, stubs, and error reporting."""

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

import hbir
from hbir.quantization import (
    DeQuantStub,
    FakeQuantState,
    PrepareError,
    QuantStub,
    UnsupportedOpError,
    op_rules,
    prepare,
    set_fake_quantize,
)
from hbir.quantization import lut_modules as lut
from hbir.quantization import qat_modules as qat
from hbir.quantization.decompositions import Decomposition


def _prepare(model, inputs, tmp_path, qconfig=None):
    return prepare(model.eval(), inputs, qconfig, out_dir=tmp_path)


def _float_equal(model, qat_model, inputs, atol=1e-5):
    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState._FLOAT)
    with torch.no_grad():
        expected, got = model(*inputs), qat_model(*inputs)
    torch.testing.assert_close(got, expected, atol=atol, rtol=1e-5)


def _source_line(obj, text: str) -> int:
    lines, start = inspect.getsourcelines(obj)
    return start + next(i for i, line in enumerate(lines) if text in line)


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant_a = QuantStub()
        self.quant_b = QuantStub()
        self.drop = nn.Dropout(0.1)
        self.ident = nn.Identity()
        self.flat = nn.Flatten()
        self.dequant = DeQuantStub()

    def forward(self, a, b):
        a, b = self.quant_a(a), self.quant_b(b)
        s = (a + b) * b - a * 0.5
        m = torch.matmul(s, b.transpose(-2, -1))
        c = torch.cat([m, m.mean(-1, keepdim=True)], dim=-1)
        c = self.ident(self.drop(c)).reshape(2, -1).permute(1, 0)
        d = c / (c * c + 1.0) + c**2
        return self.dequant(self.flat(d.unsqueeze(0)))


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 4, generator=g)


def test_functional_ops_become_qat_call_modules(tmp_path):
    model = Functional()
    qat_model = _prepare(model, _inputs(), tmp_path)
    assert isinstance(qat_model, fx.GraphModule)
    kinds = set()
    for node in qat_model.graph.nodes:
        if node.op == "call_module":
            module = qat_model.get_submodule(node.target)
            assert isinstance(module, qat.QATModule | qat.DeQuantStub | nn.Dropout), (
                node
            )
            kinds.add(type(module).__name__)
        elif node.op == "call_function":
            assert node.target in op_rules.PASSTHROUGH_FUNCTIONS, node
        elif node.op == "call_method":
            assert node.target in op_rules.PASSTHROUGH_METHODS, node
    expected = {
        "QuantAdd",
        "QuantMul",
        "QuantSub",
        "QuantMatmul",
        "QuantMean",
        "QuantCat",
        "Reciprocal",
        "QuantStub",
        "DeQuantStub",
        "Dropout",
    }
    assert expected <= kinds
    assert not any(isinstance(m, nn.Identity | nn.Flatten) for m in qat_model.modules())
    _float_equal(model, qat_model, _inputs())


def _producer_fake_quant(gm, node):
    """Independent walk: the output fake quant that defines ``node``'s value."""
    while node.op != "call_module" or isinstance(
        gm.get_submodule(node.target), nn.Dropout
    ):
        node = node.all_input_nodes[0]
    return gm.get_submodule(node.target).activation_post_process


def test_every_qat_module_links_its_producers_and_owns_its_output(tmp_path):
    qat_model = _prepare(Functional(), _inputs(), tmp_path)
    checked = 0
    for node in qat_model.graph.nodes:
        if node.op != "call_module":
            continue
        module = qat_model.get_submodule(node.target)
        if not isinstance(module, qat.QATModule):
            continue
        assert module.qconfig is not None
        assert isinstance(module.activation_post_process.scale, torch.Tensor)
        if isinstance(module, qat.QuantStub):
            continue
        args = []
        fx.node.map_arg(
            node.args, args.append
        )  # tensor arguments in order, repeats kept
        expected = tuple(_producer_fake_quant(qat_model, n) for n in args)
        assert module.producer_fake_quants == expected, node.target
        checked += 1
    assert checked >= 8


def test_squares_and_division_are_rewritten(tmp_path):
    qat_model = _prepare(Functional(), _inputs(), tmp_path)
    div = next(
        m
        for n, m in qat_model.named_modules()
        if "_generated_div" in n and isinstance(m, Decomposition)
    )
    assert isinstance(div.reciprocal, lut.Reciprocal) and isinstance(
        div.mul, qat.QuantMul
    )
    squares = [
        n
        for n in qat_model.graph.nodes
        if n.op == "call_module" and len(n.args) == 2 and n.args[0] is n.args[1]
    ]
    assert len(squares) == 2  # c * c and c ** 2


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.relu = nn.ReLU6()
        self.convt = nn.ConvTranspose2d(6, 4, 2, stride=2)
        self.bnt = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 8 * 8, 3)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.bnt(self.convt(self.relu(self.bn(self.conv(self.quant(x))))))
        return self.dequant(F.relu(self.fc(x.flatten(1))))


def _randomize_bn(model):
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g))
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.uniform_(0.5, 1.5, generator=g)
            m.bias.data.normal_(generator=g)
    return model


def test_conv_bn_relu_fold_and_fuse(tmp_path):
    model = _randomize_bn(ConvBnRelu())
    x = torch.randn(2, 3, 4, 4)
    qat_model = _prepare(model, x, tmp_path)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in qat_model.modules())
    assert (
        isinstance(qat_model.conv, qat.Conv2d) and qat_model.conv.fused_relu == "relu6"
    )
    assert (
        isinstance(qat_model.convt, qat.ConvTranspose2d)
        and qat_model.convt.bias is not None
    )
    assert qat_model.fc.fused_relu == "relu"
    assert qat_model.conv.bias is not None  # the folded BN's shift
    # Independent reference: the float model in eval mode (torch's own BN).
    _float_equal(model, qat_model, (x,))
    check = (tmp_path / "model_check_result.txt").read_text()
    assert "None: every fusable pattern was fused." in check


def test_fused_relu_is_seen_by_the_output_fake_quant(tmp_path):
    model = _randomize_bn(ConvBnRelu())
    qat_model = _prepare(model, torch.randn(2, 3, 4, 4), tmp_path)
    set_fake_quantize(qat_model, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat_model(torch.randn(8, 3, 4, 4))
    observer = qat_model.conv.activation_post_process.activation_post_process
    assert observer.min_val.item() >= 0.0 and observer.max_val.item() <= 6.0


class SharedModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.fc = nn.Linear(4, 4)
        self.act = nn.Sigmoid()
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        a = self.act(self.fc(x))
        b = self.act(self.fc(a))
        return self.dequant(a + b)


def test_every_call_of_a_module_gets_its_own_qat_module(tmp_path):
    qat_model = _prepare(SharedModules(), torch.randn(2, 4), tmp_path)
    targets = [n.target for n in qat_model.graph.nodes if n.op == "call_module"]
    assert {"fc", "fc_1", "act", "act_1"} <= set(targets)
    for name in ("fc", "act"):
        first, later = (
            qat_model.get_submodule(name),
            qat_model.get_submodule(name + "_1"),
        )
        assert first.activation_post_process is not later.activation_post_process
    # the calls of a weight module share its weight and weight fake quant
    assert qat_model.fc.weight is qat_model.fc_1.weight
    assert qat_model.fc.bias is qat_model.fc_1.bias
    assert qat_model.fc.weight_fake_quant is qat_model.fc_1.weight_fake_quant
    assert len(list(qat_model.parameters())) == 2
    check = (tmp_path / "model_check_result.txt").read_text()
    section = check.split("Each module called times:")[1].split("\n\n")[0]
    assert "| fc   | Linear  | 2" in section and "| act  | Sigmoid | 2" in section


class NoStubs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("offset", torch.linspace(-1, 1, 4))

    def forward(self, x):
        return self.fc(x) + self.offset


def test_model_without_stubs_gets_generated_ones(tmp_path):
    model = NoStubs()
    qat_model = _prepare(model, torch.randn(2, 4), tmp_path)
    stubs = [
        m
        for n, m in qat_model.named_children()
        if n.startswith("_generated_quant_stub")
    ]
    assert len(stubs) == 2 and all(isinstance(s, qat.QuantStub) for s in stubs)
    check = (tmp_path / "model_check_result.txt").read_text()
    assert "input without QuantStub" in check
    assert "float tensor used by a quantized op" in check  # the buffer
    _float_equal(model, qat_model, (torch.randn(3, 4),))


class FloatTail(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.quant = QuantStub()
        self.fc = nn.Linear(4, 4)
        self.dequant = DeQuantStub()

    def forward(self, x):
        y = self.dequant(self.fc(self.quant(self.pre(x))))
        return torch.sigmoid(y) * 2


def test_ops_outside_the_stubs_stay_float_and_are_reported(tmp_path):
    model = FloatTail()
    qat_model = _prepare(model, torch.randn(2, 4), tmp_path)
    assert type(qat_model.pre) is nn.Linear
    assert isinstance(qat_model.fc, qat.Linear)
    check = (tmp_path / "model_check_result.txt").read_text()
    section = check.split("Ops left unquantized (run in float):")[1]
    for name in ("pre", "sigmoid", "mul"):
        assert f"| {name} " in section
    _float_equal(model, qat_model, (torch.randn(3, 4),))


class Unsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.bilinear = nn.Bilinear(4, 4, 4)

    def forward(self, x):
        x = self.quant(x)
        x = torch.lgamma(x)
        x = torch.cumprod(x, 0)
        return self.bilinear(x, x)


def test_unsupported_ops_are_named_with_the_users_source_line(tmp_path):
    with pytest.raises(UnsupportedOpError) as info:
        _prepare(Unsupported(), torch.randn(3, 2, 4), tmp_path)
    message = str(info.value)
    assert "cannot quantize 3 ops" in message
    for op, code in (
        ("torch.lgamma", "torch.lgamma(x)"),
        ("torch.cumprod", "torch.cumprod(x, 0)"),
        ("torch.nn.modules.linear.Bilinear", "self.bilinear(x, x)"),
    ):
        assert op in message
        where = f"{__file__}:{_source_line(Unsupported.forward, code)}"
        assert where in message, where
    assert not (tmp_path / "model_check_result.txt").exists()


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x
        return -x


def test_untraceable_control_flow_names_the_line(tmp_path):
    with pytest.raises(PrepareError) as info:
        _prepare(DataDependent(), torch.randn(2), tmp_path)
    line = _source_line(DataDependent.forward, "if x.sum() > 0")
    assert f"{__file__}:{line}" in str(info.value)


def test_unsupported_arguments_are_reported(tmp_path):
    class AddAlpha(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = QuantStub()

        def forward(self, x):
            x = self.quant(x)
            return torch.add(x, x, alpha=2)

    with pytest.raises(UnsupportedOpError, match="alpha=2"):
        _prepare(AddAlpha(), torch.randn(2), tmp_path)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: F.adaptive_avg_pool2d(x, 3), "from 4x4 to 3x3"),
        (lambda x: F.pad(x, (1, 1), value=float("inf")), "pad value inf"),
        (lambda x: F.pad(x, (-1, 0)), "negative padding"),
        (lambda x: torch.einsum("...i,...i->...", x, x), "'...'"),
        (lambda x: F.leaky_relu(x, float("nan")), "negative_slope=nan"),
        (lambda x: F.softplus(x, 1.0, 5.0), "threshold=5.0"),
        (lambda x: torch.where(x > 0)[0] * 1.0, "computes with integer indices"),
        (
            lambda x: x.masked_fill(torch.ones(4).bool(), float("-inf")),
            "a fill value of -inf",
        ),
    ],
)
def test_what_export_cannot_emit_is_refused_at_prepare(call, message, tmp_path):
    class Call(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = QuantStub()

        def forward(self, x):
            return call(self.quant(x))

    with pytest.raises(UnsupportedOpError, match=message):
        _prepare(Call(), torch.randn(1, 2, 4, 4), tmp_path)


def test_float_model_is_left_untouched(tmp_path):
    model = _randomize_bn(ConvBnRelu())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    qat_model = _prepare(model, torch.randn(2, 3, 4, 4), tmp_path)
    assert qat_model.fc.weight is not model.fc.weight
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


class FunctionalLayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.weight = nn.Parameter(torch.rand(6) + 0.5)
        self.bias = nn.Parameter(torch.randn(6))

    def forward(self, x):
        x = self.quant(x)
        y = F.layer_norm(x, (6,), self.weight, self.bias, 1e-5)
        return F.max_pool2d(F.softmax(y, dim=-1), 2)


def test_functional_layer_norm_softmax_and_pooling(tmp_path):
    model = FunctionalLayerNorm()
    x = torch.randn(2, 3, 4, 6)
    qat_model = _prepare(model, x, tmp_path)
    ln = qat_model.get_submodule("_generated_layer_norm_0")
    assert ln.affine.weight is qat_model.weight
    assert isinstance(qat_model.get_submodule("_generated_max_pool2d_0"), qat.MaxPool2d)
    _float_equal(model, qat_model, (x,))


def test_print_shows_fake_quant_fields_and_observer_ranges(tmp_path):
    model = _randomize_bn(ConvBnRelu())
    qat_model = _prepare(model, torch.randn(2, 3, 4, 4), tmp_path)
    set_fake_quantize(qat_model, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat_model(torch.randn(4, 3, 4, 4))
    text = str(qat_model)
    conv = text[text.index("(conv): Conv2d(") : text.index("(convt):")]
    observer = qat_model.conv.activation_post_process.activation_post_process
    for field in (
        "3, 6, kernel_size=(3, 3)",
        "fused_relu=relu6",
        "(activation_post_process): FakeQuantize(",
        "(weight_fake_quant): FakeQuantize(",
        "fake_quant_enabled=tensor([0], dtype=torch.uint8)",
        "observer_enabled=tensor([1], dtype=torch.uint8)",
        "quant_min=-128, quant_max=127, dtype=qint8",
        "qscheme=torch.per_tensor_symmetric, ch_axis=-1",
        "qscheme=torch.per_channel_symmetric, ch_axis=0",
        f"scale={qat_model.conv.activation_post_process.scale!r}",
        f"MinMaxObserver(min_val={observer.min_val!r}, max_val={observer.max_val!r})",
        "PerChannelMinMaxObserver(min_val=tensor([",
    ):
        assert field in conv, field


def _calibrate(qat_model, batches):
    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in batches:
            qat_model(*batch)
    set_fake_quantize(qat_model, FakeQuantState.VALIDATION)
    return qat_model


def test_state_dict_loads_into_a_fresh_prepare(tmp_path):
    model = _randomize_bn(ConvBnRelu())
    x = torch.randn(2, 3, 4, 4)
    source = _calibrate(_prepare(model, x, tmp_path), [(torch.randn(8, 3, 4, 4),)])
    target = _prepare(model, x, tmp_path)
    target.load_state_dict(source.state_dict())
    _calibrate(target, [])
    batch = torch.randn(5, 3, 4, 4)
    with torch.no_grad():
        assert torch.equal(target(batch), source(batch))


def test_deepcopy_and_pickle_keep_producer_links(tmp_path):
    import copy
    import io

    qat_model = _calibrate(_prepare(Functional(), _inputs(), tmp_path), [_inputs()])
    buffer = io.BytesIO()
    torch.save(qat_model, buffer)
    buffer.seek(0)
    for clone in (copy.deepcopy(qat_model), torch.load(buffer, weights_only=False)):
        add = clone.get_submodule("_generated_add_0")
        assert add.producer_fake_quants == (
            clone.quant_a.activation_post_process,
            clone.quant_b.activation_post_process,
        )
        with torch.no_grad():
            assert torch.equal(clone(*_inputs()), qat_model(*_inputs()))


def test_tuple_pass_through_keeps_the_scale(tmp_path):
    class Chunk(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = QuantStub()

        def forward(self, x):
            a, b = self.quant(x).chunk(2, dim=1)
            return a * b, x.argmax(1)

    qat_model = _prepare(Chunk(), torch.randn(3, 4), tmp_path)
    mul = qat_model.get_submodule("_generated_mul_0")
    fq = qat_model.quant.activation_post_process
    assert mul.producer_fake_quants == (fq, fq)
    ops = [n.target for n in qat_model.graph.nodes if n.op == "call_method"]
    assert ops == ["chunk", "argmax"]


# ----------------------------------------------------------------- real code (review)


class _Q(nn.Module):
    """QuantStub, ``f``, DeQuantStub (``f`` may use ``self.mods``)."""

    def __init__(self, f, **mods):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.f, self.mods = f, nn.ModuleDict(mods)

    def forward(self, x):
        return self.dequant(self.f(self, self.quant(x)))


@pytest.mark.parametrize(
    "f, message",
    [
        (lambda m, x: x * 2 if x.sum().item() > 0 else -x, r"Tensor.item\(\)"),
        (lambda m, x: x * (1.0 / x.abs().amax().item()), r"Tensor.item\(\)"),
        (lambda m, x: x.reshape(len(x), -1).mean(1), r"len\(x\) on a tensor"),
    ],
    ids=["branch-on-item", "value-from-item", "len-is-the-batch"],
)
def test_values_read_from_tensors_are_refused_not_frozen(f, message, tmp_path):
    with pytest.raises(PrepareError, match=message):
        _prepare(_Q(f), (torch.ones(2, 3),), tmp_path)


class WithDefault(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()

    def forward(self, x, scale=2.0):
        return self.dequant(self.quant(x) * scale)


def test_a_forward_argument_with_a_default_takes_it(tmp_path):
    qat_model = _prepare(WithDefault(), (torch.randn(2, 3),), tmp_path)
    x = torch.randn(2, 3)
    _float_equal(WithDefault(), qat_model, (x,))


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()

    def forward(self, x):
        return self.dequant(self.quant(x.mul_(0.5)))  # in place, before the stub


def test_in_place_ops_do_not_touch_the_callers_example_inputs(tmp_path):
    x = torch.ones(2, 3)
    _prepare(InPlace(), (x,), tmp_path)
    assert torch.equal(x, torch.ones(2, 3))


def test_multihead_attention_refuses_what_it_does_not_compute(tmp_path):
    mha = nn.MultiheadAttention(8, 2)
    used_weights = _Q(lambda m, x: m.mods["a"](x, x, x)[1], a=mha)
    with pytest.raises(UnsupportedOpError, match="does not compute output 1"):
        _prepare(used_weights, (torch.randn(5, 2, 8),), tmp_path)
    unbatched = _Q(lambda m, x: m.mods["a"](x, x, x)[0], a=mha)
    with pytest.raises(UnsupportedOpError, match="unbatched"):
        _prepare(unbatched, (torch.randn(5, 8),), tmp_path)


def test_dividing_by_a_size_is_a_located_error(tmp_path):
    model = _Q(lambda m, x: x / x.size(-1))
    with pytest.raises(UnsupportedOpError, match="computed from sizes") as info:
        _prepare(model, (torch.randn(2, 4),), tmp_path)
    assert "test_prepare.py" in str(info.value)


def test_prepare_errors_are_hbir_errors_and_a_bad_out_dir_is_one(tmp_path):
    """prepare's own errors belong to the one family of user errors; an out_dir
    that is a file is a one-line error naming it, not a raw OSError."""
    assert issubclass(PrepareError, hbir.HbirError)
    assert issubclass(UnsupportedOpError, hbir.HbirError)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()

        def forward(self, x):
            return self.dequant(torch.relu(self.quant(x)))

    with pytest.raises(hbir.HbirOutputError, match=r"a_file: cannot write prepare"):
        prepare(Net(), torch.randn(1, 4), out_dir=blocker)


class IndexResults(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        values, indices = y.max(-1)
        picked = y.gather(-1, y.topk(2, -1).indices)  # indices read: fine
        return values + indices + picked.sum(-1) + y.argmax(-1).float()


def test_arithmetic_on_indices_is_refused_at_prepare_not_at_export(tmp_path):
    """max(dim), topk and argmax give integer indices; reading with them and
    casting them to values (scale 1) is supported, adding them to values has no
    quantized form, so prepare lists that use at its line, before any calibration
    or QAT is spent."""
    with pytest.raises(UnsupportedOpError, match="cannot quantize 1 op") as error:
        prepare(IndexResults().eval(), (torch.randn(2, 8),), out_dir=tmp_path)
    text = str(error.value)
    assert "_operator.add: it computes with integer indices" in text
    assert text.count("test_prepare.py:") == 1


class KeywordArguments(nn.Module):
    """Module calls with keyword arguments: one the rule takes (``hx=``), one
    that it cannot quantize (a padding mask computed from the input)."""

    def __init__(self, masked: bool):
        super().__init__()
        self.quant = QuantStub()
        self.gru = nn.GRU(4, 4, batch_first=True)
        self.mha = nn.MultiheadAttention(4, 2, batch_first=True)
        self.h0 = nn.Parameter(torch.randn(1, 1, 4))
        self.masked = masked

    def forward(self, x):
        x = self.quant(x)
        h0 = self.h0.expand(1, x.shape[0], 4).contiguous()
        y = self.gru(x, hx=h0)[0]
        if self.masked:
            padding = y[..., 0] > 0
            return self.mha(y, y, y, key_padding_mask=padding, need_weights=False)[0]
        return self.mha(y, y, y, need_weights=False)[0]


def test_keyword_arguments_of_module_calls_are_used_or_refused_never_dropped(tmp_path):
    model = KeywordArguments(masked=False).eval()
    x = torch.randn(2, 3, 4)
    qat_model = _prepare(model, x, tmp_path)
    set_fake_quantize(qat_model, FakeQuantState._FLOAT)
    with torch.no_grad():
        torch.testing.assert_close(qat_model(x), model(x), atol=1e-5, rtol=1e-5)
    with pytest.raises(UnsupportedOpError, match="a key padding mask"):
        _prepare(KeywordArguments(masked=True).eval(), x, tmp_path / "masked")


class StandardisedConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3))
        self.gain = nn.Parameter(torch.ones(4, 1, 1, 1))

    def forward(self, x):
        w = self.weight
        w = (w - w.mean((1, 2, 3), keepdim=True)) / (
            w.std((1, 2, 3), keepdim=True) + 1e-5
        )
        return F.conv2d(self.quant(x), w * self.gain, padding=1)


def test_a_weight_computed_from_parameters_is_computed_and_trained_each_forward(
    tmp_path,
):
    model = StandardisedConv().eval()
    x = torch.randn(2, 3, 6, 6)
    qat_model = _prepare(model, x, tmp_path)
    conv = next(
        m for m in qat_model.modules() if isinstance(m, qat.ComputedWeightConv2d)
    )
    set_fake_quantize(qat_model, FakeQuantState._FLOAT)
    with torch.no_grad():
        torch.testing.assert_close(qat_model(x), model(x), atol=1e-5, rtol=1e-5)
    qat_model.train()
    set_fake_quantize(qat_model, FakeQuantState.QAT)
    qat_model(x).pow(2).mean().backward()
    params = dict(qat_model.named_parameters())
    assert params["weight"].grad is not None and params["gain"].grad is not None
    assert not conv.weight.requires_grad  # kept detached between forwards
