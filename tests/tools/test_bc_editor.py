"""bc_editor as its console script runs it (and its library call): editing and every
bad input."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from cli_runs import run_main
from zoo_stages import calibrated

import hbir
from hbir.bc_editor import ConfigError, QatBcEditor, remove_fake_quant
from hbir.dialects.hbir import is_float
from hbir.dialects.op_ids import OpIdError, op_ids
from hbir.quantization import export
from hbir.tools import bc_editor as bc_editor_tool

FAKE_QUANT_LINE = re.compile(r'^\s*%(\d+) = "?qnt\.const_fake_quant\b')
OP_LINE = re.compile(r'^\s*%(\d+) = "?([a-z_0-9]+\.[a-z_0-9]+)')


def bc_editor(*args, cwd=None):
    """``bc_editor ARGS`` in this process (``cli_runs``; the console script's
    own process: ``test_dashed_spellings_and_the_console_script``)."""
    return run_main(bc_editor_tool.main, *args, cwd=cwd)


def printed_ops(text: str) -> dict[int, str]:
    """%N -> op name, read off get_asm's text."""
    return {int(m[1]): m[2] for line in text.splitlines() if (m := OP_LINE.match(line))}


def op_lines_without(text: str, ids) -> list[str]:
    """The op lines of ``text`` minus the fake quants ``ids``, SSA names blanked."""
    lines = [
        line
        for line in text.splitlines()
        if " = " in line
        and not ((m := FAKE_QUANT_LINE.match(line)) and int(m[1]) in ids)
    ]
    # Removing a fake quant drops the qnt.exact mark of its neighbours.
    mark = r" ?\{qnt\.exact = \{[^{}]*\}\}|,? ?qnt\.exact = \{[^{}]*\}"
    lines = [re.sub(mark, "", line) for line in lines]
    return [re.sub(r"%[\w$.-]+", "%", line.strip()) for line in lines]


@pytest.fixture(scope="module")
def qat_bc(tmp_path_factory):
    """A real exported model on disk, and its get_asm text."""
    folder = tmp_path_factory.mktemp("resnet")
    qat, example = calibrated("resnet", folder)
    path = folder / "qat.bc"
    hbir.save(export(qat, example), path)
    return path, hbir.load(path).module.get_asm()


def write_config(tmp_path, config) -> str:
    path = tmp_path / "config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return path


# ---- editing


def test_edit_removes_exactly_the_chosen_fake_quants(qat_bc, tmp_path):
    path, text = qat_bc
    original = path.read_bytes()
    fqs = sorted(
        n for n, op in printed_ops(text).items() if op == "qnt.const_fake_quant"
    )
    start, end, single = fqs[2], fqs[5], fqs[-1]
    chosen = [n for n in fqs if start <= n <= end] + [single]
    config = write_config(tmp_path, {"remove_fake_quant": [[start, end], single]})
    out = tmp_path / "qat_modified.bc"

    res = bc_editor("--bc_path", path, "--config_path", config, "--new_bc_path", out)
    assert res.returncode == 0, res.stderr
    ids = ", ".join(f"%{n}" for n in chosen)
    assert res.stdout.splitlines() == [
        f"removed {len(chosen)} qnt.const_fake_quant ({ids})",
        f"wrote {out}",
    ]
    edited = hbir.load(out)
    after = edited.module.get_asm()
    assert after.count("qnt.const_fake_quant") == len(fqs) - len(chosen)
    assert op_lines_without(after, ()) == op_lines_without(text, chosen)
    assert path.read_bytes() == original
    # The edited model still runs.
    f = edited["forward"]
    x = np.linspace(-2, 2, np.prod(f.inputs[0].shape), dtype=np.float32)
    assert np.isfinite(f(x.reshape(f.inputs[0].shape))).all()


def test_dashed_spellings_and_the_console_script(qat_bc, tmp_path):
    path, text = qat_bc
    fq = next(n for n, op in printed_ops(text).items() if op == "qnt.const_fake_quant")
    config = write_config(tmp_path, {"remove_fake_quant": [fq], "function": "forward"})
    out = tmp_path / "new.bc"
    res = bc_editor("--bc-path", path, "--config-path", config, "--new-bc-path", out)
    assert res.returncode == 0, res.stderr
    script = shutil.which("bc_editor", path=os.path.dirname(sys.executable))
    assert script, "the bc_editor console script is not installed: pip install -e ."
    res = subprocess.run([script, "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "--bc_path" in res.stdout


def test_library_calls(qat_bc, tmp_path):
    path, text = qat_bc
    fqs = [n for n, op in printed_ops(text).items() if op == "qnt.const_fake_quant"]
    m = hbir.load(path)
    edited = remove_fake_quant(m, [[fqs[0], fqs[1]], fqs[3]])
    assert m.module.get_asm() == text
    assert op_lines_without(edited.module.get_asm(), ()) == op_lines_without(
        text, [fqs[0], fqs[1], fqs[3]]
    )
    config = write_config(tmp_path, {"remove_fake_quant": [fqs[3]]})
    editor = QatBcEditor(str(path), str(config), str(tmp_path / "out.bc"))
    assert editor.run() == [fqs[3]]
    with pytest.raises(ConfigError, match="wrong types"):
        remove_fake_quant(m, ["3"])
    with pytest.raises(OpIdError, match="reversed range"):
        remove_fake_quant(m, [[fqs[1], fqs[0]]])


# ---- bad input: one message, exit status 1, no traceback, nothing written


def assert_fails(res, out, *expected):
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith("bc_editor: error: "), res.stderr
    for line in expected:
        assert line in res.stderr, res.stderr
    assert not os.path.exists(out)


def run_config(qat_bc, tmp_path, config):
    path, _ = qat_bc
    out = tmp_path / "out.bc"
    cfg = write_config(tmp_path, config)
    return bc_editor("--bc_path", path, "--config_path", cfg, "--new_bc_path", out), out


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            '{"remove_fake_quant": [[1, 3],\n  7 42]}',
            ["config.json:2:5: malformed JSON: Expecting ',' delimiter"],
        ),
        ('{"remove_fake_quant": [1', ["config.json:1:25: malformed JSON"]),
        ("", ["config.json:1:1: malformed JSON: Expecting value"]),
        (
            {"remove_fake_quants": [1], "zzz": 2},
            [
                "unknown key 'remove_fake_quants' (did you mean 'remove_fake_quant'?)",
                "unknown key 'zzz' (known keys: remove_fake_quant, function)",
            ],
        ),
        ({}, ["missing key 'remove_fake_quant'"]),
        ([1, 2], ["expected a JSON object like", "got a list"]),
        (
            '{"remove_fake_quant": [1], "remove_fake_quant": [2]}',
            ["key 'remove_fake_quant' appears twice"],
        ),
        ({"remove_fake_quant": 5}, ["expected a list of IDs", "got an integer"]),
        ({"remove_fake_quant": []}, ["the list is empty: nothing to remove"]),
        (
            {"remove_fake_quant": [1], "function": 3},
            ["function: expected a function name, got an integer"],
        ),
        ({"remove_fake_quant": [1], "function": "head"}, ["no function @head"]),
    ],
)
def test_bad_config(qat_bc, tmp_path, config, expected):
    assert_fails(*run_config(qat_bc, tmp_path, config), *expected)


def test_wrong_types_are_listed_together(qat_bc, tmp_path):
    config = {
        "remove_fake_quant": [1, True, -1, 1.5, "3", [1], [1, 2, 3], [1, "a"], None]
    }
    res, out = run_config(qat_bc, tmp_path, config)
    assert_fails(res, out)
    assert res.stderr.splitlines() == [
        f"bc_editor: error: {tmp_path / 'config.json'}: remove_fake_quant: wrong types:",
        "  [1] true: an ID is an integer, got a boolean",
        "  [2] -1: IDs are >= 0",
        "  [3] 1.5: an ID is an integer, got a real number",
        '  [4] "3": an ID is an integer, got a string',
        "  [5] [1]: a range is [start, end], got 1 value",
        "  [6] [1, 2, 3]: a range is [start, end], got 3 values",
        '  [7] [1, "a"]: an ID is an integer, got a string',
        "  [8] null: an ID is an integer, got null",
    ]


def test_bad_ids_are_listed_together(qat_bc, tmp_path):
    _, text = qat_bc
    ops = printed_ops(text)
    last = max(ops)
    conv = next(n for n, op in ops.items() if op == "hbir.conv2d")
    fq = next(n for n, op in ops.items() if op == "qnt.const_fake_quant")
    assert min(ops) == 0  # the arguments print as %arg0...: never IDs
    config = {
        "remove_fake_quant": [
            fq,
            last + 1,
            conv,
            [conv, conv],
            [fq + 1, fq],
            [fq, last + 50],
        ]
    }
    res, out = run_config(qat_bc, tmp_path, config)
    assert_fails(res, out)
    assert res.stderr.splitlines() == [
        f"bc_editor: error: {tmp_path / 'config.json'}: remove_fake_quant: "
        "5 bad entries for @forward:",
        f"  {last + 1}: @forward has no %{last + 1} (its IDs end at %{last})",
        f"  {conv}: %{conv} is 'hbir.conv2d', not a qnt.const_fake_quant",
        f"  [{conv}, {conv}]: no qnt.const_fake_quant from %{conv} to %{conv}",
        f"  [{fq + 1}, {fq}]: reversed range: {fq + 1} > {fq}",
        f"  [{fq}, {last + 50}]: @forward has no %{last + 50} (its IDs end at %{last})",
    ]


def test_unreadable_and_corrupt_models(qat_bc, tmp_path):
    path, _ = qat_bc
    config = write_config(tmp_path, {"remove_fake_quant": [1]})
    out = tmp_path / "out.bc"
    missing = tmp_path / "missing.bc"
    res = bc_editor("--bc_path", missing, "--config_path", config, "--new_bc_path", out)
    assert_fails(res, out, f"{missing}: cannot read: No such file or directory")

    corrupt = tmp_path / "corrupt.bc"
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    res = bc_editor("--bc_path", corrupt, "--config_path", config, "--new_bc_path", out)
    assert_fails(res, out, f"{corrupt}: checksum mismatch: the file is corrupt")

    truncated = tmp_path / "truncated.bc"
    truncated.write_bytes(path.read_bytes()[:20])
    res = bc_editor(
        "--bc_path", truncated, "--config_path", config, "--new_bc_path", out
    )
    assert_fails(res, out, "truncated")

    text = tmp_path / "model.txt"
    text.write_text("hello")
    res = bc_editor("--bc_path", text, "--config_path", config, "--new_bc_path", out)
    assert_fails(res, out, "unsupported file type '.txt'")


def test_bad_paths(qat_bc, tmp_path):
    path, text = qat_bc
    fq = next(n for n, op in printed_ops(text).items() if op == "qnt.const_fake_quant")
    config = write_config(tmp_path, {"remove_fake_quant": [fq]})
    for out, expected in [
        (
            tmp_path / "out.mlir",
            "the edited model is written as .bc: end the path in .bc",
        ),
        (tmp_path / "out", "the edited model is written as .bc: end the path in .bc"),
        (
            tmp_path / "no" / "such" / "out.bc",
            f"folder '{tmp_path / 'no' / 'such'}' does not exist: create it",
        ),
    ]:
        res = bc_editor(
            "--bc_path", path, "--config_path", config, "--new_bc_path", out
        )
        assert_fails(res, out, f"{out}: {expected}")
    missing = tmp_path / "missing.json"
    out = tmp_path / "out.bc"
    res = bc_editor("--bc_path", path, "--config_path", missing, "--new_bc_path", out)
    assert_fails(res, out, f"{missing}: cannot read: No such file or directory")


def test_missing_arguments(tmp_path):
    res = bc_editor("--bc_path", "qat.bc", "--config_path", "c.json", cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "usage: bc_editor" in res.stderr
    assert "the following arguments are required: --new_bc_path" in res.stderr


# ---- the point of it: convert keeps the edited region float


def float_compute(m: hbir.Module) -> list:
    """The hbir ops (constants aside) that compute in float."""
    return [
        op
        for op in m["forward"].op.walk()
        if op.name.startswith("hbir.")
        and op.name != "hbir.constant"
        and any(is_float(r.type) for r in op.results)
    ]


def test_converting_the_edited_model_keeps_the_region_float(qat_bc, tmp_path):
    path, text = qat_bc
    ops = printed_ops(text)
    fqs = sorted(n for n, name in ops.items() if name == "qnt.const_fake_quant")
    start, end = fqs[3], fqs[6]
    config = write_config(tmp_path, {"remove_fake_quant": [[start, end]]})
    out = tmp_path / "qat_modified.bc"
    res = bc_editor("--bc_path", path, "--config_path", config, "--new_bc_path", out)
    assert res.returncode == 0, res.stderr

    original = hbir.load(path)
    ids = op_ids(original["forward"].op)
    removed = [ids[n] for n in fqs if start <= n <= end]
    # The region: the ops between the first and the last removed fake quant.
    region = [
        ids[n]
        for n in range(start + 1, end)
        if ops.get(n) not in (None, "hbir.constant", "qnt.const_fake_quant")
    ]
    assert {op.name for op in region} >= {"hbir.conv2d", "hbir.relu"}
    # Its edges: what fed or read a removed fake quant may go either way.
    edges = {r.input.owner for r in removed} | {
        use.operation for r in removed for use in r.output.uses
    }

    def key(op):
        return (op.name, op.location)

    assert float_compute(hbir.convert(original, "nash-e")) == []
    quantized = hbir.convert(hbir.load(out), "nash-e")
    floats = float_compute(quantized)
    assert {key(op) for op in region} <= {key(op) for op in floats}
    assert {key(op) for op in floats} <= {key(op) for op in [*region, *edges]}
    # Fenced: integer values enter through dequantize, leave through quantize.
    island = set(floats)
    for op in floats:
        for v in op.operands:
            assert v.owner in island or v.owner.name in (
                "qnt.dequantize",
                "hbir.constant",
            ), f"{op.name} reads {v.owner.name}"
            assert is_float(v.type)
        for r in op.results:
            for use in r.uses:
                assert use.operation in island or use.operation.name in (
                    "qnt.quantize",
                    "func.return",
                ), f"{op.name} feeds {use.operation.name}"
    f = quantized["forward"]
    x = np.linspace(-2, 2, np.prod(f.inputs[0].shape), dtype=np.float32)
    assert np.isfinite(f(x.reshape(f.inputs[0].shape))).all()
