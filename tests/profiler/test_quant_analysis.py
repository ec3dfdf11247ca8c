"""QuantAnalysis: the reference's methods and files, parsed back; two HBIR models."""

import copy
import importlib.util

import numpy as np
import profiler_faults as faults
import pytest
import torch
import zoo_stages

import hbir
from hbir.profiler.bisect import hbir_outputs
from hbir.profiler.quant_analysis import QuantAnalysis, QuantAnalysisError
from hbir.profiler.stages import StageError
from hbir.profiler.tables import parse_psql
from hbir.quantization import export
from hbir.quantization.fake_quantize import FakeQuantize

COMPARE_COLUMNS = [
    "",
    "mod_name",
    "base_op_type",
    "analy_op_type",
    "shape",
    "quant_dtype",
    "qscale",
    "Cosine",
    "L1",
    "Atol",
    "max_qscale_diff",
    "base_model_min",
    "analy_model_min",
    "base_model_max",
    "analy_model_max",
    "base_model_mean",
    "analy_model_mean",
]
STATISTIC_COLUMNS = [
    "Index",
    "Op Name",
    "Mod Name",
    "Attr",
    "Dtype",
    "Scale",
    "Min",
    "Max",
    "Mean",
    "Var",
    "Shape",
]


@pytest.fixture(scope="module")
def corrupted(tmp_path_factory):
    return faults.corrupted_quantized(tmp_path_factory.mktemp("qa"))


def test_two_hbir_models_per_layer_and_sensitivity(corrupted, tmp_path):
    _, qat_bc, quantized = corrupted
    qa = QuantAnalysis(qat_bc, quantized, "convert", out_dir=str(tmp_path))
    qa.auto_find_bad_case(faults.data("resnet", 3), metric="L1")
    qa.run()
    rows = qa.compare_per_layer()
    table = parse_psql((tmp_path / "compare_per_layer_out.txt").read_text())
    text = (tmp_path / "compare_per_layer_out.txt").read_text()
    header = [c.strip() for c in text.splitlines()[1].strip("|").split("|")]
    assert header == COMPARE_COLUMNS
    assert len(table) == len(rows) > 5
    by_name = {r["mod_name"]: r for r in table}
    planted = by_name[f"{faults.PLANTED_CONV}#0"]
    assert float(planted["max_qscale_diff"]) > 1
    assert planted["analy_op_type"].endswith("[qnt.requantize]")
    # Every layer before the corrupted conv is identical (aligned by origin).
    names = [r["mod_name"] for r in table]
    for name in names[: names.index(planted["mod_name"])]:
        assert float(by_name[name]["Atol"]) == 0.0, name
    csv = (tmp_path / "compare_per_layer_out.csv").read_text().splitlines()
    assert csv[0].split(", ") == COMPARE_COLUMNS[1:]
    assert len(csv) == len(rows) + 1
    for side in ("baseline_model", "analysis_model"):
        stat = (tmp_path / side / "statistic.txt").read_text()
        assert [c.strip() for c in stat.splitlines()[1].strip("|").split("|")] == (
            STATISTIC_COLUMNS
        )
    badcase = (tmp_path / "badcase.txt").read_text()
    for title in (
        "The bad case input index of each output:",
        "The metric results of each badcase:",
        "The bad case input index of the worst output:",
    ):
        assert title in badcase
    assert badcase.splitlines()[1].split() == [
        "Name/Index",
        "Cosine",
        "MSE",
        "L1",
        "KL",
        "SQNR",
    ]
    assert (tmp_path / "badcase.pt").exists()
    assert (tmp_path / "all_badcase_info.pt").exists()
    assert (tmp_path / "abnormal_layer_advisor.txt").exists()

    result = qa.sensitivity(metric="L1")
    (name,) = result
    rows = result[name]
    # The float fallback of the corrupted conv removes the most error: first.
    assert rows[0][0] == f"{faults.PLANTED_CONV}#0" and rows[0][1] == "exact"
    txt = (tmp_path / f"output_{name}_L1_sensitive_ops.txt").read_text()
    assert txt.splitlines()[0].split() == [
        "op_name",
        "sensitive_type",
        "op_type",
        "L1",
        "quant_dtype",
        "flops",
    ]
    # flops: the conv's multiply-adds, from its shapes (batch 2, 8 -> 8 channels,
    # 3x3, on the 8x8 map after the stem's max pool).
    assert rows[0][5] == f"{2 * 8 * 8 * 8 * (8 * 3 * 3)}" + rows[0][5][5:]
    assert rows[0][5].endswith("%)")
    shares = [float(r[5].split("(")[1].rstrip("%)")) for r in rows]
    assert sum(shares) == pytest.approx(100, abs=0.05)
    saved = torch.load(tmp_path / f"output_{name}_L1_sensitive_ops.pt")
    assert [r[0] for r in saved] == [r[0] for r in rows]
    # Parallel processes give the same table.
    assert qa.sensitivity(metric="L1", workers=2)[name] == rows


def test_fake_quant_sensitivity_toggles_one_quantizer_at_a_time(tmp_path):
    qat, _ = zoo_stages.calibrated("mobilenet", tmp_path)
    float_model = copy.deepcopy(qat)
    for m in float_model.modules():
        if isinstance(m, FakeQuantize):
            m.enable_fake_quant(False)
    qa = QuantAnalysis(float_model, qat, "fake_quant", out_dir=str(tmp_path / "o"))
    batch = faults.data("mobilenet", 1)[0]
    qa.set_bad_case(batch)
    rows = qa.sensitivity(metric="Cosine")["output_0"]
    kinds = {r[1] for r in rows}
    assert kinds == {"activation", "weight"}
    values = [r[3] for r in rows]
    assert values == sorted(values)  # Cosine: the most sensitive (lowest) first
    conv = qat.get_submodule("stem.0.0")
    macs = 2 * 8 * 8 * 8 * int(np.prod(conv.weight.shape[1:]))  # stride 2: 8x8
    stem = [r for r in rows if r[0] == "stem.0.0"]
    assert stem and all(r[5].startswith(f"{macs}(") for r in stem)
    # One row checked by hand: only that weight's fake quant on.
    label, kind = next((r[0], r[1]) for r in rows if r[1] == "weight")
    for m in float_model.modules():
        if isinstance(m, FakeQuantize):
            m.enable_fake_quant(False)
    model = copy.deepcopy(float_model)
    model.get_submodule(label).weight_fake_quant.enable_fake_quant(True)
    with torch.no_grad():
        ref = torch.nn.CosineSimilarity(dim=0)(
            float_model(*batch).flatten().double(), model(*batch).flatten().double()
        )
    got = next(r[3] for r in rows if r[0] == label and r[1] == kind)
    assert got == pytest.approx(float(ref), abs=1e-9)
    # All quantizers are back on afterwards.
    assert all(
        bool(m.fake_quant_enabled[0])
        for m in qat.modules()
        if isinstance(m, FakeQuantize)
    )


def test_bad_case_round_trip_and_clean(corrupted, tmp_path):
    qat, qat_bc, _ = corrupted
    out = tmp_path / "qa"
    qa = QuantAnalysis(qat, qat_bc, "export", out_dir=str(out))
    data = faults.data("resnet", 3)
    qa.auto_find_bad_case(data, num_steps=2)
    index = qa.bad_case_index
    assert index in (0, 1)
    other = QuantAnalysis(qat, qat_bc, "export", out_dir=str(out))
    other.load_bad_case()
    for a, b in zip(other.bad_case, data[index], strict=True):
        np.testing.assert_array_equal(a, b)
    qa.clean()
    assert not out.exists()


def test_wrong_uses_are_refused(corrupted, tmp_path):
    qat, qat_bc, quantized = corrupted
    with pytest.raises(QuantAnalysisError, match="expected one of"):
        QuantAnalysis(qat, qat_bc, "hbir", out_dir=str(tmp_path))
    with pytest.raises(StageError, match="model.hbm"):
        QuantAnalysis(qat, qat_bc, "compile", out_dir=str(tmp_path))
    qa = QuantAnalysis(qat, quantized, "convert", out_dir=str(tmp_path))
    with pytest.raises(QuantAnalysisError, match="no bad case"):
        qa.run()
    qa.set_bad_case(faults.data("resnet", 1)[0])
    if importlib.util.find_spec("ray") is None:
        with pytest.raises(QuantAnalysisError, match="needs ray: pip install ray"):
            two_hbir = QuantAnalysis(
                qat_bc, quantized, "convert", out_dir=str(tmp_path)
            )
            two_hbir.set_bad_case(faults.data("resnet", 1)[0])
            two_hbir.sensitivity(backend="ray", workers=2)


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason='ray not installed: pip install -e ".[test]" (ray)',
)
def test_ray_backend_gives_the_process_result(corrupted, tmp_path):
    _, qat_bc, quantized = corrupted
    qa = QuantAnalysis(qat_bc, quantized, "convert", out_dir=str(tmp_path))
    qa.set_bad_case(faults.data("resnet", 1)[0])
    assert qa.sensitivity(workers=2, backend="ray") == qa.sensitivity()


def test_an_exported_model_is_analysed_against_its_qat_model(corrupted, tmp_path):
    qat, qat_bc, _ = corrupted
    qa = QuantAnalysis(
        qat,
        hbir.Module.parse(qat_bc.module.get_asm(enable_debug_info=True)),
        "export",
        out_dir=str(tmp_path),
    )
    qa.set_bad_case(faults.data("resnet", 1)[0])
    rows = qa.compare_per_layer()
    assert rows and all(r["Atol"] == 0.0 for r in rows)  # export is exact
    assert export  # the fixture's qat.bc came from export


def test_bad_case_search_in_processes_finds_the_same_case(corrupted, tmp_path):
    _, qat_bc, quantized = corrupted
    data = faults.data("resnet", 6, seed=11)
    found = []
    for workers in (1, 2):
        qa = QuantAnalysis(qat_bc, quantized, "convert", out_dir=str(tmp_path))
        qa.auto_find_bad_case(iter(data), metric="Cosine", workers=workers)
        found.append((qa.bad_case_index, (tmp_path / "badcase.txt").read_text()))
    assert found[0] == found[1]
    # The index is the batch with the lowest output cosine, computed here.
    cosines = [
        torch.nn.CosineSimilarity(dim=0)(
            torch.from_numpy(hbir_outputs(qat_bc, b)[0]).flatten().double(),
            torch.from_numpy(hbir_outputs(quantized, b)[0]).flatten().double(),
        )
        for b in data
    ]
    assert found[0][0] == int(np.argmin(cosines))


def test_bad_case_search_keeps_only_the_worst_batches(corrupted, tmp_path, capsys):
    _, qat_bc, quantized = corrupted
    qa = QuantAnalysis(qat_bc, quantized, "convert", out_dir=str(tmp_path))
    qa.auto_find_bad_case(iter(faults.data("resnet", 9, seed=4)), progress=True)
    # One output, five metrics: at most five batches are held.
    assert len(qa.bad_info[2]) <= 5
    assert "auto_find_bad_case" in capsys.readouterr().err  # the tqdm bar


def test_the_default_pipeline_writes_every_file(corrupted, tmp_path):
    from hbir.profiler.quant_analysis import analyse

    _, qat_bc, quantized = corrupted
    analyse(qat_bc, quantized, "convert", faults.data("resnet", 2), str(tmp_path))
    names = {p.name for p in tmp_path.iterdir()}
    assert {
        "badcase.txt",
        "badcase.pt",
        "all_badcase_info.pt",
        "compare_per_layer_out.txt",
        "compare_per_layer_out.csv",
        "abnormal_layer_advisor.txt",
        "output__output_0_L1_sensitive_ops.txt",
        "output__output_0_L1_sensitive_ops.pt",
        "baseline_model",
        "analysis_model",
    } <= names


def test_quantized_against_qat_pt_per_layer_and_sensitivity(corrupted, tmp_path):
    qat, _, quantized = corrupted
    qa = QuantAnalysis(qat, quantized, "convert", out_dir=str(tmp_path))
    qa.set_bad_case(faults.data("resnet", 1)[0])
    rows = {r["mod_name"]: r for r in qa.compare_per_layer()}
    assert rows["quant#0"]["Atol"] == 0.0  # codes dequantized with qat.pt's grid
    assert rows[f"{faults.PLANTED_CONV}#0"]["max_qscale_diff"] > 1
    (table,) = qa.sensitivity(metric="Atol").values()
    assert table[0][:2] == [f"{faults.PLANTED_CONV}#0", "exact"]


def _float_copy(qat):
    float_model = copy.deepcopy(qat)
    for m in float_model.modules():
        if isinstance(m, FakeQuantize):
            m.enable_fake_quant(False)
    return float_model


class _Linear(torch.nn.Module):
    def __init__(self):
        from hbir.quantization import DeQuantStub, QuantStub

        super().__init__()
        self.quant, self.fc, self.dequant = (
            QuantStub(),
            torch.nn.Linear(8, 4),
            DeQuantStub(),
        )

    def forward(self, x):
        return self.dequant(self.fc(self.quant(x)))


def _calibrated_linear(tmp_path, calibration):
    from hbir.quantization import FakeQuantState, prepare, set_fake_quantize

    torch.manual_seed(0)
    qat = prepare(_Linear().eval(), torch.zeros(2, 8), out_dir=tmp_path)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(calibration)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat


@pytest.mark.parametrize(
    "calibration, case, coarse",
    [
        # a wide range, data spread over it: int8 is fine although |x| > 128
        (torch.linspace(-200, 200, 16), torch.linspace(-200, 200, 16), False),
        # an outlier sets the scale, the data lives in its bottom codes
        (torch.linspace(-100, 100, 16), torch.linspace(-1, 1, 16), True),
    ],
)
def test_the_int16_advice_is_relative_to_the_grid(tmp_path, calibration, case, coarse):
    qat = _calibrated_linear(tmp_path, calibration.reshape(2, 8))
    qa = QuantAnalysis(_float_copy(qat), qat, "fake_quant", out_dir=str(tmp_path / "o"))
    qa.set_bad_case((case.reshape(2, 8),))
    rows = qa.compare_per_layer()
    stub = next(r for r in rows if r["mod_name"] == "quant#0")
    advisor = (tmp_path / "o" / "abnormal_layer_advisor.txt").read_text()
    advised = "quant#0" in advisor and "try qint16" in advisor
    assert advised == coarse, (stub, advisor)
    assert (stub["Cosine"] < 0.999) == coarse
    assert "too large for int8" not in advisor  # no absolute-range rule


def test_the_advisor_reads_the_unclipped_side_and_torch_rows_carry_their_grid(
    tmp_path,
):
    """Calibrated on inputs in [-1, 1], evaluated on an input ten times larger:
    the QuantStub's scale does not cover the float side's range (the fake
    quantized side is clipped, so only the float side shows it). Every torch row
    has its dtype, scale and error in LSB."""
    qat = _calibrated_linear(tmp_path, torch.linspace(-1, 1, 16).reshape(2, 8))
    qa = QuantAnalysis(_float_copy(qat), qat, "fake_quant", out_dir=str(tmp_path / "o"))
    qa.set_bad_case((torch.linspace(-10, 10, 16).reshape(2, 8),))
    rows = qa.compare_per_layer()
    stub = next(r for r in rows if r["mod_name"] == "quant#0")
    scale = float(qat.quant.activation_post_process.scale)
    assert stub["quant_dtype"] == "qint8" and stub["qscale"] == pytest.approx(scale)
    assert stub["max_qscale_diff"] == pytest.approx(stub["Atol"] / scale)
    assert stub["base_model_max"] == pytest.approx(10.0)
    assert stub["analy_model_max"] <= 127 * scale + 1e-6  # the clipped side
    advisor = (tmp_path / "o" / "abnormal_layer_advisor.txt").read_text()
    assert "quant#0" in advisor and "values beyond it are clipped" in advisor
    assert "the data spans [-10, 10]" in advisor


def test_pre_export_sensitivity_ranks_the_broken_table_first(tmp_path):
    """qat.export.pt differs from qat.pt only by its tables: sensitivity turns
    one table on at a time, so the table with too few segments leads."""
    from hbir.quantization import pre_export

    qat, _ = faults.few_tables(tmp_path)
    qa = QuantAnalysis(qat, pre_export(qat), "pre_export", out_dir=str(tmp_path / "o"))
    qa.set_bad_case(faults.data("transformer", 1)[0])
    (rows,) = qa.sensitivity(metric="L1").values()
    assert rows[0][:2] == ["norm2.rsqrt", "table"]
    assert rows[0][4] == "num_tables=6"
    assert all(r[1] == "table" for r in rows) and rows[0][3] > rows[1][3]


def test_convert_sensitivity_ties_go_to_the_first_divergence(corrupted, tmp_path):
    """Every op after the planted fault restores the output as well as the
    fault itself: among the ties, the fault (where the models first diverge)
    comes first."""
    _, qat_bc, quantized = corrupted
    qa = QuantAnalysis(qat_bc, quantized, "convert", out_dir=str(tmp_path))
    qa.set_bad_case(faults.data("resnet", 1)[0])
    (rows,) = qa.sensitivity(metric="L1").values()
    best = rows[0][3]
    tied = [r[0] for r in rows if r[3] == best]
    assert len(tied) > 1 and tied[0] == f"{faults.PLANTED_CONV}#0"


# ------------------------------------------------------------- the 3.x keywords


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
def test_run_one_side_at_a_time_for_models_of_different_input_formats(tmp_path):
    """The guide's recipe: qat.pt takes float images, nv12_quantized.bc the NV12
    planes of the same frames; each side runs on its own bad case, the other
    side's record comes from out_dir (another process), and the rows compare
    the two."""
    case = faults.nv12_case(tmp_path, batches=1)
    out = str(tmp_path / "qa")
    qa = QuantAnalysis(case.qat, case.nv12, "convert", out_dir=out)
    qa.set_bad_case(case.data[0])
    qa.run(run_baseline_model=True, run_analysis_model=False)
    other = QuantAnalysis(case.qat, case.nv12, "convert", out_dir=out)
    other.set_bad_case(case.planes[0])
    other.run(run_baseline_model=False)
    rows = {r["mod_name"]: r for r in other.compare_per_layer()}
    assert (tmp_path / "qa" / "baseline_model" / "statistic.txt").exists()
    # The output layer's difference, computed here from both models' outputs.
    with torch.no_grad():
        torch_out = case.qat(*case.data[0]).numpy()
    hbir_out = hbir_outputs(case.nv12, case.planes[0])[0]
    assert rows["fc#0"]["Atol"] == pytest.approx(
        float(np.abs(torch_out - hbir_out).max()), rel=1e-6
    )
    with pytest.raises(QuantAnalysisError, match="both False: nothing to run"):
        qa.run(run_baseline_model=False, run_analysis_model=False)


def test_run_refuses_to_pair_a_side_that_never_ran(corrupted, tmp_path):
    _, qat_bc, quantized = corrupted
    qa = QuantAnalysis(qat_bc, quantized, "convert", out_dir=str(tmp_path))
    qa.set_bad_case(faults.data("resnet", 1)[0])
    qa.run(run_analysis_model=False)
    with pytest.raises(QuantAnalysisError, match="the analysis model has not been run"):
        qa.compare_per_layer()


def test_topk_keeps_the_k_worst_batches_per_metric(corrupted, tmp_path):
    _, qat_bc, quantized = corrupted
    data = faults.data("resnet", 6, seed=11)
    qa = QuantAnalysis(qat_bc, quantized, "convert", out_dir=str(tmp_path))
    qa.auto_find_bad_case(iter(data), metric="Cosine", topk=3)
    cosines = [
        float(
            torch.nn.CosineSimilarity(dim=0)(
                torch.from_numpy(hbir_outputs(qat_bc, b)[0]).flatten().double(),
                torch.from_numpy(hbir_outputs(quantized, b)[0]).flatten().double(),
            )
        )
        for b in data
    ]
    lowest = [int(i) for i in np.argsort(cosines, kind="stable")[:3]]
    text = (tmp_path / "badcase.txt").read_text()
    assert "The top 3 bad case input indices of each output:" in text
    table = text.split("The top 3 bad case input indices of each output:")[1]
    header, row = table.strip().splitlines()[:2]
    column = header.split().index("Cosine")
    cells = [c for c in row.split("  ") if c.strip()]
    assert [int(i) for i in cells[column].split()] == lowest
    assert qa.bad_case_index == lowest[0]
    assert set(lowest) <= set(qa.bad_info[2])
    qa.run(index=lowest[2])  # any kept batch
    with pytest.raises(QuantAnalysisError, match="is not a kept bad case"):
        qa.run(index=99)
    with pytest.raises(QuantAnalysisError, match="topk must be a positive int"):
        qa.auto_find_bad_case(iter(data), topk=0)


def test_prefixes_and_types_filter_compare_per_layer_and_sensitivity(tmp_path):
    qat, _ = zoo_stages.calibrated("resnet", tmp_path)
    float_model = copy.deepcopy(qat)
    for m in float_model.modules():
        if isinstance(m, FakeQuantize):
            m.enable_fake_quant(False)
    qa = QuantAnalysis(float_model, qat, "fake_quant", out_dir=str(tmp_path / "o"))
    qa.set_bad_case(faults.data("resnet", 1)[0])
    every = qa.compare_per_layer()
    layer1 = qa.compare_per_layer(prefixes=("layer1",))
    assert layer1 == [r for r in every if r["mod_name"].startswith("layer1")]
    convs = qa.compare_per_layer(types=(torch.nn.Conv2d,))
    assert {r["mod_name"] for r in convs} == {
        f"{n}#0" for n, m in qat.named_modules() if type(m).__name__ == "Conv2d" and n
    }
    rows = qa.sensitivity(prefixes=("layer2",))["output_0"]
    full = {(r[0], r[1]): r[3] for r in qa.sensitivity()["output_0"]}
    assert rows and all(r[0].startswith("layer2") for r in rows)
    assert all(full[(r[0], r[1])] == r[3] for r in rows)
    with pytest.raises(QuantAnalysisError, match="no layer name starts with 'layr1'"):
        qa.compare_per_layer(prefixes=("layr1",))
    with pytest.raises(QuantAnalysisError, match="no layer is of type Conv3d"):
        qa.sensitivity(types=("Conv3d",))
    with pytest.raises(QuantAnalysisError, match="types are classes or type names"):
        qa.compare_per_layer(types=(3,))


def test_tune_bad_case_sets_the_sensitive_layer_to_int16(tmp_path):
    from hbir.quantization import QconfigSetter

    qat, _ = faults.outlier_channel(tmp_path)
    float_model = copy.deepcopy(qat)
    for m in float_model.modules():
        if isinstance(m, FakeQuantize):
            m.enable_fake_quant(False)
    qa = QuantAnalysis(float_model, qat, "fake_quant", out_dir=str(tmp_path / "o"))
    batch = faults.data("resnet", 3)[1]
    qa.set_bad_case(batch)
    rows = qa.tune_bad_case(outputs_config={"output_0": ("Cosine", 0.999)})
    assert [r["fake_quant"] for r in rows] == ["spread.activation_post_process"]
    assert rows[0]["output_0 Cosine"] >= 0.999
    assert list(qa.tuned_module_name) == ["spread"]
    assert "all outputs meet" in (tmp_path / "o" / "tune_bad_case.txt").read_text()
    # the user's model is unchanged; prepared with the rules, the same figure
    assert qat.get_submodule("spread.activation_post_process").dtype.bits == 8
    advised, _ = faults.outlier_channel(
        tmp_path / "a", QconfigSetter(module_name=qa.tuned_module_name)
    )
    with torch.no_grad():
        ref = torch.nn.CosineSimilarity(dim=0)(
            float_model(*batch).flatten().double(), advised(*batch).flatten().double()
        )
    assert rows[0]["output_0 Cosine"] == pytest.approx(float(ref), abs=1e-6)
    # skipping it: another layer is tried, up to max_tuned_stubs
    skipped = qa.tune_bad_case(skip_prefix="spread", max_tuned_stubs=2)
    assert len(skipped) == 2 and all("spread" != r["module"] for r in skipped)
    with pytest.raises(QuantAnalysisError, match="names output 'out'"):
        qa.tune_bad_case(outputs_config={"out": ("Cosine", 0.9)})
    with pytest.raises(QuantAnalysisError, match="unknown metric"):
        qa.tune_bad_case(outputs_config={0: ("Cosin", 0.9)})


def test_tune_bad_case_needs_a_torch_analysis_model(corrupted, tmp_path):
    _, qat_bc, quantized = corrupted
    qa = QuantAnalysis(qat_bc, quantized, "convert", out_dir=str(tmp_path))
    qa.set_bad_case(faults.data("resnet", 1)[0])
    with pytest.raises(QuantAnalysisError, match="tune_bad_case sets fake quants"):
        qa.tune_bad_case()


def test_a_plain_float_module_is_the_baseline_of_its_prepared_model(tmp_path):
    import zoo

    qat, _ = zoo_stages.calibrated("resnet", tmp_path)
    float_model, _ = zoo.build("resnet")
    qa = QuantAnalysis(float_model, qat, "fake_quant", out_dir=str(tmp_path / "o"))
    data = faults.data("resnet", 3)
    qa.auto_find_bad_case(data)
    batch = qa.bad_case
    rows = {r["mod_name"]: r for r in qa.compare_per_layer()}
    with torch.no_grad():
        # the fused conv's row is the float conv + batch norm + relu
        stem = float_model.stem(batch[0])
        out = float_model(*batch)
        fq_out = qat(*batch)
    assert rows["stem.0.0#0"]["base_op_type"] == "Conv2d"
    assert rows["stem.0.0#0"]["base_model_max"] == pytest.approx(float(stem.max()))
    assert rows["fc#0"]["Atol"] == pytest.approx(float((out - fq_out).abs().max()))
    assert rows["stem.0.0#0"]["Cosine"] > 0.999  # aligned, not pre-BN values
    assert qa.sensitivity(metric="Cosine")["output_0"]
    with pytest.raises(QuantAnalysisError, match="a float nn.Module is the baseline"):
        QuantAnalysis(float_model, export(qat, batch), "export", out_dir=str(tmp_path))
