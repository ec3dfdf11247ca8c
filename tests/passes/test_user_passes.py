"""The user-pass example of docs/writing-passes.md, run as a user would."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "my_hbir_passes"
HBIR_OPT = [sys.executable, "-m", "hbir.tools.hbir_opt"]


def run_opt(args, extra_path=()):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLE / "src"), *map(str, extra_path)])
    return subprocess.run(
        HBIR_OPT + args, capture_output=True, text=True, env=env, check=False
    )


def test_load_plugin_runs_the_user_pass():
    res = run_opt(
        [
            "--load-plugin",
            "my_hbir_passes.passes",
            "-p",
            "merge-double-relu,cleanup",
            str(EXAMPLE / "model.mlir"),
        ]
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("hbir.relu") == 1
    assert "func.return %a" in res.stdout


def test_entry_point_registration(tmp_path):
    # An installed package is a dist-info folder with entry_points.txt on sys.path:
    # write exactly that instead of pip-installing into the test environment.
    dist = tmp_path / "my_hbir_passes-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: my-hbir-passes\nVersion: 0.1.0\n"
    )
    ep = (EXAMPLE / "pyproject.toml").read_text().split('"hbir.passes"]\n')[1]
    # entry_points.txt spells the value without the TOML quotes.
    (dist / "entry_points.txt").write_text(
        "[hbir.passes]\n" + ep.strip().replace('"', "") + "\n"
    )
    res = run_opt(["-p", "merge-double-relu", str(EXAMPLE / "model.mlir")], [tmp_path])
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("hbir.relu") == 1
    listing = run_opt(["--help"], [tmp_path]).stdout
    assert "merge-double-relu        Replace relu(relu(x)) by relu(x)." in listing


def test_missing_plugin_is_a_clear_error():
    res = run_opt(["--load-plugin", "no_such_module", str(EXAMPLE / "model.mlir")])
    assert res.returncode == 1
    assert "cannot load plugin 'no_such_module'" in res.stderr
    assert "Traceback" not in res.stderr


def test_user_pass_cannot_shadow_ours():
    from dataclasses import dataclass

    from xdsl.passes import ModulePass

    from hbir.passes import PassRegistryError, register_pass

    with pytest.raises(PassRegistryError, match="'cleanup' is already registered"):

        @register_pass
        @dataclass(frozen=True)
        class Impostor(ModulePass):
            name = "cleanup"

            def apply(self, ctx, op):
                pass
