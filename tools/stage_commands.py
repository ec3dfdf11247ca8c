"""The stage commands of ``hbir``: export, convert, compile, run, perf, verify.

Each takes the parsed arguments and returns the exit status; a bad input raises
an ``HbirError``, which ``hbir`` prints as one line. Heavy imports (torch, the
compiler) happen here, when a command runs, not when ``hbir --help`` does.
"""

from __future__ import annotations

import os

import numpy as np

from hbir.errors import HbirFileError


def export(ns) -> int:
    """qat.pt (a whole model, or a state_dict with --model) -> qat.bc."""
    import hbir
    from hbir.profiler.doctor import load_inputs
    from hbir.quantization import export as export_model
    from hbir.quantization.checkpoint import load_qat

    _check_output(ns.output, (".bc", ".mlir"), "qat.bc")
    batches = load_inputs(ns.data)
    example = batches[0]
    qat = load_qat(ns.qat, ns.model, example, ns.qconfig)
    qat_bc = export_model(qat, example)
    hbir.save(qat_bc, ns.output)
    print(f"wrote {ns.output} (batch {_batch(example)})")
    return 0


def convert(ns) -> int:
    """qat.bc -> quantized.bc for a march."""
    import hbir

    _check_output(ns.output, (".bc", ".mlir"), "quantized.bc")
    qat_bc = _module(ns.model, "qat.bc")
    quantized = hbir.convert(qat_bc, ns.march, advice=ns.advice)
    hbir.save(quantized, ns.output)
    print(f"wrote {ns.output} ({ns.march})")
    return 0


def compile_model(ns) -> int:
    """quantized.bc -> model.hbm."""
    import hbir

    _check_output(ns.output, (".hbm",), "model.hbm")
    quantized = _module(ns.model, "quantized.bc")
    hbir.compile(
        quantized,
        ns.output,
        ns.march,
        opt=ns.opt,
        progress_bar=ns.progress,
        time_passes=ns.time_passes,
        verify_each=ns.verify_each,
    )
    print(f"wrote {ns.output} ({ns.march}, opt {ns.opt})")
    return 0


def run(ns) -> int:
    """Run any model file on input files; print each output, save them."""
    from hbir.tools.hb_verifier import load_model, read_inputs

    model = load_model(ns.model)
    feed = read_inputs(ns.input, model)
    if model.kind == "bc" and ns.reference:
        outputs = model.function.feed(feed, reference=True)
    else:
        outputs = model.function.feed(feed)
    for name, value in outputs.items():
        value = np.asarray(value)
        stats = ""
        if value.size:
            v = value.astype(np.float64)
            stats = f" min {v.min():.6g} max {v.max():.6g} mean {v.mean():.6g}"
        print(f"{name}: {value.dtype}{list(value.shape)}{stats}")
    if ns.output:
        _check_output(ns.output, (".npz",), "the outputs")
        try:
            np.savez(ns.output, **{k: np.asarray(v) for k, v in outputs.items()})
        except OSError as e:
            raise HbirFileError(f"{ns.output}: cannot write: {e.strerror}") from None
        print(f"wrote {ns.output}")
    return 0


def perf(ns) -> int:
    """The estimated speed of a model.hbm (or of the program a quantized.bc
    compiles to), with its JSON and HTML report."""
    import tempfile

    import hbir

    if not os.path.isfile(ns.model):
        raise HbirFileError(f"{ns.model}: no such file")
    stem = os.path.splitext(os.path.basename(ns.model))[0]
    if ns.model.endswith(".hbm"):
        hbir.hbm_perf(ns.model, ns.out_dir)
    else:
        model = _module(ns.model, "quantized.bc or model.hbm")
        if model.march is None:
            raise HbirFileError(
                f"{ns.model}: not converted: hbir perf estimates a compiled model "
                "(hbir convert it, then hbir compile)"
            )
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, f"{stem}.hbm")
            hbir.compile(model, path, model.march)
            hbir.hbm_perf(path, ns.out_dir)
    print(f"wrote {os.path.join(ns.out_dir, stem)}.json and .html")
    return 0


def verify(ns) -> int:
    """Two models on the same inputs: 0 bit-identical, 1 not. A model.hbm whose
    checksums or framing fail is not bit-identical to anything: 1, naming the
    damage (a file that is no model.hbm at all is bad input, 2)."""
    from hbir.hbm.errors import HbmFormatError
    from hbir.tools.hb_verifier import verify as verify_pair

    try:
        return verify_pair(
            [ns.model_a, ns.model_b],
            ns.input,
            ns.compare_digits,
            ns.dump_all_nodes,
            strict=True,
        )
    except HbmFormatError as e:
        damaged = [p for p in (ns.model_a, ns.model_b) if _is_hbm_file(p)]
        if not damaged:
            raise
        print(f"not bit-identical: {e} (compile it again)")
        return 1


def _is_hbm_file(path: str) -> bool:
    """The file starts as a model.hbm does (so a failure to load it is damage)."""
    from hbir.hbm.container import MAGIC

    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


# ------------------------------------------------------------------ helpers


def _module(path: str, what: str):
    """The hbir model (``.bc`` / ``.mlir``) at ``path``; a model.hbm is refused."""
    from hbir.tools.model_files import load_ir

    if not os.path.isfile(path):
        raise HbirFileError(f"{path}: no such file")
    return load_ir(path, what)


def _check_output(path: str, suffixes: tuple[str, ...], what: str) -> None:
    if not path.endswith(suffixes):
        raise HbirFileError(f"-o {path}: {what} is written as {' or '.join(suffixes)}")
    if os.path.isdir(path):
        raise HbirFileError(f"-o {path}: a folder; give a file path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise HbirFileError(f"-o {path}: no such folder {folder}")


def _batch(example) -> int:
    first = example[0]
    return int(first.shape[0]) if getattr(first, "ndim", 0) else 1
