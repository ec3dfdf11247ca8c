"""What the input-adaptation passes share: finding a function and one of its named
inputs or outputs, replacing an input by new ones, and their errors.

Not a pass. The passes ``insert-transpose``, ``insert-image-preprocess``,
``insert-image-convert`` and ``remove-io-op`` (and ``hbir/inputs.py``, which runs
them for ``Argument.insert_*`` / ``Function.remove_io_op``) edit a function's
signature through these helpers, so names and attributes stay consistent:
every argument keeps its name in an ``hbir.name`` attribute, so positional
default names (``_input_0``, ...) do not shift when an input becomes two.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, BlockArgument

from hbir.errors import HbirError

ATTR_NAME = "hbir.name"  # hbir/module.py's ATTR_ARG_NAME
ATTR_MARCH = "hbir.march"  # set by convert


class InputEditError(HbirError):
    """An input adaptation that does not apply: wrong function, input, order or
    shape. The message names the function, the input and the rule."""


def find_function(module: ModuleOp, name: str, what: str) -> FuncOp:
    """The function ``name``, or the only one when ``name`` is empty."""
    funcs = [op for op in module.body.block.ops if isinstance(op, FuncOp)]
    names = [f.sym_name.data for f in funcs]
    if not name:
        if len(funcs) != 1:
            raise InputEditError(
                f"{what}: the module has functions {names}; name one with "
                f"function=<name>"
            )
        return funcs[0]
    for f in funcs:
        if f.sym_name.data == name:
            return f
    raise InputEditError(f"{what}: no function @{name}; the module has {names}")


def converted(module: ModuleOp) -> bool:
    return ATTR_MARCH in module.attributes


def _names(attrs: ArrayAttr | None, count: int, prefix: str) -> list[str]:
    names = []
    for i in range(count):
        d = attrs.data[i] if attrs is not None else None
        name = d.data.get(ATTR_NAME) if isinstance(d, DictionaryAttr) else None
        names.append(name.data if isinstance(name, StringAttr) else f"_{prefix}_{i}")
    return names


def input_names(func: FuncOp) -> list[str]:
    return _names(func.arg_attrs, len(func.args), "input")


def output_names(func: FuncOp) -> list[str]:
    return _names(func.res_attrs, len(func.function_type.outputs.data), "output")


def _pin(attrs: ArrayAttr | None, names: list[str]) -> list[dict[str, Attribute]]:
    """Per-argument attribute dicts with every name explicit."""
    dicts = []
    for i, name in enumerate(names):
        d = attrs.data[i] if attrs is not None else None
        entries = dict(d.data) if isinstance(d, DictionaryAttr) else {}
        entries[ATTR_NAME] = StringAttr(name)
        dicts.append(entries)
    return dicts


def find_input(func: FuncOp, name: str, what: str) -> int:
    names = input_names(func)
    if name not in names:
        raise InputEditError(
            f"{what}: function @{func.sym_name.data} has no input '{name}'; its "
            f"inputs are {names}"
        )
    return names.index(name)


def input_to_edit(
    module: ModuleOp, function: str, name: str, what: str
) -> tuple[FuncOp, int, str]:
    """(the function, the input's index, ``where`` for messages) of an input an
    edit inserts nodes before; a converted model is refused (edit qat.bc)."""
    func = find_function(module, function, what)
    where = f"{what}: function @{func.sym_name.data}, input '{name}'"
    index = find_input(func, name, what)
    if converted(module):
        raise InputEditError(
            f"{where}: the model is already converted; insert input nodes into "
            f"qat.bc, then convert"
        )
    return func, index, where


def replace_input(
    func: FuncOp, index: int, types: Sequence[Attribute], names: Sequence[str]
) -> list[BlockArgument]:
    """Insert new arguments in place of input ``index``; the caller rewires the old
    argument's uses to what it builds from them, then calls ``drop_input``."""
    block = func.body.block
    attrs = _pin(func.arg_attrs, input_names(func))
    old, old_name, old_hint = attrs[index], input_names(func)[index], func.args[index]
    old_hint = old_hint.name_hint
    new = [block.insert_arg(t, index + k) for k, t in enumerate(types)]
    for arg, name in zip(new, names, strict=True):
        hint = old_hint if name == old_name else name
        arg.name_hint = hint if hint and hint.isidentifier() else None
    fresh = [{**old, ATTR_NAME: StringAttr(n)} for n in names]
    attrs[index:index] = fresh
    func.arg_attrs = ArrayAttr([DictionaryAttr(d) for d in attrs])
    return new


def drop_input(func: FuncOp, arg: BlockArgument) -> None:
    """Erase an input that has no uses left (after ``replace_input``)."""
    attrs = list(func.arg_attrs.data) if func.arg_attrs is not None else []
    index = arg.index
    func.body.block.erase_arg(arg)
    if attrs:
        del attrs[index]
        func.arg_attrs = ArrayAttr(attrs)
    func.update_function_type()


def set_arg_attrs(func: FuncOp, index: int, extra: dict[str, Attribute]) -> None:
    attrs = _pin(func.arg_attrs, input_names(func))
    attrs[index].update(extra)
    func.arg_attrs = ArrayAttr([DictionaryAttr(d) for d in attrs])


def set_res_attrs(func: FuncOp, index: int, extra: dict[str, Attribute]) -> None:
    attrs = _pin(func.res_attrs, output_names(func))
    attrs[index].update(extra)
    func.res_attrs = ArrayAttr([DictionaryAttr(d) for d in attrs])


def swap_input(func: FuncOp, index: int, types, names, build) -> list[BlockArgument]:
    """Replace input ``index`` by new inputs of ``types`` named ``names``;
    ``build(new_args)`` returns the ops that compute the old input from them (the
    last op's result takes the old input's uses). Returns the new inputs."""
    new = replace_input(func, index, types, names)
    old = func.args[index + len(new)]
    ops = build(new)
    block = func.body.block
    first = block.first_op
    for op in ops:
        block.insert_op_before(op, first)
    old.replace_all_uses_with(ops[-1].results[0])
    drop_input(func, old)
    return new
