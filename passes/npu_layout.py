"""npu-layout: NHWC everywhere it pays, transposes cancelled, channels aligned.

``npu-lower`` wraps every spatial op in a pair of ``npu.transpose`` (NCHW -> NHWC
in, back out). This pass

1. folds transposes of constants (weights become OHWI constants);
2. sinks each transpose below the layout-free op that uses it (rescale, eltwise,
   cast, lut, keepdim reduce, concat, slice): the op then works on NHWC directly,
   its axis / dims / concat dim / slice bounds renumbered and constant operands
   transposed to match;
3. cancels transposes that meet (``T_Q(T_P(x))`` with ``P∘Q`` the identity) and
   merges the others; a transpose that only moves size-1 dims becomes
   ``npu.reshape`` (a view);
4. records the layout and the march's channel alignment on the module
   (``npu.layout = "nhwc"``, ``npu.channel_align``): buffers are sized with the
   channel count rounded up to it (``npu.aligned_bytes``).

Before::

    %3 = npu.transpose %c {perm = array<i64: 0, 3, 1, 2>} : tensor<2x16x16x8xsi32>
        -> tensor<2x8x16x16xsi32>
    %4 = npu.rescale %3 {multiplier = array<i64: 1>, shift = array<i64: -11>} :
        tensor<2x8x16x16xsi32> -> tensor<2x8x16x16xsi32>

After::

    %4 = npu.rescale %c {multiplier = array<i64: 1>, shift = array<i64: -11>} :
        tensor<2x16x16x8xsi32> -> tensor<2x16x16x8xsi32>
    %3 = npu.transpose %4 {perm = array<i64: 0, 3, 1, 2>} : ...
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from hbir.dialects import npu
from hbir.dialects.hbir import dense_array, i64_attr, ints
from hbir.passes.march import get_npu
from hbir.passes.npu_lower import constant, erase, require_lowered, transpose


def _perm(op: npu.TransposeOp) -> tuple[int, ...]:
    return tuple(op.perm.get_values())


def _fold_constant_transpose(op: npu.TransposeOp) -> bool:
    src = op.input.owner
    if not isinstance(src, npu.ConstantOp):
        return False
    data = np.transpose(dense_array(src.value), _perm(op))
    c = constant(data, op.output.type.element_type)
    c.location = src.location
    npu.set_origin(c, npu.origin(src))
    inverse = tuple(int(i) for i in np.argsort(_perm(op)))
    npu.set_value_of(c, npu.permuted_value_of(src, inverse))
    Rewriter.insert_op(c, InsertPoint.before(op))
    op.output.replace_all_uses_with(c.output)
    erase(op)
    if not src.output.uses:
        erase(src)
    return True


def _merge(op: npu.TransposeOp, to_reshape: bool = False) -> bool:
    src = op.input.owner
    p2 = _perm(op)
    if isinstance(src, npu.TransposeOp):
        p1 = _perm(src)
        composed = tuple(p1[i] for i in p2)
        if composed == tuple(range(len(composed))):
            op.output.replace_all_uses_with(src.input)
        else:
            t = transpose(src.input, composed)
            t.location = op.location
            npu.absorb(t, op, [src])
            Rewriter.insert_op(t, InsertPoint.before(op))
            op.output.replace_all_uses_with(t.output)
        erase(op)
        if not src.output.uses:
            erase(src)
        return True
    if p2 == tuple(range(len(p2))):
        op.output.replace_all_uses_with(op.input)
        erase(op)
        return True
    shape = op.input.type.get_shape()
    moved = [p for p in p2 if shape[p] != 1]
    if to_reshape and moved == sorted(moved):  # only size-1 dims move: the same bytes
        r = npu.ReshapeOp.create(operands=[op.input], result_types=[op.output.type])
        r.location = op.location
        npu.absorb(r, op, [])
        Rewriter.insert_op(r, InsertPoint.before(op))
        op.output.replace_all_uses_with(r.output)
        erase(op)
        return True
    return False


_FLEXIBLE = (
    npu.RescaleOp,
    npu.EltwiseOp,
    npu.CastOp,
    npu.Fp16MapOp,
    npu.LutOp,
    npu.ReduceOp,
    npu.ConcatOp,
    npu.SliceOp,
)


def _sink(op: Operation) -> bool:
    """``f(T_P(x), ...) -> T_P(f'(x, ...))`` for a layout-free, rank-keeping f."""
    if not isinstance(op, _FLEXIBLE) or len(op.results) != 1:
        return False
    if isinstance(op, npu.ReduceOp) and not op.keepdim.value.data:
        return False
    perm = None
    for v in op.operands:
        owner = v.owner
        if isinstance(owner, npu.TransposeOp):
            p = _perm(owner)
            if perm is not None and p != perm:
                return False
            perm = p
        elif not isinstance(owner, npu.ConstantOp):
            return False
    if perm is None:
        return False
    rank = len(perm)
    out_t = op.results[0].type
    if len(out_t.get_shape()) != rank:
        return False
    inv = tuple(int(i) for i in np.argsort(perm))
    operands: list[SSAValue] = []
    for v in op.operands:
        owner = v.owner
        if isinstance(owner, npu.TransposeOp):
            operands.append(owner.input)
            continue
        data = dense_array(owner.value)
        if data.ndim > rank:
            return False
        data = data.reshape((1,) * (rank - data.ndim) + data.shape)
        c = constant(np.transpose(data, inv), v.type.element_type)
        c.location = owner.location
        npu.set_origin(c, npu.origin(owner))
        Rewriter.insert_op(c, InsertPoint.before(op))
        operands.append(c.output)
    props = dict(op.properties)
    if "axis" in props and isinstance(props["axis"], IntegerAttr):
        props["axis"] = i64_attr(perm[props["axis"].value.data % rank])
    if isinstance(op, npu.ReduceOp):
        props["dims"] = ints(sorted(perm[d % rank] for d in op.dims.get_values()))
    if isinstance(op, npu.ConcatOp):
        props["dim"] = i64_attr(perm[op.dim.value.data % rank])
    if isinstance(op, npu.SliceOp):
        for key in ("begin", "end", "step"):
            vals = props[key].get_values()
            new = [0] * rank
            for i in range(rank):
                new[perm[i]] = vals[i]
            props[key] = ints(new)
    shape = out_t.get_shape()
    new_t = TensorType(out_t.element_type, [shape[inv[j]] for j in range(rank)])
    new = type(op).create(
        operands=operands,
        result_types=[new_t],
        properties=props,
        attributes=dict(op.attributes),
    )
    new.location = op.location
    npu.set_value_of(new, npu.permuted_value_of(op, perm))  # op = T_perm(new)
    Rewriter.insert_op(new, InsertPoint.before(op))
    back = transpose(new.results[0], perm)
    back.location = op.location
    npu.absorb(back, op, [])
    Rewriter.insert_op(back, InsertPoint.before(op))
    op.results[0].replace_all_uses_with(back.output)
    olds = dict.fromkeys(v.owner for v in op.operands)  # once: cat([y, y])
    erase(op)
    for o in olds:
        if isinstance(o, Operation) and not any(r.uses for r in o.results):
            erase(o)
    return True


def layout_function(f: func.FuncOp) -> None:
    changed = True
    while changed:
        changed = False
        for op in list(f.body.block.ops):
            if op.parent is None:
                continue
            if isinstance(op, npu.TransposeOp):
                if _fold_constant_transpose(op) or _merge(op):
                    changed = True
            elif _sink(op):
                changed = True
    for op in list(f.body.block.ops):  # what is left: views where possible
        if isinstance(op, npu.TransposeOp) and op.parent is not None:
            _merge(op, to_reshape=True)
    for op in reversed(list(f.body.block.ops)):
        if isinstance(op, npu.TransposeOp | npu.ConstantOp) and not op.output.uses:
            erase(op)


@dataclass(frozen=True)
class NpuLayoutPass(ModulePass):
    """NHWC layout: sink and cancel transposes, fold them into constants, align."""

    name = "npu-layout"

    march: str = "nash-e"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name)
        for f in op.body.block.ops:
            if isinstance(f, func.FuncOp):
                layout_function(f)
        op.attributes[npu.ATTR_LAYOUT] = StringAttr("nhwc")
        op.attributes[npu.ATTR_CHANNEL_ALIGN] = i64_attr(
            get_npu(self.march).channel_align
        )
