"""Compile throughput: ``hbir.compile`` of a 10,000-op model and of ViT-B/16.

Run: ``python benchmarks/compile.py [--model generator|vit_b16|all] [--ops 10000]
[--quantized] [--verify-each] [--march nash-e]``

``generator``: ``benchmarks/ir_throughput.py``'s chain of conv blocks, converted to
fixed point (``hbir.convert``; ``--quantized``: every value fake-quantized first,
so the convs go to the NPU with CPU islands between them). ``vit_b16``: timm's
``vit_base_patch16_224`` (random weights, 86.6 M parameters) prepared, calibrated on
two random inputs, exported and converted. Then every pass of the compile phase
runs once, as ``hbir.compile`` runs it: the module verified once after the last
pass (``--verify-each``: after every pass too, as the tests do), each pass's time
printed with the op count after it; then the emission of ``model.hbm``
(``hbir/hbm/emit.py``) and its bytes (the container). Times are wall seconds and,
in brackets, this process's CPU seconds (the machine is shared).
The issue's target: the compile phase (passes and verification) of each model
in at most 30 s.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(__file__))
# tests/models/timm_import.py: timm beside this machine's torch (ViT-B/16)
sys.path.insert(1, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))

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


class _Clock:
    """Wall and process-CPU seconds since the last ``lap``."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        took = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return took


def _secs(took: tuple[float, float]) -> str:
    return f"{took[0]:8.2f} ({took[1]:6.2f})"


def generator_model(args) -> tuple[Module, str]:
    """quantized.bc of the generator, and what it is."""
    clock = _Clock()
    build = build_quantized_model if args.quantized else build_model
    qat_bc = Module(build(args.ops))
    built = clock.lap()
    quantized = hbir.convert(qat_bc, args.march)
    converted = clock.lap()
    return quantized, (
        f"generator{' --quantized' if args.quantized else ''}: {_count(qat_bc)} ops "
        f"built in {built[0]:.2f} s, converted in {converted[0]:.2f} s"
    )


def vit_b16_model(args) -> tuple[Module, str]:
    """quantized.bc of timm's ViT-B/16 at 224 (random weights), and what it is."""
    import torch
    from timm_import import import_timm

    from hbir.quantization import (
        DeQuantStub,
        FakeQuantState,
        QuantStub,
        export,
        prepare,
        set_fake_quantize,
    )

    class Boundary(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.quant, self.model, self.dequant = QuantStub(), inner, DeQuantStub()

        def forward(self, x):
            return self.dequant(self.model(self.quant(x)))

    torch.set_num_threads(1)
    torch.manual_seed(0)
    clock = _Clock()
    timm = import_timm()
    model = Boundary(timm.create_model("vit_base_patch16_224", pretrained=False))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 3, 224, 224, generator=g)
    with tempfile.TemporaryDirectory() as out_dir:
        qat = prepare(model.eval(), (x,), out_dir=out_dir)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for _ in range(2):
            qat(torch.randn(1, 3, 224, 224, generator=g))
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    qat_bc = export(qat, (x,))
    exported = clock.lap()
    quantized = hbir.convert(qat_bc, args.march)
    converted = clock.lap()
    params = sum(p.numel() for p in model.parameters()) / 1e6
    return quantized, (
        f"vit_b16 (timm vit_base_patch16_224, {params:.1f} M parameters): "
        f"{_count(qat_bc)} ops exported in {exported[0]:.2f} s, converted in "
        f"{converted[0]:.2f} s"
    )


MODELS = {"generator": generator_model, "vit_b16": vit_b16_model}


def compile_model(name: str, args) -> float:
    """Compile ``name``, printing each pass; the compile phase's wall seconds."""
    quantized, what = MODELS[name](args)
    print(f"{what} -> {_count(quantized)} ops")
    module = quantized.clone()
    print(f"{'pass':<18} {'pass s':>8} {'verify s':>9} {'ops after':>10}")

    reported, counting = [0.0], [0.0, 0.0]  # counting: not the compiler's time

    def report(i: int, name: str, ran: float, checked: float) -> None:
        reported[0] += ran + checked
        count = _Clock()
        ops = _count(module)
        took = count.lap()
        counting[0] += took[0]
        counting[1] += took[1]
        print(f"{name:<18} {ran:8.2f} {checked:9.2f} {ops:>10}")

    clock = _Clock()
    run_passes(module, compile_passes(args.march), report, verify_each=args.verify_each)
    wall, cpu = clock.lap()
    total = (wall - counting[0], cpu - counting[1])
    print(f"{'final check':<18} {total[0] - reported[0]:8.2f}")
    print(f"{'compile phase':<18} {_secs(total)}   (target: <= 30 s)")
    program = emit(module, quantized)
    emitted = clock.lap()
    data = container.to_bytes(program)
    written = clock.lap()
    print(f"{'emit (Program)':<18} {_secs(emitted)}")
    print(f"{'.hbm bytes':<18} {_secs(written)}   ({len(data)} bytes)")
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
    return total[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", choices=[*MODELS, "all"], default="generator", help="what to compile"
    )
    ap.add_argument("--ops", type=int, default=10_000, help="the generator's size")
    ap.add_argument("--march", default="nash-e")
    ap.add_argument(
        "--quantized",
        action="store_true",
        help="every value fake-quantized (the convs go to the NPU, with DMA, "
        "tiles and islands between them) instead of ir_throughput's generator",
    )
    ap.add_argument(
        "--verify-each",
        action="store_true",
        help="verify after every pass too (as the tests do); default: once",
    )
    args = ap.parse_args()
    names = list(MODELS) if args.model == "all" else [args.model]
    phases = {}
    for name in names:
        phases[name] = compile_model(name, args)
        print()
    for name, took in phases.items():
        verdict = "met" if took <= 30 else "NOT met"
        print(f"compile phase of {name}: {took:.2f} s (target <= 30 s: {verdict})")


if __name__ == "__main__":
    main()
