"""The analysis commands of ``hbir``: doctor and bisect (usage: ``hbir --help``).

``hbir doctor`` runs every stage it is given or can make (qat.pt, qat.export.pt,
qat.bc, quantized.bc, and nv12_quantized.bc on the NV12 planes of the same
frames: ``torch.save`` of a list of ``(y, uv)`` uint8 tensors, one per batch of
``data.pt``, e.g. ``tuple(map(torch.from_numpy, hbir.data.rgb_to_nv12(rgb)))``),
prints one screen: each stage pair against its contract (and qat.pt against the
float model, ``--float``, by output cosine), the first pair beyond it, its first
op (ID in qat.bc and torch source line) and the cause; writes
report.json and report.html to ``--out-dir``. ``hbir bisect`` prints the smallest
window of fake quants whose float fallback restores the metric, and the
bc_editor config for it.
"""

from __future__ import annotations

import sys

from hbir.errors import HbirError


def doctor(ns) -> int:
    """Every stage it is given or can make, against its contract (0 within, 3
    beyond)."""
    from hbir.profiler import diagnose
    from hbir.profiler.doctor import load_float_model, load_inputs, load_qat_model

    data = load_inputs(ns.data)
    qat = load_qat_model(ns.qat, ns.model, data[0], ns.qconfig)
    qat_bc = _load_bc(ns.qat_bc, "--qat-bc") if ns.qat_bc else None
    quantized = _load_bc(ns.quantized_bc, "--quantized-bc") if ns.quantized_bc else None
    nv12 = _load_bc(ns.nv12_bc, "--nv12-bc") if ns.nv12_bc else None
    planes = load_inputs(ns.nv12_data) if ns.nv12_data else None
    hbm = _load_hbm(ns.hbm, "--hbm") if ns.hbm else None
    stages = {
        "qat_bc": qat_bc,
        "quantized_bc": quantized,
        "nv12_quantized_bc": nv12,
        "nv12_data": planes,
        "model_hbm": hbm,
        "float_model": load_float_model(ns.float_model) if ns.float_model else None,
    }
    if ns.cosine_tolerance is not None:
        stages["cosine_tolerance"] = ns.cosine_tolerance
    result = diagnose(
        qat, data, ns.march, **stages, out_dir=ns.out_dir, progress=sys.stderr.isatty()
    )
    print(result.text())
    if ns.out_dir:
        print(f"wrote {ns.out_dir}/report.json and {ns.out_dir}/report.html")
    if ns.fix and not result.ok:
        from hbir.profiler.fix import remedy

        fix = remedy(result, qat, data, ns.march, **stages)
        print(
            fix.text()
            if fix is not None
            else f"fix: none for '{result.finding.cause}': it needs a person"
        )
    return 0 if result.ok else 3


def bisect(ns) -> int:
    """The smallest float region of qat.bc that restores the metric."""
    from hbir.profiler import bisect_float_fallback
    from hbir.profiler.bisect import hbir_outputs, reference_outputs
    from hbir.profiler.doctor import load_inputs, load_qat_model

    data = load_inputs(ns.data)
    qat_bc = _load_bc(ns.qat_bc, "--qat-bc")
    try:
        if ns.reference.endswith((".bc", ".mlir", ".hbm")):
            reference_model = _load_bc(ns.reference, "--reference")
        else:
            reference_model = load_qat_model(
                ns.reference, ns.model, data[0], ns.qconfig
            )
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
    except ValueError as e:  # an unknown metric, a threshold out of range
        raise BisectError(str(e)) from None
    print(found.text())
    return 0


class BisectError(HbirError):
    """A metric or threshold bisect cannot use."""


def _load_bc(path: str, flag: str):
    from hbir.tools.model_files import load_ir

    return load_ir(path, "a .bc (qat.bc, quantized.bc)", flag)


def _load_hbm(path: str, flag: str):
    from hbir.tools.model_files import load_hbm

    return load_hbm(path, flag)
