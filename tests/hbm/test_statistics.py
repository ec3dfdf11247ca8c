"""hbir.statistics on a compiled model: counts read off tests/hbm/conftest.py's
hand-built program, and the .bc path unchanged."""

import pytest

import hbir
from hbir.hbm import Hbm

HAND = {
    "opcodes": {"cpu_call": 1, "dma_load": 1, "dma_store": 1, "eltwise": 1},
    "units": {"cpu": 1, "dma": 2, "vae": 1},
    "instructions": 4,
    "const_bytes": 64 + 64 + 8,  # the added constant, multiplier and shift
    "ddr_peak_bytes": 192,
    "sram_peak_bytes": 128,
}


def test_counts_per_function(program, capsys):
    stats = hbir.statistics(Hbm(program))
    assert stats["forward"] == HAND
    assert stats["identity"]["instructions"] == 0
    assert stats["identity"]["opcodes"] == {}
    printed = capsys.readouterr().out
    assert "ops encountered in func @forward\n\t cpu_call : 1\n\t dma_load : 1\n" in (
        printed
    )
    assert "ops encountered in func @identity\n" in printed
    assert "constants : 136 bytes, DDR peak : 192 bytes, SRAM peak : 128 bytes" in (
        printed
    )


def test_a_module_keeps_its_op_counts(capsys):
    module = hbir.Module.parse(
        """
func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = hbir.relu %x : tensor<2xf32>
  func.return %y : tensor<2xf32>
}
"""
    )
    assert hbir.statistics(module) == {"forward": {"hbir.relu": 1}}


def test_a_path_is_refused_with_the_fix(tmp_path):
    with pytest.raises(hbir.ModelTypeError, match=r"hbir\.load"):
        hbir.statistics(str(tmp_path / "model.hbm"))
