"""quantized.bc's fast feed: its compiled program, run in memory.

``Function.feed`` (without an observer) of a model ``hbir.convert`` made — it
records its march — runs the program ``hbir.compile`` would write to
``model.hbm``: the compile phase (lower, layout, fuse, tile, schedule, plan
memory), the emitter, the loader's verification of every instruction, then the
simulated NPU (``runtime/npu_sim.py``). So ``quantized.bc`` and ``model.hbm``
share one fast engine: each kernel and each fusion exists once (the fusions as
npu-fuse's IR rewrites), and the interpreter (``runtime/interpreter.py``) stays
the op-by-op reference both are proved against.

The program is built on the first feed (or taken from ``hbir.compile``, which
made the same one) and cached on the module, and built again when its IR
changes (the test of ``runtime/plan.py``'s ``Snapshot``). A model the compile
phase refuses (one with fake quantization left, or an integer op no npu
rule takes and the op table places nowhere) runs as the interpreter's prepared
plan instead: the same numbers, more slowly; :func:`engine` says which and why.
Should the compile phase itself fail (a compiler bug), feed warns and runs the
plan too.
Other models (``qat.bc``, float models, hand-written IR without a march, a
program already lowered to the npu dialect) run as the prepared plan, and
``feed(..., reference=True)`` runs any model as the interpreter defines it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.utils.exceptions import VerifyException

from hbir.errors import HbirError

_CACHE = "_hbir_fast_feed"


@dataclass(frozen=True)
class _Built:
    """A module's program (None: refused, ``reason`` says why) and the IR it was
    built from."""

    key: tuple
    snapshots: tuple
    functions: dict  # name -> runtime.npu_sim.FunctionSim
    reason: str


def _key(module: ModuleOp) -> tuple:
    """The module's functions and attributes (march, rounding, ...)."""
    return (tuple(module.body.block.ops), dict(module.attributes))


def _built(module: ModuleOp) -> _Built | None:
    """The cached program of ``module`` (None: not a converted model)."""
    from hbir.module import ATTR_MARCH

    if ATTR_MARCH not in module.attributes:
        return None
    hit = module.__dict__.get(_CACHE)
    key = _key(module)
    functions = [f for f in module.body.block.ops if isinstance(f, FuncOp)]
    if (
        hit is not None
        and hit.key == key
        and all(s.matches(f) for s, f in zip(hit.snapshots, functions, strict=True))
    ):
        return hit
    if _lowered(module):
        sims, reason = {}, "npu ops already: a compiled program, run op by op"
    else:
        try:
            sims, reason = _compile(module), ""
        except (HbirError, VerifyException) as e:
            sims, reason = {}, f"compile refused the model: {str(e).splitlines()[0]}"
        except Exception as e:  # a compiler bug: feed still gives the numbers
            sims = {}
            reason = f"compile failed (a compiler bug): {type(e).__name__}: {e}"
            warnings.warn(
                f"quantized.bc runs as the prepared plan: {reason}",
                RuntimeWarning,
                stacklevel=4,
            )
    return _store(module, sims, reason)


def _store(module: ModuleOp, sims: dict, reason: str) -> _Built:
    """Cache ``sims`` on ``module``, with the IR they were built from."""
    from hbir.runtime.plan import Snapshot

    functions = [f for f in module.body.block.ops if isinstance(f, FuncOp)]
    snapshots = tuple(Snapshot.of(f) for f in functions)
    built = _Built(_key(module), snapshots, sims, reason)
    module.__dict__[_CACHE] = built
    return built


def _simulators(hbm) -> dict:
    """Each function's prepared simulator of an ``Hbm``, by name."""
    return {f.name: f._sim for f in hbm.functions}


def remember(module: ModuleOp, hbm) -> None:
    """``hbm`` (an ``Hbm`` that ``hbir.compile`` just made from ``module``, for
    the march the module records, at the default opt) is the program the fast
    feed would build: cache it, so the next feed does not compile again."""
    functions = [f for f in module.body.block.ops if isinstance(f, FuncOp)]
    sims = _simulators(hbm)
    if len(sims) == len(functions) and not _lowered(module):
        _store(module, sims, "")


def _lowered(module: ModuleOp) -> bool:
    """The module is (part of) a compiled program already: npu ops, which the
    prepared plan runs with the npu kernels, as the interpreter defines them."""
    return any(
        op.dialect_name() == "npu"
        for f in module.body.block.ops
        if isinstance(f, FuncOp)
        for op in f.body.block.ops
    )


def _compile(module: ModuleOp) -> dict:
    """``hbir.compile`` in memory (no per-pass IR verification: the emitted
    program is verified as the loader verifies a file); each function's
    simulator, prepared."""
    from hbir.compile import compile as compile_model
    from hbir.module import Module

    source = Module(module)
    hbm = compile_model(source, None, source.march, verify_passes=False)
    return _simulators(hbm)


def simulator(module: ModuleOp, name: str):
    """The simulated NPU's prepared function ``name`` of the converted model
    ``module``, or None where it runs as the prepared plan."""
    built = _built(module)
    return None if built is None else built.functions.get(name)


def run(module: ModuleOp, name: str, arrays: list, batch: int | None = None):
    """The outputs of function ``name`` of ``module`` for ``arrays`` (checked
    inputs; ``batch``: N samples of its batch-1 inputs, run at once,
    ``runtime/npu_batch.py``) by its compiled program, or None where the
    prepared plan runs it: not a converted model, one compile refused, a batch
    the program cannot run at once, or a program already running in another
    thread (the simulator's memories are one per function; the plan computes
    the same numbers meanwhile)."""
    sim = simulator(module, name)
    if sim is None or not sim.lock.acquire(blocking=False):
        return None
    try:
        if batch is not None:
            batched = sim.batched(batch)
            return None if batched is None else batched.run(arrays)
        return sim.run(arrays)  # (fresh arrays)
    finally:
        sim.lock.release()


def engine(module) -> str:
    """Which fast engine ``feed`` uses for ``module`` (an ``hbir.Module``):
    ``"npu"`` (the compiled program on the simulated NPU) or ``"plan"`` (the
    interpreter's prepared plan), with the reason for a plan."""
    built = _built(module.module.op)
    if built is None:
        return "plan (not a converted model: no march recorded)"
    return "npu" if built.functions else f"plan ({built.reason})"
