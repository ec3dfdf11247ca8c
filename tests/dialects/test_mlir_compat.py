"""Our generic output is valid MLIR for MLIR's own C++ parser.

Runs when ``iree-opt`` (pip package ``iree-base-compiler``) is installed: on PATH,
or named by the ``HBIR_IREE_OPT`` environment variable. It is a 500 MB download,
so the default test install does not pull it.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hbir.diagnostics import parse_module
from hbir.dialects import make_context
from hbir.files import print_module

ROUNDTRIP = Path(__file__).parents[1] / "filecheck" / "dialects" / "roundtrip.mlir"
IREE_OPT = os.environ.get("HBIR_IREE_OPT") or shutil.which("iree-opt")

pytestmark = pytest.mark.skipif(
    IREE_OPT is None, reason="iree-opt not installed (pip install iree-base-compiler)"
)


def chunks():
    text = ROUNDTRIP.read_text()
    return [c for c in text.split("// -----") if "func.func" in c]


@pytest.mark.parametrize("index", range(3))
def test_mlir_parses_our_generic_output_and_we_parse_its_output(index):
    ours = parse_module(make_context(), chunks()[index], "roundtrip.mlir")
    generic = print_module(ours, generic=True, debuginfo=True)
    res = subprocess.run(
        [
            IREE_OPT,
            "--allow-unregistered-dialect",
            "--mlir-print-op-generic",
            "--mlir-print-debuginfo",
            "--mlir-print-local-scope",
            "-",
        ],
        input=generic,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    back = parse_module(make_context(), res.stdout, "iree-opt output")
    assert back.is_structurally_equivalent(ours)
