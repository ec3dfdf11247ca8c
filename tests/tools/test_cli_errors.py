"""Every user mistake at a command line is one located message and exit status 1
or 2: the wrong kind of file for an argument, a file that is not what it claims,
a folder that is a file, an overlapping constant in a hand-edited .hbms. Run in
process: any exception other than SystemExit fails the test."""

import re

import numpy as np
import pytest
import torch
from cli_runs import run_main
from zoo_stages import calibrated

import hbir
from hbir.hbm import text as hbm_text
from hbir.quantization import export
from hbir.tools import hbir_cli, hbir_opt


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    qat, example = calibrated("resnet", d)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    hbir.save(qat_bc, d / "qat.bc")
    hbir.save(quantized, d / "quantized.bc")
    hbm = hbir.compile(quantized, d / "model.hbm")
    torch.save(qat, d / "qat.pt")
    torch.save([example], d / "data.pt")
    torch.save([], d / "empty.pt")
    np.save(d / "x.npy", example[0].numpy())
    torch.save(qat.state_dict(), d / "state.pt")
    (d / "factory.py").write_text(FACTORY)
    (d / "folder.hbm").mkdir()
    (d / "notes.txt").write_text("not a model")
    (d / "a_file").write_text("x")
    listing = hbm_text.disassemble(hbm.program)
    (d / "model.hbms").write_text(listing)
    return d


FACTORY = """
import tempfile

import zoo
from hbir.quantization import prepare


def mobilenet():
    model, example = zoo.build("mobilenet")
    return prepare(model, example, zoo.qconfig("mobilenet"), out_dir=tempfile.mkdtemp())


def boom():
    raise ValueError("not today")


def three():
    return 3
"""

EXPORT = ["export", "--data", "{d}/data.pt", "-o", "{d}/out.bc", "--qat"]


def _run(main, args):
    res = run_main(main, *args)
    return res.returncode, res.stderr


CASES = {
    "doctor --qat model.hbm": (
        hbir_cli.main,
        ["doctor", "--qat", "{d}/model.hbm", "--data", "{d}/data.pt"],
        "an hbir model file, not qat.pt",
    ),
    "doctor --data notes.txt": (
        hbir_cli.main,
        ["doctor", "--qat", "{d}/qat.pt", "--data", "{d}/notes.txt"],
        "notes.txt: cannot read input batches: not a torch.save file",
    ),
    "doctor --qat-bc model.hbm": (
        hbir_cli.main,
        ["doctor", "--qat", "{d}/qat.pt", "--data", "{d}/data.pt", "--qat-bc"]
        + ["{d}/model.hbm"],
        "--qat-bc .*model.hbm: a compiled model",
    ),
    "doctor --out-dir a_file": (
        hbir_cli.main,
        ["doctor", "--qat", "{d}/qat.pt", "--data", "{d}/data.pt", "--out-dir"]
        + ["{d}/a_file"],
        "a_file: cannot write the doctor's report",
    ),
    "doctor --data an empty list": (
        hbir_cli.main,
        ["doctor", "--qat", "{d}/qat.pt", "--data", "{d}/empty.pt"],
        "empty.pt: an empty list: give at least one input batch",
    ),
    "doctor --hbm quantized.bc": (
        hbir_cli.main,
        ["doctor", "--qat", "{d}/qat.pt", "--data", "{d}/data.pt", "--hbm"]
        + ["{d}/quantized.bc"],
        "--hbm .*quantized.bc: an hbir model .*takes the compiled model.hbm",
    ),
    "bisect --qat-bc model.hbm": (
        hbir_cli.main,
        ["bisect", "--qat-bc", "{d}/model.hbm", "--data", "{d}/data.pt"]
        + ["--reference", "{d}/qat.pt", "--threshold", "0.1"],
        "--qat-bc .*model.hbm: a compiled model",
    ),
    "bisect --data notes.txt": (
        hbir_cli.main,
        ["bisect", "--qat-bc", "{d}/qat.bc", "--data", "{d}/notes.txt"]
        + ["--reference", "{d}/qat.pt", "--threshold", "0.1"],
        "not a torch.save file",
    ),
    "bisect --reference notes.txt": (
        hbir_cli.main,
        ["bisect", "--qat-bc", "{d}/qat.bc", "--data", "{d}/data.pt"]
        + ["--reference", "{d}/notes.txt", "--threshold", "0.1"],
        "notes.txt: cannot read qat.pt: not a torch.save file",
    ),
    "export a state_dict without --model": (
        hbir_cli.main,
        [*EXPORT, "{d}/state.pt"],
        "state.pt is a state_dict .*--model module:factory",
    ),
    "export --model of another architecture": (
        hbir_cli.main,
        [*EXPORT, "{d}/state.pt", "--model", "{d}/factory.py:mobilenet"],
        "state.pt does not fit the model --model .*factory.py:mobilenet builds",
    ),
    "export --model that raises": (
        hbir_cli.main,
        [*EXPORT, "{d}/state.pt", "--model", "{d}/factory.py:boom"],
        "factory.py:boom: calling it failed: ValueError: not today",
    ),
    "export --model returning no model": (
        hbir_cli.main,
        [*EXPORT, "{d}/state.pt", "--model", "{d}/factory.py:three"],
        "factory.py:three: returned int, not a torch model",
    ),
    "export --model without a factory": (
        hbir_cli.main,
        [*EXPORT, "{d}/state.pt", "--model", "{d}/factory.py"],
        "expected module:name",
    ),
    "export --model missing attribute": (
        hbir_cli.main,
        [*EXPORT, "{d}/state.pt", "--model", "{d}/factory.py:nothing"],
        "factory.py has no attribute 'nothing'",
    ),
    "export --model missing module": (
        hbir_cli.main,
        [*EXPORT, "{d}/state.pt", "--model", "no_such_module_here:build"],
        "cannot import no_such_module_here",
    ),
    "export -o model.hbm": (
        hbir_cli.main,
        ["export", "--qat", "{d}/qat.pt", "--data", "{d}/data.pt", "-o", "{d}/x.hbm"],
        "qat.bc is written as .bc or .mlir",
    ),
    "convert model.hbm": (
        hbir_cli.main,
        ["convert", "{d}/model.hbm", "-o", "{d}/q.bc"],
        "model.hbm: a compiled model .*takes qat.bc",
    ),
    "convert a missing file": (
        hbir_cli.main,
        ["convert", "{d}/missing.bc", "-o", "{d}/q.bc"],
        "missing.bc: no such file",
    ),
    "convert --march unknown": (
        hbir_cli.main,
        ["convert", "{d}/qat.bc", "-o", "{d}/q.bc", "--march", "bayes"],
        "unknown march 'bayes': expected one of nash-e, nash-m",
    ),
    "compile -o a .bc": (
        hbir_cli.main,
        ["compile", "{d}/quantized.bc", "-o", "{d}/m.bc"],
        "model.hbm is written as .hbm",
    ),
    "compile -o a folder": (
        hbir_cli.main,
        ["compile", "{d}/quantized.bc", "-o", "{d}/folder.hbm"],
        "folder.hbm: a folder",
    ),
    "compile -o into a missing folder": (
        hbir_cli.main,
        ["compile", "{d}/quantized.bc", "-o", "{d}/nowhere/m.hbm"],
        "no such folder",
    ),
    "compile qat.bc": (
        hbir_cli.main,
        ["compile", "{d}/qat.bc", "-o", "{d}/m.hbm"],
        "compile takes a converted model .*run hbir.convert",
    ),
    "run notes.txt": (
        hbir_cli.main,
        ["run", "{d}/notes.txt", "-i", "{d}/x.npy"],
        "unsupported model type '.txt'",
    ),
    "run -i notes.txt": (
        hbir_cli.main,
        ["run", "{d}/model.hbm", "-i", "{d}/notes.txt"],
        "inputs are .npy files",
    ),
    "perf qat.bc": (
        hbir_cli.main,
        ["perf", "{d}/qat.bc"],
        "qat.bc: not converted: hbir perf estimates a compiled model",
    ),
    "perf a missing file": (
        hbir_cli.main,
        ["perf", "{d}/missing.hbm"],
        "missing.hbm: no such file",
    ),
    "verify a missing model": (
        hbir_cli.main,
        ["verify", "{d}/quantized.bc", "{d}/missing.hbm", "-i", "{d}/x.npy"],
        "missing.hbm: no such file",
    ),
    "hbir-opt -o model.hbm": (
        hbir_opt.main,
        ["{d}/quantized.bc", "-o", "{d}/m.hbm"],
        "a model.hbm is compiled from quantized.bc by .hbir compile",
    ),
    "hbir-opt .hbms -o into a file": (
        hbir_opt.main,
        ["{d}/model.hbms", "-o", "{d}/a_file/x.hbm"],
        "^hbir-opt: error: .*a_file/x.hbm: cannot write the model.hbm file",
    ),
    "hbir-opt overlapping constants": (
        hbir_opt.main,
        ["{d}/overlap.hbms", "-o", "{d}/overlap.hbm"],
        r"overlap.hbms:\d+:\d+: error: const buffer %\d+ overlaps const buffer",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_mistake_is_one_located_line(files, case):
    main, args, message = CASES[case]
    listing = (files / "model.hbms").read_text()
    # a second constant moved onto the first one's bytes
    consts = [line for line in listing.splitlines() if " const offset " in line]
    second = consts[1].split(" offset ")[1].split(" ")[0]
    moved = consts[1].replace(f" offset {second} ", " offset 4 ", 1)
    (files / "overlap.hbms").write_text(listing.replace(consts[1], moved))
    code, err = _run(main, [a.format(d=files) for a in args])
    assert code in (1, 2), err
    assert "Traceback" not in err
    assert re.search(message, err), err
    assert len(err.strip().splitlines()) <= 3  # (argparse adds its usage line)


def test_hbm_perf_into_a_file_is_an_output_error(files):
    with pytest.raises(hbir.HbirError, match="a_file: cannot write hbm_perf's report"):
        hbir.hbm_perf(files / "model.hbm", output_dir=files / "a_file")


def test_options_out_of_range_are_hbir_errors():
    from hbir.quantization import ConsistencyStrategy, QuantOptions, set_round_mode
    from hbir.quantization.lut_modules import Sigmoid
    from hbir.quantization.qconfig import get_qconfig

    for call in (
        lambda: ConsistencyStrategy.set_consistency_level(5),
        lambda: set_round_mode("nearest"),
        lambda: QuantOptions(fixed_point_validation=1),
        lambda: setattr(Sigmoid(get_qconfig()), "num_tables", 2139095040),
    ):
        with pytest.raises(hbir.HbirError):
            call()


def test_verify_calls_a_damaged_model_hbm_not_bit_identical(files):
    """A byte flipped inside model.hbm: its checksums fail, so it is not
    bit-identical to quantized.bc (exit 1, naming the damage); a file that is no
    model.hbm at all stays bad input (exit 2)."""
    data = bytearray((files / "model.hbm").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (files / "flipped.hbm").write_bytes(bytes(data))
    args = ["verify", files / "quantized.bc", files / "flipped.hbm", "-i"]
    res = run_main(hbir_cli.main, *args, files / "x.npy")
    assert res.returncode == 1
    assert res.stdout.startswith("not bit-identical: ") and "corrupt" in res.stdout
    (files / "text.hbm").write_text("not a model")
    args = ["verify", files / "quantized.bc", files / "text.hbm", "-i"]
    code, err = _run(hbir_cli.main, [*args, files / "x.npy"])
    assert code == 2 and "text.hbm" in err
