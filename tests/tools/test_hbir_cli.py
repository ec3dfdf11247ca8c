"""``hbir doctor`` as a user runs it: files in, one screen out, report files."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import profiler_faults as faults
import pytest
import torch
import zoo_stages
from cli_runs import run_main

import hbir
from hbir.tools import hbir_cli

ROOT = Path(__file__).parents[2]


def _doctor_process(*args) -> subprocess.CompletedProcess:
    """``hbir doctor`` as a process of its own, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "hbir.tools.hbir_cli", "doctor", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def _cli(*args) -> SimpleNamespace:
    """``hbir ARGS`` in this process, from the repository root (``cli_runs``;
    ``test_doctor_on_an_unfaulted_model_exits_0`` starts a real process)."""
    return run_main(hbir_cli.main, *args, cwd=ROOT)


def _doctor(*args) -> SimpleNamespace:
    return _cli("doctor", *args)


def test_doctor_names_the_stage_op_and_cause_of_a_corrupted_constant(tmp_path):
    qat, qat_bc, quantized = faults.corrupted_quantized(tmp_path)
    torch.save(qat, tmp_path / "qat.pt")
    torch.save(faults.data("resnet"), tmp_path / "data.pt")
    hbir.save(qat_bc, tmp_path / "qat.bc")
    hbir.save(quantized, tmp_path / "quantized.bc")
    run = _doctor(
        "--qat",
        tmp_path / "qat.pt",
        "--data",
        tmp_path / "data.pt",
        "--qat-bc",
        tmp_path / "qat.bc",
        "--quantized-bc",
        tmp_path / "quantized.bc",
        "--out-dir",
        tmp_path / "report",
    )
    assert run.returncode == 3, run.stderr
    out = run.stdout
    assert "first stage pair beyond contract: qat.bc -> quantized.bc" in out
    line = faults.zoo_line("out = self.bn2(self.conv2(out))")
    assert f"torch source: tests/zoo.py:{line}" in out
    assert f"<- {faults.PLANTED_CONV}#0" in out
    assert "cause: stale or corrupted quantized.bc:" in out
    assert len(out.splitlines()) <= 24  # one screen
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["ok"] is False
    assert report["finding"]["cause"] == "stale or corrupted quantized.bc"
    assert [p["within"] for p in report["pairs"]] == [True, True, False]
    assert (tmp_path / "report" / "report.html").exists()


def test_doctor_on_an_unfaulted_model_exits_0(tmp_path):
    qat, _ = zoo_stages.calibrated("multi_io", tmp_path)
    torch.save(qat, tmp_path / "qat.pt")
    torch.save(faults.data("multi_io"), tmp_path / "data.pt")
    # a process of its own, as a user starts it
    run = _doctor_process("--qat", tmp_path / "qat.pt", "--data", tmp_path / "data.pt")
    assert run.returncode == 0, run.stderr
    assert "every stage is within its contract" in run.stdout
    assert run.stdout.count("within contract:") == 3


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
def test_doctor_takes_the_nv12_stage_and_finds_a_wrong_mode(tmp_path):
    case = faults.nv12_case(tmp_path, mode="yuvbt601video2rgb", batches=2)
    torch.save(case.qat, tmp_path / "qat.pt")
    torch.save(case.data, tmp_path / "data.pt")
    planes = [tuple(map(torch.from_numpy, p)) for p in case.planes]
    torch.save(planes, tmp_path / "planes.pt")
    hbir.save(case.qat_bc, tmp_path / "qat.bc")
    hbir.save(case.nv12, tmp_path / "nv12_quantized.bc")
    files = ["--qat", tmp_path / "qat.pt", "--data", tmp_path / "data.pt"]
    files += ["--qat-bc", tmp_path / "qat.bc"]
    nv12 = ["--nv12-bc", tmp_path / "nv12_quantized.bc"]
    run = _doctor(*files, *nv12, "--nv12-data", tmp_path / "planes.pt")
    assert run.returncode == 3, run.stderr
    out = run.stdout
    assert "first stage pair beyond contract: quantized.bc -> nv12_quantized.bc" in out
    assert "'hbir.image_preprocess' in nv12_quantized.bc" in out
    assert "inserted on input '_input_0'" in out
    assert "cause: input preprocessing or layout" in out
    assert len(out.splitlines()) <= 24
    # The NV12 model alone, without its planes, is refused with a clear message.
    run = _doctor(*files, *nv12)
    assert run.returncode == 1 and "needs both" in run.stderr
    assert "Traceback" not in run.stderr


def test_doctor_refuses_a_file_that_is_not_a_qat_model(tmp_path):
    torch.save([torch.zeros(2)], tmp_path / "qat.pt")
    torch.save(torch.zeros(2, 3), tmp_path / "data.pt")
    run = _doctor("--qat", tmp_path / "qat.pt", "--data", tmp_path / "data.pt")
    assert run.returncode == 1
    assert "expected qat.pt, a prepared model or its state_dict" in run.stderr
    assert "Traceback" not in run.stderr


def test_doctor_asks_for_the_model_of_a_state_dict(tmp_path):
    torch.save({"weight": torch.zeros(2)}, tmp_path / "qat.pt")
    torch.save(torch.zeros(2, 3), tmp_path / "data.pt")
    run = _doctor("--qat", tmp_path / "qat.pt", "--data", tmp_path / "data.pt")
    assert run.returncode == 1
    assert "is a state_dict" in run.stderr and "--model module:factory" in run.stderr
    assert "Traceback" not in run.stderr


def test_doctor_requires_its_files():
    for run in (_doctor(), _doctor_process()):
        assert run.returncode == 1 and "--qat" in run.stderr


def test_bisect_prints_the_bc_editor_config_of_the_planted_table(tmp_path):
    qat, qat_bc = faults.few_tables(tmp_path)
    torch.save(qat, tmp_path / "qat.pt")
    torch.save(faults.data("transformer", 1), tmp_path / "data.pt")
    hbir.save(qat_bc, tmp_path / "qat.bc")
    run = _cli(
        "bisect",
        "--qat-bc",
        tmp_path / "qat.bc",
        "--data",
        tmp_path / "data.pt",
        "--reference",
        tmp_path / "qat.pt",
        "--threshold",
        "1e-3",
        "--no-convert",
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    config = json.loads(lines[-1].split("bc_editor config: ", 1)[1])
    (entry,) = config["remove_fake_quant"]
    assert any("'hbir.rsqrt' <- norm2.rsqrt|" in line for line in lines)
    # The config names fake quants next to that rsqrt.
    from hbir.dialects.op_ids import op_ids

    ops = op_ids(qat_bc["forward"].op)
    ids = entry if isinstance(entry, list) else [entry, entry]
    assert all(ops[n].name == "qnt.const_fake_quant" for n in ids)


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
def test_doctor_names_the_instruction_of_a_corrupted_model_hbm(tmp_path):
    qat, qat_bc, quantized, _, index, channel, old, new = faults.corrupted_hbm(tmp_path)
    torch.save(qat, tmp_path / "qat.pt")
    torch.save(faults.data("resnet"), tmp_path / "data.pt")
    hbir.save(qat_bc, tmp_path / "qat.bc")
    hbir.save(quantized, tmp_path / "quantized.bc")
    files = ["--qat", tmp_path / "qat.pt", "--data", tmp_path / "data.pt"]
    files += [
        "--qat-bc",
        tmp_path / "qat.bc",
        "--quantized-bc",
        tmp_path / "quantized.bc",
    ]
    run = _doctor(*files, "--hbm", tmp_path / "bad.hbm")
    assert run.returncode == 3, run.stderr
    out = run.stdout
    assert "first stage pair beyond contract: quantized.bc -> model.hbm" in out
    assert f"<- {faults.PLANTED_CONV}#0" in out
    assert "cause: stale or corrupted model.hbm:" in out
    assert f"instruction #{index} conv" in out
    assert f"has {new} at [{channel}], a fresh compile has {old}" in out
    bad = (tmp_path / "bad.hbm").read_bytes()
    run = _doctor(*files, "--hbm", tmp_path / "bad.hbm", "--fix")
    assert run.returncode == 3, run.stderr
    assert "fix (stale or corrupted model.hbm): model.hbm compiled again" in run.stdout
    assert "after the fix every stage is within its contract" in run.stdout
    assert (tmp_path / "bad.hbm").read_bytes() == bad  # no file changed
    run = _doctor(*files, "--hbm", tmp_path / "model.hbm")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "quantized.bc -> model.hbm" in run.stdout
    assert "every stage is within its contract" in run.stdout


GEMM = """
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @forward(%x: tensor<1x8xsi8>) -> tensor<1x2xsi32> {
    %w = hbir.constant dense<3> : tensor<2x8xsi8>
    %y = hbir.linear %x, %w : (tensor<1x8xsi8>, tensor<2x8xsi8>) -> tensor<1x2xsi32>
    func.return %y : tensor<1x2xsi32>
  }
}
"""


@pytest.mark.parametrize(("flag", "each"), [([], False), (["--verify-each"], True)])
def test_compile_verifies_after_every_pass_with_verify_each(tmp_path, flag, each):
    (tmp_path / "quantized.mlir").write_text(GEMM)
    env = {**os.environ, "HBIR_VERIFY_EACH": "0"}
    run = subprocess.run(
        [sys.executable, "-m", "hbir.tools.hbir_cli", "compile"]
        + [str(tmp_path / "quantized.mlir"), "-o", str(tmp_path / "model.hbm")]
        + ["--progress", "--time-passes", *flag],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("compile [")]
    assert len(lines) == 6  # one per compile pass
    assert all(("+ verify" in ln) == each for ln in lines)
    assert (tmp_path / "model.hbm").exists()


@pytest.mark.slow  # two CLI runs (not in the fast tier)
def test_doctor_measures_qat_pt_against_the_float_model_and_fixes_it(tmp_path):
    import zoo

    from hbir.quantization import export

    qat, example = faults.clipped_range(tmp_path)
    model, _ = zoo.build("resnet")
    torch.save(qat, tmp_path / "qat.pt")
    # qat.bc exported where the model's source is (its torch source lines)
    hbir.save(export(qat, example), tmp_path / "qat.bc")
    # saved as its fx graph: loadable without the class's module (tests/zoo.py)
    torch.save(torch.fx.symbolic_trace(model), tmp_path / "float.pt")
    torch.save(faults.data("resnet"), tmp_path / "data.pt")
    files = ["--qat", tmp_path / "qat.pt", "--data", tmp_path / "data.pt"]
    kept = (tmp_path / "qat.pt").read_bytes()
    given = [*files, "--qat-bc", tmp_path / "qat.bc"]
    run = _doctor(*given, "--float", tmp_path / "float.pt", "--fix")
    assert run.returncode == 3, run.stderr
    out = run.stdout
    assert "float -> qat.pt        [tolerance] BEYOND TOLERANCE" in out
    assert "qat.pt itself is far from the float model" in out
    line = faults.zoo_line("return self.dequant(self.fc(x))")
    assert f"torch source: tests/zoo.py:{line}" in out
    assert "cause: quantization loss: clipped calibration range:" in out
    assert "fix (quantization loss: clipped calibration range): fc." in out
    assert "after the fix every stage is within its contract" in out
    assert (tmp_path / "qat.pt").read_bytes() == kept
    run = _doctor(*files, "--cosine-tolerance", "0.5")
    assert run.returncode == 0, run.stdout + run.stderr
    run = _doctor(*files, "--float", tmp_path / "data.pt")
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "expected the float model saved whole" in run.stderr
