"""Op identity: every op's torch origin aligns qat.pt, qat.bc and quantized.bc
exactly, and survives save / load and graph edits."""

import numpy as np
import pytest
import zoo
import zoo_stages

import hbir
from hbir.bc_editor import remove_fake_quant
from hbir.profiler import origin as og
from hbir.quantization import export, pre_export


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    qat, example = zoo_stages.calibrated("mobilenet", tmp_path_factory.mktemp("o"))
    qat_bc = export(qat, example)
    return qat, qat_bc, hbir.convert(qat_bc, "nash-e")


def _feed(batch):
    return {f"_input_{i}": t.numpy() for i, t in enumerate(batch)}


def test_every_computing_op_has_an_origin_after_export_and_convert(stages):
    _, qat_bc, quantized = stages
    for model in (qat_bc, quantized):
        func = model["forward"].op
        missing = [
            op.name
            for op in func.body.block.ops
            if op.results and og.origin_of(op) is None
        ]
        assert missing == []


def test_origin_fields(stages):
    _, qat_bc, _ = stages
    ops = og.layer_ops(qat_bc["forward"].op)
    origin = og.origin_of(ops[("stem.1", 0)])
    assert origin.torch_op == "hbir.quantization.lut_modules.Hardswish"
    assert origin.call_index == 0 and origin.file == "tests/zoo.py"
    lines = open(zoo.__file__).read().splitlines()
    assert "self.stem(" in lines[origin.line - 1]


def test_torch_and_hbir_records_align_exactly(stages):
    qat, qat_bc, quantized = stages
    batch = zoo.batches("mobilenet", 1, batch=2, seed=9)[0]
    pt = og.record_torch(pre_export(qat), batch)
    bc = og.record_hbir(qat_bc["forward"], _feed(batch))
    grids = og.fake_quant_grids(qat_bc["forward"].op)
    q = og.record_hbir(quantized["forward"], _feed(batch), grids)
    # qat.bc holds every torch call of qat.pt except the ones export folds.
    assert set(bc.layers) <= set(pt.layers)
    assert set(pt.layers) - set(bc.layers) == {("dequant", 0)}
    assert set(q.layers) <= set(bc.layers) and len(q.layers) >= len(bc.layers) - 1
    for key, layer in bc.layers.items():  # the contract: bit-identical
        np.testing.assert_array_equal(layer.value, pt.layers[key].value)
    for key, layer in q.layers.items():
        np.testing.assert_array_equal(layer.value, bc.layers[key].value)


def test_a_module_called_twice_has_two_call_indices(tmp_path):
    qat, example = zoo_stages.calibrated("resnet", tmp_path)
    keys = set(og.torch_keys(qat).values())
    calls = sorted(k for k in keys if k[0] == "layer1.relu")
    # torchvision's shared self.relu: conv-bn-relu is fused, the last relu is not.
    assert calls and calls == [("layer1.relu", i) for i in range(len(calls))]
    qat_bc = export(qat, example)
    bc = {
        og.origin_of(op).key for op in qat_bc["forward"].op.walk() if og.origin_of(op)
    }
    assert set(calls) <= bc


def test_origins_survive_save_load_and_remove_fake_quant(stages, tmp_path):
    _, qat_bc, _ = stages
    path = tmp_path / "qat.bc"
    hbir.save(qat_bc, path)
    loaded = hbir.load(path)
    before = [str(og.origin_of(op)) for op in qat_bc["forward"].op.walk()]
    after = [str(og.origin_of(op)) for op in loaded["forward"].op.walk()]
    assert before == after
    edited = remove_fake_quant(loaded, [[5, 7]])
    kept = {
        og.origin_of(op).key for op in edited["forward"].op.walk() if og.origin_of(op)
    }
    assert ("stem.1", 0) in kept
    quantized = hbir.convert(edited, "nash-e")
    assert ("stem.1", 0) in og.layer_ops(quantized["forward"].op)


def test_hand_written_ops_have_no_origin():
    m = hbir.Module.parse(
        "func.func @forward(%0: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %1 = hbir.relu %0 : tensor<4xf32>\n  func.return %1 : tensor<4xf32>\n}\n"
    )
    (relu,) = [op for op in m["forward"].op.walk() if op.name == "hbir.relu"]
    assert og.origin_of(relu) is None
