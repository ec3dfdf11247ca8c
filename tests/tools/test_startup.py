"""Every console tool parses its command line, and answers ``--help`` or a usage
error, before it imports torch, numba or the dialects (xDSL's universe of them
and ours): start-up is the arguments' business alone (benchmarks/startup.py
times it). Run in a fresh interpreter per case, so that ``sys.modules`` shows
what the tool itself imported."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]

# What start-up must not import: the libraries a command needs once it runs.
HEAVY = (
    "torch",
    "numba",
    "hbir.dialects.hbir",
    "hbir.dialects.npu",
    "hbir.dialects.qnt",
    "hbir.runtime.interpreter",
    "xdsl.dialects.arith",  # one of xDSL's own dialects: its universe
)

# (script, arguments, exit status): --help, and a usage error of each tool.
CASES = [
    ("hbir-opt", ["--help"], 0),
    ("hbir-opt", ["--no-such-flag"], 2),
    ("hbir-opt", ["--compile-to=nowhere", "x.mlir"], 2),
    ("hb_verifier", ["--help"], 0),
    ("hb_verifier", [], 2),
    ("hbir", ["--help"], 0),
    ("hbir", ["no-such-command"], 1),
    ("hbir", ["doctor", "--help"], 0),
    ("hbir", ["doctor"], 1),
    ("hbir", ["compile", "--help"], 0),
    ("hbir", ["compile", "quantized.bc"], 1),
    ("bc_editor", ["--help"], 0),
    ("bc_editor", [], 1),
]

PROBE = """
import importlib, json, sys
target, argv, heavy = json.loads(sys.argv[1])
module, name = target.split(":")
sys.argv = [module] + argv
try:
    getattr(importlib.import_module(module), name)()
    code = 0
except SystemExit as e:
    code = e.code
print(json.dumps([code, [m for m in heavy if m in sys.modules]]))
"""


def test_every_console_script_is_covered():
    assert {script for script, _, _ in CASES} == set(SCRIPTS)


@pytest.mark.parametrize(
    ("script", "args", "status"),
    CASES,
    ids=[" ".join([s, *a]) or s for s, a, _ in CASES],
)
def test_start_up_imports_nothing_heavy(script, args, status):
    res = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([SCRIPTS[script], args, HEAVY])],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    code, loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert code == status, res.stderr
    assert loaded == [], f"{script} {args} imported {loaded}"
    if status:  # a usage error: one message, no traceback
        assert "Traceback" not in res.stderr
        assert "usage:" in res.stderr
