"""``hbir.compile``: quantized.bc -> the NPU program -> ``model.hbm``.

The ``compile`` phase of ``passes/pipelines.py`` (``npu-lower``, ``npu-layout``,
``npu-fuse``, ``npu-tile``, ``npu-schedule``, ``npu-plan-memory``) on a clone of
the model, the march passed to every pass, the module verified (IR and SRAM)
after each pass — the same as ``hbir-opt quantized.bc --compile-to=compile
--march=<march>`` (:func:`lower_to_npu`); then the emitter turns the npu module
into the program a ``.hbm`` file holds (:func:`compile`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from hbir import compile_options, diagnostics
from hbir.default_march import default_march
from hbir.dialects import make_context
from hbir.module import Module, require_module

if TYPE_CHECKING:
    from hbir.hbm import Hbm

__all__ = ["compile", "compile_passes", "lower_to_npu", "run_passes"]


def compile_passes(march: str, opt: int = 2, stop: str | None = None):
    """The compile phase's pass instances for ``march`` (through ``stop``)."""
    from xdsl.utils.arg_spec import parse_pipeline

    from hbir.passes import get_all_passes
    from hbir.passes.pipelines import pipeline_up_to

    if isinstance(opt, bool) or opt not in (0, 1, 2):
        raise diagnostics.HbirError(
            f"hbir.compile: opt must be 0 (no fusion), 1 or 2, got {opt!r}"
        )
    specs = dict(pipeline_up_to(stop or "compile", march))["compile"]
    if opt < 1:  # opt 0: no fusion (each requantization its own op)
        specs = [s for s in specs if not s.startswith("npu-fuse")]
    available = get_all_passes()
    passes = []
    for spec in parse_pipeline(",".join(specs)):
        cls = available[spec.name]()
        passes.append(cls.from_pass_spec(spec))
    return passes


def lower_to_npu(
    m: Module,
    march: str | None = None,
    opt: int = 2,
    progress_bar: bool = False,
    time_passes: bool = False,
    verify_passes: bool = True,
) -> Module:
    """The compile phase on a clone of ``quantized.bc``: the npu-dialect module
    (layout, fusion, tiles, DMA schedule and memory plan all in the IR;
    ``m2["forward"].feed(...)`` runs it in the interpreter, bit for bit what
    ``quantized.bc`` computes). ``hbir.compile`` emits it as ``model.hbm``.

    ``opt``: 0 skips fusion, 1 and 2 run the whole phase (the same today).
    ``progress_bar`` prints one line per pass to stderr; ``time_passes`` adds
    each pass's time to it. A model with fake quantization (qat.bc) is refused:
    convert it first. ``verify_passes=False`` skips the verification after each
    pass (``hbir/fast_feed.py``, whose program the loader's rules verify).
    """
    from hbir.passes.march import UnknownMarchError, get_march

    require_module(m, "hbir.compile", "compile")
    march = march or default_march() or m.march or "nash-e"
    try:
        march = get_march(march).name
    except UnknownMarchError as e:
        raise diagnostics.HbirError(str(e)) from None
    converted_for = m.march
    if converted_for is not None and converted_for != march:
        raise diagnostics.HbirError(
            f"hbir.compile: the model was converted for {converted_for}, not "
            f"{march}: convert the qat.bc for {march} (hbir.convert(qat_bc, "
            f"'{march}')) or compile for {converted_for}"
        )
    compiled = m.clone()
    passes = compile_passes(march, opt)

    def report(i: int, name: str, ran: float, checked: float) -> None:
        if progress_bar or time_passes:
            took = f" ({ran:.3f} s + verify {checked:.3f} s)" if time_passes else ""
            print(f"compile [{i + 1}/{len(passes)}] {name}{took}", file=sys.stderr)

    run_passes(compiled, passes, report, verify=verify_passes)
    return compiled


def compile(  # noqa: A001 - the reference toolchain's name
    m: Module,
    path: str | os.PathLike | None = None,
    march: str | None = None,
    opt: int = 2,
    jobs: int = 4,
    debug: bool = False,
    progress_bar: bool = False,
    time_passes: bool = False,
    verify_passes: bool = True,
    **options,
) -> Hbm:
    """Compile ``quantized.bc`` for ``march`` ("nash-e", "nash-m"; None: the
    default ``set_march`` chose, else the march it was converted for) into an
    :class:`~hbir.hbm.Hbm`, written to ``path`` (a ``.hbm`` file) unless it is
    None.

    The compile phase (:func:`lower_to_npu`), then the emitter
    (``hbir/hbm/emit.py``): the program is verified as the loader verifies a
    file (``hbir/hbm/verify.py``), so what is returned is what ``hbir.load``
    gives back. ``hbm["forward"].feed(...)`` runs it on the simulated NPU.

    ``opt``: 0 skips fusion, 1 and 2 run the whole phase (the same today).
    ``jobs`` and ``debug`` are accepted for the reference signature and unused;
    so are the reference's other keywords (``core_num``, ``balance``,
    ``input_no_padding``, ``cache_mode``, ...) where they hold for the march
    model, and refused by name where not (``hbir/compile_options.py``).
    ``progress_bar`` prints one line per pass to stderr; ``time_passes`` adds
    each pass's time to it; ``verify_passes=False`` skips the IR verification
    after each pass (the emitted program is verified all the same).
    """
    from hbir import fast_feed
    from hbir.hbm import Hbm, container, verify
    from hbir.hbm.emit import emit

    if path is not None and not os.fspath(path).endswith(".hbm"):
        raise diagnostics.HbirError(
            f"hbir.compile: {os.fspath(path)}: the compiled model file ends in .hbm"
        )
    march = march or default_march() or getattr(m, "march", None) or "nash-e"
    compile_options.check(options, march)
    compiled = lower_to_npu(m, march, opt, progress_bar, time_passes, verify_passes)
    program = emit(compiled, m)
    if path is None:

        def fail(place: tuple, what: str):
            raise diagnostics.HbirError(f"hbir.compile: emitted {place}: {what}")

        verify.verify_program(program, fail)
        hbm = Hbm(program)
    else:
        container.write(program, path)  # verifies it first
        hbm = Hbm(program, os.fspath(path))
    if opt == 2 and march == m.march:  # the program quantized.bc's feed runs
        fast_feed.remember(m.module.op, hbm)
    return hbm


def run_passes(module: Module, passes, on_pass=None, verify: bool = True) -> None:
    """Apply ``passes`` in order, verifying after each: xDSL's verifier (every op's
    own rules) and the SRAM verifier; the first failure is re-raised as a located
    error. The model API's stricter checks (``diagnostics.verify``) run once at
    the end. ``on_pass(index, name, pass seconds, verify seconds)``.
    ``verify=False``: the passes alone."""
    from xdsl.utils.exceptions import DiagnosticException, VerifyException

    from hbir.dialects.npu import verify_sram

    ctx, op = make_context(), module.module.op
    for i, p in enumerate(passes):
        started = time.perf_counter()
        p.apply(ctx, op)
        ran = time.perf_counter() - started
        if not verify:
            continue
        started = time.perf_counter()
        try:
            op.verify()
        except (VerifyException, DiagnosticException):
            diagnostics.verify(op, filename=f"after pass '{p.name}'")
            raise
        try:
            verify_sram(op)
        except VerifyException as e:
            raise diagnostics.HbirError(f"after pass '{p.name}': error: {e}") from None
        if on_pass is not None:
            on_pass(i, p.name, ran, time.perf_counter() - started)
    if verify:
        diagnostics.verify(op, filename="after compile")
