"""Compile throughput: ``hbir.compile`` of a 10,000-op model, time per pass.

Run: ``python benchmarks/compile.py [--ops 10000] [--march nash-e] [--quantized]``

The model is ``benchmarks/ir_throughput.py``'s generator (a chain of conv blocks),
converted to fixed point (``hbir.convert``; ``--quantized``: every value
fake-quantized first); then every pass of the compile phase
runs once, verified after each as ``hbir.compile`` does, and its time is printed,
with the op counts before and after and the compiled program's memory figures;
then the emission of its ``model.hbm`` (``hbir/hbm/emit.py``, the container).
The issue's target: the whole compile in under 60 s on this machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
from ir_throughput import build_model  # noqa: E402
from xdsl.builder import Builder  # noqa: E402
from xdsl.dialects import func  # noqa: E402
from xdsl.dialects.builtin import (  # noqa: E402
    BytesAttr,
    DenseIntOrFPElementsAttr,
    FunctionType,
    ModuleOp,
    TensorType,
    f32,
)

import hbir  # noqa: E402
from hbir.compile import compile_passes, run_passes  # noqa: E402
from hbir.dialects import hbir as hb  # noqa: E402
from hbir.dialects import qnt  # noqa: E402
from hbir.hbm import container  # noqa: E402
from hbir.hbm.emit import emit  # noqa: E402
from hbir.module import Module  # noqa: E402


def build_quantized_model(n_ops: int) -> ModuleOp:
    """``ir_throughput``'s conv-block chain with every value fake-quantized (the
    plain generator quantizes only the conv inputs, so convert leaves the rest
    float: one CPU island). Today convert lowers the convs of this chain and
    leaves relu / add / sigmoid / mul float (no export passes ran on it), so the
    compiled program alternates NPU convs and CPU islands: a stress test of
    lowering, DMA, scheduling and memory planning on ~20k ops."""
    x_t = TensorType(f32, [1, 8, 16, 16])
    rng = np.random.default_rng(0)

    def fq(v, lo=-4.0, hi=3.96875):
        return qnt.ConstFakeQuantOp(v, [lo], [hi], bits=8).output

    @Builder.implicit_region((x_t,))
    def body(args):
        (x,) = args
        x = fq(x)
        count = 0
        while count < n_ops - 1:
            w = (rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32)
            weight = hb.ConstantOp(
                DenseIntOrFPElementsAttr(
                    TensorType(f32, list(w.shape)), BytesAttr(w.tobytes())
                )
            )
            wq = qnt.ConstFakeQuantOp(weight, [-0.5], [0.49609375], bits=8)
            conv = fq(hb.Conv2dOp(x, wq, padding=(1, 1)).output)
            act = fq(hb.ReluOp(conv).output, 0.0, 3.96875)
            res = fq(hb.AddOp(act, x).output)
            sig = fq(hb.SigmoidOp(res).output, 0.0, 0.9921875)
            x = fq(hb.MulOp(sig, res).output)
            count += 12
        func.ReturnOp(x)

    f = func.FuncOp("forward", FunctionType.from_lists([x_t], [x_t]), body)
    return ModuleOp([f])


def _count(module: Module) -> int:
    return sum(1 for _ in module.module.op.walk())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--march", default="nash-e")
    ap.add_argument(
        "--quantized",
        action="store_true",
        help="every value fake-quantized (the convs go to the NPU, with DMA, "
        "tiles and islands between them) instead of ir_throughput's generator",
    )
    args = ap.parse_args()

    t = time.perf_counter()
    build = build_quantized_model if args.quantized else build_model
    qat_bc = Module(build(args.ops))
    built = time.perf_counter() - t
    t = time.perf_counter()
    quantized = hbir.convert(qat_bc, args.march)
    converted = time.perf_counter() - t
    print(
        f"model: {_count(qat_bc)} ops built in {built:.2f} s, converted in "
        f"{converted:.2f} s -> {_count(quantized)} ops"
    )

    module = quantized.clone()
    times: list[float] = []
    print(f"{'pass':<18} {'pass s':>8} {'verify s':>9} {'ops after':>10}")

    def report(i: int, name: str, ran: float, checked: float) -> None:
        times.append(ran + checked)
        print(f"{name:<18} {ran:8.2f} {checked:9.2f} {_count(module):>10}")

    started = time.perf_counter()
    run_passes(module, compile_passes(args.march), report)
    total = time.perf_counter() - started
    print(f"{'final check':<18} {total - sum(times):8.2f}")
    print(f"{'compile total':<18} {total:8.2f}   (target: < 60 s)")
    started = time.perf_counter()
    program = emit(module, quantized)
    emitted = time.perf_counter() - started
    started = time.perf_counter()
    data = container.to_bytes(program)
    written = time.perf_counter() - started
    print(f"{'emit (Program)':<18} {emitted:8.2f}")
    print(f"{'.hbm bytes':<18} {written:8.2f}   ({len(data)} bytes)")
    attrs = module.module.op.attributes
    for key in (
        "npu.ddr_peak_bytes",
        "npu.ddr_total_bytes",
        "npu.sram_peak_bytes",
        "npu.estimated_cycles",
    ):
        print(f"{key}: {attrs[key].value.data}")
    top = collections.Counter(
        op.name for op in module["forward"].op.body.block.ops
    ).most_common(6)
    print("top-level ops:", ", ".join(f"{n} {c}" for n, c in top))


if __name__ == "__main__":
    main()
