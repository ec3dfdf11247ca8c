"""Named phases: export is the 1:1 import plus passes, stoppable after each one."""

import pytest
import torch
from cli_runs import run_main
from torch import nn
from zoo_stages import validated

import hbir
from hbir.conversion import cpu_advice
from hbir.passes.pipelines import PHASES, pipeline_up_to, stop_points
from hbir.quantization import (
    DeQuantStub,
    ExportError,
    QuantStub,
    export,
)
from hbir.tools import hbir_opt

EXPORT_PASSES = [spec.split("{")[0] for spec in PHASES["export"]]


def _opt(*args):
    """hbir-opt in this process (``cli_runs``; tests/tools start it as a process)."""
    return run_main(hbir_opt.main, *args)


def _asm(module: hbir.Module) -> str:
    return module.module.get_asm()


class LayerScale(nn.Module):
    """conv, sigmoid, then a parameter broadcast by ``gamma.reshape(1, -1, 1, 1)``."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.gamma = nn.Parameter(torch.linspace(0.5, 2.0, 4))

    def forward(self, x):
        y = torch.sigmoid(self.conv(self.quant(x)))
        return self.dequant(y * self.gamma.reshape(1, -1, 1, 1))


@pytest.fixture(scope="module")
def layer_scale(tmp_path_factory):
    torch.manual_seed(0)
    inputs = [torch.randn(1, 3, 8, 8) for _ in range(4)]
    out_dir = tmp_path_factory.mktemp("layer_scale")
    return validated(LayerScale(), inputs, out_dir), (inputs[0],)


def test_a_parameter_reshape_folds_and_converts_to_fixed_point(layer_scale):
    qat, example = layer_scale
    imported = export(qat, example, stop_after="import")
    assert imported["forward"].statistics()["hbir.reshape"] == 1
    qat_bc = export(qat, example)
    assert "hbir.reshape" not in qat_bc["forward"].statistics()
    quantized = hbir.convert(qat_bc, "nash-e")
    assert cpu_advice(quantized) == []


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
def test_hbir_opt_stops_after_each_export_pass_of_an_imported_model(
    layer_scale, tmp_path
):
    qat, example = layer_scale
    imported = export(qat, example, stop_after="import")
    hbir.save(imported, tmp_path / "imported.bc")
    previous = _asm(imported)
    for name in EXPORT_PASSES:
        out = tmp_path / f"{name}.mlir"
        result = _opt(
            str(tmp_path / "imported.bc"), f"--compile-to={name}", "-o", str(out)
        )
        assert result.returncode == 0, result.stderr
        text = _asm(hbir.load(out))
        assert text == _asm(export(qat, example, stop_after=name)), name
        assert text != previous, f"{name} changed nothing"
        previous = text
    assert previous == _asm(export(qat, example))


def test_import_asks_for_tables_and_configure_lut_gives_the_grids(layer_scale):
    qat, example = layer_scale
    imported = export(qat, example, stop_after="import")
    configured = export(qat, example, stop_after="configure-lut")
    luts = [
        op
        for op in imported["forward"].op.walk()
        if hasattr(op, "lut_config") and op.num_tables is not None
    ]
    assert luts, "the model has a LUT op"
    assert all(op.lut_config() is None for op in luts)
    configured_luts = [
        op for op in configured["forward"].op.walk() if hasattr(op, "lut_config")
    ]
    assert all(op.lut_config() is not None for op in configured_luts)


def test_export_refuses_a_stop_outside_export(layer_scale):
    qat, example = layer_scale
    with pytest.raises(ExportError, match="not a pass of export"):
        export(qat, example, stop_after="convert")
    with pytest.raises(ExportError, match="unknown phase or pass 'nope'"):
        export(qat, example, stop_after="nope")


def test_stop_points_are_phases_then_their_passes(monkeypatch):
    assert stop_points()[:3] == ["export", "convert", "compile"]
    assert set(EXPORT_PASSES) <= set(stop_points())
    assert pipeline_up_to("fold-constants") == [("export", PHASES["export"][:2])]
    assert pipeline_up_to("compile", "nash-m")[-1] == (
        "compile",
        [s.replace("nash-e", "nash-m") for s in PHASES["compile"]],
    )
    # A phase that does nothing is an error, not a silent success.
    monkeypatch.setitem(PHASES, "compile", [])
    with pytest.raises(ValueError, match="phase 'compile' has no passes yet"):
        pipeline_up_to("compile")
