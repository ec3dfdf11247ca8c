"""hbm_perf: the cost model's totals, checked by hand against the march table.

Expected figures are derived here from the published / assumed march numbers of
docs/compile.md (nash-e: 80 int8 TOPS at 1 GHz = 40,000 MACs per cycle, 51.2 GB/s
DDR = 51.2 bytes per cycle) and the model's tensor sizes, not read back from the
implementation.
"""

import json
import math
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
from torch import nn
from zoo_stages import validated

import hbir
from hbir.hbm.perf import estimate
from hbir.passes.march import get_npu
from hbir.quantization import DeQuantStub, QuantStub, export

MACS_PER_CYCLE = 80e12 / (2 * 1e9)  # nash-e int8
DDR_BYTES_PER_CYCLE = 51.2e9 / 1e9  # nash-e
N, K, M = 64, 256, 128  # a linear layer: x [N, K] int8, w [M, K] int8, y [N, M] int8


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.fc = nn.Linear(K, M)
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.fc(self.quant(x)))


@pytest.fixture(scope="module")
def linear_hbm(tmp_path_factory):
    """One int8 linear layer with integer inputs and outputs (no CPU edges), as
    model.hbm, and the perf report of it."""
    folder = tmp_path_factory.mktemp("perf")
    torch.manual_seed(0)
    inputs = [torch.randn(N, K) for _ in range(2)]
    qat = validated(Linear(), inputs, folder)
    quantized = hbir.convert(export(qat, (inputs[0],)), "nash-e")
    quantized["forward"].remove_io_op(op_types=["Quantize", "Dequantize"])
    path = folder / "linear.hbm"
    hbir.compile(quantized, path, march="nash-e")
    return folder, path


def test_linear_layer_matches_the_march_table(linear_hbm, capsys):
    folder, path = linear_hbm
    data = hbir.hbm_perf(path, output_dir=folder / "out")
    printed = capsys.readouterr().out
    (forward,) = data["functions"]
    # DMA in order: x, w, the int32 bias; the gemm; then y out. Nothing overlaps:
    # one compute op, whose loads precede it and whose store follows it.
    sizes = {"x": N * K, "w": M * K, "bias": 4 * M, "y": N * M}
    dma = sum(math.ceil(b / DDR_BYTES_PER_CYCLE) for b in sizes.values())
    gemm = math.ceil(N * M * K / MACS_PER_CYCLE)
    assert forward["units"] == {"dma": dma, "tae": gemm}
    assert forward["cycles"] == dma + gemm
    assert forward["latency_us"] == pytest.approx((dma + gemm) / 1000)
    assert forward["fps"] == pytest.approx(1e6 / forward["latency_us"])
    assert forward["ddr_bytes"] == sum(sizes.values())
    assert forward["sram_peak_bytes"] >= N * K + M * K + 4 * M + N * M
    (layer,) = forward["layers"]
    assert layer["opcode"] == "gemm" and layer["cycles"] == dma + gemm
    assert printed == (
        f"FPS={forward['fps']:.2f}, latency = {forward['latency_us']:.2f} us, "
        f"DDR = {sum(sizes.values())} bytes\n"
    )


def test_json_and_html_are_written_and_the_html_has_the_bars(linear_hbm):
    folder, path = linear_hbm
    data = hbir.hbm_perf(path, output_dir=folder / "out2")
    assert json.loads((folder / "out2" / "linear.json").read_text()) == data
    page = (folder / "out2" / "linear.html").read_text()
    assert "https://" not in page and "<script" not in page  # nothing to fetch
    bars = re.findall(r'<rect class="bar"[^>]*fill="([^"]+)"', page)
    assert len(bars) == 2  # the one layer: a dma and a tae segment
    widths = [
        float(w) for w in re.findall(r'<rect class="bar"[^>]*width="([\d.]+)"', page)
    ]
    assert sum(widths) == pytest.approx(560, abs=0.2)  # the longest bar is full width


def test_hand_program_totals(program):
    """tests/hbm/conftest.py's program: four 4-cycle instructions in a row."""
    cost = estimate(program.functions[0], get_npu("nash-e"))
    assert cost.cycles == 16
    assert cost.units == {"cpu": 4, "dma": 8, "vae": 4}
    # load reads x (64), the add reads a constant (64), the store writes 64 and
    # the CPU island reads 64 and writes 64 bytes of DDR.
    assert cost.ddr_bytes == 64 + 64 + 64 + 128
    assert cost.const_bytes == 64 + 64 + 8
    assert [layer.name for layer in cost.layers] == [
        "(no origin)",
        "net.py:12:5",
        "net.py:13:9 \u00e9",
    ]
    assert cost.layers[0].units == {"dma": 8}  # the load and the store


def test_a_path_that_is_not_hbm_is_refused(tmp_path):
    with pytest.raises(hbir.HbirError, match=r"expected a \.hbm file"):
        hbir.hbm_perf(tmp_path / "model.bc")


def test_empty_function_costs_nothing(program):
    cost = estimate(program.functions[1], get_npu("nash-e"))
    assert (cost.cycles, cost.ddr_bytes, cost.layers) == (0, 0, [])
    assert cost.fps == 0.0


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TAE_BLUE = (31, 119, 180)  # #1f77b4, the tae segment


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_the_chart_renders_in_a_headless_browser(linear_hbm, tmp_path):
    from PIL import Image

    folder, path = linear_hbm
    hbir.hbm_perf(path, output_dir=tmp_path)
    url = (tmp_path / "linear.html").as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1000,600"]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert dom.count('class="bar"') == 2
    shot = tmp_path / "perf.png"
    subprocess.run(
        [CHROMIUM, *flags, f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    blue = np.all(pixels == TAE_BLUE, axis=-1)
    # The tae segment (560 * 53 / 1183 = 25 px wide); the legend's swatch is 12.
    assert blue.sum(axis=1).max() >= 20


def test_cpu_instructions_are_their_own_layer(tmp_path_factory):
    """The digits model's output dequantize runs on the CPU under the last
    linear's location: its cycles are a layer of their own (cpu_op), and the NPU
    layer of that location has no CPU time."""
    import compile_models

    _, _, hbm, _ = compile_models.compiled("digits", tmp_path_factory)
    code = hbm.program.functions[0]
    cost = estimate(code, get_npu(hbm.march))
    cpu = {
        debug.op: instruction.end - instruction.start
        for instruction, debug in zip(code.instructions, code.debug, strict=True)
        if instruction.unit == "cpu"
    }
    islands = {layer.cpu_op: layer for layer in cost.layers if layer.cpu_op}
    assert set(islands) == set(cpu) and "qnt.dequantize" in islands
    for op, layer in islands.items():
        assert layer.units == {"cpu": cpu[op]} and layer.opcode == "cpu_call"
    npu_names = {layer.name for layer in cost.layers if not layer.cpu_op}
    output = islands["qnt.dequantize"]
    assert output.name in npu_names  # it shares the last layer's location
    assert all("cpu" not in layer.units for layer in cost.layers if not layer.cpu_op)
