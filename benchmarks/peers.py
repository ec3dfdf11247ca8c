"""model.hbm against its int8 peers and the CPU's int8 floor: the issue's table.

Run: ``python benchmarks/peers.py [--models resnet18,resnet18_fpn512,mobilenet_v2,
vit_tiny] [--rounds 30]``

Per model, batch 1, one thread: the float model taken through every hbir stage
to ``model.hbm`` (prepared, calibrated on two batches, exported, converted,
compiled); ONNX Runtime int8 and OpenVINO int8 running the same static QDQ
model (``ort_peer``, ``openvino_peer``: u8 activations, s8 weights per channel,
calibrated on the same two batches); and the floor, the model's conv / linear /
matmul MACs at this CPU's measured int8 peak (``int8_floor``). In each round
every runtime runs once, adjacent, on the process's CPU clock (which a shared
machine's other jobs do not inflate); each ratio is the median of the rounds'
ratios, [p25, p75] beside it. A peer that is not installed is a skipped column
(``pip install -e ".[bench]"`` installs them); the peers calibrate their own
scales, so this compares speed only.

The rows: ResNet-18 at 224 (``execution_models``), ResNet-18 + FPN at 512 (C3-C5
to 128-channel laterals, nearest 2x top-down, 3x3 smoothing; three outputs),
MobileNetV2 at 224, and timm's ViT-tiny at 224 (random weights).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(__file__))
# tests/models/timm_import.py: timm beside this machine's torch (ViT-tiny)
sys.path.insert(1, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))

import int8_floor  # noqa: E402
import numpy as np  # noqa: E402
import openvino_peer  # noqa: E402
import ort_peer  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from execution_models import build as build_execution_model  # noqa: E402
from torch import nn  # noqa: E402

import hbir  # noqa: E402
from hbir.errors import HbirError  # noqa: E402
from hbir.quantization import (  # noqa: E402
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    export,
    prepare,
    set_fake_quantize,
)

torch.set_num_threads(1)


class ResNet18FPN(nn.Module):
    """Detection-style: ResNet-18's C3-C5, 128-channel FPN, three outputs."""

    size = 512

    def __init__(self):
        super().__init__()
        backbone = build_execution_model("resnet18")
        self.quant, self.stem, self.pool = QuantStub(), backbone.stem, backbone.pool
        blocks = list(backbone.layers)
        self.c2, self.c3 = nn.Sequential(*blocks[:2]), nn.Sequential(*blocks[2:4])
        self.c4, self.c5 = nn.Sequential(*blocks[4:6]), nn.Sequential(*blocks[6:])
        self.lateral = nn.ModuleList(nn.Conv2d(c, 128, 1) for c in (128, 256, 512))
        self.smooth = nn.ModuleList(nn.Conv2d(128, 128, 3, padding=1) for _ in "abc")
        self.dequant = nn.ModuleList(DeQuantStub() for _ in "abc")

    def forward(self, x):
        c3 = self.c3(self.c2(self.pool(self.stem(self.quant(x)))))
        c4 = self.c4(c3)
        c5 = self.c5(c4)
        p5 = self.lateral[2](c5)
        p4 = self.lateral[1](c4) + F.interpolate(p5, scale_factor=2, mode="nearest")
        p3 = self.lateral[0](c3) + F.interpolate(p4, scale_factor=2, mode="nearest")
        return tuple(
            d(s(p))
            for d, s, p in zip(self.dequant, self.smooth, (p3, p4, p5), strict=True)
        )


class Boundary(nn.Module):
    """A timm model with a QuantStub at the input and a DeQuantStub at the output."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.quant, self.model, self.dequant = QuantStub(), inner, DeQuantStub()

    def forward(self, x):
        return self.dequant(self.model(self.quant(x)))


def _vit_tiny() -> nn.Module:
    from timm_import import import_timm

    torch.manual_seed(0)
    timm = import_timm()
    return Boundary(timm.create_model("vit_tiny_patch16_224", pretrained=False))


def _fpn() -> nn.Module:
    torch.manual_seed(0)
    return ResNet18FPN().eval()


MODELS = {  # name -> (label, float model factory, input side)
    "resnet18": ("ResNet-18 224", lambda: build_execution_model("resnet18"), 224),
    "resnet18_fpn512": ("ResNet-18 + FPN 512", _fpn, 512),
    "mobilenet_v2": (
        "MobileNetV2 224",
        lambda: build_execution_model("mobilenet_v2"),
        224,
    ),
    "vit_tiny": ("ViT-tiny 224", _vit_tiny, 224),
}


def _input(side: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 3, side, side, generator=g)


def quantized_model(name: str, out_dir: str):
    """(the float model, its batch-1 input, the calibration batches, its
    ``quantized.bc``): the model taken through every hbir stage before compile."""
    _, factory, side = MODELS[name]
    model = factory().eval()
    x = _input(side, 1)
    calibration = [_input(side, s) for s in (10, 11)]
    qat = prepare(model, (x,), out_dir=out_dir)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in calibration:
            qat(batch)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return model, x, calibration, hbir.convert(export(qat, (x,)), "nash-e")


def runtimes(name: str, out_dir: str) -> tuple[dict, dict, int]:
    """({runtime: callable}, {runtime: why skipped}, the model's MACs)."""
    model, x, calibration, quantized = quantized_model(name, out_dir)
    calls, skipped = {}, {}
    xn = x.numpy()
    try:
        hbm = hbir.compile(quantized, os.path.join(out_dir, "model.hbm"))
        f = hbm[0]
        feed = {f.inputs[0].name: xn}
        calls["model.hbm"] = lambda: f.feed(feed)
    except HbirError as e:
        skipped["model.hbm"] = f"compile refused: {str(e)[:80]}"
    if ort_peer.available():
        batches = [b.numpy() for b in calibration]
        files = ort_peer.onnx_files(model, x, batches, out_dir)
        session = ort_peer.session(files["int8"])
        calls["ORT int8"] = lambda: session.run(None, {"input": xn})
        if openvino_peer.available():
            ov_run = openvino_peer.compiled(files["int8"])
            calls["OpenVINO int8"] = lambda: ov_run(xn)
        else:
            skipped["OpenVINO int8"] = f"skipped: {openvino_peer.INSTALL_HINT}"
    else:
        why = f"skipped: {ort_peer.INSTALL_HINT} (OpenVINO reads its QDQ model)"
        skipped["ORT int8"] = skipped["OpenVINO int8"] = why
    return calls, skipped, int8_floor.model_macs(model, x)


def rounds(calls: dict, n: int) -> dict[str, np.ndarray]:
    """CPU ms of every call in ``n`` rounds, each call once per round, adjacent
    (after two warm-up calls each)."""
    for fn in calls.values():
        fn()
        fn()
    times = {row: [] for row in calls}
    for _ in range(n):
        for row, fn in calls.items():
            started = time.process_time()
            fn()
            times[row].append((time.process_time() - started) * 1e3)
    return {row: np.array(v) for row, v in times.items()}


def _ratio(a: np.ndarray, b: np.ndarray | float) -> str:
    r = a / b
    p25, median, p75 = np.percentile(r, [25, 50, 75])
    return f"{median:.2f} [{p25:.2f}, {p75:.2f}]"


COLUMNS = (  # (heading, numerator, denominator)
    ("model.hbm / ORT int8", "model.hbm", "ORT int8"),
    ("model.hbm / OpenVINO int8", "model.hbm", "OpenVINO int8"),
    ("model.hbm / int8 floor", "model.hbm", "floor"),
    ("ORT / floor", "ORT int8", "floor"),
    ("OpenVINO / floor", "OpenVINO int8", "floor"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    ap.add_argument("--rounds", type=int, default=30, help="adjacent rounds")
    args = ap.parse_args()
    names = args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}: expected some of {list(MODELS)}")
    peak = int8_floor.peak()
    if peak is None:
        print("int8 floor: not measured (no C compiler or no int8 SIMD)")
    else:
        print(f"int8 floor: {peak[0] / 1e9:.1f} GMAC/s on one thread ({peak[1]})")
    lines = ["| model, batch 1 | " + " | ".join(c[0] for c in COLUMNS) + " |"]
    lines.append("|---" * (len(COLUMNS) + 1) + "|")
    notes = []
    for name in names:
        with tempfile.TemporaryDirectory() as out_dir:
            calls, skipped, macs = runtimes(name, out_dir)
            with torch.no_grad():
                times = rounds(calls, args.rounds)
        if peak is not None:
            times["floor"] = macs / peak[0] * 1e3  # ms
        cells = []
        for _, num, den in COLUMNS:
            ok = num in times and den in times
            cells.append(_ratio(times[num], times[den]) if ok else "–")
        lines.append(f"| {MODELS[name][0]} | " + " | ".join(cells) + " |")
        medians = ", ".join(
            f"{row} {np.median(t):.1f}" for row, t in times.items() if row != "floor"
        )
        floor = f", floor {times['floor']:.2f}" if "floor" in times else ""
        notes.append(
            f"{MODELS[name][0]}: {macs / 1e9:.2f} GMAC; CPU ms medians: {medians}"
            f"{floor}" + "".join(f"; {k}: {v}" for k, v in skipped.items())
        )
        print(notes[-1], flush=True)
    print(f"\n{args.rounds} rounds, medians of per-round ratios [p25, p75]:\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
