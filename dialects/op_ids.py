"""Op IDs: the ``%N`` numbers that ``get_asm`` prints.

``bc_editor``, the ``remove-fake-quant`` pass and the reports name ops by these
numbers, so they are computed here, once, and ``get_asm`` prints with them
(``hbir/asm.py``). The rule is MLIR's, as the reference toolchain's dumps show it:

* Numbers count per function from 0, one per op that has results, in program
  order: ``%0`` is the first op with a result. An op's ID is its number.
* An op with several results prints them as a group: ``%5:2 = "hbir.split"...``
  is op 5, and its results are used as ``%5#0`` and ``%5#1``.
* Block arguments print as ``%arg0``, ``%arg1``, ... and are never IDs: a
  function's inputs are named by ``_input_N``, not by number.
* Names from hand-written IR (``%x``) are not kept, as MLIR keeps none: every op
  with a result has an ID. Ops without results (``func.return``) have none.
* The ops of a nested block are numbered where that block starts; the body of an
  op isolated from above inside a function (a nested function) is numbered on its
  own by the printer, and its ops get no ID here.

IDs describe one printing of one module: removing an op renumbers everything
printed after it. ``hbir-opt`` prints xDSL's own form, whose numbers count the
arguments too; its ``remove-fake-quant{ids=...}`` still means these IDs.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, Region
from xdsl.traits import IsolatedFromAbove

from hbir.errors import HbirError


class OpIdError(HbirError):
    """Op IDs that do not name what they should, or a module without one scope."""


def numbered_ops(region: Region) -> list[Operation]:
    """The ops of ``region`` that have results, in the order they are numbered."""
    found: list[Operation] = []

    def visit(region: Region) -> None:
        for block in region.blocks:
            for op in block.ops:
                if op.results:
                    found.append(op)
                if not op.has_trait(IsolatedFromAbove):
                    for inner in op.regions:
                        visit(inner)

    visit(region)
    return found


def op_ids(func: FuncOp) -> dict[int, Operation]:
    """ID -> op for every op of ``func`` that has a result, as ``get_asm`` prints."""
    return dict(enumerate(numbered_ops(func.body)))


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
