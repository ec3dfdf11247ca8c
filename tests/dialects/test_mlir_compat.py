"""Our text is valid MLIR for MLIR's own C++ parser, and we parse what it prints.

``get_asm``'s reference form of an exported and a converted model, and the generic
form of every op; MLIR's output with debug info (location aliases) parses back.

``iree-opt`` comes with the test extra (pip package ``iree-base-compiler``): found
beside this Python (its venv's scripts), else on PATH, or named by the
``HBIR_IREE_OPT`` environment variable; without it the tests skip, saying how to
install it.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hbir.diagnostics import parse_module
from hbir.dialects import make_context
from hbir.files import print_module

ROUNDTRIP = Path(__file__).parents[1] / "filecheck" / "dialects" / "roundtrip.mlir"
IREE_OPT = (
    os.environ.get("HBIR_IREE_OPT")
    or shutil.which("iree-opt", path=os.path.dirname(sys.executable))
    or shutil.which("iree-opt")
)

pytestmark = pytest.mark.skipif(
    IREE_OPT is None,
    reason='iree-opt not installed: pip install -e ".[test]" (iree-base-compiler)',
)


def chunks():
    text = ROUNDTRIP.read_text()
    return [c for c in text.split("// -----") if "func.func" in c]


@pytest.mark.parametrize("index", range(len(chunks())))  # every chunk
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


def _iree(text: str, *flags: str) -> str:
    res = subprocess.run(
        [IREE_OPT, "--allow-unregistered-dialect", *flags, "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from zoo_stages import calibrated

    import hbir
    from hbir.quantization import export

    qat, example = calibrated("multi_io", tmp_path_factory.mktemp("multi_io"))
    qat_bc = export(qat, example)
    return qat_bc, hbir.convert(qat_bc, "nash-e")


@pytest.mark.parametrize("stage", ["qat.bc", "quantized.bc"])
@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--mlir-print-debuginfo",),  # location aliases: loc(#loc3) ... #loc3 = ...
        ("--mlir-print-op-generic", "--mlir-print-debuginfo"),
    ],
)
def test_mlir_parses_get_asm_and_we_parse_what_it_prints(exported, stage, flags):
    import hbir

    m = exported[stage == "quantized.bc"]
    debug = "--mlir-print-debuginfo" in flags
    printed = _iree(m.module.get_asm(enable_debug_info=True), *flags)
    if debug:
        assert "loc(#loc" in printed and "\n#loc" in printed
    back = hbir.Module.parse(printed, "iree-opt output")
    assert back.module.get_asm(enable_debug_info=debug) == m.module.get_asm(
        enable_debug_info=debug
    )
    assert back.module.op.is_structurally_equivalent(m.module.op)


@pytest.mark.parametrize("index", range(len(chunks())))  # every chunk
def test_mlir_parses_the_reference_form_of_every_op(index):
    import hbir

    ours = hbir.Module.parse(chunks()[index], "roundtrip.mlir")
    text = ours.module.get_asm(enable_debug_info=True)
    back = hbir.Module.parse(_iree(text, "--mlir-print-debuginfo"), "iree-opt output")
    assert back.module.get_asm() == ours.module.get_asm()
