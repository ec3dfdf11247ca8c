"""Per-image cost of a batch on ``model.hbm``: batch N against batch 1, beside ORT's.

Run: ``python benchmarks/batch.py [--models resnet18,mobilenet_v2] [--batch 8]
[--rounds 10]``

Per model (``peers.py``'s ResNet-18 and MobileNetV2 at 224, compiled at batch
1), one thread: ``HbmFunction.feed`` of one image and of a batch of N images
(``runtime/npu_batch.py``: the program run on the N samples at once), adjacent
in each round, on the process's CPU clock. The ratio is (batch time / N) /
(batch-1 time), the median of the rounds' ratios with [p25, p75]; the
issue's target is 0.7 or less. The batch's outputs are checked against the N
single feeds, byte for byte, before timing.

The same rounds time ONNX Runtime int8 (``ort_peer``: the same float model as
static QDQ, exported with a free batch dimension) on the same one image and N
images, so the peer's own batch ratio on this CPU stands beside ours: where
batch-1 gemms already run at the CPU's peak (no VNNI: exact int8 goes through
float32 sgemm here, and ORT's u8s8 kernels are no faster per MAC at batch 8),
a batch saves only the per-call costs, for either runtime. Skipped where
onnxruntime is not installed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(1, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))

import numpy as np  # noqa: E402
import ort_peer  # noqa: E402
import peers  # noqa: E402
import torch  # noqa: E402

import hbir  # noqa: E402

torch.set_num_threads(1)


def _cpu_ms(fn) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1e3


def measure(name: str, batch: int, rounds: int, out_dir: str) -> None:
    model, x, calibration, quantized = peers.quantized_model(name, out_dir)
    f = hbir.compile(quantized, os.path.join(out_dir, "model.hbm"))[0]
    side = x.shape[-1]
    images = np.concatenate([peers._input(side, s).numpy() for s in range(batch)])
    key = f.inputs[0].name
    one, many = {key: images[:1]}, {key: images}
    got = f.feed(many)
    for i in range(batch):
        alone = f.feed({key: images[i : i + 1]})
        for k, y in got.items():
            if y[i : i + 1].tobytes() != alone[k].tobytes():
                raise SystemExit(f"{name}: the batch's sample {i} differs ({k})")
    calls = {"model.hbm": (lambda: f.feed(one), lambda: f.feed(many))}
    if ort_peer.available():
        batches = [b.numpy() for b in calibration]
        files = ort_peer.onnx_files(model, x, batches, out_dir, any_batch=True)
        session = ort_peer.session(files["int8"])
        calls["ORT int8"] = (
            lambda: session.run(None, {"input": images[:1]}),
            lambda: session.run(None, {"input": images}),
        )
    for _ in range(2):  # warm up
        for single, whole in calls.values():
            single()
            whole()
    times = {k: ([], []) for k in calls}
    for _ in range(rounds):
        for k, (single, whole) in calls.items():
            times[k][0].append(_cpu_ms(single))
            times[k][1].append(_cpu_ms(whole) / batch)
    for k, (singles, per_image) in times.items():
        ratios = np.asarray(per_image) / np.asarray(singles)
        p25, p50, p75 = np.percentile(ratios, [25, 50, 75])
        print(
            f"{name}, {k}: batch 1 {np.median(singles):.1f} ms, batch {batch} "
            f"{np.median(per_image):.1f} ms per image; per image / batch 1 "
            f"{p50:.2f} [{p25:.2f}, {p75:.2f}] ({rounds} rounds)"
        )
    if "ORT int8" not in calls:
        print(f"{name}, ORT int8: skipped: {ort_peer.INSTALL_HINT}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as out_dir:
            measure(name, args.batch, args.rounds, out_dir)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
