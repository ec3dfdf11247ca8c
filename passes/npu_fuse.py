"""npu-fuse: requantization, bias, relu / clip and widening casts into the op
that produces them (the NPU's post-process), exactly.

Run after ``npu-layout`` (the ops meet once the transposes between them are
gone). Each fusion keeps every intermediate saturation of the unfused chain, so
the numbers do not change (``dialects/npu.py``, ``PostProcessOp``):

* ``npu.rescale`` by ``1 / 2**-k`` (an exact left shift, si32 -> si32) after a
  conv / conv_transpose / gemm -> its ``pre_shift = k``;
* ``npu.eltwise "add"`` of an si32 per-channel constant after such an op -> its
  ``bias`` operand (with ``pre_shift`` present, 0 if there was no shift: the bias
  is added after the accumulator saturated, as in the unfused chain);
* the ``npu.rescale`` that follows any compute op -> its ``multiplier`` /
  ``shift`` / ``clip`` (``acc_bits`` keeps the width the op's result had);
* an identity ``npu.rescale`` with a clip (a folded relu / clip) after an op that
  already requantizes -> the intersection of the clips;
* the two ``npu.rescale`` into si32 in front of an ``npu.eltwise`` ->
  ``in_multiplier`` / ``in_shift`` (an operand without one gets the exact
  identity ``2**30 / 2**30``);
* a widening ``npu.cast`` in front of an eltwise or a reduce -> dropped (they
  compute in int64 anyway).

A value with more than one use is never fused into its producer.

Before::

    %c = npu.conv %x, %w {...} : (...) -> tensor<2x16x16x8xsi32>
    %s = npu.rescale %c {multiplier = array<i64: 1>, shift = array<i64: -11>} : ...
        -> tensor<2x16x16x8xsi32>
    %b = npu.eltwise %s, %bias {kind = "add"} : (..., tensor<1x1x1x8xsi32>) ->
        tensor<2x16x16x8xsi32>
    %y = npu.rescale %b {multiplier = array<i64: ...>, shift = array<i64: ...>, axis
        = 3 : i64, clip = array<i64: 0, 127>} : ... -> tensor<2x16x16x8xsi8>

After::

    %y = npu.conv %x, %w bias(%b1) {..., acc_bits = 32 : i64, pre_shift = 11 : i64,
        multiplier = array<i64: ...>, shift = array<i64: ...>, clip = array<i64: 0,
        127>} : (...) -> tensor<2x16x16x8xsi8>
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerType, ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from hbir.dialects import npu
from hbir.dialects.hbir import dense_array, i64_attr, ints, shape_of
from hbir.passes.npu_lower import constant, erase, require_lowered

_GEMMS = (npu.ConvOp, npu.ConvTransposeOp, npu.GemmOp)
_IDENTITY = (1 << 30, 30)


def _width(v: SSAValue) -> int:
    t = v.type.element_type
    return t.width.data if isinstance(t, IntegerType) else 0


def _single_user(v: SSAValue) -> Operation | None:
    uses = list(v.uses)
    return uses[0].operation if len(uses) == 1 else None


def _vals(attr) -> tuple[int, ...]:
    return () if attr is None else tuple(attr.get_values())


def _rebuild(op: Operation, *, operands=None, result_type=None, **props) -> Operation:
    """A copy of ``op`` with other operands / result type / properties."""
    p = dict(op.properties)
    for k, v in props.items():
        if v is None:
            p.pop(k, None)
        else:
            p[k] = v
    new = type(op).create(
        operands=list(op.operands) if operands is None else operands,
        result_types=[result_type or op.results[0].type],
        properties=p,
        attributes=dict(op.attributes),
    )
    new.location = op.location
    return new


def _replace(old_ops: list[Operation], new: Operation, at: Operation) -> None:
    """``new`` goes before ``at`` and takes over the last old op's result (and
    computes what all of them did: ``npu.absorb``)."""
    npu.absorb(new, old_ops[-1], old_ops)
    Rewriter.insert_op(new, InsertPoint.before(at))
    old_ops[-1].results[0].replace_all_uses_with(new.results[0])
    for o in reversed(old_ops):
        if o.parent is not None and not any(r.uses for r in o.results):
            erase(o)


def _per_tensor(r: npu.RescaleOp) -> bool:
    return len(_vals(r.multiplier)) == 1


def _pre_shift(r: npu.RescaleOp) -> bool:
    p = r.input.owner
    if not isinstance(p, _GEMMS) or _single_user(p.output) is not r:
        return False
    if p.pre_shift is not None or p.multiplier is not None or p.bias is not None:
        return False
    m, s = _vals(r.multiplier), _vals(r.shift)
    if m != (1,) or not -31 <= s[0] <= 0 or r.clip is not None:
        return False
    if _width(p.output) != 32 or _width(r.output) != 32:
        return False
    new = _rebuild(p, pre_shift=i64_attr(-s[0]), rounding=r.rounding)
    _replace([p, r], new, r)
    return True


def _bias(e: npu.EltwiseOp) -> bool:
    if e.kind.data != "add" or e.multiplier is not None or e.in_multiplier is not None:
        return False
    for mine, other in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
        p = mine.owner
        c = other.owner
        if not isinstance(p, _GEMMS) or not isinstance(c, npu.ConstantOp):
            continue
        if _single_user(p.output) is not e or p.multiplier is not None:
            continue
        if p.bias is not None or _width(p.output) != 32 or _width(e.output) != 32:
            continue
        if _width(c.output) != 32 or shape_of(e.output) != shape_of(p.output):
            continue
        channels = shape_of(p.output)[-1]
        data = dense_array(c.value)
        if data.size != channels or (data.ndim and data.shape[-1] != channels):
            continue
        b = constant(
            data.reshape(channels).astype(np.int64), c.output.type.element_type
        )
        b.location = c.location
        npu.set_origin(b, npu.origin(c))
        Rewriter.insert_op(b, InsertPoint.before(e))
        pre = p.pre_shift if p.pre_shift is not None else i64_attr(0)
        new = _rebuild(p, operands=[p.input, p.weight, b.output], pre_shift=pre)
        _replace([p, e], new, e)
        if not c.output.uses:
            erase(c)
        return True
    return False


def _output(r: npu.RescaleOp) -> bool:
    p = r.input.owner
    if not isinstance(p, npu.PostProcessOp) or isinstance(p, npu.RescaleOp):
        return False
    if _single_user(p.results[0]) is not r or p.multiplier is not None:
        return False
    if p.clip is not None:  # an unfused clip before the requantization
        return False
    uses_rounding = (
        p.pre_shift is not None
        or getattr(p, "in_multiplier", None) is not None
        or (isinstance(p, npu.ReduceOp) and p.kind.data == "mean")
    )
    if uses_rounding and p.rounding.data != r.rounding.data:
        return False
    rank = len(shape_of(r.output))
    props = {
        "acc_bits": i64_attr(_width(p.results[0])),
        "multiplier": r.multiplier,
        "shift": r.shift,
        "clip": r.clip,
        "rounding": r.rounding,
    }
    if not _per_tensor(r):
        axis = r.axis.value.data % rank
        if isinstance(p, npu.EltwiseOp | npu.ReduceOp):
            props["axis"] = i64_attr(axis)
        elif axis != rank - 1:
            return False
    new = _rebuild(p, result_type=r.output.type, **props)
    _replace([p, r], new, r)
    return True


def _clip(r: npu.RescaleOp) -> bool:
    p = r.input.owner
    if not isinstance(p, npu.PostProcessOp) or p.multiplier is None:
        return False
    if _single_user(p.results[0]) is not r or r.input.type != r.output.type:
        return False
    m, s = _vals(r.multiplier), _vals(r.shift)
    if len(m) != 1 or not 0 <= s[0] <= 30 or m[0] != 1 << s[0]:
        return False
    w = _width(r.output)
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    a = _vals(p.clip) or (lo, hi)
    b = _vals(r.clip) or (lo, hi)
    c = (max(a[0], b[0]), min(a[1], b[1]))
    if c[0] > c[1]:
        return False
    new = _rebuild(p, clip=ints(c))
    _replace([p, r], new, r)
    return True


def _inputs(e: npu.EltwiseOp) -> bool:
    if (
        e.in_multiplier is not None
        or e.multiplier is not None
        or _width(e.output) != 32
    ):
        return False
    operands, ms, ss, fused, rounding = [], [], [], [], set()
    for v in (e.lhs, e.rhs):
        r = v.owner
        if (
            isinstance(r, npu.RescaleOp)
            and _single_user(v) is e
            and _per_tensor(r)
            and r.clip is None
            and _width(r.output) == 32
            and _width(r.input) <= 32
        ):
            operands.append(r.input)
            ms.append(_vals(r.multiplier)[0])
            ss.append(_vals(r.shift)[0])
            fused.append(r)
            rounding.add(r.rounding.data)
        elif _width(v) and _width(v) <= 32:
            operands.append(v)
            ms.append(_IDENTITY[0])
            ss.append(_IDENTITY[1])
        else:
            return False
    if not fused or len(rounding) != 1:
        return False
    new = _rebuild(
        e,
        operands=operands,
        in_multiplier=ints(ms),
        in_shift=ints(ss),
        rounding=StringAttr(rounding.pop()),
    )
    npu.absorb(new, e, fused)
    Rewriter.insert_op(new, InsertPoint.before(e))
    e.output.replace_all_uses_with(new.output)
    erase(e)
    for r in fused:
        if not r.output.uses:
            erase(r)
    return True


def _casts(op: Operation) -> bool:
    if not isinstance(op, npu.EltwiseOp | npu.ReduceOp):
        return False
    operands, dropped = [], []
    for v in op.operands:
        c = v.owner
        if (
            isinstance(c, npu.CastOp)
            and _single_user(v) is op
            and _width(c.input) > 1  # a mask's cast makes codes: kept
            and _width(c.input) <= _width(c.output)
        ):
            operands.append(c.input)
            dropped.append(c)
        else:
            operands.append(v)
    if not dropped:
        return False
    new = _rebuild(op, operands=operands)
    npu.absorb(new, op, dropped)
    Rewriter.insert_op(new, InsertPoint.before(op))
    op.results[0].replace_all_uses_with(new.results[0])
    erase(op)
    for c in dropped:
        erase(c)
    return True


def fuse_function(f: func.FuncOp) -> int:
    fused = 0
    changed = True
    while changed:
        changed = False
        for op in list(f.body.block.ops):
            if op.parent is None:
                continue
            if isinstance(op, npu.RescaleOp):
                done = _pre_shift(op) or _output(op) or _clip(op)
            elif isinstance(op, npu.EltwiseOp):
                done = _bias(op) or _casts(op) or _inputs(op)
            else:
                done = _casts(op)
            if done:
                fused += 1
                changed = True
    return fused


@dataclass(frozen=True)
class NpuFusePass(ModulePass):
    """Fuse requantize / bias / relu / widening casts into the producing npu op."""

    name = "npu-fuse"

    march: str = "nash-e"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name)
        for f in op.body.block.ops:
            if isinstance(f, func.FuncOp):
                fuse_function(f)
