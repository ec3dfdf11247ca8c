"""qnt.exact marks: export writes them, the interpreter honours them, and
remove-fake-quant drops them where it makes an op float (docs/contract.md)."""

import numpy as np
import pytest
import torch
from torch import nn
from xdsl.dialects.builtin import DenseArrayBase, DictionaryAttr, IntegerAttr, f32, i64
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import VerifyException

import hbir
from hbir.dialects import make_context, qnt
from hbir.dialects.op_ids import op_ids
from hbir.errors import HbirVerifyError
from hbir.passes import get_all_passes
from hbir.quantization import (
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    export,
    prepare,
    set_fake_quantize,
)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu6 = nn.ReLU6()
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.relu6(self.conv(self.quant(x))) + 0.5)


@pytest.fixture(scope="module")
def qat_bc(tmp_path_factory):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(1, 3, 6, 6, generator=g) for _ in range(3)]
    qat = prepare(Net().eval(), (batches[0],), out_dir=tmp_path_factory.mktemp("p"))
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for b in batches:
            qat(b)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return export(qat, (batches[0],)), batches[0].numpy()


def run_pass(m: hbir.Module, spec: str) -> hbir.Module:
    edited = m.clone()
    PassPipeline.parse_spec(get_all_passes(), spec).apply(
        make_context(), edited.module.op
    )
    return edited


def _ops(m: hbir.Module) -> list:
    return list(m["forward"].op.body.block.ops)


def test_export_marks_the_fixed_point_ops(qat_bc):
    m, _ = qat_bc
    marked = {op.name for op in _ops(m) if qnt.EXACT in op.attributes}
    assert marked == {"hbir.conv2d", "hbir.add"}  # the relu6 is fused into the conv
    conv = next(op for op in _ops(m) if op.name == "hbir.conv2d")
    grids = qnt.exact(conv)
    assert len(grids.w_scales) == 4 and grids.in_bits == (8,)


def test_removing_the_fake_quant_after_the_conv_makes_it_float(qat_bc):
    m, x = qat_bc
    ops = _ops(m)
    conv_index = next(i for i, op in enumerate(ops) if op.name == "hbir.conv2d")
    # conv -> clip (the fused relu6) -> the output fake quant
    fq = ops[conv_index + 2]
    assert isinstance(fq, qnt.ConstFakeQuantOp)
    fq_id = next(n for n, op in op_ids(m["forward"].op).items() if op is fq)
    edited = run_pass(m, f"remove-fake-quant{{ids={fq_id}}}")
    conv = next(op for op in _ops(edited) if op.name == "hbir.conv2d")
    add = next(op for op in _ops(edited) if op.name == "hbir.add")
    assert qnt.EXACT not in conv.attributes and qnt.EXACT not in add.attributes
    values = {}
    edited["forward"].feed(
        {"_input_0": x}, on_op=lambda op, res: values.setdefault(op.name, res[0])
    )
    s = float(qnt.exact(next(o for o in _ops(m) if o.name == "hbir.conv2d")).out_scale)
    codes = values["hbir.conv2d"] / s
    assert not np.allclose(codes, np.round(codes))  # float, not on the output grid


def test_a_malformed_mark_is_a_verify_error(qat_bc):
    m, _ = qat_bc
    conv = next(op for op in _ops(m) if op.name == "hbir.conv2d").clone()
    conv.attributes[qnt.EXACT] = conv.attributes[qnt.EXACT].__class__(
        {"input": conv.attributes[qnt.EXACT].data["input"]}
    )
    with pytest.raises(VerifyException, match="needs exactly the entries"):
        qnt.exact(conv)


def _with_mark(m: hbir.Module, name: str, change) -> str:
    """The text of ``m`` with the mark of its first ``name`` op changed."""
    edited = m.clone()
    op = next(op for op in _ops(edited) if op.name == name)
    fields = dict(op.attributes[qnt.EXACT].data)
    change(fields)
    op.attributes[qnt.EXACT] = DictionaryAttr(fields)
    return edited.module.get_asm()


def _f32(*values):
    return DenseArrayBase.from_list(f32, list(values))


def _scaled(fields, key, factor):
    values = [v * factor for v in fields[key].get_values()]
    fields[key] = _f32(*values)


@pytest.mark.parametrize(
    "name, change, message",
    [
        ("hbir.conv2d", lambda f: _scaled(f, "input", 1.5), r"puts operand 0 on the"),
        ("hbir.conv2d", lambda f: _scaled(f, "output", 2.0), r"puts the result on the"),
        (
            "hbir.conv2d",
            lambda f: f.update(output_bits=IntegerAttr(16, 64)),
            r"puts the result on the grid .* \(16 bits\)",
        ),
        ("hbir.conv2d", lambda f: _scaled(f, "weight", 1.01), r"weight grid disagrees"),
        (
            "hbir.conv2d",
            lambda f: f.update(weight=_f32(*f["weight"].get_values()[:-1])),
            r"weight grid disagrees",
        ),
        ("hbir.conv2d", lambda f: _scaled(f, "input", -1.0), r"positive and finite"),
        (
            "hbir.conv2d",
            lambda f: f.update(input_bits=DenseArrayBase.from_list(i64, [8, 8])),
            r"one width \(8, 16 or 32\) per input scale",
        ),
        (
            "hbir.add",
            lambda f: f.update(input=_f32(0.0, 0.0)),
            r"calls operand 0 a float constant",
        ),
    ],
    ids=[
        "input scale",
        "output scale",
        "output bits",
        "weight scales",
        "weight count",
        "negative",
        "bits count",
        "constant",
    ],
)
def test_a_mark_that_lies_is_a_located_error_at_load(qat_bc, name, change, message):
    """qnt.exact is verified, not trusted: its grids must be those of the fake
    quantizations around its op (a lie would make qat.bc compute on other grids
    than convert lowers with)."""
    m, _ = qat_bc
    text = _with_mark(m, name, change)
    with pytest.raises(HbirVerifyError, match=message) as error:
        hbir.Module.parse(text, "qat_modified.bc")
    line = int(str(error.value).split(":")[1])
    assert name in text.splitlines()[line - 1]  # located at the marked op


def test_an_unknown_or_contradicting_inexact_mark_is_refused(qat_bc):
    m, _ = qat_bc
    text = m.module.get_asm()
    conv = next(line for line in text.splitlines() if "hbir.conv2d" in line)
    unknown = conv.replace("qnt.exact = {", 'qnt.inexact = "luck", qnt.exact = {')
    with pytest.raises(HbirVerifyError, match="qnt.inexact must be one of"):
        hbir.Module.parse(text.replace(conv, unknown))
    both = conv.replace(
        "qnt.exact = {", 'qnt.inexact = "float_validation", qnt.exact = {'
    )
    with pytest.raises(HbirVerifyError, match="cannot be both"):
        hbir.Module.parse(text.replace(conv, both))
