"""IR throughput: parse, verify, print, save and load a 10,000-op model.

Run: ``python benchmarks/ir_throughput.py [--ops 10000] [--repeat 3]``

Prints ops/s for each step (median of ``--repeat`` runs) and then times whole
processes on the same file: ``hbir-opt`` against plain ``xdsl-opt`` (which sees our
dialects through the entry point) and, when installed, MLIR's C++ ``iree-opt``.
The ratios are the numbers to beat.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from timing import median_time  # noqa: E402
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

from hbir import diagnostics, files  # noqa: E402
from hbir.dialects import hbir, make_context, qnt  # noqa: E402


def build_model(n_ops: int) -> ModuleOp:
    """A chain of small conv blocks, ~``n_ops`` ops in all (constants included)."""
    x_t = TensorType(f32, [1, 8, 16, 16])
    rng = np.random.default_rng(0)

    @Builder.implicit_region((x_t,))
    def body(args):
        (x,) = args
        count = 0
        while count < n_ops - 1:
            w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
            weight = hbir.ConstantOp(
                DenseIntOrFPElementsAttr(
                    TensorType(f32, list(w.shape)), BytesAttr(w.tobytes())
                )
            )
            fq = qnt.ConstFakeQuantOp(x, [-4.0], [3.96875], bits=8)
            conv = hbir.Conv2dOp(fq, weight, padding=(1, 1))
            act = hbir.ReluOp(conv)
            res = hbir.AddOp(act, x)
            sig = hbir.SigmoidOp(res)
            x = hbir.MulOp(sig, res).output
            count += 7
        func.ReturnOp(x)

    f = func.FuncOp("forward", FunctionType.from_lists([x_t], [x_t]), body)
    return ModuleOp([f])


def process_time(cmd: list[str], repeat: int) -> float | None:
    def run():
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)

    try:
        return median_time(run, repeat, warm_up=False)
    except (OSError, subprocess.CalledProcessError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    module = build_model(args.ops)
    n = sum(1 for _ in module.walk()) - 2  # minus module and func
    ctx = make_context()
    tmp = tempfile.mkdtemp(prefix="hbir-bench-")
    pretty_path = os.path.join(tmp, "model.mlir")
    generic_path = os.path.join(tmp, "model.generic.mlir")
    bc_path = os.path.join(tmp, "model.bc")
    pretty = files.print_module(module, generic=False, debuginfo=False)
    generic = files.print_module(module, generic=True, debuginfo=False)
    with open(pretty_path, "w") as f:
        f.write(pretty)
    with open(generic_path, "w") as f:
        f.write(generic)

    steps = {
        "parse (pretty)": lambda: diagnostics.TrackingParser(
            ctx, pretty
        ).parse_module(),
        "parse (generic)": lambda: diagnostics.TrackingParser(
            ctx, generic
        ).parse_module(),
        "verify": lambda: diagnostics.verify(module),
        "print (pretty)": lambda: files.print_module(module, False, False),
        "print (generic)": lambda: files.print_module(module, True, True),
        "save .bc": lambda: files.save_module(module, bc_path),
        "load .bc (read+parse+verify)": lambda: diagnostics.parse_module(
            ctx, files.read_text(bc_path), bc_path
        ),
    }
    print(f"model: {n} ops, text {len(pretty) / 1e6:.2f} MB pretty, ", end="")
    print(f"{len(generic) / 1e6:.2f} MB generic; .bc ", end="")
    files.save_module(module, bc_path)
    print(f"{os.path.getsize(bc_path) / 1e6:.2f} MB")
    print(f"{'step':<30} {'seconds':>9} {'ops/s':>10}")
    for name, fn in steps.items():
        t = median_time(fn, args.repeat, warm_up=False)
        print(f"{name:<30} {t:>9.3f} {n / t:>10,.0f}")

    print("\nwhole process on the pretty file: parse + verify + print")
    bin_dir = os.path.dirname(sys.executable)
    tools = {
        "hbir-opt": [os.path.join(bin_dir, "hbir-opt"), pretty_path],
        "xdsl-opt": [os.path.join(bin_dir, "xdsl-opt"), pretty_path],
    }
    iree = os.environ.get("HBIR_IREE_OPT") or shutil.which("iree-opt")
    if iree:
        tools["iree-opt (C++ MLIR)"] = [
            iree,
            "--allow-unregistered-dialect",
            generic_path,
        ]
    times = {name: process_time(cmd, args.repeat) for name, cmd in tools.items()}
    base = times["xdsl-opt"]
    for name, t in times.items():
        if t is None:
            print(f"{name:<30} failed to run")
            continue
        ratio = f"{t / base:.2f}x xdsl-opt" if base else ""
        print(f"{name:<30} {t:>9.3f} {n / t:>10,.0f}   {ratio}")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
