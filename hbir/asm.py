"""The reference text form: what ``get_asm()`` prints by default.

The reference toolchain's dumps are MLIR's own printing of unregistered ops, and
its users read them as such::

    module attributes {hbir.fuse_requantize = true, hbir.legacy_round = false} {
      func.func @forward(%arg0: tensor<1x3x4x4xf32>) -> tensor<1x4x4x4xf32> {
        %0 = "qnt.const_fake_quant"(%arg0) <{bits = 8 : i64, max = [2.29...],
            min = [-2.31...], narrowRange = false}> : (tensor<...>) -> tensor<...>
        %1 = "hbir.constant"() <{value = dense<...> : tensor<4x3x3x3xf32>}> : ...
        ...
        return %7 : tensor<1x4x4x4xf32>
      }
    }

* ``module``, ``func.func`` and ``return`` in their custom forms, every other op
  in generic form with its properties in ``<{...}>``, sorted by name as MLIR
  sorts them; attribute dictionaries sorted too.
* Block arguments ``%arg0...``; op results numbered from ``%0`` per function, one
  number per op (``%5:2`` for two results, used as ``%5#1``), so the number after
  ``%`` is the op ID (``dialects/op_ids.py`` is the rule, used here as is).
* ``i64`` and ``f64`` arrays (``min``, ``max``, ``stride``, ...) as lists,
  ``[-1.280000e+01]``, the way the reference prints them; the parser turns such a
  list back into the array the op holds (``diagnostics.TrackingParser``).

The text is valid MLIR (``mlir-opt``/``iree-opt --allow-unregistered-dialect``
parse it) and parses back here to the same module. ``get_asm(pretty=True)`` gives
the custom forms ``hbir-opt`` prints.
"""

from __future__ import annotations

import functools
import io
import math

from xdsl.dialects.builtin import (
    DenseArrayBase,
    DictionaryAttr,
    Float64Type,
    ModuleOp,
    NameLoc,
    NoneAttr,
    UnitAttr,
    UnknownLoc,
    f64,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Operation, Region, SSAValue, TypeAttribute
from xdsl.traits import IsolatedFromAbove

from hbir.dialects.op_ids import numbered_ops
from hbir.files import HbirPrinter


def _scope_names(regions: list[Region]) -> dict[SSAValue, str]:
    """The names of the values defined directly in ``regions`` (one scope)."""
    names: dict[SSAValue, str] = {}
    args = (arg for region in regions for b in _blocks(region) for arg in b.args)
    for i, arg in enumerate(args):
        names[arg] = f"arg{i}"
    ops = (op for region in regions for op in numbered_ops(region))
    for n, op in enumerate(ops):
        if len(op.results) == 1:
            names[op.results[0]] = str(n)
        else:
            for i, r in enumerate(op.results):
                names[r] = f"{n}#{i}"
    return names


def _blocks(region: Region):
    """Every block of ``region`` and of the regions nested in it (one scope)."""
    for block in region.blocks:
        yield block
        for op in block.ops:
            if not op.has_trait(IsolatedFromAbove):
                for inner in op.regions:
                    yield from _blocks(inner)


class ReferencePrinter(HbirPrinter):
    """``HbirPrinter`` writing the reference toolchain's form (see the module)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._scopes: list[dict[SSAValue, str]] = []

    # ---- names
    def _name(self, value: SSAValue) -> str | None:
        for names in reversed(self._scopes):
            if value in names:
                return names[value]
        return None

    def print_ssa_value(self, value: SSAValue) -> str:
        name = self._name(value)
        if name is None:
            return super().print_ssa_value(value)
        self.print_string(f"%{name}")
        return name

    def _print_results(self, op: Operation) -> None:
        if len(op.results) > 1:
            # The group is printed as its number, the uses as number#index.
            name = self._name(op.results[0]) or ""
            if "#" in name:
                self.print_string(f"%{name.split('#')[0]}:{len(op.results)} = ")
                return
        super()._print_results(op)

    def print_attribute(self, attribute: Attribute) -> None:
        # MLIR elides a name location's unknown child: `loc("conv")`.
        if isinstance(attribute, NameLoc) and isinstance(
            attribute.location, UnknownLoc
        ):
            attribute = NameLoc(attribute.desc, NoneAttr())
        if isinstance(attribute, DictionaryAttr):  # sorted, as MLIR keeps them
            self._print_sorted_dict(attribute.data)
            return
        if isinstance(attribute, TypeAttribute):  # printed once per process
            self.print_string(_type_text(attribute))
            return
        super().print_attribute(attribute)

    # ---- ops
    def print_op(self, op: Operation) -> None:
        isolated = op.has_trait(IsolatedFromAbove)
        if isolated:
            self._scopes.append(_scope_names(list(op.regions)))
        try:
            if isinstance(op, ModuleOp):
                self._print_module(op)
            elif isinstance(op, FuncOp):
                super().print_op(op)
            elif isinstance(op, ReturnOp) and isinstance(op.parent_op(), FuncOp):
                self.print_string("return")
                op.print(self)
                self._print_location(op)
            else:
                self._print_generic(op)
        finally:
            if isolated:
                self._scopes.pop()

    def _print_location(self, op: Operation) -> None:
        if self.print_debuginfo:
            self.print_string(" ")
            self.print_attribute(op.location)

    def _print_module(self, op: ModuleOp) -> None:
        self.print_string("module")
        if op.sym_name is not None:
            self.print_string(" ")
            self.print_symbol_name(op.sym_name.data)
        self.print_op_attributes(
            dict(sorted(op.attributes.items())), print_keyword=True
        )
        if not op.body.block.ops:
            self.print_string(" {\n}")
        else:
            self.print_string(" ")
            self.print_region(op.body)
        self._print_location(op)

    def _print_generic(self, op: Operation) -> None:
        self._print_results(op)
        self.print_string(f'"{op.name}"')
        self.print_operands(op.operands)
        self.print_successors(op.successors)
        if op.properties:
            self.print_string(" <")
            self._print_sorted_dict(op.properties, lists=True)
            self.print_string(">")
        self.print_regions(op.regions)
        if op.attributes:
            self.print_string(" ")
            self._print_sorted_dict(op.attributes)
        self.print_string(" : ")
        self.print_operation_type(op)  # and the location, with debug info

    def _print_sorted_dict(
        self, attrs: dict[str, Attribute], lists: bool = False
    ) -> None:
        """``{a = ..., b = ...}``; with ``lists``, i64/f64 arrays as lists (only
        for properties: the parser turns those back into arrays)."""
        with self.in_braces():
            self.print_list(
                sorted(attrs.items()), lambda entry: self._print_entry(*entry, lists)
            )

    def _print_entry(self, name: str, value: Attribute, lists: bool) -> None:
        self.print_identifier_or_string_literal(name)
        if isinstance(value, UnitAttr):
            return
        self.print_string(" = ")
        if lists and isinstance(value, DenseArrayBase) and _prints_as_list(value):
            self._print_list(value)
        else:
            self.print_attribute(value)

    def _print_list(self, value: DenseArrayBase) -> None:
        with self.in_square_brackets():
            if isinstance(value.elt_type, Float64Type):
                self.print_list(value.get_values(), lambda v: self.print_float(v, f64))
            else:
                self.print_list(value.get_values(), lambda v: self.print_int(v))


@functools.lru_cache(maxsize=4096)
def _type_text(t: TypeAttribute) -> str:
    """The text of type ``t``. A model prints the same few tensor types at every
    op (operands and results), and xDSL's printer takes ~0.3 ms per type: the
    emitter prints every CPU island of a model.hbm this way (``hbir/hbm/emit.py``)."""
    stream = io.StringIO()
    HbirPrinter.print_attribute(ReferencePrinter(stream=stream), t)
    return stream.getvalue()


def _prints_as_list(value: DenseArrayBase) -> bool:
    """An i64 or finite f64 array: its elements print untyped in a list and parse
    back exactly (a non-finite float prints as a hex integer)."""
    if value.elt_type == i64:
        return True
    return value.elt_type == f64 and all(map(math.isfinite, value.get_values()))


def print_reference(module: ModuleOp, debuginfo: bool = False) -> str:
    """``module`` in the reference form (see the module docstring)."""
    stream = io.StringIO()
    ReferencePrinter(stream=stream, print_debuginfo=debuginfo).print_op(module)
    stream.write("\n")
    return stream.getvalue()
