"""model.hbm on the simulated NPU against its peers: ResNet-18-like at 224x224.

Run: ``python benchmarks/hbm.py [--repeat 3] [--model resnet18]``

The ResNet-18-like benchmark model (``benchmarks/execution_models.py``'s
``resnet18``: the torchvision layout at 224x224, batch 1; ``--model`` picks another
model of that file) calibrated, exported, converted and compiled, then timed on one
thread, in one run:

* ``model.hbm``: ``Hbm.feed`` (the simulator, after save and load; a model the
  compiler refuses is reported with the compiler's message);
* ``quantized.bc``: ``Function.feed`` (the interpreter);
* ONNX Runtime int8 static QDQ, u8 activations and s8 weights per channel
  (``benchmarks/ort_peer.py``; skipped with an install hint without onnxruntime);
* torch fp32 eager (the float model).

Each figure is the median of ``--repeat`` runs after one untimed run; the ratios
are against ORT int8 and torch fp32. The load average is printed too: the machine
is shared and noisy, and others' work inflates every figure. Then, less
sensitive to the load, the medians of adjacent pairs' ratios on the CPU clock
(``time.process_time``): ``model.hbm`` / ORT int8, and ``model.hbm``'s time per
image at batch ``--batch`` (a batch feed of the batch-1 model) / its time at
batch 1 (the issue's target: at most 0.7).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import execution_models  # noqa: E402
import ort_peer  # noqa: E402
from timing import median_time  # noqa: E402

import hbir  # noqa: E402
from hbir.quantization import (  # noqa: E402
    FakeQuantState,
    export,
    prepare,
    set_fake_quantize,
)

torch.set_num_threads(1)
CALIBRATION_BATCHES = 4


def quantize(name: str, folder: str):
    """(float model, input, calibration batches, quantized.bc) of ``name``."""
    model = execution_models.build(name)
    x = execution_models.example(name, seed=1)
    calibration = [
        execution_models.example(name, seed=2 + i) for i in range(CALIBRATION_BATCHES)
    ]
    qat = prepare(model, (x,), out_dir=folder)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in calibration:
            qat(batch)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    quantized = hbir.convert(export(qat, (x,)), "nash-e")
    return execution_models.build(name), x, calibration, quantized


def compile_and_load(quantized, folder: str):
    """The loaded model.hbm, or the compile error's message."""
    path = os.path.join(folder, "model.hbm")
    try:
        hbir.compile(quantized, path, march="nash-e")
    except hbir.HbirError as e:
        return str(e)
    return hbir.load(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument(
        "--model", default="resnet18", choices=sorted(execution_models.MODELS)
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        float_model, x, calibration, quantized = quantize(args.model, folder)
        hbm = compile_and_load(quantized, folder)
    feed = {"_input_0": x.numpy()}
    rows = {}
    if isinstance(hbm, str):
        print(f"model.hbm: not compiled: {hbm}")
    else:
        identical = np.array_equal(hbm[0](feed["_input_0"]), quantized[0](x.numpy()))
        print(f"model.hbm output bit-identical to quantized.bc: {identical}")
        rows["model.hbm (Hbm.feed)"] = median_time(
            lambda: hbm[0].feed(feed), args.repeat
        )
    rows["quantized.bc (Function.feed)"] = median_time(
        lambda: quantized[0].feed(feed), args.repeat
    )
    if ort_peer.available():
        session = ort_peer.sessions(float_model, x, [b.numpy() for b in calibration])[
            "int8"
        ]
        ort_feed = {"input": x.numpy()}
        rows["ORT int8 QDQ u8s8"] = median_time(
            lambda: session.run(None, ort_feed), args.repeat
        )
    else:
        print(
            f"ORT int8 QDQ skipped: onnxruntime is not installed "
            f"({ort_peer.INSTALL_HINT})"
        )
    with torch.no_grad():
        rows["torch fp32 eager"] = median_time(lambda: float_model(x), args.repeat)
    print(
        f"{args.model} {list(x.shape)}, 1 thread, median of {args.repeat}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    peers = [p for p in ("ORT int8 QDQ u8s8", "torch fp32 eager") if p in rows]
    print(f"{'':30} {'ms':>9}" + "".join(f" {'/ ' + p.split()[0]:>10}" for p in peers))
    for name, seconds in rows.items():
        ratios = "".join(f" {seconds / rows[p]:>9.2f}x" for p in peers)
        print(f"{name:30} {seconds * 1e3:>9.2f}{ratios}")
    if isinstance(hbm, str):
        return
    f = hbm[0]
    single = lambda: f.feed(feed)  # noqa: E731
    if ort_peer.available():
        run = lambda: session.run(None, ort_feed)  # noqa: E731
        print_pairs("model.hbm / ORT int8", single, run, 1, args.pairs)
    xb = execution_models.example(args.model, batch=args.batch, seed=3).numpy()
    batch = lambda: f.feed({"_input_0": xb})  # noqa: E731
    print_pairs(
        f"model.hbm per image, batch {args.batch} / batch 1",
        batch, single, args.batch, args.pairs,
    )  # fmt: skip


def print_pairs(what: str, a, b, per: int, pairs: int) -> None:
    """The median [p25, p75] of ``pairs`` adjacent CPU-clock ratios
    ``(a / per) / b``."""
    a(), b()
    ratios = []
    for _ in range(pairs):
        start = time.process_time()
        a()
        middle = time.process_time()
        b()
        end = time.process_time()
        ratios.append((middle - start) / per / (end - middle))
    q1, med, q3 = np.percentile(ratios, [25, 50, 75])
    print(f"{what}: {med:.2f} [{q1:.2f}, {q3:.2f}] (median of {pairs} CPU pairs)")


if __name__ == "__main__":
    main()
