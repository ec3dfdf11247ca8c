"""Every zoo model prepares, calibrates, trains with QAT, and evaluates in VALIDATION."""

import pytest
import torch
import torch.nn.functional as F
import zoo

from hbir.quantization import (
    ConsistencyStrategy,
    FakeQuantize,
    FakeQuantState,
    prepare,
    set_fake_quantize,
)
from hbir.quantization import lut_modules as lut
from hbir.quantization import qat_modules as qat
from hbir.quantization.decompositions import (
    LayerNormDecomposition,
    SoftmaxDecomposition,
)

EXPECTED_MODULES = {
    "resnet": {
        qat.Conv2d,
        qat.MaxPool2d,
        qat.QuantAdd,
        qat.ReLU,
        qat.AdaptiveAvgPool2d,
        qat.Linear,
    },
    "mobilenet": {
        qat.Conv2d,
        lut.Hardswish,
        lut.Sigmoid,
        qat.QuantMul,
        qat.QuantAdd,
        qat.AdaptiveAvgPool2d,
        qat.Linear,
    },
    "transformer": {
        LayerNormDecomposition,
        SoftmaxDecomposition,
        lut.Rsqrt,
        lut.Exp,
        lut.Reciprocal,
        lut.GELU,
        qat.QuantMatmul,
        qat.Linear,
        qat.QuantAdd,
    },
    "posenc": {
        lut.Sin,
        lut.Cos,
        lut.Rsqrt,
        lut.Reciprocal,
        lut.Exp,
        lut.Log,
        lut.Sqrt,
        lut.Tanh,
        lut.SiLU,
        lut.Hardsigmoid,
        qat.QuantCat,
        qat.QuantMean,
        qat.QuantSum,
        qat.Linear,
    },
    "multi_io": {
        qat.ConvTranspose2d,
        qat.QuantCat,
        qat.QuantSub,
        qat.QuantMean,
        qat.MaxPool2d,
        qat.AvgPool2d,
        qat.Clamp,
        qat.Linear,
    },
    "fpn_head": {
        qat.Conv2d,
        qat.ReLU,
        lut.Sigmoid,
        qat.QuantMul,
        qat.QuantSub,
        qat.QuantCat,
    },
    "sparse_bev": {qat.Conv2d},  # selection and the scatter pass the grid through
    "const_tables": {
        qat.Conv2d,
        qat.Abs,
        qat.QuantAdd,
        qat.QuantSub,
        qat.QuantMul,
        lut.Log,
        lut.Rsqrt,
        qat.QuantCat,
    },
}


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _output_fake_quants(qat_model):
    """The fake quant feeding each DeQuantStub, in output order."""
    output = next(n for n in qat_model.graph.nodes if n.op == "output")
    result = []
    for dequant in _as_tuple(output.args[0]):
        if dequant.op != "call_module":  # int64 indices: no fake quant
            result.append(None)
            continue
        node = dequant.args[0]
        while node.op != "call_module":
            node = node.all_input_nodes[0]
        result.append(qat_model.get_submodule(node.target).activation_post_process)
    return result


# Cosine similarity of the VALIDATION output (after calibration and two QAT steps)
# with the float model's, pinned just below what is measured (the lowest output of
# each model, December 2026: resnet 0.99991, mobilenet 0.999993, transformer
# 0.99986, posenc 0.99862, multi_io 0.99163, fpn_head 0.9956, const_tables
# 0.9997, sparse_bev 0.9852: a near tie of scores picks another location than the
# float model); a regression in quantization shows.
MIN_COSINE = {
    "resnet": 0.9999,
    "mobilenet": 0.9999,
    "transformer": 0.9998,
    "posenc": 0.998,
    "multi_io": 0.991,
    "fpn_head": 0.995,
    "const_tables": 0.9996,
    "sparse_bev": 0.984,
}


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_model_full_workflow(name, tmp_path):
    model, example = zoo.build(name)
    qat_model = prepare(model, example, zoo.qconfig(name), out_dir=tmp_path)
    classes = {type(m) for m in qat_model.modules()}
    assert EXPECTED_MODULES[name] <= classes
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in qat_model.modules())
    if name == "mobilenet":
        depthwise = qat_model.get_submodule("block.depthwise.0.0")
        assert (
            depthwise.groups == depthwise.in_channels
            and depthwise.fused_relu == "relu6"
        )
        assert qat_model.get_submodule("block.se_reduce").fused_relu == "relu"

    check = (tmp_path / "model_check_result.txt").read_text()
    graph = (tmp_path / "fx_graph.txt").read_text()
    for node in qat_model.graph.nodes:
        assert f"| {node.name} " in graph
        if node.op == "call_module" and isinstance(
            qat_model.get_submodule(node.target), qat.QATModule
        ):
            assert f"| {node.target} " in check

    # _FLOAT reproduces the float model (BN folded, decompositions exact in float).
    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState._FLOAT)
    with torch.no_grad():
        reference = _as_tuple(model(*example))
        for got, want in zip(_as_tuple(qat_model(*example)), reference, strict=True):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)

    set_fake_quantize(qat_model, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in zoo.batches(name, 3):
            qat_model(*batch)
    fake_quants = [m for m in qat_model.modules() if isinstance(m, FakeQuantize)]
    assert all(fq.activation_post_process.has_data() for fq in fake_quants)

    qat_model.train()
    set_fake_quantize(qat_model, FakeQuantState.QAT)
    optimizer = torch.optim.SGD(qat_model.parameters(), lr=0.01)
    before = [p.detach().clone() for p in qat_model.parameters()]
    for batch in zoo.batches(name, 2, seed=7):
        outputs = _as_tuple(qat_model(*batch))
        loss = sum(o.square().mean() for o in outputs if o.is_floating_point())
        optimizer.zero_grad()
        loss.backward()
        grads = [p.grad for p in qat_model.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads)
        assert sum(g.abs().sum() for g in grads) > 0
        optimizer.step()
    assert any(
        not torch.equal(a, p)
        for a, p in zip(before, qat_model.parameters(), strict=True)
    )

    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState.VALIDATION)
    with torch.no_grad():
        outputs = _as_tuple(qat_model(*example))
        reference = _as_tuple(model(*example))
    for out, fq, want in zip(
        outputs, _output_fake_quants(qat_model), reference, strict=True
    ):
        if fq is None:  # indices: compared stage by stage (tests/test_contract.py)
            continue
        assert torch.isfinite(out).all()
        assert torch.equal(
            torch.round(out / fq.scale) * fq.scale, out
        )  # on the int grid
        similarity = F.cosine_similarity(out.flatten(), want.flatten(), dim=0)
        assert similarity >= MIN_COSINE[name], (name, similarity)


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_model_at_consistency_level_2(name, tmp_path):
    ConsistencyStrategy.set_consistency_level(2)
    try:
        model, example = zoo.build(name)
        qat_model = prepare(model, example, zoo.qconfig(name), out_dir=tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    exact = [m for m in qat_model.modules() if isinstance(m, qat.QATModule) and m.exact]
    assert exact and all(m.supports_exact for m in exact)
    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in zoo.batches(name, 3):
            qat_model(*batch)
    set_fake_quantize(qat_model, FakeQuantState.VALIDATION)
    for fq in (m for m in qat_model.modules() if isinstance(m, FakeQuantize)):
        exponent = torch.log2(fq.scale.double())
        assert torch.equal(exponent, torch.round(exponent))
    with torch.no_grad():
        outputs = _as_tuple(qat_model(*example))
    assert all(torch.isfinite(out).all() for out in outputs)


def test_posenc_with_single_period_tables(tmp_path):
    model, example = zoo.build("posenc")
    qat_model = prepare(model, example, zoo.qconfig("posenc"), out_dir=tmp_path)
    for name in ("_generated_sin_0", "_generated_cos_0"):
        qat_model.get_submodule(name).single_period = True
    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in zoo.batches("posenc", 3):
            qat_model(*batch)
    set_fake_quantize(qat_model, FakeQuantState.VALIDATION)
    with torch.no_grad():
        out, reference = qat_model(*example), model(*example)
    sin = qat_model.get_submodule("_generated_sin_0")
    assert sin.period_fake_quant.scale.item() < 1e-4
    similarity = F.cosine_similarity(out.flatten(), reference.flatten(), dim=0)
    assert similarity >= 0.998, similarity  # measured 0.99864
