"""The compile stage of the road: ``model.hbm`` against the quantized.bc it came from.

A compiled model is recorded through its debug table (``origin.record_hbm``):
each instruction whose result is a whole quantized.bc op's value stands for that
op, so its torch call lines up with the same call in every other stage. The
contract is exact. When it breaks, the cause is found by compiling quantized.bc
again and comparing the two programs field by field (:func:`program_difference`):

* the programs differ: model.hbm is not what compile makes of this quantized.bc
  (a corrupted or stale file; its instruction, field and values are named);
* they are the same program: a compiler or simulator bug (``tool bug``).

A model.hbm whose debug table names ops this quantized.bc does not have under
those IDs was compiled from another model (:func:`source_mismatch`): it is
compared by its outputs only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hbir.profiler import origin as og
from hbir.profiler.metrics import first_difference
from hbir.profiler.stages import Stage, StageError


def source_mismatch(source, hbm_function) -> str:
    """ "" when ``hbm_function`` (an ``HbmFunction``) was compiled from ``source``
    (an ``hbir.Function``): every op its debug table names is there under that ID
    and name. Otherwise the first one that is not, as a sentence."""
    from hbir.dialects.op_ids import op_ids

    ops = op_ids(source.op)
    for index, debug in enumerate(hbm_function.code.debug):
        if not debug.op_ids:
            continue
        n = debug.op_ids[-1]
        if n not in ops or ops[n].name != debug.op:
            there = f"'{ops[n].name}'" if n in ops else "no op"
            return (
                f"instruction #{index} computes %{n} '{debug.op}', but %{n} is "
                f"{there} in the quantized.bc given"
            )
    return ""


@dataclass
class HbmStage(Stage):
    """``model.hbm`` (an ``Hbm``), recorded as the ops of ``source`` (the
    ``hbir.Module`` it was compiled from) whose values its instructions compute."""

    source: object = field(default=None, repr=False, kw_only=True)

    def __post_init__(self):
        from hbir.hbm import Hbm
        from hbir.module import Module

        if not isinstance(self.model, Hbm):
            raise StageError(
                f"{self.name}: the compile stage takes a compiled model (model.hbm), "
                f"got {type(self.model).__name__}"
            )
        if not isinstance(self.source, Module) or self.source.march is None:
            raise StageError(
                f"{self.name}: a model.hbm is compared with the quantized.bc it was "
                "compiled from (a converted .bc)"
            )
        names = [f.name for f in self.source.functions]
        name = "forward" if "forward" in names else names[0]
        self.source_function = self.source[name]
        self.mismatch = source_mismatch(self.source_function, self.function)

    @property
    def function(self):
        names = [f.name for f in self.model.functions]
        return self.model["forward" if "forward" in names else names[0]]

    @property
    def io_function(self):
        return self.source_function

    def record(self, inputs: tuple) -> og.Record:
        feed = self.feed(inputs)
        if self.mismatch:  # another model's op IDs: the outputs only
            out = self.function.feed(feed)
            return self.in_float(og.Record(outputs=list(out.values())))
        return self.in_float(
            og.record_hbm(
                self.function, self.source_function, feed, self.grids, self.keep_codes
            )
        )

    def cause(self, key, diff) -> tuple[str, str]:
        """(cause, detail) of the first layer ``key`` that differs from
        quantized.bc (see the module)."""
        import hbir

        fresh = hbir.compile(self.source, None, self.model.march)
        code = self.function.code
        mine = _instructions_of(code, key, self.source_function)
        found = program_difference(code, fresh[self.function.name].code, mine)
        if found is not None:
            index, what = found
            return (
                "stale or corrupted model.hbm",
                f"{_instruction(code, index)}: {what}; model.hbm is not what "
                "compile makes of this quantized.bc: compile it again (hbir compile "
                "quantized.bc -o model.hbm)",
            )
        where = f"instruction #{diff.instruction}" if diff.instruction else "it"
        return (
            "tool bug",
            f"model.hbm is exactly what compile makes of quantized.bc, yet {where} "
            f"computes {og.key_text(key)} differently (by {diff.atol:g}): a "
            "compiler or simulator bug",
        )


def _instructions_of(code, key, source) -> set[int]:
    """The instructions computing ops of torch call ``key``."""
    from hbir.dialects.op_ids import op_ids

    ids = {
        n
        for n, op in op_ids(source.op).items()
        if (o := og.origin_of(op)) and o.key == key
    }
    return {i for i, d in enumerate(code.debug) if ids & set(d.op_ids)}


def _instruction(code, index: int) -> str:
    from hbir.runtime.hbm_opcodes import BY_NUMBER

    ins, debug = code.instructions[index], code.debug[index]
    what = f"instruction #{index} {BY_NUMBER[ins.opcode].name}"
    if debug.op_ids:
        what += f" (computes %{debug.op_ids[-1]} {debug.op}"
        what += f" at {debug.loc})" if debug.loc else ")"
    return what


def program_difference(given, fresh, first=()) -> tuple[int, str] | None:
    """The first instruction (those in ``first`` before the rest) where two
    functions' code differ, and what differs with both values; None when they are
    the same program."""
    n = min(len(given.instructions), len(fresh.instructions))
    order = sorted(i for i in first if i < n) + [i for i in range(n) if i not in first]
    for i in order:
        what = _instruction_difference(given, fresh, i)
        if what:
            return i, what
    if len(given.instructions) != len(fresh.instructions):
        return n, (
            f"model.hbm has {len(given.instructions)} instructions, a fresh compile "
            f"{len(fresh.instructions)}"
        )
    for a, b in zip(given.islands, fresh.islands, strict=False):
        if a != b:
            return n - 1, "a CPU island's program differs from a fresh compile's"
    return None


def _instruction_difference(given, fresh, i: int) -> str:
    from hbir.runtime.hbm_opcodes import BY_NUMBER

    x, y = given.instructions[i], fresh.instructions[i]
    if x.opcode != y.opcode:
        return (
            f"opcode {BY_NUMBER[x.opcode].name}, a fresh compile has "
            f"{BY_NUMBER[y.opcode].name}"
        )
    spec = BY_NUMBER[x.opcode]
    for name, kind in spec.fields:
        a, b = x.fields.get(name), y.fields.get(name)
        if kind == "buffer" and a is not None and b is not None:
            what = _buffer_difference(given, fresh, a, b, f"field '{name}'")
        elif a != b:
            what = f"field '{name}' is {a!r}, a fresh compile has {b!r}"
        else:
            what = ""
        if what:
            return what
    for role, xs, ys in (
        ("operand", x.operands, y.operands),
        ("result", x.results, y.results),
    ):
        for k, (a, b) in enumerate(zip(xs, ys, strict=False)):
            what = _buffer_difference(given, fresh, a, b, f"{role} {k}")
            if what:
                return what
    return ""


def _buffer_difference(given, fresh, a: int, b: int, what: str) -> str:
    """How buffer ``a`` of ``given`` differs from buffer ``b`` of ``fresh``: its
    place and type, or (a constant) its first differing element."""
    if a < 0 or b < 0:
        return "" if a == b else f"{what} is {a}, a fresh compile has {b}"
    ba, bb = given.buffers.get(a), fresh.buffers.get(b)
    if ba is None or bb is None:
        return ""
    for attr in ("space", "shape", "dtype", "offset"):
        va, vb = getattr(ba, attr, None), getattr(bb, attr, None)
        if va != vb:
            return f"{what}'s {attr} is {va}, a fresh compile has {vb}"
    ca, cb = given.constants.get(a), fresh.constants.get(b)
    if ca is None or cb is None:
        return ""
    if ca.shape != cb.shape:
        return f"{what} (a constant) has shape {ca.shape}, a fresh compile {cb.shape}"
    e = first_difference(ca, cb)
    if e is None:
        return ""
    return (
        f"{what} (a constant, {ba.dtype}{list(ca.shape)}) has {e.value!r} at "
        f"{e.index}, a fresh compile has {e.other!r} ({e.count} of {e.size} "
        "elements differ)"
    )
