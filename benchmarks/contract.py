"""The numeric contract on the timm suite, measured: 20 inputs per model.

Run: ``python benchmarks/contract.py [--inputs 20] [--levels default,0,1,2]
[--repeat 3] [MODEL ...]``

For every model of the timm suite (``tests/models/timm_suite.py``: 22 public
architectures, random weights, BatchNorm statistics re-estimated on random data) and
every consistency level asked for, it runs every stage and reports, over
``--inputs`` inputs:

* ``q-bc``: max |quantized.bc - qat.bc| in output LSBs (the contract: 0);
* ``bc-ept``: elements where qat.bc differs from qat.export.pt (the contract: 0);
* ``pt-ept``: max |qat.pt (VALIDATION) - qat.export.pt| in output LSBs, which only
  the lookup tables of nonlinear ops may make nonzero (``pre_export``);
* the VALIDATION forward of qat.pt per input (on the batch of all inputs), fixed
  point (the default) against the float forward (``float_validation()``): medians
  of ``--repeat`` runs, one thread, and their ratio, the cost of bit-exactness.

Needs the test extra (timm; see tests/models/timm_import.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))
from timing import median_time  # noqa: E402
from timm_suite import MODELS, Result, run_stages  # noqa: E402

from hbir.quantization import float_validation  # noqa: E402

torch.set_num_threads(1)


def measure(name: str, level: int | None, inputs: int, repeat: int) -> dict:
    art: dict = {}
    with tempfile.TemporaryDirectory() as out:
        result = run_stages(
            name, out, Result(name), level=level, inputs=inputs, artifacts=art
        )
    qat, qat_export, lsb = art["qat"], art["qat_export"], art["lsb"]
    x = art["inputs"]  # one batch of ``inputs`` inputs
    with torch.no_grad():
        pt_ept = (qat(x) - qat_export(x)).abs().max().item() / lsb
        fixed = median_time(lambda: qat(x), repeat)
        with float_validation():
            floating = median_time(lambda: qat(x), repeat)
    return {
        "q-bc": result.quantized_vs_bc_lsb,
        "bc-ept": result.bc_vs_export_pt_diff,
        "pt-ept": pt_ept,
        "fixed_ms": fixed * 1e3 / inputs,
        "float_ms": floating * 1e3 / inputs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--inputs", type=int, default=20)
    parser.add_argument("--levels", default="default")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    levels = [None if v == "default" else int(v) for v in args.levels.split(",")]
    print(
        f"{args.inputs} inputs per model; VALIDATION forward: medians of "
        f"{args.repeat}, 1 thread"
    )
    print(
        f"{'model':30} {'level':>7} {'q-bc':>5} {'bc-ept':>6} {'pt-ept':>7} "
        f"{'fixed ms':>9} {'float ms':>9} {'ratio':>6}"
    )
    for level in levels:
        for name in args.models:
            try:
                r = measure(name, level, args.inputs, args.repeat)
            except Exception as e:  # one model's failure does not stop the table
                print(f"{name:30} {str(level):>7} failed: {type(e).__name__}: {e}")
                continue
            print(
                f"{name:30} {str(level if level is not None else 'default'):>7} "
                f"{r['q-bc']:>5g} {r['bc-ept']:>6} {r['pt-ept']:>7.2f} "
                f"{r['fixed_ms']:>9.1f} {r['float_ms']:>9.1f} "
                f"{r['fixed_ms'] / r['float_ms']:>6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
