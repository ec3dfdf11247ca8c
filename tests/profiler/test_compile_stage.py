"""The compile stage in hbir doctor: quantized.bc -> model.hbm, exact, recorded
through the debug table; a planted fault named by stage, op, instruction, field
and values, checked against the constants the test itself changed."""

import profiler_faults as faults
import zoo_stages

import hbir
from hbir.dialects.op_ids import op_ids
from hbir.profiler import diagnose
from hbir.profiler.compile_stage import program_difference, source_mismatch
from hbir.profiler.origin import origin_of
from hbir.quantization import export


def test_a_clean_model_hbm_is_within_contract_at_every_layer(tmp_path):
    qat, example = zoo_stages.calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    hbm = hbir.compile(quantized, tmp_path / "model.hbm")
    d = diagnose(qat, faults.data("resnet"), qat_bc=qat_bc, model_hbm=hbm)
    assert d.finding is None, d.text()
    assert d.stages[-1] == "model.hbm"
    last = d.pairs[-1]
    assert (last.baseline, last.analysis, last.contract) == (
        "quantized.bc",
        "model.hbm",
        "exact",
    )
    assert last.layers and all(row["atol"] == 0 for row in last.layers)
    assert len(last.layers) >= 10  # aligned layer by layer, not by the output only


def test_a_corrupted_constant_in_model_hbm(tmp_path):
    qat, qat_bc, quantized, bad, index, channel, old, new = faults.corrupted_hbm(
        tmp_path
    )
    d = diagnose(
        qat, faults.data("resnet"), qat_bc=qat_bc, quantized_bc=quantized, model_hbm=bad
    )
    f = d.finding
    assert [p.within for p in d.pairs] == [True, True, True, False]
    assert (f.baseline, f.analysis) == ("quantized.bc", "model.hbm")
    assert f.cause == "stale or corrupted model.hbm"
    assert f.layer == f"{faults.PLANTED_CONV}#0"
    line = faults.zoo_line("out = self.bn2(self.conv2(out))")
    assert f.source == f"tests/zoo.py:{line}"
    assert f"instruction #{index} conv" in f.detail
    assert "field 'multiplier' (a constant" in f.detail
    assert f"has {new} at [{channel}], a fresh compile has {old}" in f.detail
    assert "1 of" in f.detail and "compile it again" in f.detail
    # the quantized.bc op the instruction computes is of that conv
    op = op_ids(quantized["forward"].op)[f.analysis_op_id]
    assert origin_of(op).module_path == faults.PLANTED_CONV
    text = d.text()
    assert "first stage pair beyond contract: quantized.bc -> model.hbm" in text
    assert f"in model.hbm: instruction #{f.instruction}" in text


def test_a_model_hbm_of_another_model_state_is_stale(tmp_path):
    """model.hbm compiled from the same model after three more QAT steps: its
    debug table names other ops under the IDs (constants folded differently), so
    it is compared by its outputs and called stale, naming the first op that does
    not match; a program with the same IDs but other constants is found by the
    field-by-field comparison with a fresh compile."""
    qat, example = zoo_stages.calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    other, _ = zoo_stages.calibrated("resnet", tmp_path, qat_steps=3)
    stale = hbir.compile(hbir.convert(export(other, example), "nash-e"))
    mismatch = source_mismatch(quantized["forward"], stale["forward"])
    d = diagnose(qat, faults.data("resnet"), qat_bc=qat_bc, model_hbm=stale)
    f = d.finding
    assert (f.baseline, f.analysis) == ("quantized.bc", "model.hbm"), d.text()
    assert f.cause == "stale or corrupted model.hbm"
    if mismatch:
        assert mismatch.startswith("instruction #") and " but %" in mismatch
        assert f"was not compiled from this quantized.bc: {mismatch}" in f.detail
    else:
        assert "a fresh compile has" in f.detail
    fresh = hbir.compile(quantized)["forward"].code
    assert program_difference(stale["forward"].code, fresh) is not None
    assert program_difference(hbir.compile(quantized)["forward"].code, fresh) is None


def test_quant_analysis_compares_model_hbm_with_its_quantized_bc(tmp_path):
    import pytest

    from hbir.profiler import QuantAnalysis
    from hbir.profiler.quant_analysis import QuantAnalysisError
    from hbir.profiler.stages import StageError

    qat, qat_bc, quantized, bad, index, _, _, _ = faults.corrupted_hbm(tmp_path)
    good = hbir.load(tmp_path / "model.hbm")
    batch = faults.data("resnet", 1)[0]
    qa = QuantAnalysis(quantized, good, "compile", out_dir=str(tmp_path / "good"))
    qa.set_bad_case(batch)
    qa.run()
    rows = qa.compare_per_layer()
    assert len(rows) >= 10 and all(r["Atol"] == 0 for r in rows)
    qa = QuantAnalysis(quantized, bad, "compile", out_dir=str(tmp_path / "bad"))
    qa.set_bad_case(batch)
    qa.run()
    rows = qa.compare_per_layer()
    first = next(r for r in rows if r["Atol"] > 0)
    assert first["mod_name"] == f"{faults.PLANTED_CONV}#0"
    assert (tmp_path / "bad" / "compare_per_layer_out.txt").exists()
    with pytest.raises(QuantAnalysisError, match="hbir doctor --hbm"):
        qa.sensitivity()
    with pytest.raises(StageError, match="the baseline is the quantized.bc"):
        QuantAnalysis(qat_bc, bad, "compile", out_dir=str(tmp_path))
    with pytest.raises(StageError, match="analysis model is the model.hbm"):
        QuantAnalysis(quantized, qat_bc, "compile", out_dir=str(tmp_path))
    with pytest.raises(StageError, match="analysis_model_type 'compile'"):
        QuantAnalysis(quantized, bad, "convert", out_dir=str(tmp_path))


# ------------------------------------------- an io-removed quantized.bc / model.hbm


def test_an_io_removed_model_is_fed_codes_and_compared_in_float(tmp_path, capsys):
    """quantized.bc with its input Quantize and output Dequantize removed, and the
    model.hbm compiled from it, take int8 codes: the doctor feeds them the same
    batches quantized as the removed op did, and compares their outputs
    dequantized as it did; a corrupted constant is still named."""
    import numpy as np

    from hbir.profiler.quant_analysis import QuantAnalysis
    from hbir.profiler.stages import Stage

    qat, qat_bc, quantized, bad, index, channel, old, new = faults.corrupted_hbm(
        tmp_path, io_removed=True
    )
    assert "Remove op _input_0_Quantize_0 successfully" in capsys.readouterr().out
    arg = quantized["forward"].inputs[0]
    assert arg.dtype == np.int8
    data = faults.data("resnet")
    # the codes fed: round half to even of x / scale, clipped (numpy here)
    x = data[0][0].numpy()
    scale = float(arg.quant_info.scales[0])
    codes = np.clip(np.rint(x / np.float32(scale)), -128, 127).astype(np.int8)
    fed = Stage("quantized.bc", quantized).feed(data[0])[arg.name]
    np.testing.assert_array_equal(fed, codes)

    good = hbir.load(tmp_path / "model.hbm")
    d = diagnose(qat, data, qat_bc=qat_bc, quantized_bc=quantized, model_hbm=good)
    assert d.finding is None, d.text()
    assert all(max(p.output_atol) == 0 for p in d.pairs[1:])
    d = diagnose(qat, data, qat_bc=qat_bc, quantized_bc=quantized, model_hbm=bad)
    f = d.finding
    assert (f.baseline, f.analysis) == ("quantized.bc", "model.hbm"), d.text()
    assert f.cause == "stale or corrupted model.hbm"
    assert f.layer == f"{faults.PLANTED_CONV}#0"
    assert f"has {new} at [{channel}], a fresh compile has {old}" in f.detail
    # QuantAnalysis' compile pair on the same float batches (codes compared)
    qa = QuantAnalysis(quantized, good, "compile", out_dir=str(tmp_path / "qa"))
    qa.set_bad_case(data[0])
    rows = qa.compare_per_layer()
    assert len(rows) >= 10 and all(r["Atol"] == 0 for r in rows)
