"""hbir.profiler.diagnose: every stage within contract on the zoo, and each
planted fault found at the right stage pair, op and cause."""

import copy
from pathlib import Path

import profiler_faults as faults
import pytest
import torch
import zoo
import zoo_stages
from torch import nn

import hbir
from hbir.dialects import qnt
from hbir.profiler import diagnose
from hbir.profiler.doctor import CAUSES
from hbir.profiler.origin import origin_of
from hbir.quantization import (
    DeQuantStub,
    FakeQuantState,
    QconfigSetter,
    QuantStub,
    export,
    float_validation,
    get_qconfig,
    prepare,
    qint16,
    set_fake_quantize,
)


@pytest.mark.parametrize("name", zoo.NAMES)
def test_an_unfaulted_zoo_model_is_within_contract_everywhere(name, tmp_path):
    qat, _ = zoo_stages.calibrated(name, tmp_path)
    d = diagnose(qat, faults.data(name))
    assert d.finding is None, d.text()
    assert [p.within for p in d.pairs] == [True, True, True]
    assert [(p.baseline, p.analysis) for p in d.pairs] == [
        ("qat.pt", "qat.export.pt"),
        ("qat.export.pt", "qat.bc"),
        ("qat.bc", "quantized.bc"),
    ]
    # The exact pairs are exact at every aligned layer, not only at the output.
    for p in d.pairs[1:]:
        assert p.layers and all(row["atol"] == 0 for row in p.layers)
    assert "every stage is within its contract" in d.text()
    # qat.pt against its float model: within tolerance, or (sparse_bev, whose
    # top-k picks flip under int8) a loss spread over the model: no finding.
    loss = d.quant_loss
    assert loss is not None and (loss.within or not loss.found), d.text()
    assert "float -> qat.pt" in d.text()


def _qat_bc_op(qat_bc, op_id):
    from hbir.dialects.op_ids import op_ids

    return op_ids(qat_bc["forward"].op)[op_id]


def test_a_table_with_too_few_segments(tmp_path):
    qat, qat_bc = faults.few_tables(tmp_path)
    d = diagnose(qat, faults.data("transformer"), qat_bc=qat_bc)
    f = d.finding
    assert (f.baseline, f.analysis) == ("qat.pt", "qat.export.pt")
    assert f.cause == "lookup-table approximation"
    assert f.layer == "norm2.rsqrt#0"
    assert "num_tables=6" in f.detail and f.lsb > 2.5
    op = _qat_bc_op(qat_bc, f.op_id)
    assert op.name == f.hbir_op == "hbir.rsqrt"
    assert origin_of(op).module_path == "norm2.rsqrt"
    line = faults.zoo_line("x = x + self.fc2(self.act(self.fc1(self.norm2(x))))")
    assert f.source == f"tests/zoo.py:{line}"
    assert [p.within for p in d.pairs] == [False, True, True]


def test_a_deploy_branch_that_changes_the_exported_graph(tmp_path):
    qat, qat_bc = faults.deploy_branch(tmp_path)
    d = diagnose(qat, faults.data("resnet"), qat_bc=qat_bc)
    f = d.finding
    assert (f.baseline, f.analysis) == ("qat.export.pt", "qat.bc")
    assert f.cause == "graph mismatch"
    assert f.hbir_op == "hbir.clip" and "clamp" in f.layer
    assert _qat_bc_op(qat_bc, f.op_id).name == "hbir.clip"
    lines = Path(faults.__file__).read_text().splitlines()
    (row,) = [i + 1 for i, t in enumerate(lines) if "x = torch.clamp(x, -1.0" in t]
    assert f.source == f"tests/profiler/faults.py:{row}"


def test_a_corrupted_requantization_constant(tmp_path):
    qat, qat_bc, quantized = faults.corrupted_quantized(tmp_path)
    d = diagnose(qat, faults.data("resnet"), qat_bc=qat_bc, quantized_bc=quantized)
    f = d.finding
    assert (f.baseline, f.analysis) == ("qat.bc", "quantized.bc")
    assert f.layer == f"{faults.PLANTED_CONV}#0"
    assert f.cause == "stale or corrupted quantized.bc"
    assert "convert it again" in f.detail
    # the element and both values, read back from the two models
    from hbir.dialects.qnt import RequantizeOp

    def first_shift(module):
        return next(
            int(op.shift.get_values()[0])
            for op in module.module.op.walk()
            if isinstance(op, RequantizeOp)
            and origin_of(op).module_path == faults.PLANTED_CONV
        )

    planted, expected = (
        first_shift(quantized),
        first_shift(hbir.convert(qat_bc, "nash-e")),
    )
    assert planted == expected - 1
    assert (
        f"shift[0] = {planted} (expected {expected}; 1 of 1 elements differ)"
        in f.detail
    )
    op = _qat_bc_op(qat_bc, f.op_id)
    assert op.name == f.hbir_op == "hbir.conv2d"
    line = faults.zoo_line("out = self.bn2(self.conv2(out))")
    assert f.source == f"tests/zoo.py:{line}"
    assert [p.within for p in d.pairs] == [True, True, False]
    # The quantized.bc ID names an op of that conv in the corrupted model.
    from hbir.dialects.op_ids import op_ids

    analysis_op = op_ids(quantized["forward"].op)[f.analysis_op_id]
    assert origin_of(analysis_op).module_path == faults.PLANTED_CONV


class MixedConv(nn.Module):
    """timm's MixedConv2d: channels split unevenly, a depthwise conv of its own
    kernel size on each part, the parts concatenated."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.splits = [2, 3, 3]
        self.convs = nn.ModuleList(
            nn.Conv2d(c, c, k, padding=k // 2, groups=c)
            for c, k in zip(self.splits, (3, 5, 7), strict=True)
        )
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        parts = torch.split(self.stem(self.quant(x)), self.splits, 1)
        x = torch.cat([c(parts[i]) for i, c in enumerate(self.convs)], 1)
        return self.dequant(self.head(x))


def test_a_corrupted_constant_after_a_split_is_not_a_graph_mismatch(tmp_path):
    """Not every op of qat.bc is recorded in quantized.bc (a split's parts):
    that alone is no graph mismatch, so the corrupted constant is named."""
    torch.manual_seed(0)
    data = [(torch.randn(2, 3, 8, 8),) for _ in range(3)]
    qat = zoo_stages.validated(MixedConv(), [b[0] for b in data], tmp_path)
    qat_bc = export(qat, data[0])
    quantized = hbir.convert(qat_bc, "nash-e")
    faults.corrupt_requantize(quantized, "convs.2")
    d = diagnose(qat, data, qat_bc=qat_bc, quantized_bc=quantized)
    f = d.finding
    assert (f.baseline, f.analysis) == ("qat.bc", "quantized.bc"), d.text()
    assert f.layer == "convs.2#0" and f.cause == "stale or corrupted quantized.bc"


def test_causes_are_the_fixed_list():
    assert CAUSES == (
        "lookup-table approximation",
        "requantization tie",
        "float CPU island",
        "graph mismatch",
        "input preprocessing or layout",
        "march limit",
        "stale or corrupted quantized.bc",
        "stale or corrupted model.hbm",
        "stale or foreign checkpoint",
        "input normalisation",
        "observer still on",
        "quantization loss: int8 too coarse",
        "quantization loss: clipped calibration range",
        "quantization loss",
        "inexact: float_validation",
        "tool bug",
    )


class WideLinear(nn.Module):
    """1024 int8 x int8 terms into an int16 output: a float32 forward rounds the
    sum, the integer pipeline does not."""

    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.fc = nn.Linear(1024, 64)
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.fc(self.quant(x)))


def test_an_export_inside_float_validation_is_a_named_cause_everywhere(tmp_path):
    """float_validation() makes qat.bc's ops float: each is marked qnt.inexact
    (kept by save / load), convert warns and lists them, the doctor names it."""
    torch.manual_seed(0)
    batches = [(torch.randn(8, 1024),) for _ in range(3)]
    qconfig = get_qconfig(out_dtype=qint16)
    qat = prepare(WideLinear().eval(), batches[0], qconfig, out_dir=tmp_path)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for b in batches:
            qat(*b)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    with float_validation():
        qat_bc = export(qat, batches[0])
    hbir.save(qat_bc, tmp_path / "qat.bc")
    qat_bc = hbir.load(tmp_path / "qat.bc")
    marked = [op for op in qat_bc.module.op.walk() if qnt.INEXACT in op.attributes]
    assert [op.name for op in marked] == ["hbir.linear"]
    assert qnt.inexact(marked[0]) == "float_validation"
    with pytest.warns(UserWarning, match=r"1 op\(s\) of qat.bc are marked qnt.inexact"):
        quantized = hbir.convert(qat_bc, "nash-e")
    advice = hbir.conversion.inexact_advice(qat_bc)
    assert len(advice) == 1 and "'hbir.linear'" in advice[0]
    assert "float_validation" in advice[0]
    with float_validation(), pytest.warns(UserWarning):
        d = diagnose(qat, batches, qat_bc=qat_bc, quantized_bc=quantized)
    assert d.finding is not None and d.finding.cause == "inexact: float_validation"
    # outside float_validation() the same model is exact, with no mark
    exact = export(qat, batches[0])
    assert not any(qnt.INEXACT in op.attributes for op in exact.module.op.walk())
    assert diagnose(qat, batches).finding is None


def test_empty_data_is_refused(tmp_path):
    qat, _ = zoo_stages.calibrated("resnet", tmp_path)
    with pytest.raises(hbir.HbirError, match="data is empty"):
        diagnose(qat, [])


def test_memory_does_not_grow_with_the_number_of_batches(tmp_path):
    import gc
    import tracemalloc

    import hbir
    from hbir.profiler.origin import fake_quant_grids
    from hbir.profiler.stages import Stage
    from hbir.quantization import export, pre_export

    qat, _ = zoo_stages.calibrated("multi_io", tmp_path)
    batch = faults.data("multi_io", 1)[0]
    qat_bc = export(qat, batch)
    grids = fake_quant_grids(qat_bc["forward"].op)
    stages = [
        Stage("qat.pt", qat),
        Stage("qat.export.pt", pre_export(qat)),
        Stage("qat.bc", qat_bc),
        Stage("quantized.bc", hbir.convert(qat_bc, "nash-e"), grids),
    ]
    # What one batch's per-layer tensors take, in all four stages.
    per_batch = sum(
        layer.value.nbytes for s in stages for layer in s.record(batch).layers.values()
    )
    diagnose(qat, faults.data("multi_io", 2), qat_bc=qat_bc)  # warm caches
    peaks = []
    for count in (2, 6):
        data = (faults.data("multi_io", 1, seed=i)[0] for i in range(count))
        # Without the cycle collector, the garbage of convert and export counts in
        # both runs alike (and any per-batch cycle counts as growth): the peaks do
        # not depend on when earlier tests left the collector.
        gc.collect()
        gc.disable()
        tracemalloc.start()
        try:
            d = diagnose(qat, data, qat_bc=qat_bc)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
            gc.enable()
        assert d.batches == count and d.ok
    # Keeping the layers of the 4 more batches would add 4 * per_batch.
    assert peaks[1] - peaks[0] < 2 * per_batch, (peaks, per_batch)


def test_progress_bar(tmp_path, capsys):
    qat, _ = zoo_stages.calibrated("multi_io", tmp_path)
    data = faults.data("multi_io", count=3)
    diagnose(qat, data, progress=True)
    err = capsys.readouterr().err
    assert "hbir doctor" in err and "3/3" in err  # a total, so an ETA


def test_a_float_island_in_quantized_bc_is_named(tmp_path):
    from hbir.bc_editor import remove_fake_quant
    from hbir.dialects.op_ids import op_ids
    from hbir.quantization import export

    qat, example = zoo_stages.calibrated("mobilenet", tmp_path)
    qat_bc = export(qat, example)
    ops = op_ids(qat_bc["forward"].op)
    (hardswish, *_) = [n for n, op in ops.items() if op.name == "hbir.hardswish"]
    # quantized.bc made from a qat.bc whose stem hardswish was made float.
    edited = remove_fake_quant(qat_bc, [[hardswish - 1, hardswish + 1]])
    quantized = hbir.convert(edited, "nash-e")
    d = diagnose(qat, faults.data("mobilenet"), qat_bc=qat_bc, quantized_bc=quantized)
    f = d.finding
    assert (f.baseline, f.analysis) == ("qat.bc", "quantized.bc")
    assert f.cause == "float CPU island"
    assert f.op_id == hardswish - 2 or f.op_id == hardswish  # the conv or the op
    assert origin_of(_qat_bc_op(qat_bc, f.op_id)).module_path.startswith("stem")


def test_a_qat_bc_exported_from_another_checkpoint(tmp_path):
    """qat.bc exported, then the evaluated model trained on (a conv's weights
    moved): not a tool bug but a stale checkpoint, naming the constant, the
    element and both values."""
    qat, example = zoo_stages.calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    conv = qat.get_submodule(faults.PLANTED_CONV)
    with torch.no_grad():
        before = float(conv.weight[0, 0, 0, 0])
        conv.weight.mul_(0.9)
        after = float(conv.weight[0, 0, 0, 0])
    d = diagnose(qat, faults.data("resnet"), qat_bc=qat_bc)
    f = d.finding
    assert f is not None, d.text()
    assert (f.baseline, f.analysis) == ("qat.export.pt", "qat.bc"), d.text()
    assert f.cause == "stale or foreign checkpoint"
    assert "qat.bc was exported from another model state" in f.detail
    assert f"'hbir.constant' (of {faults.PLANTED_CONV}#0)" in f.detail
    assert f"has {before!r} at [0, 0, 0, 0], qat.pt's export has {after!r}" in f.detail
    assert "export it again" in f.detail
    assert f.layer == f"{faults.PLANTED_CONV}#0" and f.hbir_op == "hbir.conv2d"
    line = faults.zoo_line("out = self.bn2(self.conv2(out))")
    assert f.source == f"tests/zoo.py:{line}"


def test_data_normalised_otherwise_than_calibration_is_named(tmp_path):
    """Every stage agrees bit for bit on data in 0..255 while the model was
    calibrated on data in about [-1, 1]: the doctor says so at the input
    QuantStub and names the normalisation that fits."""
    qat, _ = zoo_stages.calibrated("resnet", tmp_path)
    data = [tuple((x + 1) * 127.5 for x in batch) for batch in faults.data("resnet")]
    d = diagnose(qat, data)
    assert all(p.within for p in d.pairs), d.text()
    f = d.finding
    assert f is not None and f.cause == "input normalisation", d.text()
    assert (f.baseline, f.analysis) == ("data", "qat.pt")
    assert f.layer == "quant#0" and f.hbir_op == "qnt.const_fake_quant"
    assert (
        "of its values fall outside the range its QuantStub was calibrated" in f.detail
    )
    assert "as x / 127.5 - 1 it would fit" in f.detail
    line = faults.zoo_line("x = self.pool(self.stem(self.quant(x)))")
    assert f.source == f"tests/zoo.py:{line}"
    assert "but the data is not what the model was calibrated on" in d.text()
    assert not d.ok


@pytest.mark.parametrize("state", ["CALIBRATION", "QAT"])
def test_a_qat_pt_still_observing_is_a_finding_not_an_error(state, tmp_path):
    qat, _ = zoo_stages.calibrated("resnet", tmp_path)
    qat.train(state == "QAT")
    set_fake_quantize(qat, getattr(FakeQuantState, state))
    d = diagnose(qat, faults.data("resnet"))
    f = d.finding
    assert f is not None and f.cause == "observer still on"
    assert f"in FakeQuantState.{state}" in f.detail
    assert "set_fake_quantize(model, FakeQuantState.VALIDATION)" in f.detail
    assert f.layer == "quant" and not d.ok and d.pairs == []
    assert "qat.pt is not frozen" in d.text()


# ------------------------------------------------ quantization loss in qat.pt


def _cosine(x, y) -> float:
    x, y = x.double().flatten(), y.double().flatten()
    return float(torch.nn.functional.cosine_similarity(x, y, dim=0))


def _float_outputs(qat, data):
    from hbir.quantization.fake_quantize import FakeQuantize

    model = copy.deepcopy(qat)
    for m in model.modules():
        if isinstance(m, FakeQuantize):
            m.enable_fake_quant(False)
    with torch.no_grad():
        return [model(*batch) for batch in data]


SPREAD = "spread.activation_post_process"


def test_an_outlier_channel_is_quantization_loss_that_int16_recovers(tmp_path):
    """Every stage agrees bit for bit, but qat.pt is far from the float model:
    the doctor names the layer with its source line, says int16 recovers it,
    and the figure it measured is what following its advice gives."""
    qat, example = faults.outlier_channel(tmp_path)
    data = faults.data("resnet", 3)
    d = diagnose(qat, data)
    assert all(p.within for p in d.pairs), d.text()
    f = d.finding
    assert f is not None, d.text()
    assert (f.baseline, f.analysis) == ("float", "qat.pt")
    assert f.cause == "quantization loss: int8 too coarse"
    assert f.layer == "spread#0" and f.hbir_op == "hbir.conv2d"
    line = faults.faults_line("planted: an outlier channel (resnet)")
    assert f.source == f"tests/profiler/faults.py:{line}"
    assert "quantize spread in int16" in f.detail
    assert "qat.pt itself is far from the float model" in d.text()
    # The worst batch's cosine, against torch's own.
    loss = d.quant_loss
    floats = _float_outputs(qat, data)
    with torch.no_grad():
        cosines = [_cosine(fl, qat(*b)) for fl, b in zip(floats, data, strict=True)]
    assert loss.cosine == pytest.approx(min(cosines), abs=1e-9) and loss.cosine < 0.99
    assert loss.sensitive[0][0] == SPREAD
    # The measured int16 figure is what prepare with the advised qconfig gives.
    (int16,) = [
        r for r in loss.remedies if r.kind == "int16" and r.fake_quant == SPREAD
    ]
    assert int16.cosine >= 0.999
    advised, _ = faults.outlier_channel(
        tmp_path, QconfigSetter(module_name={"spread": qint16})
    )
    with torch.no_grad():
        redone = advised(*data[loss.batch])
    assert _cosine(floats[loss.batch], redone) == pytest.approx(int16.cosine, abs=1e-6)
    # A wider int8 range does not recover it, and the doctor says so.
    (wide,) = [r for r in loss.remedies if r.kind == "range" and r.fake_quant == SPREAD]
    assert wide.cosine < 0.99


def test_a_clipped_calibration_range_is_named_with_the_data_range(tmp_path):
    import json

    qat, _ = faults.clipped_range(tmp_path)
    data = faults.data("resnet", 3)
    d = diagnose(qat, data, out_dir=tmp_path / "report")
    saved = json.loads((tmp_path / "report" / "report.json").read_text())
    assert saved["finding"]["cause"] == "quantization loss: clipped calibration range"
    assert saved["quant_loss"]["cosine"] == d.quant_loss.cosine
    f = d.finding
    assert f is not None, d.text()
    assert (f.baseline, f.analysis) == ("float", "qat.pt")
    assert f.cause == "quantization loss: clipped calibration range"
    assert f.layer == f"{faults.CLIPPED_LAYER}#0" and f.hbir_op == "hbir.linear"
    line = faults.zoo_line("return self.dequant(self.fc(x))")
    assert f.source == f"tests/zoo.py:{line}"
    # The range it widens to is the float model's largest |fc output| over the
    # data (fc's output is the model's output).
    peak = max(float(out.abs().max()) for out in _float_outputs(qat, data))
    best = d.quant_loss.best
    assert best.kind == "range" and best.cosine >= 0.999
    assert d.quant_loss.ranges[best.fake_quant] == pytest.approx(peak, rel=1e-6)
    assert f"-> {peak:.6g} (the data's max |x|" in f.detail
    # int16 on the same clipped range does not recover it.
    (int16,) = [
        r
        for r in d.quant_loss.remedies
        if r.fake_quant == best.fake_quant and r.kind == "int16"
    ]
    assert int16.cosine < 0.99


def test_a_given_float_model_is_the_reference(tmp_path):
    model, _ = zoo.build("resnet")
    qat, _ = faults.clipped_range(tmp_path)
    d = diagnose(qat, faults.data("resnet"), float_model=model)
    assert d.finding.cause == "quantization loss: clipped calibration range"
    # The float model's own outputs are the reference (BN folded or not).
    with torch.no_grad():
        cosines = [_cosine(model(*b), qat(*b)) for b in faults.data("resnet")]
    assert d.quant_loss.cosine == pytest.approx(min(cosines), abs=1e-9)
    with pytest.raises(hbir.HbirError, match="float_model must be the float torch"):
        diagnose(qat, faults.data("resnet"), float_model="float.pt")
    with pytest.raises(hbir.HbirError, match="are not qat.pt's"):  # another model
        diagnose(qat, faults.data("resnet"), float_model=torch.nn.Flatten())


def test_a_loose_tolerance_reports_nothing(tmp_path):
    qat, _ = faults.clipped_range(tmp_path)
    d = diagnose(qat, faults.data("resnet"), cosine_tolerance=0.5)
    assert d.ok and d.quant_loss.within and d.quant_loss.remedies == []
    d = diagnose(qat, faults.data("resnet"), cosine_tolerance=None)  # skipped
    assert d.ok and d.quant_loss is None and "float -> qat.pt" not in d.text()
