"""Op IDs: the ``%N`` numbers that ``get_asm`` prints.

``bc_editor``, the ``remove-fake-quant`` pass and the reports name ops by these
numbers, so they are computed here, once, by the rule xDSL's printer follows:

* Numbers count per function from 0: the function's arguments first (``%0`` is
  ``_input_0``), then the results of every op in program order. The arguments of
  a nested block are numbered where that block starts.
* A value with a name hint prints as its name (``%x``, ``%x_1``) and takes no
  number, so names never shift the numbers of other values. An op whose first
  result is named has no ID and cannot be chosen by number; exported models carry
  no names, so there every op with a result has an ID.
* An op's ID is the number of its first result: ``%5, %6 = hbir.split ...`` is op
  5, and 6 names its second result. Ops without results (``func.return``) have no
  ID.
* The body of an op isolated from above inside a function (a nested function) is
  numbered on its own by the printer; its values get no ID here.

IDs describe one printing of one module: removing an op renumbers everything
printed after it.
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, OpResult, Region, SSAValue
from xdsl.traits import IsolatedFromAbove

from hbir.errors import HbirError


class OpIdError(HbirError):
    """Op IDs that do not name what they should, or a module without one scope."""


def value_ids(func: FuncOp) -> dict[int, SSAValue]:
    """Number -> value, exactly as ``get_asm`` numbers the values of ``func``."""
    numbered: list[SSAValue] = []

    def number(values: Iterable[SSAValue]) -> None:
        numbered.extend(v for v in values if not v.name_hint)

    def visit(region: Region) -> None:
        for block in region.blocks:
            number(block.args)
            for op in block.ops:
                # The printer names an op's results before it enters the op's
                # regions, and gives an isolated op's body a scope of its own.
                number(op.results)
                if not op.has_trait(IsolatedFromAbove):
                    for inner in op.regions:
                        visit(inner)

    visit(func.body)
    return dict(enumerate(numbered))


def op_ids(func: FuncOp) -> dict[int, Operation]:
    """ID -> op for every op of ``func`` whose first result prints as a number."""
    return {
        n: v.owner
        for n, v in value_ids(func).items()
        if isinstance(v, OpResult) and v.index == 0
    }


def id_function(module: ModuleOp, name: str = "") -> FuncOp:
    """The function whose IDs are meant: ``name``, or the module's only function."""
    funcs = [op for op in module.body.block.ops if isinstance(op, FuncOp)]
    if not funcs:
        raise OpIdError("the module has no function, so no op IDs")
    names = ", ".join(f"@{f.sym_name.data}" for f in funcs)
    if name:
        for f in funcs:
            if f.sym_name.data == name:
                return f
        raise OpIdError(f"no function @{name} (the module has {names})")
    if len(funcs) != 1:
        raise OpIdError(
            f"IDs are numbered per function and the module has {len(funcs)} "
            f"({names}): choose one with `function`"
        )
    return funcs[0]
