"""QuantAnalysis over a dataset: one worker process against several.

    python benchmarks/analysis_workers.py [--frames 1000] [--workers 2]

``auto_find_bad_case`` over ``--frames`` batches of the zoo's ResNet-like model,
qat.bc against quantized.bc, with ``workers=1`` and with ``--workers`` (one
persistent pool of forked processes for the whole stream), in the same run: the
wall times, the speed-up, and whether both found the same bad case. Torch and
BLAS use one thread per process.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import zoo_loader  # noqa: E402, F401  (makes tests/zoo.py importable)

# isort: split
import zoo  # noqa: E402
import zoo_stages  # noqa: E402

import hbir  # noqa: E402
from hbir.profiler import QuantAnalysis  # noqa: E402
from hbir.quantization import export  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    folder = tempfile.mkdtemp()
    qat, example = zoo_stages.calibrated("resnet", folder)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    batch = example[0].shape[0]
    frames = zoo.batches("resnet", args.frames, batch=batch)
    results = {}
    for workers in (1, args.workers):
        qa = QuantAnalysis(qat_bc, quantized, "convert", out_dir=folder)
        start = time.perf_counter()
        qa.auto_find_bad_case(iter(frames), metric="L1", workers=workers)
        results[workers] = (time.perf_counter() - start, qa.bad_case_index)
    (t1, bad1), (tn, badn) = results[1], results[args.workers]
    print(f"auto_find_bad_case, {args.frames} batches of {batch}, resnet-like")
    print(f"{'workers':>8} | {'seconds':>8} | bad case")
    for workers, (seconds, bad) in results.items():
        print(f"{workers:>8} | {seconds:>8.2f} | {bad}")
    print(
        f"workers={args.workers} / workers=1: {tn / t1:.2f} of the time "
        f"({t1 / tn:.2f}x faster); same bad case: {bad1 == badn}"
    )


if __name__ == "__main__":
    main()
