"""hb_verifier: the reference's tables, the trace of a difference, every bad input.

Expected numbers are computed here from the models' own outputs with numpy (cosine,
mismatch counts), and the op a difference is traced to is found from the IR text
that was edited, not from the tool.
"""

import json
import re
import subprocess
import sys

import compile_models
import numpy as np
import pytest
import zoo
from zoo_stages import calibrated

import hbir
from hbir.dialects.op_ids import op_ids
from hbir.quantization import export
from hbir.tools.hb_verifier import main

ROW = re.compile(r"^\| (.+) \|$")


def rows(text: str) -> list[list[str]]:
    """The cells of a printed table, header first."""
    found = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            found.append([c.strip() for c in m[1].split(" | ")])
    return found


def run(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def edited(module: hbir.Module, old: str, new: str) -> tuple[hbir.Module, int]:
    """``module`` with the first ``old`` of its text replaced, and the %N of the
    op whose line was edited."""
    text = module.module.get_asm(enable_debug_info=True)
    line = next(line for line in text.splitlines() if old in line)
    op_id = int(re.match(r"\s*%(\d+)", line)[1])
    return hbir.Module.parse(text.replace(old, new, 1)), op_id


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """qat.bc, quantized.bc and an input file of the zoo's resnet."""
    folder = tmp_path_factory.mktemp("resnet")
    qat, example = calibrated("resnet", folder)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    hbir.save(qat_bc, folder / "qat.bc")
    hbir.save(quantized, folder / "quantized.bc")
    np.save(folder / "x.npy", example[0].numpy())
    return folder, quantized


@pytest.fixture(scope="module")
def corrupted_bc(resnet):
    """quantized.bc with the first per-channel requantization multiplier changed."""
    folder, quantized = resnet
    text = quantized.module.get_asm()
    multiplier = re.search(r"multiplier = \[(\d+),", text)[1]
    bad, op_id = edited(
        quantized,
        f"multiplier = [{multiplier},",
        f"multiplier = [{int(multiplier) // 2},",
    )
    hbir.save(bad, folder / "bad.bc")
    return folder / "bad.bc", op_id


def test_bc_pair_prints_the_cosine_table(resnet, capsys):
    folder, _ = resnet
    status, out, err = run(
        capsys, "-m", f"{folder}/qat.bc,{folder}/quantized.bc", "-i", folder / "x.npy"
    )
    assert status == 0 and err == ""
    table = rows(out)
    assert table[0] == ["NodeName", "TensorName", "ConsineSimilarity"]
    assert table[1][1:] == ["_output_0", "1"]  # the contract: bit-identical
    assert "first differing op" not in out


def test_bc_pair_names_the_first_differing_op(resnet, corrupted_bc, capsys):
    folder, quantized = resnet
    bad_path, op_id = corrupted_bc
    x = np.load(folder / "x.npy")
    a = quantized[0](x).astype(np.float64).ravel()
    b = hbir.load(bad_path)[0](x).astype(np.float64).ravel()
    cosine = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    assert cosine < 1
    status, out, _ = run(
        capsys, "-m", f"{folder}/qat.bc,{bad_path}", "-i", folder / "x.npy"
    )
    assert status == 0  # the cosine table has no verdict
    assert rows(out)[1][1:] == ["_output_0", f"{cosine:.6g}"]
    assert f"first differing op: %{op_id} qnt.requantize" in out
    assert "tests/zoo.py:" in out  # the torch source line


def test_dump_all_nodes_writes_both_models_values(resnet, tmp_path, capsys):
    folder, quantized = resnet
    status, out, _ = run(
        capsys,
        "-m",
        f"{folder}/qat.bc,{folder}/quantized.bc",
        "-i",
        folder / "x.npy",
        "--dump-all-nodes",
        tmp_path / "dump",
    )
    assert status == 0
    index = json.loads((tmp_path / "dump" / "index.json").read_text())
    assert [m["model"] for m in index] == [
        f"{folder}/qat.bc",
        f"{folder}/quantized.bc",
    ]
    for model in index:
        for node in model["nodes"]:
            value = np.load(tmp_path / "dump" / node["file"])
            assert list(value.shape) == node["shape"]
    # The last op of quantized.bc computes the output.
    last = max(index[1]["nodes"], key=lambda n: n["id"])
    x = np.load(folder / "x.npy")
    expected = quantized[0](x)
    np.testing.assert_array_equal(np.load(tmp_path / "dump" / last["file"]), expected)


def test_multi_input_model_takes_one_file_per_input(tmp_path, capsys):
    qat, example = calibrated("multi_io", tmp_path)
    qat_bc = export(qat, example)
    hbir.save(qat_bc, tmp_path / "qat.bc")
    hbir.save(hbir.convert(qat_bc, "nash-e"), tmp_path / "quantized.bc")
    img, vec = (t.numpy() for t in zoo.MultiIO.inputs())
    np.save(tmp_path / "img.npy", img)
    np.save(tmp_path / "vec.npy", vec)
    models = f"{tmp_path}/qat.bc,{tmp_path}/quantized.bc"
    for inputs in (
        ["-i", tmp_path / "img.npy", "-i", tmp_path / "vec.npy"],
        ["-i", f"{tmp_path}/img.npy,{tmp_path}/vec.npy"],
        ["-i", f"_input_1:{tmp_path}/vec.npy", "-i", f"_input_0:{tmp_path}/img.npy"],
    ):
        status, out, err = run(capsys, "-m", models, *inputs)
        assert (status, err) == (0, "")
        assert [r[1:] for r in rows(out)[1:]] == [
            ["_output_0", "1"],
            ["_output_1", "1"],
        ]
    status, _, err = run(
        capsys, "-m", models, "-i", tmp_path / "vec.npy", "-i", tmp_path / "img.npy"
    )
    assert status == 2
    assert "vec.npy: holds float32[2, 6], but input '_input_0'" in err


BAD_INPUTS = {
    "one model": (["{d}/qat.bc"], ["{d}/x.npy"], "give exactly two models"),
    "three models": (
        ["{d}/qat.bc", "{d}/quantized.bc", "{d}/qat.bc"],
        ["{d}/x.npy"],
        "give exactly two models",
    ),
    "missing model": (
        ["{d}/qat.bc", "{d}/nope.bc"],
        ["{d}/x.npy"],
        "nope.bc: no such file",
    ),
    "onnx model": (
        ["{d}/qat.bc", "{d}/m.onnx"],
        ["{d}/x.npy"],
        "unsupported model type '.onnx'",
    ),
    "missing input": (
        ["{d}/qat.bc", "{d}/quantized.bc"],
        ["{d}/nope.npy"],
        "nope.npy: no such file",
    ),
    "input not .npy": (
        ["{d}/qat.bc", "{d}/quantized.bc"],
        ["{d}/qat.bc"],
        "inputs are .npy files",
    ),
    "unreadable .npy": (
        ["{d}/qat.bc", "{d}/quantized.bc"],
        ["{d}/garbage.npy"],
        "garbage.npy: not a readable .npy file",
    ),
    "wrong shape": (
        ["{d}/qat.bc", "{d}/quantized.bc"],
        ["{d}/x1.npy"],
        "x1.npy: holds float32[1, 3, 16, 16], but input '_input_0' of qat.bc is "
        "float32[2, 3, 16, 16]",
    ),
    "wrong dtype": (
        ["{d}/qat.bc", "{d}/quantized.bc"],
        ["{d}/x64.npy"],
        "x64.npy: holds float64[2, 3, 16, 16]",
    ),
    "too many inputs": (
        ["{d}/qat.bc", "{d}/quantized.bc"],
        ["{d}/x.npy,{d}/x.npy"],
        "has 1 inputs ['_input_0'], got 2 input files",
    ),
    "unknown input name": (
        ["{d}/qat.bc", "{d}/quantized.bc"],
        ["foo:{d}/x.npy"],
        "has no input 'foo'",
    ),
    "corrupt model": (
        ["{d}/qat.bc", "{d}/garbage.bc"],
        ["{d}/x.npy"],
        "garbage.bc: ",
    ),
}


@pytest.fixture(scope="module")
def bad_files(resnet):
    folder, _ = resnet
    x = np.load(folder / "x.npy")
    np.save(folder / "x1.npy", x[:1])
    np.save(folder / "x64.npy", x.astype(np.float64))
    (folder / "garbage.npy").write_bytes(b"\x93NUMPY nonsense")
    (folder / "garbage.bc").write_bytes(b"not a bc file at all, really not")
    return folder


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_and_status_2(bad_files, case, capsys):
    models, inputs, message = BAD_INPUTS[case]
    d = bad_files
    args = ["-m", ",".join(m.format(d=d) for m in models)]
    for i in inputs:
        args += ["-i", i.format(d=d)]
    status, out, err = run(capsys, *args)
    assert status == 2
    assert out == ""
    assert err.startswith("hb_verifier: error: ") and err.count("\n") == 1
    assert message.format(d=d) in err


def test_console_script_exit_status_and_no_traceback(bad_files):
    d = bad_files
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hbir.tools.hb_verifier",
            "-m",
            f"{d}/qat.bc",
            "-i",
            "x",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "give exactly two models" in result.stderr


# ------------------------------------------------------------------ .bc,.hbm


@pytest.fixture(scope="module")
def resnet_hbm(resnet):
    folder, quantized = resnet
    hbir.compile(quantized, folder / "model.hbm", march="nash-e")
    return folder / "model.hbm"


def test_bc_hbm_pair_is_consistent(resnet, resnet_hbm, capsys):
    folder, _ = resnet
    status, out, err = run(
        capsys, "-m", f"{folder}/quantized.bc,{resnet_hbm}", "-i", folder / "x.npy"
    )
    assert (status, err) == (0, "")
    table = rows(out)
    assert table[0] == [
        "OutputName",
        "Consistency",
        "Mismatched Elements",
        "Max Abs Diff",
        "Max Rel Diff",
        "Bit Identical",
    ]
    assert table[1] == ["_output_0", "True", "0/20 (0.00%)", "0", "0", "True"]
    assert "bit-identical: all 20 elements of 1 output(s)" in out
    assert "first mismatching" not in out


@pytest.mark.parametrize(
    "name",
    [n for n in compile_models.NAMES if n != "nv12"],  # nv12: below
)
def test_every_compiled_model_is_consistent_with_its_quantized_bc(
    name, tmp_path, tmp_path_factory, capsys
):
    quantized, batches, _, hbm_path = compile_models.compiled(name, tmp_path_factory)
    hbir.save(quantized, tmp_path / "quantized.bc")
    inputs = []
    for i, x in enumerate(batches[0]):
        np.save(tmp_path / f"x{i}.npy", x)
        inputs += ["-i", tmp_path / f"x{i}.npy"]
    status, out, err = run(capsys, "-m", f"{tmp_path}/quantized.bc,{hbm_path}", *inputs)
    assert (status, err) == (0, "")
    table = rows(out)[1:]
    assert len(table) == len(quantized["forward"].outputs.names)
    assert all(r[1] == "True" and r[2].startswith("0/") for r in table)


@pytest.fixture(scope="module")
def corrupted_hbm(resnet, resnet_hbm):
    """model.hbm with one per-channel requantization multiplier halved (the
    container rewrites the checksums), and the op the changed instruction
    computes according to the debug table."""
    from hbir.hbm import container

    folder, _ = resnet
    program = hbir.load(resnet_hbm).program
    index, _, _, _ = compile_models.halve_a_multiplier(program)
    code = program.functions[0]
    path = folder / "bad.hbm"
    container.write(program, path)
    return path, index, code.debug[index].value_of


def test_corrupted_requantization_is_inconsistent_and_traced(
    resnet, corrupted_hbm, capsys
):
    folder, quantized = resnet
    path, index, op_id = corrupted_hbm
    x = np.load(folder / "x.npy")
    expected, got = quantized[0](x), hbir.load(path)[0](x)
    mismatched = int(np.count_nonzero(expected != got))
    assert mismatched > 0
    max_abs = float(np.abs(expected.astype(np.float64) - got).max())
    status, out, _ = run(
        capsys, "-m", f"{folder}/quantized.bc,{path}", "-i", folder / "x.npy"
    )
    assert status == 1
    row = rows(out)[1]
    assert row[:3] == [
        "_output_0",
        "False",
        f"{mismatched}/{expected.size} ({100 * mismatched / expected.size:.2f}%)",
    ]
    assert row[3] == f"{max_abs:.6g}" and row[5] == "False"
    assert (
        f"not bit-identical: _output_0: {mismatched} of {expected.size} elements "
        "differ" in out
    )
    names = {n: o.name for n, o in op_ids(quantized[0].op).items()}
    assert (
        f"first mismatching instruction: #{index} conv computes %{op_id} "
        f"{names[op_id]}" in out
    )
    assert "tests/zoo.py:" in out


def test_loose_digits_accept_a_small_difference(resnet, corrupted_hbm, capsys):
    folder, _ = resnet
    path, _, _ = corrupted_hbm
    status, out, _ = run(
        capsys, "-m", f"{folder}/quantized.bc,{path}", "-i", folder / "x.npy", "-c", "0"
    )
    assert status == 0 and rows(out)[1][1] == "True"  # every element within 1
    assert rows(out)[1][5] == "False"  # but not bit-identical, and it says so
    assert "not bit-identical: _output_0" in out


def test_qat_bc_against_model_hbm_prints_no_trace_of_other_ops(
    resnet, resnet_hbm, tmp_path, capsys
):
    """model.hbm's debug table numbers quantized.bc's ops: against qat.bc (other
    IDs, float values) nothing is paired, and nothing is called a mismatch."""
    folder, _ = resnet
    qat_bc = hbir.load(folder / "qat.bc")
    x = np.load(folder / "x.npy")
    expected, got = qat_bc[0](x), hbir.load(resnet_hbm)[0](x)
    identical = np.array_equal(expected, got)
    status, out, _ = run(
        capsys,
        "-m",
        f"{folder}/qat.bc,{resnet_hbm}",
        "-i",
        folder / "x.npy",
        "--dump-all-nodes",
        tmp_path,
    )
    assert "first mismatching" not in out
    assert "was not compiled from qat.bc" in out
    assert (rows(out)[1][5] == "True") == identical
    assert ("bit-identical: all" in out) == identical
    assert status == (0 if np.abs(expected - got).max() <= 1e-5 else 1)


def test_dump_all_nodes_of_an_hbm_pair_pairs_files_by_op(
    resnet, corrupted_hbm, tmp_path, capsys
):
    folder, _ = resnet
    path, _, op_id = corrupted_hbm
    run(
        capsys,
        "-m",
        f"{path},{folder}/quantized.bc",
        "-i",
        folder / "x.npy",
        "--dump-all-nodes",
        tmp_path,
    )
    index = json.loads((tmp_path / "index.json").read_text())
    hbm_nodes = {n["id"]: n for n in index[0]["nodes"]}
    bc_nodes = {n["id"]: n for n in index[1]["nodes"]}
    assert index[0]["model"].endswith("bad.hbm")
    for n, node in hbm_nodes.items():
        a = np.load(tmp_path / node["file"])
        b = np.load(tmp_path / bc_nodes[n]["file"])
        assert a.shape == b.shape
        if n < op_id:
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(
        np.load(tmp_path / hbm_nodes[op_id]["file"]),
        np.load(tmp_path / bc_nodes[op_id]["file"]),
    )


def test_nv12_model_takes_its_two_planes(tmp_path, tmp_path_factory, capsys):
    """A conv model behind the canonical NV12 insertion (tests/compile_models.py):
    inputs _input_0_y and _input_0_uv, given as -i y.npy,uv.npy."""
    quantized, batches, _, hbm_path = compile_models.compiled("nv12", tmp_path_factory)
    assert quantized["forward"].inputs.names == ["_input_0_y", "_input_0_uv"]
    hbir.save(quantized, tmp_path / "nv12_quantized.bc")
    y, uv = batches[0]
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "uv.npy", uv)
    status, out, err = run(
        capsys,
        "-m",
        f"{tmp_path}/nv12_quantized.bc,{hbm_path}",
        "-i",
        f"{tmp_path}/y.npy,{tmp_path}/uv.npy",
    )
    assert (status, err) == (0, "")
    assert rows(out)[1] == ["_output_0", "True", "0/10 (0.00%)", "0", "0", "True"]


# ------------------------------------------------------------------ reference flags


def test_board_flags_are_accepted_and_reported_not_applicable(
    resnet, resnet_hbm, capsys
):
    folder, _ = resnet
    status, out, err = run(
        capsys,
        "-m",
        f"{folder}/quantized.bc,{resnet_hbm}",
        "-i",
        folder / "x.npy",
        "--ip",
        "None,10.0.0.2",
        "-u",
        "root",
        "-p",
        "secret",
        "--port",
        "22",
        "--remote-root",
        "/tmp/hb",
        "--skip-arm",
        "--skip-sim",
        "-s",
    )
    assert (status, err) == (0, "")
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: --ip 10.0.0.2 (model.hbm): board runs are not applicable; it runs "
        "on the simulator",
        "note: -u/--username: a board option, not applicable to the simulator",
        "note: -p/--password: a board option, not applicable to the simulator",
        "note: --port: a board option, not applicable to the simulator",
        "note: --remote-root: a board option, not applicable to the simulator",
        "note: --skip-arm: there is no board run to skip",
        "note: --skip-sim: the simulator is the only runner here; it runs",
        "note: -s/--run-sim (deprecated): the simulator always runs",
    ]
    assert rows(out)[1][:2] == ["_output_0", "True"]
    # the reference's own example: --ip None,<board> with the simulator first
    status, out, _ = run(
        capsys,
        "-m",
        f"{folder}/quantized.bc,{resnet_hbm}",
        "-i",
        folder / "x.npy",
        "--ip",
        "None,None",
    )
    assert status == 0 and "note:" not in out


def test_ip_with_more_entries_than_models_is_refused(resnet, resnet_hbm, capsys):
    folder, _ = resnet
    status, out, err = run(
        capsys,
        "-m",
        f"{folder}/quantized.bc,{resnet_hbm}",
        "-i",
        folder / "x.npy",
        "--ip",
        "None,None,None",
    )
    assert status == 2 and out == ""
    assert "--ip None,None,None: one entry per model (2)" in err


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("hb_verifier (hbir")


def test_second_input_is_the_io_removed_models_own_data(resnet, tmp_path, capsys):
    """The reference's second -i: runtime data (int8 codes) for a model whose
    Quantize / Dequantize were removed, against quantized.bc on float data."""
    folder, quantized = resnet
    removed = quantized.clone()
    removed.functions[0].remove_io_op(op_types=["Quantize", "Dequantize"])
    hbir.compile(removed, tmp_path / "removed.hbm", march="nash-e")
    (arg,) = removed.functions[0].inputs
    scale = np.float32(arg.quant_info.scales[0])
    x = np.load(folder / "x.npy")
    codes = np.clip(np.rint(x / scale), -128, 127).astype(np.int8)
    np.save(tmp_path / "codes.npy", codes)
    args = ["-m", f"{folder}/quantized.bc,{tmp_path}/removed.hbm"]
    status, out, err = run(
        capsys, *args, "-i", folder / "x.npy", "-i", tmp_path / "codes.npy"
    )
    assert (status, err) == (0, "")
    assert rows(out)[1][1] == "True" and rows(out)[1][5] == "True"
    assert "bit-identical: all 20 elements" in out
    # one -i: both models get the float data, which the removed model refuses
    status, _, err = run(capsys, *args, "-i", folder / "x.npy")
    assert status == 2 and "compare models that take the same inputs" in err


def test_roi_resize_model_takes_its_three_inputs(tmp_path, capsys):
    """A conv model behind insert_roi_resize("nv12"): inputs _input_0_y,
    _input_0_uv and _input_0_roi, given as -i y.npy,uv.npy,roi.npy."""
    import torch
    from torch import nn

    torch.manual_seed(2)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten())
    inputs = [torch.rand(1, 3, 6, 8) * 4 - 2 for _ in range(3)]
    model = export(compile_models.validated(net, inputs, tmp_path), (inputs[0],))
    node = model.functions[0].inputs[0].insert_transpose(permutes=[0, 3, 1, 2])
    node = node.insert_image_preprocess("yuvbt601full2rgb", 1, [128.0] * 3, [128.0] * 3)
    node.insert_roi_resize("nv12", frame=(12, 16))
    quantized = hbir.convert(model, "nash-e")
    assert quantized["forward"].inputs.names == [
        "_input_0_y",
        "_input_0_uv",
        "_input_0_roi",
    ]
    hbir.save(quantized, tmp_path / "roi_quantized.bc")
    hbir.compile(quantized, tmp_path / "model.hbm", "nash-e")
    rng = np.random.default_rng(4)
    np.save(tmp_path / "y.npy", rng.integers(0, 256, (1, 12, 16, 1), np.uint8))
    np.save(tmp_path / "uv.npy", rng.integers(0, 256, (1, 6, 8, 2), np.uint8))
    np.save(tmp_path / "roi.npy", np.array([[-3, 2, 11, 13]], np.int32))
    status, out, err = run(
        capsys,
        "-m",
        f"{tmp_path}/roi_quantized.bc,{tmp_path}/model.hbm",
        "-i",
        f"{tmp_path}/y.npy,{tmp_path}/uv.npy,{tmp_path}/roi.npy",
    )
    assert (status, err) == (0, "")
    assert rows(out)[1][:2] == ["_output_0", "True"] and rows(out)[1][-1] == "True"
