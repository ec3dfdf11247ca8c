"""The README's main job and the quickstart run and say what they promise."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# not in the fast tier (docs/testing.md); the tests share a costly module
# fixture, so one process runs them all (pyproject's --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("examples")]

EXAMPLES = Path(__file__).parents[2] / "examples"


def run(script: str, tmp_path) -> str:
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The main job's artifacts and what it printed."""
    folder = tmp_path_factory.mktemp("digits")
    return folder, run("digits_e2e.py", folder)


def test_digits_end_to_end(digits):
    tmp_path, out = digits
    rows = {}
    for line in out.splitlines():
        m = re.match(r"(\S+)\s+\|\s+([\d.]+)%\s+\|\s+([\d.]+)%\s+\|\s+(\S+)", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), m.group(4))
    assert list(rows) == [
        "float",
        "qat.pt",
        "qat.export.pt",
        "qat.bc",
        "quantized.bc",
        "compiled",
        "model.hbm",
        "gray_quantized.bc",
    ]
    assert rows["qat.bc"][2] == "0.00"  # bit-identical to qat.export.pt
    assert rows["quantized.bc"][2] == "0.00"  # bit-identical to qat.bc
    assert rows["compiled"][2] == "0.00"  # the npu program: bit-identical
    assert "model.hbm bit-identical to quantized.bc: True" in out
    assert rows["gray_quantized.bc"][2] == "0.00"  # the gray plane: the same input
    assert abs(rows["quantized.bc"][0] - rows["qat.pt"][0]) <= 0.5
    assert rows["qat.pt"][0] > 95.0
    for name in ("qat.pt", "qat.export.pt", "qat.bc", "quantized.bc"):
        assert (tmp_path / name).stat().st_size > 0
    for name in ("model_check_result.txt", "fx_graph.txt"):
        assert (tmp_path / name).read_text().strip()
    _reload_qat_pt(tmp_path)


def _reload_qat_pt(out):
    """qat.pt loads with weights_only=True into a fresh prepare, as
    docs/quantization.md shows, and exports to the very qat.bc the example wrote."""
    import importlib.util

    import numpy as np
    import torch

    import hbir
    from hbir.quantization import FakeQuantState, export, prepare, set_fake_quantize

    spec = importlib.util.spec_from_file_location("digits", EXAMPLES / "digits_e2e.py")
    digits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digits)
    (x_train, _), (x_test, _) = digits.load_data()
    qconfig = digits.get_qconfig(observer=digits.MovingAverageMinMaxObserver)
    qat = prepare(digits.DigitsNet(), x_train[: digits.BATCH], qconfig, out_dir=out)
    qat.load_state_dict(torch.load(out / "qat.pt", weights_only=True))
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    example = x_test[: digits.BATCH]
    again = export(qat, (example,))["forward"](example.numpy())
    saved = hbir.load(out / "qat.bc")["forward"](example.numpy())
    np.testing.assert_array_equal(again, saved)


def hbir_command(*args, cwd=None) -> subprocess.CompletedProcess:
    """``hbir ARGS`` as the console script runs it (its module, by this Python)."""
    return subprocess.run(
        [sys.executable, "-m", "hbir.tools.hbir_cli", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=600,
    )


def test_every_stage_from_the_shell_on_the_digits_artifacts(digits, tmp_path):
    """The README's state_dict qat.pt and --model: export, convert and compile
    from the shell write the very files the Python API wrote; verify says
    bit-identical (exit 0), and names the instruction of a corrupted model.hbm
    (exit 1)."""
    import compile_models

    import hbir
    from hbir.hbm import container

    out, _ = digits
    model = [
        "--model",
        EXAMPLES / "digits_e2e.py:DigitsNet",
        "--qconfig",
        EXAMPLES / "digits_e2e.py:QCONFIG",
    ]
    steps = [
        ["export", "--qat", out / "qat.pt", *model, "--data", out / "x.npy"]
        + ["-o", tmp_path / "qat.bc"],
        ["convert", tmp_path / "qat.bc", "-o", tmp_path / "quantized.bc"],
        ["compile", tmp_path / "quantized.bc", "-o", tmp_path / "model.hbm"]
        + ["--march", "nash-e"],
    ]
    for step in steps:
        res = hbir_command(*step)
        assert res.returncode == 0, res.stderr
        assert res.stderr == "" or "warn" not in res.stderr.lower(), res.stderr
    x = np.load(out / "x.npy")
    for name in ("qat.bc", "quantized.bc", "model.hbm"):
        ours, theirs = hbir.load(tmp_path / name), hbir.load(out / name)
        np.testing.assert_array_equal(ours[0](x), theirs[0](x))
    assert (tmp_path / "model.hbm").read_bytes() == (out / "model.hbm").read_bytes()

    res = hbir_command(
        "verify", out / "quantized.bc", tmp_path / "model.hbm", "-i", out / "x.npy"
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"bit-identical: all {x.shape[0] * 10} elements of 1 output(s)" in res.stdout

    program = hbir.load(tmp_path / "model.hbm").program
    index, _, _, _ = compile_models.halve_a_multiplier(program)
    container.write(program, tmp_path / "bad.hbm")
    res = hbir_command(
        "verify", out / "quantized.bc", tmp_path / "bad.hbm", "-i", out / "x.npy"
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "not bit-identical: _output_0" in res.stdout
    assert f"first mismatching instruction: #{index} " in res.stdout
    assert "digits_e2e.py:" in res.stdout  # the torch source line

    res = hbir_command(
        "run", tmp_path / "model.hbm", "-i", out / "x.npy", "-o", tmp_path / "out.npz"
    )
    assert res.returncode == 0, res.stderr
    saved = np.load(tmp_path / "out.npz")["_output_0"]
    np.testing.assert_array_equal(saved, hbir.load(out / "quantized.bc")[0](x))
    res = hbir_command(
        "doctor", "--qat", out / "qat.pt", *model, "--data", out / "x.npy"
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "every stage is within its contract" in res.stdout
    res = hbir_command("perf", tmp_path / "model.hbm", "--out-dir", tmp_path / "perf")
    assert res.returncode == 0 and "FPS=" in res.stdout, res.stderr
    assert (tmp_path / "perf" / "model.json").exists()
    res = hbir_command("perf", out / "quantized.bc", "--out-dir", tmp_path / "perf")
    assert res.returncode == 0, res.stderr
    import json

    ours, theirs = (
        json.loads((tmp_path / "perf" / f"{n}.json").read_text())["functions"][0]
        for n in ("quantized", "model")
    )
    assert ours["cycles"] == theirs["cycles"]  # the program it compiles to


def test_quickstart(tmp_path):
    out = run("quickstart.py", tmp_path)
    assert "bit-identical to torch on 64/64 images" in out
    assert (tmp_path / "quickstart.bc").exists()


def test_nv12_end_to_end(tmp_path):
    """RGB- and b2y-trained models on NV12 frames of the sample photos: the b2y
    model's NV12 deployment equals its quantized.bc bit for bit, input included."""
    out = run("nv12_e2e.py", tmp_path)
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 7 and cells[0] in ("rgb", "b2y"):
            rows[cells[0]] = cells[1:]
    assert list(rows) == ["rgb", "b2y"]
    assert rows["b2y"][3:] == ["0", "0.000", "0.00"]  # input levels, logits: none
    assert rows["b2y"][0] == rows["b2y"][1]  # the same accuracy
    assert float(rows["rgb"][4]) > 0  # chroma loss reaches the RGB model's input
    assert float(rows["rgb"][2].rstrip("%")) > 90  # but top-1 mostly agrees
    for model in ("rgb", "b2y"):
        for name in ("quantized.bc", "nv12_quantized.bc"):
            assert (tmp_path / model / name).stat().st_size > 0
