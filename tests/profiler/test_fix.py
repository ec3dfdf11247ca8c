"""hbir doctor --fix: each mechanical remedy recovers its planted fault on a copy,
with the metric before and after asserted, and nothing given is changed."""

import copy

import profiler_faults as faults
import torch
import zoo_stages

from hbir.profiler import diagnose
from hbir.profiler.fix import remedy
from hbir.quantization import FakeQuantState, export, set_fake_quantize


def _fixed(d, qat, data, **stages):
    fix = remedy(d, qat, data, **stages)
    assert fix is not None, d.text()
    assert fix.worked, fix.text()
    return fix


def test_too_few_tables_are_raised_until_within_bound(tmp_path):
    qat, qat_bc = faults.few_tables(tmp_path)
    data = faults.data("transformer")
    d = diagnose(qat, data, qat_bc=qat_bc)
    assert d.finding.cause == "lookup-table approximation"
    fix = _fixed(d, qat, data, qat_bc=qat_bc)
    assert fix.applied.startswith("norm2.rsqrt.num_tables = ")
    assert int(fix.applied.rsplit(" ", 1)[1]) > 6
    before, after = fix.before, fix.after.pairs[0]
    assert not before.within and after.within
    assert max(after.output_atol) < max(before.output_atol)
    assert qat.get_submodule("norm2.rsqrt").num_tables == 6  # the user's model
    assert "before: qat.pt -> qat.export.pt" in fix.text()


def test_a_stale_checkpoint_is_exported_again(tmp_path):
    qat, example = zoo_stages.calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    text = qat_bc.module.get_asm()
    with torch.no_grad():
        qat.get_submodule(faults.PLANTED_CONV).weight.mul_(0.9)
    data = faults.data("resnet")
    d = diagnose(qat, data, qat_bc=qat_bc)
    assert d.finding.cause == "stale or foreign checkpoint"
    fix = _fixed(d, qat, data, qat_bc=qat_bc)
    assert max(fix.before.output_atol) > 0
    assert max(fix.after.pairs[1].output_atol) == 0
    assert qat_bc.module.get_asm() == text  # the user's qat.bc is unchanged


def test_a_corrupted_model_hbm_is_compiled_again(tmp_path):
    qat, qat_bc, quantized, bad, *_ = faults.corrupted_hbm(tmp_path)
    data = faults.data("resnet")
    stages = dict(qat_bc=qat_bc, quantized_bc=quantized, model_hbm=bad)
    d = diagnose(qat, data, **stages)
    assert d.finding.cause == "stale or corrupted model.hbm"
    fix = _fixed(d, qat, data, **stages)
    assert max(fix.before.output_atol) > 0 and fix.before.analysis == "model.hbm"
    assert max(fix.after.pairs[-1].output_atol) == 0
    assert (tmp_path / "bad.hbm").exists()  # no file changed


def test_observers_still_on_are_frozen_on_a_copy(tmp_path):
    qat, _ = zoo_stages.calibrated("resnet", tmp_path)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    data = faults.data("resnet")
    d = diagnose(qat, data)
    assert d.finding.cause == "observer still on"
    fix = _fixed(d, qat, data)
    assert fix.before is None and len(fix.after.pairs) == 3
    assert any(
        bool(m.observer_enabled[0])
        for m in qat.modules()
        if hasattr(m, "observer_enabled")
    )


def test_misnormalised_data_is_normalised_on_a_copy(tmp_path):
    qat, _ = zoo_stages.calibrated("resnet", tmp_path)
    data = [tuple((x + 1) * 127.5 for x in batch) for batch in faults.data("resnet")]
    kept = copy.deepcopy(data)
    d = diagnose(qat, data)
    assert d.finding.cause == "input normalisation"
    fix = _fixed(d, qat, data)
    assert fix.applied == "the data normalised as x / 127.5 - 1"
    assert all(torch.equal(a[0], b[0]) for a, b in zip(data, kept, strict=True))


def test_a_cause_without_a_mechanical_remedy_has_no_fix(tmp_path):
    qat, qat_bc = faults.deploy_branch(tmp_path)
    d = diagnose(qat, faults.data("resnet"), qat_bc=qat_bc)
    assert d.finding.cause == "graph mismatch"
    assert remedy(d, qat, faults.data("resnet"), qat_bc=qat_bc) is None
    assert (
        remedy(diagnose(qat, faults.data("resnet")), qat, faults.data("resnet")) is None
    )
