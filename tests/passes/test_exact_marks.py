"""qnt.exact marks: export writes them, the interpreter honours them, and
remove-fake-quant drops them where it makes an op float (docs/contract.md)."""

import numpy as np
import pytest
import torch
from torch import nn
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import VerifyException

import hbir
from hbir.dialects import make_context, qnt
from hbir.dialects.op_ids import op_ids
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
