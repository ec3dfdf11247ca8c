"""``hbir.compile``: quantized.bc -> the NPU program -> ``model.hbm``.

The ``compile`` phase of ``passes/pipelines.py`` (``npu-lower``, ``npu-layout``,
``npu-fuse``, ``npu-tile``, ``npu-schedule``, ``npu-plan-memory``) on a clone of
the model, the march passed to every pass, the module verified (IR and SRAM)
once at the end, or after each pass with ``verify_each`` — the same as
``hbir-opt quantized.bc --compile-to=compile --march=<march>``
(:func:`lower_to_npu`); then the emitter turns the npu module
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

__all__ = ["compile", "compile_passes", "final_check", "lower_to_npu", "run_passes"]


def compile_passes(
    march: str, opt: int = 2, stop: str | None = None, core_num: int = 1
):
    """The compile phase's pass instances for ``march`` (through ``stop``);
    npu-schedule splits the TAE's work over ``core_num`` cores."""
    import dataclasses

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
        p = available[spec.name]().from_pass_spec(spec)
        if spec.name == "npu-schedule":
            p = dataclasses.replace(p, cores=core_num)
        passes.append(p)
    return passes


def lower_to_npu(
    m: Module,
    march: str | None = None,
    opt: int = 2,
    progress_bar: bool = False,
    time_passes: bool = False,
    verify_passes: bool = True,
    verify_each: bool | None = None,
    core_num: int = 1,
) -> Module:
    """The compile phase on a clone of ``quantized.bc``: the npu-dialect module
    (layout, fusion, tiles, DMA schedule and memory plan all in the IR;
    ``m2["forward"].feed(...)`` runs it in the interpreter, bit for bit what
    ``quantized.bc`` computes). ``hbir.compile`` emits it as ``model.hbm``.

    ``opt``: 0 skips fusion, 1 and 2 run the whole phase (the same today).
    ``progress_bar`` prints one line per pass to stderr; ``time_passes`` adds
    each pass's time to it. A model with fake quantization (qat.bc) is refused:
    convert it first. The module is verified once, after the last pass;
    ``verify_each=True`` verifies it after every pass too (None: the
    ``HBIR_VERIFY_EACH`` environment variable, which the tests set).
    ``verify_passes=False`` skips the IR verification altogether
    (``hbir/fast_feed.py``, whose program the loader's rules verify).
    ``core_num``: the cores npu-schedule splits the TAE's work over.
    """
    from hbir.passes import pipelines
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
    passes = compile_passes(march, opt, core_num=core_num)

    each = verify_passes and pipelines.verify_each(verify_each)

    def report(i: int, name: str, ran: float, checked: float) -> None:
        if progress_bar or time_passes:
            took = ""
            if time_passes:
                took = (
                    f" ({ran:.3f} s + verify {checked:.3f} s)"
                    if each
                    else (f" ({ran:.3f} s)")
                )
            print(f"compile [{i + 1}/{len(passes)}] {name}{took}", file=sys.stderr)

    run_passes(compiled, passes, report, verify=verify_passes, verify_each=each)
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
    verify_each: bool | None = None,
    **options,
) -> Hbm:
    """Compile ``quantized.bc`` for ``march`` ("nash-e", "nash-p", ...; None: the
    default ``set_march`` chose, else the march it was converted for) into an
    :class:`~hbir.hbm.Hbm`, written to ``path`` (a ``.hbm`` file) unless it is
    None.

    The compile phase (:func:`lower_to_npu`), then the emitter
    (``hbir/hbm/emit.py``): the program is verified as the loader verifies a
    file (``hbir/hbm/verify.py``), so what is returned is what ``hbir.load``
    gives back. ``hbm["forward"].feed(...)`` runs it on the simulated NPU.

    ``opt``: 0 skips fusion, 1 and 2 run the whole phase (the same today).
    ``jobs`` and ``debug`` are accepted for the reference signature and unused;
    so are the reference's other keywords (``balance``, ``input_no_padding``,
    ``cache_mode``, ...) where they hold for the march model, and refused by
    name where not (``hbir/compile_options.py``). ``core_num`` (up to the
    march's cores) splits the TAE's work over that many cores in the cycle
    estimate; the numbers computed are the same.
    ``progress_bar`` prints one line per pass to stderr; ``time_passes`` adds
    each pass's time to it. The IR is verified once after the compile phase;
    ``verify_each=True`` verifies it after every pass too (None: the
    ``HBIR_VERIFY_EACH`` environment variable); ``verify_passes=False`` skips
    the IR verification (the emitted program is verified all the same).
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
    compiled = lower_to_npu(
        m,
        march,
        opt,
        progress_bar,
        time_passes,
        verify_passes,
        verify_each,
        core_num=options.get("core_num", 1),
    )
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


def run_passes(
    module: Module,
    passes,
    on_pass=None,
    verify: bool = True,
    verify_each: bool | None = None,
) -> None:
    """Apply ``passes`` in order, then verify the module once: the model API's
    checks (``diagnostics.verify``: every op's own rules and more) and the SRAM
    verifier; the first failure is a located error.

    ``verify_each`` (None: ``HBIR_VERIFY_EACH``, :func:`~hbir.passes.pipelines.
    verify_each`) also verifies after every pass (xDSL's verifier and the SRAM
    verifier), so a failure names the pass that broke the IR.
    ``on_pass(index, name, pass seconds, verify seconds)`` after each pass (0
    verify seconds when not verifying each). ``verify=False``: the passes alone.
    """
    from hbir.passes.pipelines import verify_each as wanted

    ctx, op = make_context(), module.module.op
    each = verify and wanted(verify_each)
    for i, p in enumerate(passes):
        started = time.perf_counter()
        p.apply(ctx, op)
        ran = time.perf_counter() - started
        started = time.perf_counter()
        if each:
            _verify_after(op, p.name)
        if on_pass is not None:
            on_pass(i, p.name, ran, time.perf_counter() - started)
    if verify:
        final_check(module, after_last_pass=each and bool(passes))


def final_check(module: Module, after_last_pass: bool = False) -> None:
    """The check after the whole phase: ``diagnostics.verify`` (every op's
    rules, the types ``feed`` can run, use before definition) and the SRAM
    verifier, as a located error. ``after_last_pass``: the module was verified
    (xDSL's verifier and the SRAM verifier) after the last pass, so those two
    are not run again on the same IR."""
    from xdsl.utils.exceptions import VerifyException

    from hbir.dialects.npu import verify_sram

    op = module.module.op
    diagnostics.verify(op, filename="after compile", rules_checked=after_last_pass)
    if after_last_pass:
        return
    try:
        verify_sram(op)
    except VerifyException as e:
        raise diagnostics.HbirError(f"after compile: error: {e}") from None


def _verify_after(op, name: str) -> None:
    """xDSL's verifier and the SRAM verifier after pass ``name``; a failure is
    re-raised located (``diagnostics.verify``) and naming the pass."""
    from xdsl.utils.exceptions import DiagnosticException, VerifyException

    from hbir.dialects.npu import verify_sram

    try:
        op.verify()
    except (VerifyException, DiagnosticException):
        diagnostics.verify(op, filename=f"after pass '{name}'")
        raise
    try:
        verify_sram(op)
    except VerifyException as e:
        raise diagnostics.HbirError(f"after pass '{name}': error: {e}") from None
