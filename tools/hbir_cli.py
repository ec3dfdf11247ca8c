"""``hbir``: the analysis commands.

    hbir doctor --qat qat.pt --data data.pt [--qat-bc qat.bc]
                [--quantized-bc quantized.bc]
                [--nv12-bc nv12_quantized.bc --nv12-data planes.pt]
                [--march nash-e] [--out-dir DIR]

Runs every stage it is given or can make (qat.pt, qat.export.pt, qat.bc,
quantized.bc, and nv12_quantized.bc on the NV12 planes of the same frames:
``torch.save`` of a list of ``(y, uv)`` uint8 tensors, one per batch of
``data.pt``, e.g. ``tuple(map(torch.from_numpy, hbir.data.rgb_to_nv12(rgb)))``),
prints one screen: each stage pair against its contract, the
first pair beyond it, its first op (ID in qat.bc and torch source line) and the
cause; writes report.json and report.html to ``--out-dir``. Exit status 0: every
stage within contract; 3: a stage pair beyond it; 1: bad input.

    hbir bisect --qat-bc qat.bc --data data.pt --reference qat.pt
                --threshold 1e-3 [--metric Atol] [--march nash-e] [--no-convert]

prints the smallest window of fake quants whose float fallback restores the
metric, and the bc_editor config for it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def main(args: Sequence[str] | None = None) -> None:
    parser = _Parser(prog="hbir", description="hbir analysis tools")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser(
        "doctor",
        help="find the stage, the op and the cause of a difference",
        description="Find the first stage pair beyond its numeric contract, its "
        "first op and the cause.",
    )
    doctor.add_argument(
        "--qat",
        required=True,
        help="qat.pt (torch.save of the prepared model, in VALIDATION)",
    )
    doctor.add_argument(
        "--data",
        required=True,
        help="input batches (torch.save of a tensor, a tuple, or a list of them)",
    )
    doctor.add_argument("--qat-bc", help="qat.bc (default: export qat.pt)")
    doctor.add_argument("--quantized-bc", help="quantized.bc (default: convert)")
    doctor.add_argument(
        "--nv12-bc",
        help="nv12_quantized.bc (qat.bc with camera nodes inserted, converted)",
    )
    doctor.add_argument(
        "--nv12-data",
        help="the NV12 planes of the same frames as --data (torch.save of a list "
        "of (y, uv) uint8 tensors, one per batch)",
    )
    doctor.add_argument("--march", default="nash-e")
    doctor.add_argument("--out-dir", help="write report.json and report.html here")
    bisect = sub.add_parser(
        "bisect",
        help="the smallest float region of qat.bc that restores a metric",
        description="Search windows of qat.bc fake-quant IDs whose float fallback "
        "brings the metric against the reference within the threshold; print the "
        "bc_editor config.",
    )
    bisect.add_argument("--qat-bc", required=True, help="qat.bc to edit")
    bisect.add_argument("--data", required=True, help="input batches (torch.save)")
    bisect.add_argument(
        "--reference", required=True, help="the model to recover: qat.pt or a .bc"
    )
    bisect.add_argument("--threshold", required=True, type=float)
    bisect.add_argument("--metric", default="Atol")
    bisect.add_argument("--march", default="nash-e")
    bisect.add_argument(
        "--no-convert",
        action="store_true",
        help="run the edited qat.bc itself (the error is already in qat.bc)",
    )
    ns = parser.parse_args(args)
    if ns.command == "doctor" and bool(ns.nv12_bc) != bool(ns.nv12_data):
        doctor.error(
            "the NV12 stage needs both --nv12-bc and --nv12-data (the NV12 planes "
            "of the same frames as --data)"
        )
    if ns.command == "bisect":
        _bisect(ns)
        return

    from hbir import HbirError

    try:
        from hbir.profiler import diagnose
        from hbir.profiler.doctor import load_inputs, load_qat_model

        qat = load_qat_model(ns.qat)
        data = load_inputs(ns.data)
        qat_bc = _load_bc(ns.qat_bc, "--qat-bc") if ns.qat_bc else None
        quantized = (
            _load_bc(ns.quantized_bc, "--quantized-bc") if ns.quantized_bc else None
        )
        nv12 = _load_bc(ns.nv12_bc, "--nv12-bc") if ns.nv12_bc else None
        planes = load_inputs(ns.nv12_data) if ns.nv12_data else None
        result = diagnose(
            qat,
            data,
            ns.march,
            qat_bc=qat_bc,
            quantized_bc=quantized,
            nv12_quantized_bc=nv12,
            nv12_data=planes,
            out_dir=ns.out_dir,
            progress=sys.stderr.isatty(),
        )
    except HbirError as e:
        print(f"hbir doctor: error: {e}", file=sys.stderr)
        sys.exit(1)
    print(result.text())
    if ns.out_dir:
        print(f"wrote {ns.out_dir}/report.json and {ns.out_dir}/report.html")
    sys.exit(0 if result.ok else 3)


def _bisect(ns) -> None:
    from hbir import HbirError

    try:
        from hbir.profiler import bisect_float_fallback
        from hbir.profiler.bisect import hbir_outputs, reference_outputs
        from hbir.profiler.doctor import load_inputs, load_qat_model

        data = load_inputs(ns.data)
        qat_bc = _load_bc(ns.qat_bc, "--qat-bc")
        if ns.reference.endswith((".bc", ".mlir", ".hbm")):
            reference_model = _load_bc(ns.reference, "--reference")
        else:
            reference_model = load_qat_model(ns.reference)
        reference = reference_outputs(reference_model, data)
        found = bisect_float_fallback(
            qat_bc,
            data,
            reference,
            ns.threshold,
            ns.metric,
            ns.march,
            evaluate=hbir_outputs if ns.no_convert else None,
        )
    except (HbirError, ValueError) as e:
        print(f"hbir bisect: error: {e}", file=sys.stderr)
        sys.exit(1)
    print(found.text())


def _load_bc(path: str, flag: str):
    """The hbir model (a ``.bc`` / ``.mlir``) ``flag`` names; a compiled
    ``model.hbm`` is refused by name (these tools edit and convert ``.bc``)."""
    import hbir
    from hbir.diagnostics import HbirFileError

    model = hbir.load(path)
    if not isinstance(model, hbir.Module):
        raise HbirFileError(
            f"{flag} {path}: a compiled model ({type(model).__name__}, model.hbm); "
            f"{flag} takes a .bc (qat.bc, quantized.bc)"
        )
    return model


if __name__ == "__main__":
    main()
