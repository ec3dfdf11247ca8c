"""remove-fake-quant: replace chosen ``qnt.const_fake_quant`` ops by their input.

Segmented float fallback: convert keeps an op with no fake quantization around
it in float, as a CPU island fenced by quantize/dequantize. Removing the fake
quants around a stretch of ``qat.bc`` therefore makes that stretch float, and
bisecting which stretch loses accuracy in convert is a matter of choosing IDs.
``bc_editor`` runs this pass from a JSON config.

IDs are the ``%N`` numbers ``get_asm`` prints for the input module: one per op
with a result, counted per function from 0 (the rule is in
``dialects/op_ids.py``). Option syntax::

    remove-fake-quant{ids=7}                 %7
    remove-fake-quant{ids=1-100,102}         every fake quant from %1 to %100
                                             (both included), and %102
    remove-fake-quant{ids="1-100, %102"}     the same, quoted: spaces and %
    remove-fake-quant{ids=3 function=head}   IDs of @head (a module with several
                                             functions must name one)

A single ID must name a ``qnt.const_fake_quant``. A range ``A-B`` needs A <= B and
both ends to exist; it takes every fake quant inside it, at least one, and leaves
the other ops in it alone. Every bad entry is reported in one error, and then the
module is left unchanged.

Before (``remove-fake-quant{ids=2}``, in ``get_asm``'s form)::

    func.func @forward(%arg0: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "qnt.const_fake_quant"(%arg0) <{bits = 8 : i64, max = [3.968750e+00],
          min = [-4.000000e+00], narrowRange = false}> : (tensor<4xf32>) ->
          tensor<4xf32>
      %1 = "hbir.sigmoid"(%0) : (tensor<4xf32>) -> tensor<4xf32>
      %2 = "qnt.const_fake_quant"(%1) <{bits = 8 : i64, max = [9.921875e-01],
          min = [-1.000000e+00], narrowRange = false}> : (tensor<4xf32>) ->
          tensor<4xf32>
      %3 = "hbir.relu"(%2) : (tensor<4xf32>) -> tensor<4xf32>
      return %3 : tensor<4xf32>
    }

After (the relu now reads the float sigmoid; printing renumbers)::

    func.func @forward(%arg0: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "qnt.const_fake_quant"(%arg0) <{bits = 8 : i64, max = [3.968750e+00],
          min = [-4.000000e+00], narrowRange = false}> : (tensor<4xf32>) ->
          tensor<4xf32>
      %1 = "hbir.sigmoid"(%0) : (tensor<4xf32>) -> tensor<4xf32>
      %2 = "hbir.relu"(%1) : (tensor<4xf32>) -> tensor<4xf32>
      return %2 : tensor<4xf32>
    }
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from hbir.dialects.op_ids import OpIdError, id_function, op_ids

# The qnt dialect is imported where it is used: it pulls in numpy, which
# `hbir-opt --help` (it imports every pass) must not.
FAKE_QUANT = "qnt.const_fake_quant"


@dataclass(frozen=True)
class IdRange:
    """One entry of an ID list, with its text as the user wrote it."""

    start: int
    end: int
    text: str
    is_range: bool


# 7, %7, 1-100, %1-%100 (spaces allowed around the dash)
_ENTRY = re.compile(r"%?(\d+)(?:\s*-\s*%?(\d+))?")


def parse_ids(entries: Sequence[int | str]) -> list[IdRange]:
    """``ids`` option values (ints, ``"A-B"``, comma lists) as ranges."""
    ranges: list[IdRange] = []
    bad: list[str] = []
    for entry in entries:
        if isinstance(entry, int) and not isinstance(entry, bool):
            if entry < 0:
                bad.append(f"{entry}: IDs are >= 0")
            else:
                ranges.append(IdRange(entry, entry, str(entry), False))
            continue
        for piece in str(entry).split(","):
            text = piece.strip()
            m = _ENTRY.fullmatch(text)
            if m is None and re.fullmatch(r"%?arg\d+", text):
                bad.append(f"{text!r}: a function argument, not an op ID")
                continue
            if m is None:
                bad.append(f"{text!r}: not an ID (7, %7) or a range (1-100)")
                continue
            start = int(m[1])
            end = start if m[2] is None else int(m[2])
            ranges.append(IdRange(start, end, text, m[2] is not None))
    if bad:
        raise OpIdError(
            "remove-fake-quant: malformed ids:\n" + "\n".join(f"  {b}" for b in bad)
        )
    if not ranges:
        raise OpIdError("remove-fake-quant: ids is empty: nothing to remove")
    return ranges


def _is_fake_quant(op: Operation) -> bool:
    from hbir.dialects.qnt import ConstFakeQuantOp

    return isinstance(op, ConstFakeQuantOp)


def _choose(r: IdRange, ops: dict[int, Operation], func: FuncOp) -> list[int] | str:
    """The fake-quant IDs ``r`` takes, or why it is bad."""
    if r.start > r.end:
        return f"reversed range: {r.start} > {r.end}"
    missing = [n for n in dict.fromkeys((r.start, r.end)) if n not in ops]
    if missing:
        last = f"its IDs end at %{len(ops) - 1}" if ops else "it has no IDs"
        names = " or ".join(f"%{n}" for n in missing)
        return f"@{func.sym_name.data} has no {names} ({last})"
    if not r.is_range:
        if not _is_fake_quant(ops[r.start]):
            return f"%{r.start} is '{ops[r.start].name}', not a {FAKE_QUANT}"
        return [r.start]
    found = [n for n in range(r.start, r.end + 1) if _is_fake_quant(ops[n])]
    return found or f"no {FAKE_QUANT} from %{r.start} to %{r.end}"


def remove_fake_quants(
    module: ModuleOp,
    ranges: Sequence[IdRange],
    function: str = "",
    source: str = "remove-fake-quant",
) -> list[int]:
    """Replace the fake quants ``ranges`` choose by their inputs; their IDs, sorted.

    Every range is checked first: bad ones raise one ``OpIdError`` that lists them
    all (prefixed by ``source``), and the module is left unchanged.
    """
    try:
        func = id_function(module, function)
    except OpIdError as e:
        raise OpIdError(f"{source}: {e}") from None
    ops = op_ids(func)
    chosen: set[int] = set()
    bad: list[str] = []
    for r in ranges:
        got = _choose(r, ops, func)
        if isinstance(got, str):
            bad.append(f"  {r.text}: {got}")
        else:
            chosen.update(got)
    if bad:
        entries = "entry" if len(bad) == 1 else "entries"
        raise OpIdError(
            f"{source}: {len(bad)} bad {entries} for @{func.sym_name.data}:\n"
            + "\n".join(bad)
        )
    for n in sorted(chosen):
        _make_float(ops[n])
        Rewriter.replace_op(ops[n], [], [ops[n].operands[0]])
    return sorted(chosen)


def _make_float(fake_quant: Operation) -> None:
    """The ops next to a removed fake quant compute in float: an op marked
    ``qnt.exact`` (its integer lowering's numbers) that reads the fake quant's
    output or writes its input, through ops that pass values on (moves, relu,
    clip, casts), loses the mark; a lookup-table op found there loses its table
    configuration (its grids were the removed fake quant's), so it evaluates its
    float function, in the edited qat.bc and as a CPU island after convert."""
    from hbir.dialects import hbir, qnt
    from hbir.passes import fixed_point as fp

    passes_on = (hbir.ReluOp, hbir.ClipOp, hbir.CastOp)
    seen: set[Operation] = set()
    todo = [use.operation for use in fake_quant.results[0].uses]
    producer = fake_quant.operands[0].owner
    if isinstance(producer, Operation):
        todo.append(producer)
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        seen.add(op)
        if isinstance(op, hbir.FloatUnaryOp) and op.lut_config() is not None:
            _drop_table(op)
            continue
        if op.attributes.pop(qnt.EXACT, None) is not None:
            continue
        if fp.keeps_grid(op) or isinstance(op, passes_on):
            todo += [use.operation for r in op.results for use in r.uses]
            todo += [v.owner for v in op.operands if isinstance(v.owner, Operation)]


def _drop_table(op: Operation) -> None:
    """Remove the grids of a table configuration; ``num_tables`` (what the torch
    module asked for) stays, so the op is again as export imported it."""
    from hbir.runtime.numerics import LutConfig

    for name in LutConfig.FIELDS[1:]:
        op.properties.pop(name, None)


@dataclass(frozen=True)
class RemoveFakeQuantPass(ModulePass):
    """Replace the chosen qnt.const_fake_quant ops (by %N ID) by their input."""

    name = "remove-fake-quant"

    ids: tuple[int | str, ...]
    function: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        remove_fake_quants(op, parse_ids(self.ids), self.function)
