"""Execution speed of every stage, side by side with torch and ONNX Runtime.

Run: ``python benchmarks/execution.py [--repeat 5] [--overhead-only] [MODEL ...]``

For each model of ``benchmarks/execution_models.py`` (ResNet-18 at 224x224, the
ResNet-18-like benchmark model; MobileNetV2 at 224x224; an encoder block of
sequence 128 and width 256), batch 1, one thread, in one process:

* torch fp32 eager, ``qat.pt`` eager (VALIDATION, the fixed-point forward);
* ``qat.bc`` feed (the interpreter's prepared plan, ``runtime/plan.py``),
  ``quantized.bc`` feed (its compiled program in memory, ``hbir/fast_feed.py``),
  and whether each equals the op-by-op loop bit for bit;
* ``model.hbm`` feed (the simulated NPU; skipped with the compiler's reason
  for a model it refuses);
* ONNX Runtime fp32 and int8 QDQ (u8 activations, s8 per-channel weights: the
  fast x86 path), which need ``pip install onnxruntime onnx`` (benchmark-only
  dependencies; the rows are skipped without them).

Every configuration runs once per round, ``--repeat`` rounds after one warm-up
each (so a slow minute of a shared machine slows all of them alike); times are
the median and the best; ratios are against torch fp32 eager, and the issue's
three targets are printed below each table as the median of the rounds' ratios
(``quantized.bc`` / ORT int8 <= 3, ``model.hbm`` / ORT int8 <= 1.5, ``qat.bc`` /
``qat.pt`` <= 1.2).

Then the per-op overhead of the interpreter's prepared plan on the tiny zoo models
(``tests/zoo.py``): (feed time - time inside the plan's kernels) / steps, and,
less noisy, feed's time per step with every kernel replaced by its precomputed
results.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import ort_peer  # noqa: E402
import torch  # noqa: E402
import zoo_loader  # noqa: E402, F401  (makes tests/zoo.py importable)
from execution_models import MODELS, build, example  # noqa: E402

import hbir  # noqa: E402
from hbir.errors import HbirError  # noqa: E402
from hbir.quantization import (  # noqa: E402
    FakeQuantState,
    export,
    prepare,
    set_fake_quantize,
)
from hbir.runtime import plan  # noqa: E402
from hbir.runtime.interpreter import run_function  # noqa: E402

torch.set_num_threads(1)


def stages(name: str, out_dir: str):
    """float model, qat.pt (VALIDATION), qat.bc, quantized.bc, and the input."""
    model = build(name)
    x = example(name)
    qat = prepare(model, (x,), out_dir=out_dir)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for seed in (10, 11):
            qat(example(name, seed=seed))
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    qat_bc = export(qat, (x,))
    return model, qat, qat_bc, hbir.convert(qat_bc, "nash-e"), x


def bit_identical(module, x: np.ndarray) -> bool:
    """The plan's outputs equal the op-by-op loop's, byte for byte."""
    f = module[0]
    fast = run_function(f.op, [x], rounding=module.rounding)
    slow = run_function(f.op, [x], rounding=module.rounding, on_op=lambda *_: None)
    return all(a.tobytes() == b.tobytes() for a, b in zip(fast, slow, strict=True))


def hbm_row(quantized, x: np.ndarray, out_dir: str):
    """(model.hbm's feed as a callable, "") or (None, why the compiler refused)."""
    try:
        hbm = hbir.compile(quantized, os.path.join(out_dir, "model.hbm"))
    except HbirError as e:  # e.g. a layer no tiling fits into SRAM
        return None, f"skipped: {str(e)[:80]}"
    f = hbm[0]
    feed = {f.inputs[0].name: x}
    return (lambda: f.feed(feed)), ""


def ort_rows(model, x: torch.Tensor, name: str):
    """{row: callable} of ONNX Runtime fp32 and int8 QDQ (``ort_peer``: calibrated
    on the two inputs the hbir stages saw), or {row: why skipped}."""
    if not ort_peer.available():
        why = f"skipped: {ort_peer.INSTALL_HINT}"
        return {"ORT fp32": why, "ORT int8 QDQ u8s8": why}
    calibration = [example(name, seed=s).numpy() for s in (10, 11)]
    sessions = ort_peer.sessions(model, x, calibration)
    feed = {"input": x.numpy()}
    return {
        row: (lambda s=sessions[key]: s.run(None, feed))
        for row, key in (("ORT fp32", "fp32"), ("ORT int8 QDQ u8s8", "int8"))
    }


TARGETS = (  # (row, reference row, the largest ratio)
    ("quantized.bc feed", "ORT int8 QDQ u8s8", 3),
    ("model.hbm feed", "ORT int8 QDQ u8s8", 1.5),
    ("qat.bc feed", "qat.pt eager", 1.2),
)


def benchmark(name: str, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as out:
        model, qat, qat_bc, quantized, x = stages(name, out)
        xn = x.numpy()
        calls: dict[str, object] = {}
        with torch.no_grad():
            calls["torch fp32 eager"] = lambda: model(x)
            calls["qat.pt eager"] = lambda: qat(x)
        notes = {}
        for row, module in (("qat.bc feed", qat_bc), ("quantized.bc feed", quantized)):
            f = module[0]
            feed = {f.inputs[0].name: xn}
            start = time.perf_counter()
            f.feed(feed)  # builds the plan
            notes[row] = f"first call {1e3 * (time.perf_counter() - start):.0f} ms"
            calls[row] = lambda f=f, feed=feed: f.feed(feed)
        fn, why = hbm_row(quantized, xn, out)
        calls["model.hbm feed"] = why if fn is None else fn
        calls.update(ort_rows(model, x, name))
        with torch.no_grad():
            runs = interleaved({k: v for k, v in calls.items() if callable(v)}, repeat)
        # after the timings: the op-by-op loop's big temporaries would slow them
        for row, module in (("qat.bc feed", qat_bc), ("quantized.bc feed", quantized)):
            same = bit_identical(module, xn)
            notes[row] += ", = op-by-op: " + ("bit-identical" if same else "DIFFERS")
    print(f"\n{name}: input {tuple(x.shape)}, 1 thread, {repeat} rounds: median, best")
    base = float(np.median(runs["torch fp32 eager"]))
    for row, value in calls.items():
        if row not in runs:
            print(f"  {row:22} {value}")
            continue
        median, best, note = np.median(runs[row]), min(runs[row]), notes.get(row, "")
        print(f"  {row:22} {median:9.2f} {best:9.2f} ms {median / base:6.2f}x   {note}")
    for row, ref, target in TARGETS:
        if row in runs and ref in runs:
            paired = np.median(np.array(runs[row]) / np.array(runs[ref]))
            print(
                f"  {row} / {ref}: {paired:.2f} (median of the rounds' ratios), "
                f"{min(runs[row]) / min(runs[ref]):.2f} (best runs); target <= {target}"
            )


def interleaved(calls: dict, repeat: int) -> dict[str, list[float]]:
    """ms of each call in ``repeat`` rounds, every call once per round (after one
    warm-up each): a shared machine's slow minutes slow every row alike, so the
    ratios of one round compare like with like."""
    for fn in calls.values():
        fn()
    runs = {row: [] for row in calls}
    for _ in range(repeat):
        for row, fn in calls.items():
            start = time.perf_counter()
            fn()
            runs[row].append((time.perf_counter() - start) * 1e3)
    return runs


def timed(fn, repeat: int) -> tuple[float, float]:
    """(median, best) ms of ``repeat`` calls after one warm-up: the best run is
    the least disturbed on a shared machine."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times)), min(times)


def per_op_overhead(repeat: int) -> None:
    """(feed - kernel time) / steps on the tiny zoo models, µs."""
    import zoo
    from zoo_stages import calibrated

    print("\nper-op overhead on the zoo models: (feed - kernels) / steps, best runs")
    with tempfile.TemporaryDirectory() as out:
        for name in zoo.NAMES:
            qat, ex = calibrated(name, Path(out) / name)
            qat_bc = export(qat, ex)
            quantized = hbir.convert(qat_bc, "nash-e")
            for stage, module in (("qat.bc", qat_bc), ("quantized.bc", quantized)):
                f = module[0]
                feed = dict(zip(f.inputs.names, (t.numpy() for t in ex), strict=True))
                prepared = plan.prepared(f.op, module.rounding)
                steps = prepared.steps
                inputs = list(feed.values())
                total, kernel = interleaved_best(  # (the plan: reference=True)
                    lambda f=f, feed=feed: f.feed(feed, reference=True),
                    lambda p=prepared, i=inputs: _kernels_only(p, i),
                    repeat * 40,
                )
                ops = sum(1 for _ in f.op.body.block.ops) - 1
                overhead = (total - kernel) / len(steps) * 1e6
                alone = _overhead_alone(f, feed, prepared, inputs, repeat * 40)
                print(
                    f"  {name:12} {stage:13} feed {total * 1e3:7.3f} ms, "
                    f"kernels {kernel * 1e3:7.3f} ms, {len(steps):3} steps "
                    f"({ops} ops), {overhead:5.1f} µs/step; "
                    f"kernels as constants {alone:4.1f} µs/step"
                )


def _overhead_alone(f, feed, prepared: plan.Plan, inputs, repeat: int) -> float:
    """µs per step of ``feed`` with every kernel replaced by a function that
    returns its results, computed beforehand: the overhead without the
    difference of two noisy kernel timings (and with cache-warm bookkeeping)."""
    env = prepared.env.copy()
    env[: len(inputs)] = inputs
    constant = []
    for step in prepared.steps:
        results = step.run(*[env[a] for a in step.args])
        for slot, y in zip(step.outs, results, strict=True):
            env[slot] = y
        constant.append(dataclasses.replace(step, run=lambda *_, r=results: r))
    real, prepared.steps = prepared.steps, tuple(constant)
    try:
        best = min(
            _seconds(lambda: f.feed(feed, reference=True)) for _ in range(repeat)
        )
    finally:
        prepared.steps = real
    return best / len(constant) * 1e6


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved_best(a, b, repeat: int) -> tuple[float, float]:
    """The best of ``repeat`` alternating runs of ``a`` and ``b``, seconds: both
    see the same moments of a shared machine's load."""
    best_a = best_b = float("inf")
    for _ in range(repeat + 1):
        start = time.perf_counter()
        a()
        middle = time.perf_counter()
        b()
        end = time.perf_counter()
        best_a, best_b = min(best_a, middle - start), min(best_b, end - middle)
    return best_a, best_b


def _kernels_only(p: plan.Plan, inputs) -> None:
    """The plan's kernel calls alone, on prebound inputs (no checks, no loop
    bookkeeping beyond the operand lists)."""
    env = p.env.copy()
    for i, x in enumerate(inputs):
        env[i] = x
    for step in p.steps:
        results = step.run(*[env[a] for a in step.args])
        for slot, y in zip(step.outs, results, strict=True):
            env[slot] = y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--overhead-only", action="store_true")
    args = parser.parse_args()
    if not args.overhead_only:
        for name in args.models:
            benchmark(name, args.repeat)
    per_op_overhead(args.repeat)


if __name__ == "__main__":
    main()
