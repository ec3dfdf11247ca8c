"""remove-io-op: remove quantize / dequantize / layout ops at a model's boundary.

The reference toolchain's ``Function.remove_io_op(op_types, op_names)``. Types, as
the reference names them::

    Quantize    qnt.quantize         Transpose  hbir.transpose
    Dequantize  qnt.dequantize       Cast       hbir.cast
    Reshape     hbir.reshape         Softmax    hbir.softmax

An op is removable when it has one operand and one result and sits next to a
model input whose value it alone uses, or next to a model output it alone
produces (its result used only by the return). Removal repeats until nothing more
is removable, so a chain at an input or output goes from the boundary inwards; an
op behind one that is not removed cannot be (no skipping). ``op_names`` picks ops
by name instead of type (and wins over ``op_types``): ``<io name>_<Type>_<k>``,
the ``k``-th op from that input or output (``removable_ops`` lists them).
Quantize and Dequantize only after convert. A removed quantize leaves its grid on
the input (``hbir.scales``, ``hbir.zeros``, ``hbir.axis``, ``hbir.rounding``), a
removed dequantize
on the output, so the user quantizes the inputs and dequantizes the outputs
themselves (``Argument.quant_info``).

Before (``remove-io-op{op_types=Quantize,Dequantize}``)::

    func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
      %q = qnt.quantize %x {scales = array<f32: 0.5>, zeros = array<i64: 0>} :
          tensor<4xf32> -> tensor<4xsi8>
      %r = hbir.relu %q : tensor<4xsi8>
      %d = qnt.dequantize %r {scales = array<f32: 0.5>, zeros = array<i64: 0>} :
          tensor<4xsi8> -> tensor<4xf32>
      func.return %d : tensor<4xf32>

After::

    func.func @forward(%x: tensor<4xsi8> {hbir.name = "_input_0", hbir.scales =
        array<f32: 0.5>, hbir.zeros = array<i64: 0>}) -> (tensor<4xsi8>
        {hbir.name = "_output_0", hbir.scales = array<f32: 0.5>, hbir.zeros = ...}) {
      %r = hbir.relu %x : tensor<4xsi8>
      func.return %r : tensor<4xsi8>
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from hbir.passes import function_io as io

TYPES = {
    "Quantize": "qnt.quantize",
    "Dequantize": "qnt.dequantize",
    "Transpose": "hbir.transpose",
    "Cast": "hbir.cast",
    "Reshape": "hbir.reshape",
    "Softmax": "hbir.softmax",
}
_TYPE_OF = {v: k for k, v in TYPES.items()}
_QUANT = ("Quantize", "Dequantize")


def _one_in_one_out(op: Operation) -> bool:
    return len(op.operands) == 1 and len(op.results) == 1 and op.name in _TYPE_OF


def _input_chain(func: FuncOp, arg: SSAValue) -> list[Operation]:
    chain, value = [], arg
    while value.has_one_use():
        user = value.get_user_of_unique_use()
        if isinstance(user, ReturnOp) or not _one_in_one_out(user):
            break
        chain.append(user)
        value = user.results[0]
    return chain


def _output_chain(func: FuncOp, value: SSAValue) -> list[Operation]:
    chain = []
    while value.has_one_use() and isinstance(value.owner, Operation):
        op = value.owner
        if not _one_in_one_out(op):
            break
        chain.append(op)
        value = op.operands[0]
    return chain


def _chains(func: FuncOp) -> list[tuple[str, list[Operation]]]:
    """(input or output name, its chain of candidate ops from the boundary in)."""
    ret = func.body.block.last_op
    inputs = zip(io.input_names(func), func.args, strict=True)
    outputs = zip(io.output_names(func), ret.operands, strict=True)
    ends = [(n, _input_chain(func, a)) for n, a in inputs]
    return ends + [(n, _output_chain(func, v)) for n, v in outputs]


def removable_ops(func: FuncOp) -> dict[str, Operation]:
    """``<io name>_<Type>_<k>`` -> op, for every op of a supported type in the
    single-use chain at each input and output (what could be removed, in order)."""
    named: dict[str, Operation] = {}
    ends = _chains(func)
    # an op in the chains of two ends is named from the nearer one
    found = sorted(
        (
            (k, i, end, op)
            for i, (end, chain) in enumerate(ends)
            for k, op in enumerate(chain)
        ),
        key=lambda f: (f[0], f[1]),
    )
    seen: set[int] = set()
    for k, _, end, op in found:
        if id(op) not in seen:
            seen.add(id(op))
            named[f"{end}_{_TYPE_OF[op.name]}_{k}"] = op
    return named


def _grid(op: Operation) -> dict:
    attrs = {"hbir.scales": op.scales, "hbir.zeros": op.zeros}
    if op.name == "qnt.quantize":
        attrs["hbir.rounding"] = op.rounding
    if op.axis is not None:
        attrs["hbir.axis"] = op.axis
    return attrs


def remove_io_op(
    module: ModuleOp, function: str, op_types: list[str], op_names: list[str]
) -> list[str]:
    """Remove the chosen boundary ops; returns their names. Refuses, changing
    nothing, an unknown name or type, a skip, Quantize/Dequantize before convert,
    and a request that removes nothing."""
    what = "remove_io_op"
    func = io.find_function(module, function, what)
    where = f"{what}: function @{func.sym_name.data}"
    unknown = [t for t in op_types if t not in TYPES]
    if unknown:
        raise io.InputEditError(
            f"{where}: unknown op types {unknown}; supported: {list(TYPES)}"
        )
    if not op_types and not op_names:
        raise io.InputEditError(f"{where}: give op_types or op_names")
    named = removable_ops(func)
    if op_names:
        missing = [n for n in op_names if n not in named]
        if missing:
            raise io.InputEditError(
                f"{where}: {missing} are not ops at an input or output; the "
                f"candidates are {sorted(named)}"
            )
        chosen = {id(named[n]) for n in op_names}
        types = {_TYPE_OF[named[n].name] for n in op_names}
        # no skipping: each chosen op needs every op before it, from one end, too
        reachable = set()
        for _, chain in _chains(func):
            for op in chain:
                if id(op) not in chosen:
                    break
                reachable.add(id(op))
        skipped = [n for n in op_names if id(named[n]) not in reachable]
        if skipped:
            raise io.InputEditError(
                f"{where}: {skipped} cannot be removed: an op is removable only "
                f"next to an input or output, after the ops before it (no skipping)"
            )
    else:
        chosen, types = None, set(op_types)
    early = sorted(types & set(_QUANT))
    if early and not io.converted(module):
        raise io.InputEditError(
            f"{where}: {early} can only be removed after convert (qat.bc has no "
            f"integer boundary); convert first, then remove_io_op"
        )

    def wanted(op: Operation) -> bool:
        if chosen is not None:
            return id(op) in chosen
        return _TYPE_OF[op.name] in types

    removed: list[str] = []
    names_of = {id(op): n for n, op in named.items()}
    changed = True
    while changed:
        changed = False
        for index, (name, arg) in enumerate(
            zip(io.input_names(func), func.args, strict=True)
        ):
            chain = _input_chain(func, arg)
            if chain and wanted(chain[0]):
                op = chain[0]
                (new,) = io.replace_input(func, index, [op.results[0].type], [name])
                op.results[0].replace_all_uses_with(new)
                removed.append(names_of.get(id(op), op.name))
                op.detach()
                op.erase()
                io.drop_input(func, arg)
                if op.name == "qnt.quantize":
                    io.set_arg_attrs(func, index, _grid(op))
                changed = True
        ret = func.body.block.last_op
        for index, value in enumerate(ret.operands):
            chain = _output_chain(func, value)
            if chain and wanted(chain[0]):
                op = chain[0]
                if op.name == "qnt.dequantize":
                    io.set_res_attrs(func, index, _grid(op))
                ret.operands[index] = op.operands[0]
                removed.append(names_of.get(id(op), op.name))
                op.detach()
                op.erase()
                changed = True
    if not removed:
        raise io.InputEditError(
            f"{where}: no {sorted(types)} op is removable at an input or output "
            f"(candidates: {sorted(named)})"
        )
    func.update_function_type()
    return removed


@dataclass(frozen=True)
class RemoveIoOpPass(ModulePass):
    """Remove quantize/dequantize/layout ops at inputs and outputs (remove_io_op)."""

    name = "remove-io-op"

    op_types: tuple[str, ...] = ()
    op_names: tuple[str, ...] = ()
    function: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        remove_io_op(op, self.function, list(self.op_types), list(self.op_names))
