"""The QAT model's cost against the float model's on ResNet-18: the VALIDATION
forward (fixed point: the integer pipeline's numbers) against the float
forward, and a QAT training step against a float training step.

Run: ``python benchmarks/qat_speed.py [--model resnet18] [--rounds 7] [--batch 8]``

One thread, on the process's CPU clock. The VALIDATION row: ``qat(x)`` in
VALIDATION against ``model(x)`` of the float model, batch 1 (no gradient). The
step row: forward, cross-entropy backward and an SGD step on a batch
(``--batch``), the QAT model in its QAT state against the float model in train
mode. Each ratio is the median of adjacent pairs' ratios, [p25, p75]; the
issue's targets are 1.8 (VALIDATION) and 1.4 (step).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from execution_models import build, example  # noqa: E402

from hbir.quantization import FakeQuantState, prepare, set_fake_quantize  # noqa: E402

torch.set_num_threads(1)


def _cpu_ms(fn) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1e3


def _pairs(a, b, rounds: int) -> str:
    for _ in range(2):  # warm up
        a()
        b()
    ratios, ta, tb = [], [], []
    for _ in range(rounds):
        ta.append(_cpu_ms(a))
        tb.append(_cpu_ms(b))
        ratios.append(ta[-1] / tb[-1])
    p25, p50, p75 = np.percentile(ratios, [25, 50, 75])
    return (
        f"{np.median(ta):.1f} ms / {np.median(tb):.1f} ms = "
        f"{p50:.2f} [{p25:.2f}, {p75:.2f}]"
    )


def _step(model, optimizer, x, labels):
    def run():
        optimizer.zero_grad()
        F.cross_entropy(model(x), labels).backward()
        optimizer.step()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    model = build(args.model).eval()
    x = example(args.model)
    with tempfile.TemporaryDirectory() as out_dir:
        qat = prepare(copy.deepcopy(model), (x,), out_dir=out_dir)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for seed in (10, 11):
            qat(example(args.model, batch=4, seed=seed))
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    with torch.no_grad():
        row = _pairs(lambda: qat(x), lambda: model(x), args.rounds)
    print(f"{args.model} VALIDATION forward / float forward (batch 1): {row}")

    xb = example(args.model, batch=args.batch, seed=3)
    labels = torch.randint(0, 1000, (args.batch,), generator=torch.Generator())
    qat.train()
    model.train()
    set_fake_quantize(qat, FakeQuantState.QAT)
    qat_step = _step(qat, torch.optim.SGD(qat.parameters(), lr=1e-4), xb, labels)
    float_step = _step(model, torch.optim.SGD(model.parameters(), lr=1e-4), xb, labels)
    row = _pairs(qat_step, float_step, args.rounds)
    print(f"{args.model} QAT step / float step (batch {args.batch}): {row}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
