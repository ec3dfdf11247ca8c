"""Plain xdsl-opt sees the hbir and qnt dialects and passes through the entry point."""

import os
import shutil
import subprocess
import sys

from hbir.tools.universe import HBIR_UNIVERSE

TEXT = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = hbir.reshape %x : tensor<4xf32> -> tensor<2x2xf32>
  %b = hbir.reshape %a : tensor<2x2xf32> -> tensor<4xf32>
  %y = qnt.const_fake_quant %b {min = array<f64: -1.0>, max = array<f64: 1.0>, bits = 8 : i64} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""


def test_universe_lists_our_dialects_and_passes():
    assert set(HBIR_UNIVERSE.all_dialects) == {"hbir", "qnt"}
    assert "cleanup" in HBIR_UNIVERSE.all_passes


def test_xdsl_opt_parses_and_runs_our_pass():
    xdsl_opt = shutil.which("xdsl-opt", path=os.path.dirname(sys.executable))
    assert xdsl_opt, "xdsl-opt is installed with xdsl"
    res = subprocess.run(
        [xdsl_opt, "-p", "cleanup"], input=TEXT, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("hbir.reshape") == 0
    assert "qnt.const_fake_quant %x" in res.stdout
