"""hbir-opt's answers to user mistakes: one message naming the fix, status 1; an
internal error shows as one, status 2 (issue 16 item 2, issue 17 item 4)."""

import subprocess
import sys

import pytest

MODEL = """func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = hbir.relu %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""


def opt(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "hbir.tools.hbir_opt", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "m.mlir"
    path.write_text(MODEL)
    return path


def one_error(res) -> str:
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    return res.stderr.strip()


def test_output_that_is_not_a_model_file_is_refused(model, tmp_path):
    out = tmp_path / "out.pt"
    message = one_error(opt(model, "-o", out))
    assert message.startswith(f"hbir-opt: error: {out}: hbir-opt writes .bc or .mlir")
    assert "end the output path in .bc" in message
    assert not out.exists()  # was MLIR text written into a .pt


def test_misspelt_pass_gets_did_you_mean(model):
    message = one_error(opt(model, "-p", "clenaup"))
    assert (
        message == "hbir-opt: error: unknown pass 'clenaup' (did you mean 'cleanup'?)"
    )


def test_unknown_pass_without_a_close_name_points_at_help(model):
    message = one_error(opt(model, "-p", "zzz"))
    assert "unknown pass 'zzz' (hbir-opt --help lists every pass)" in message


def test_repeated_pass_option_is_refused(model):
    message = one_error(opt(model, "-p", "convert{march=nash-e march=nash-m}"))
    assert message == (
        "hbir-opt: error: pass 'convert': option 'march' is given twice; give it once"
    )


def test_help_lists_pass_options():
    res = opt("--help")
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    convert = lines.index(next(line for line in lines if line.startswith("  convert ")))
    assert "options: march=<str> (default 'nash-e')" in lines[convert + 1]
    remove = lines.index(
        next(line for line in lines if line.startswith("  remove-fake-quant "))
    )
    assert "ids=<tuple[int | str, ...]> (required)" in lines[remove + 1]
    assert "function=<str> (default '')" in lines[remove + 1]


def test_file_errors_share_one_format(tmp_path):
    truncated = tmp_path / "t.bc"
    truncated.write_bytes(b"HBIRBC\x00\x01xx")
    other = tmp_path / "m.txt"
    other.write_text(MODEL)
    for path, what in [
        (truncated, "truncated"),
        (other, "unsupported file type '.txt'"),
        (tmp_path / "missing.mlir", "No such file or directory"),
    ]:
        message = one_error(opt(path))
        assert message.startswith(f"hbir-opt: error: {path}: "), message
        assert what in message


def test_resize_with_one_scale_is_located_not_a_traceback(tmp_path):
    path = tmp_path / "r.mlir"
    path.write_text(
        "func.func @f(%x: tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32> {\n"
        "  %y = hbir.resize2d %x {size = array<i64: 4, 4>, scale = array<f64: 2.0>}"
        " : tensor<1x1x2x2xf32> -> tensor<1x1x4x4xf32>\n"
        "  func.return %y : tensor<1x1x4x4xf32>\n}\n"
    )
    message = one_error(opt(path))
    assert message.startswith(f"{path}:2:3: error: 'hbir.resize2d' op scale needs 2")


INTERNAL = """
import sys
from hbir.tools import hbir_opt

def broken(self, module):
    raise ValueError("an internal bug")

hbir_opt.HbirOptMain.apply_passes = broken
hbir_opt.main(sys.argv[1:])
"""


def test_internal_error_is_not_dressed_as_a_user_error(model):
    res = subprocess.run(
        [sys.executable, "-c", INTERNAL, str(model)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 2
    assert "Traceback" in res.stderr and "ValueError: an internal bug" in res.stderr
    assert "hbir-opt: internal error: this is a bug in hbir" in res.stderr


def test_bf16_weight_with_a_short_blob_is_located_before_expand_fake_quant(tmp_path):
    path = tmp_path / "w.mlir"
    path.write_text(
        "func.func @f() -> tensor<2x2xbf16> {\n"
        '  %w = hbir.constant dense<"0x3F003F003F"> : tensor<2x2xbf16>\n'
        "  %q = qnt.const_fake_quant %w {min = array<f64: -0.5>, max = array<f64: "
        "0.49609375>, bits = 8 : i64} : tensor<2x2xbf16>\n"
        "  func.return %q : tensor<2x2xbf16>\n}\n"
    )
    message = one_error(opt(path, "-p", "expand-fake-quant"))
    assert message.startswith(f"{path}:2:27: error: ")  # the constant, not later
    assert "cannot reshape" not in message
