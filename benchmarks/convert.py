"""Convert time per zoo model, and quantized.bc feed latency against torch eager.

Run: ``python benchmarks/convert.py [--repeat 5]``

For each zoo model (prepared, calibrated, VALIDATION, exported): the time of
``hbir.convert(qat_bc, "nash-e")``, then the latency of one
``quantized["forward"].feed`` (the reference interpreter: exact integer kernels) and
of the float torch model in eager mode on the same inputs, one thread, medians of
``--repeat`` runs in this process. The ratio is the one to beat.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import zoo_loader  # noqa: E402, F401  (makes the test zoo importable)

# isort: split
import zoo  # noqa: E402
from timing import median_time  # noqa: E402
from zoo_stages import calibrated  # noqa: E402

import hbir  # noqa: E402
from hbir.quantization import export  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp()
    print(
        f"{'model':<12} {'ops':>5} {'convert s':>10} {'feed ms':>9} "
        f"{'torch ms':>9} {'feed/torch':>10}"
    )
    for name in zoo.NAMES:
        qat, example = calibrated(name, tmp)
        qat_bc = export(qat, example)
        t_convert = median_time(lambda q=qat_bc: hbir.convert(q, "nash-e"), args.repeat)
        quantized = hbir.convert(qat_bc, "nash-e")
        f = quantized["forward"]
        feed = dict(zip(f.inputs.names, [x.numpy() for x in example], strict=True))
        t_feed = median_time(lambda f=f, feed=feed: f.feed(feed), args.repeat)
        float_model, _ = zoo.build(name)

        def eager(m=float_model, x=example):
            with torch.no_grad():
                m(*x)

        t_torch = median_time(eager, args.repeat)
        ops = sum(f.statistics().values())
        print(
            f"{name:<12} {ops:>5} {t_convert:>10.3f} {t_feed * 1e3:>9.2f} "
            f"{t_torch * 1e3:>9.2f} {t_feed / t_torch:>10.1f}"
        )


if __name__ == "__main__":
    main()
