"""hbir-opt as a process: help, start-up imports, errors, .bc output."""

import os
import subprocess
import sys
from pathlib import Path

import hbir

INPUTS = Path(__file__).parents[1] / "filecheck" / "tools" / "Inputs"


def opt(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "hbir.tools.hbir_opt", *args],
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )


def test_help_lists_every_pass_with_its_summary():
    from hbir.passes import get_all_passes, summary

    res = opt("--help")
    assert res.returncode == 0
    # --help reads summaries from the sources; they must equal the imported
    # classes' docstrings.
    for name, factory in get_all_passes().items():
        assert f"  {name:<24} {summary(factory())}" in res.stdout


def test_help_imports_no_torch():
    code = (
        "import sys; sys.argv = ['hbir-opt', '--help']\n"
        "from hbir.tools.hbir_opt import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert 'hbir.runtime.interpreter' not in sys.modules\n"
        "assert 'numpy' not in sys.modules, 'numpy slows start-up'\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr


def test_errors_are_one_located_message_and_status_1():
    for name, first in [
        ("parse_error.mlir", "parse_error.mlir:3:3: error: Operation hbir.nope"),
        ("verify_error.mlir", "verify_error.mlir:3:3: error: 'hbir.matmul' op"),
    ]:
        res = opt(str(INPUTS / name))
        assert res.returncode == 1
        assert first in res.stderr.splitlines()[0]
        assert "Traceback" not in res.stderr
        assert len(res.stderr.splitlines()) == 3  # message, source line, caret


def test_bc_output_and_input(tmp_path):
    src = tmp_path / "m.mlir"
    src.write_text(
        "func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %y = hbir.relu %x : tensor<4xf32>\n"
        "  func.return %y : tensor<4xf32>\n}\n"
    )
    out = tmp_path / "m.bc"
    assert opt(str(src), "-o", str(out)).returncode == 0
    assert out.read_bytes()[:6] == b"HBIRBC"
    assert hbir.load(out).module.get_asm() == hbir.load(src).module.get_asm()
    res = opt(str(out), "-p", "cleanup")
    assert res.returncode == 0 and "hbir.relu %x" in res.stdout


def test_corrupt_bc_input(tmp_path):
    bad = tmp_path / "bad.bc"
    bad.write_bytes(b"HBIRBC\x00\x01" + b"\x00" * 10)
    res = opt(str(bad))
    assert res.returncode == 1
    assert "truncated" in res.stderr and "Traceback" not in res.stderr


def test_missing_input_file(tmp_path):
    res = opt(str(tmp_path / "absent.mlir"))
    assert res.returncode == 1
    assert "No such file" in res.stderr and "Traceback" not in res.stderr


def test_output_prints_floats_that_parse_back():
    """hbir-opt prints with ``files.HbirPrinter``: -1048576.0 stays decimal (xDSL's
    printer writes a hex pattern its own parser rejects in ``array<f64: ...>``)."""
    text = (
        "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %y = qnt.const_fake_quant %x {min = array<f64: -1048576.0>, "
        "max = array<f64: 1048544.0>, bits = 16 : i64} : tensor<4xf32>\n"
        "  func.return %y : tensor<4xf32>\n"
        "}\n"
    )
    for args in ([], ["--print-op-generic"]):
        res = opt(*args, input=text)
        assert res.returncode == 0, res.stderr
        assert "0x" not in res.stdout
        again = opt(input=res.stdout)
        assert again.returncode == 0, again.stderr
        assert again.stdout == opt(input=text).stdout


DROP_RETURN = '''
from xdsl.dialects.func import ReturnOp
from xdsl.passes import ModulePass

from hbir.passes import register_pass


@register_pass
class DropReturn(ModulePass):
    """Break the IR: drop every return."""

    name = "drop-return"

    def apply(self, ctx, op):
        for inner in list(op.walk()):
            if isinstance(inner, ReturnOp):
                inner.detach()
                inner.erase()
'''


def test_verify_each_names_the_pass_that_broke_the_ir(tmp_path):
    (tmp_path / "drop_return.py").write_text(DROP_RETURN)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HBIR_VERIFY_EACH": "0"}
    model = INPUTS.parents[3] / "docs" / "examples" / "my_hbir_passes" / "model.mlir"
    args = ["--load-plugin", "drop_return", "-p", "drop-return,cleanup", str(model)]
    once = opt(*args, env=env)
    assert once.returncode == 1
    assert once.stderr.startswith("after the passes (--verify-each: after every pass)")
    each = opt(*args, "--verify-each", env=env)
    assert each.returncode == 1
    assert each.stderr.startswith("after pass 'drop-return': error: ")
    env["HBIR_VERIFY_EACH"] = "1"  # as the test suite sets it
    assert opt(*args, env=env).stderr == each.stderr
