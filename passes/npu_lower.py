"""npu-lower: hbir / qnt (quantized.bc) -> the npu dialect, one op for one op.

Every integer op that runs on the NPU becomes its npu op with the same integer
semantics; spatial ops (conv, conv_transpose, pools, resize) become NHWC ops
between two ``npu.transpose`` (NCHW -> NHWC in, back out), weights included —
``npu-layout`` then cancels the transposes that meet and folds the ones on
constants. ``qnt.requantize`` becomes ``npu.rescale``; constants ``npu.constant``.

What stays on the CPU — float ops (a float island convert left), the quantize /
dequantize at the model's edges, ops check-march placed on the CPU and ops with no
npu lowering — is grouped, run of consecutive ops by run, into ``npu.cpu_call``
regions holding the original hbir / qnt ops.

Before::

    %3 = hbir.conv2d %1, %2 {stride = array<i64: 1, 1>, padding = array<i64: 1, 1>,
        dilation = array<i64: 1, 1>} : (tensor<2x3x16x16xsi8>, tensor<8x3x3x3xsi8>)
        -> tensor<2x8x16x16xsi32>

After::

    %a = npu.transpose %1 {perm = array<i64: 0, 2, 3, 1>} : ... -> tensor<2x16x16x3xsi8>
    %b = npu.transpose %2 {perm = array<i64: 0, 2, 3, 1>} : ... -> tensor<8x3x3x3xsi8>
    %c = npu.conv %a, %b {...} : (...) -> tensor<2x16x16x8xsi32>
    %3 = npu.transpose %c {perm = array<i64: 0, 3, 1, 2>} : ... ->
        tensor<2x8x16x16xsi32>
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BoolAttr,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from hbir.dialects import hbir, npu, qnt
from hbir.dialects.hbir import i64_attr, ints, shape_of
from hbir.dialects.op_ids import op_ids
from hbir.errors import HbirError
from hbir.passes.fixed_point import ATTR_CPU_REASON, ATTR_DEVICE, op_device
from hbir.runtime import hbm_opcodes, op_table

NHWC = (0, 2, 3, 1)
NCHW = (0, 3, 1, 2)


class CompileError(HbirError):
    """A model the compile phase cannot take."""


def transpose(value: SSAValue, perm) -> npu.TransposeOp:
    t = value.type
    assert isinstance(t, TensorType)
    shape = t.get_shape()
    out = TensorType(t.element_type, [shape[p] for p in perm])
    return npu.TransposeOp.create(
        operands=[value], result_types=[out], properties={"perm": ints(perm)}
    )


def erase(op: Operation) -> None:
    op.detach()
    op.erase()


def _is_int(value: SSAValue) -> bool:
    t = value.type
    return isinstance(t, TensorType) and isinstance(t.element_type, IntegerType)


# An fp16 op (convert-fp16) other than npu.fp16_map's runs on the CPU, bit-exact,
# until the npu has its fp16 instruction (docs/compile.md).
FP16_REASON = "fp16 (no npu fp16 instruction yet)"


def _is_fp16_value(v: SSAValue) -> bool:
    return isinstance(v.type, TensorType) and isinstance(
        v.type.element_type, Float16Type
    )


def _is_fp16(op: Operation) -> bool:
    return any(_is_fp16_value(r) for r in op.results)


def _all_int(op: Operation) -> bool:
    values = list(op.operands) + list(op.results)
    return all(_is_int(v) for v in values)


def _nhwc_type(t: TensorType) -> TensorType:
    s = t.get_shape()
    return TensorType(t.element_type, [s[p] for p in NHWC])


# ------------------------------------------------------------------ rules
# rule(op) -> (new ops in order, the values replacing op's results) or None


Rule = Callable[[Operation], tuple[list[Operation], list[SSAValue]] | None]


def _spatial(op: Operation, make: Callable[[SSAValue, list[SSAValue]], Operation]):
    """x (and the weight) to NHWC, the NHWC op, its result back to NCHW."""
    tx = transpose(op.operands[0], NHWC)
    rest: list[Operation] = []
    others: list[SSAValue] = []
    for v in op.operands[1:]:
        if len(shape_of(v)) == 4:  # a weight: OIHW -> OHWI
            t = transpose(v, NHWC)
            rest.append(t)
            others.append(t.output)
        else:
            others.append(v)
    core = make(tx.output, others)
    back = transpose(core.results[0], NCHW)
    return [tx, *rest, core, back], [back.output]


def _conv(op: hbir.Conv2dOp):
    def make(x, others):
        return npu.ConvOp.create(
            operands=[x, others[0], *others[1:]],
            result_types=[_nhwc_type(op.output.type)],
            properties={
                "stride": op.stride,
                "padding": op.padding,
                "dilation": op.dilation,
                "groups": op.groups,
            },
        )

    return _spatial(op, make)


def _conv_transpose(op: hbir.ConvTranspose2dOp):
    def make(x, others):
        return npu.ConvTransposeOp.create(
            operands=[x, others[0], *others[1:]],
            result_types=[_nhwc_type(op.output.type)],
            properties={
                "stride": op.stride,
                "padding": op.padding,
                "output_padding": op.output_padding,
                "dilation": op.dilation,
                "groups": op.groups,
            },
        )

    return _spatial(op, make)


def _gemm(op: Operation, transpose_b: bool):
    g = npu.GemmOp.create(
        operands=list(op.operands),
        result_types=[op.results[0].type],
        properties={"transpose_b": BoolAttr.from_bool(transpose_b)},
    )
    return [g], [g.output]


def _eltwise(kind: str) -> Rule:
    def rule(op: Operation):
        e = npu.EltwiseOp.create(
            operands=list(op.operands),
            result_types=[op.results[0].type],
            properties={"kind": StringAttr(kind)},
        )
        return [e], [e.output]

    return rule


def _identity_rescale(op: Operation, lo: int, hi: int):
    """An exact identity requantization (2**30 / 2**30) with a clip: relu / clip."""
    t = op.results[0].type
    width = t.element_type.width.data
    tlo, thi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    lo, hi = max(lo, tlo), min(hi, thi)
    if lo > hi:
        return None
    r = npu.RescaleOp.create(
        operands=[op.operands[0]],
        result_types=[t],
        properties=npu.post_properties([1 << 30], [30], [lo, hi]),
    )
    return [r], [r.output]


def _relu(op: hbir.ReluOp):
    return _identity_rescale(op, 0, 1 << 62)


def _clip(op: hbir.ClipOp):
    lo, hi = round(op.min.value.data), round(op.max.value.data)
    return _identity_rescale(op, lo, hi)


def _requantize(op: qnt.RequantizeOp):
    if op.zero.value.data != 0:
        return None
    props = npu.post_properties(
        op.multiplier.get_values(),
        op.shift.get_values(),
        None if op.clip is None else op.clip.get_values(),
        op.rounding.data,
    )
    if op.axis is not None:
        props["axis"] = op.axis
    r = npu.RescaleOp.create(
        operands=[op.input], result_types=[op.output.type], properties=props
    )
    return [r], [r.output]


def _cast(op: hbir.CastOp):
    c = npu.CastOp.create(operands=[op.input], result_types=[op.output.type])
    return [c], [c.output]


def _lut(op: hbir.LutOp):
    c = npu.LutOp.create(
        operands=[op.input],
        result_types=[op.output.type],
        properties=dict(op.properties),
    )
    return [c], [c.output]


def _fp16_function(op: Operation) -> str | None:
    """The fp16_map function of an fp16 op of one operand (f16 in, f16 out)."""
    if not _is_fp16(op) or len(op.operands) != 1:
        return None
    if not _is_fp16_value(op.operands[0]):
        return None
    return hbm_opcodes.fp16_function(op.name, getattr(op, "approximate", None))


def _fp16_map(op: Operation):
    c = npu.Fp16MapOp.create(
        operands=[op.operands[0]],
        result_types=[op.results[0].type],
        properties={"function": StringAttr(_fp16_function(op))},
    )
    return [c], [c.output]


def _reduce(kind: str) -> Rule:
    def rule(op: hbir.ReduceOp):
        dims = op.dims.get_values()
        if not dims:
            return None
        props = {"kind": StringAttr(kind), "dims": op.dims, "keepdim": op.keepdim}
        rounding = getattr(op, "rounding", None)
        if kind == "mean" and rounding is not None:
            props["rounding"] = rounding
        r = npu.ReduceOp.create(
            operands=[op.input], result_types=[op.output.type], properties=props
        )
        return [r], [r.output]

    return rule


def _global_avg(op: hbir.GlobalAvgPool2dOp):
    r = npu.ReduceOp.create(
        operands=[op.input],
        result_types=[op.output.type],
        properties={
            "kind": StringAttr("mean"),
            "dims": ints([2, 3]),
            "keepdim": BoolAttr.from_bool(True),
        },
    )
    return [r], [r.output]


def _pool(kind: str) -> Rule:
    def rule(op: hbir.Pool2dOp):
        props = {
            "kind": StringAttr(kind),
            "kernel": op.kernel,
            "stride": op.stride,
            "padding": op.padding,
            "dilation": getattr(op, "dilation", None) or ints([1, 1]),
            "ceil_mode": op.ceil_mode,
        }
        include = getattr(op, "count_include_pad", None)
        if include is not None:
            props["count_include_pad"] = include

        def make(x, _):
            return npu.PoolOp.create(
                operands=[x],
                result_types=[_nhwc_type(op.output.type)],
                properties=props,
            )

        return _spatial(op, make)

    return rule


def _resize(op: hbir.Resize2dOp):
    props = {
        k: v
        for k, v in op.properties.items()
        if k in ("size", "mode", "align_corners", "scale", "weight_bits")
    }

    def make(x, _):
        return npu.ResizeOp.create(
            operands=[x], result_types=[_nhwc_type(op.output.type)], properties=props
        )

    return _spatial(op, make)


def _topk_indices(x: SSAValue, k: int, dim: int, largest: bool, t) -> npu.TopkOp:
    return npu.TopkOp.create(
        operands=[x],
        result_types=[t],
        properties={
            "k": i64_attr(k),
            "dim": i64_attr(dim),
            "largest": BoolAttr.from_bool(largest),
        },
    )


def _topk(op: hbir.TopkOp):
    """The indices (npu.topk), then the values gathered at them."""
    dim = op.dim.value.data
    indices = _topk_indices(
        op.input, op.k.value.data, dim, op.largest.value.data, op.indices.type
    )
    values = npu.GatherOp.create(
        operands=[op.input, indices.output],
        result_types=[op.values.type],
        properties={"dim": i64_attr(dim)},
    )
    return [indices, values], [values.output, indices.output]


def _arg_extreme(largest: bool) -> Rule:
    """argmax / argmin: the first of a top-1 (its dim then dropped unless kept)."""

    def rule(op: hbir.ArgExtremeOp):
        shape = list(shape_of(op.input))
        dim = op.dim.value.data % len(shape)
        shape[dim] = 1
        t = TensorType(op.output.type.element_type, shape)
        top = _topk_indices(op.input, 1, dim, largest, t)
        if op.keepdim.value.data:
            return [top], [top.output]
        view = npu.ReshapeOp.create(
            operands=[top.output], result_types=[op.output.type]
        )
        return [top, view], [view.output]

    return rule


def _grid_sample(op: hbir.GridSampleOp):
    """The input to NHWC (the grid is N x Ho x Wo x 2 already), the result back."""
    tx = transpose(op.input, NHWC)
    core = npu.GridSampleOp.create(
        operands=[tx.output, op.grid],
        result_types=[_nhwc_type(op.output.type)],
        properties={
            k: op.properties[k]
            for k in ("mode", "padding_mode", "align_corners", "grid_scale")
        },
    )
    back = transpose(core.output, NCHW)
    return [tx, core, back], [back.output]


def _copy_as(cls, names: tuple[str, ...]) -> Rule:
    def rule(op: Operation):
        props = {k: v for k, v in op.properties.items() if k in names}
        c = cls.create(
            operands=list(op.operands),
            result_types=[r.type for r in op.results],
            properties=props,
        )
        return [c], list(c.results)

    return rule


def _slice(value: SSAValue, t: Attribute, begin, end, step) -> npu.SliceOp:
    return npu.SliceOp.create(
        operands=[value],
        result_types=[t],
        properties={"begin": ints(begin), "end": ints(end), "step": ints(step)},
    )


def _split(op: hbir.SplitOp):
    """One slice per piece."""
    shape = list(shape_of(op.input))
    dim, start, pieces = op.dim.value.data % len(shape), 0, []
    for result, size in zip(op.outputs, op.sizes.get_values(), strict=True):
        begin, end = [0] * len(shape), list(shape)
        begin[dim], end[dim] = start, start + size
        pieces.append(_slice(op.input, result.type, begin, end, [1] * len(shape)))
        start += size
    return pieces, [p.output for p in pieces]


def _flip(op: hbir.FlipOp):
    """A slice that walks the flipped dims backwards."""
    shape = shape_of(op.input)
    dims = {d % len(shape) for d in op.dims.get_values()}
    flipped = [i in dims for i in range(len(shape))]
    s = _slice(
        op.input,
        op.output.type,
        [n - 1 if f else 0 for n, f in zip(shape, flipped, strict=True)],
        [-n - 1 if f else n for n, f in zip(shape, flipped, strict=True)],
        [-1 if f else 1 for f in flipped],
    )
    return [s], [s.output]


def constant(values, element) -> npu.ConstantOp:
    """An ``npu.constant`` of ``values`` (a numpy array) as ``element`` codes."""
    import numpy as np

    from hbir.dialects.hbir import numpy_dtype

    t = TensorType(element, list(values.shape))
    data = np.ascontiguousarray(values.astype(numpy_dtype(element))).tobytes()
    return npu.ConstantOp(DenseIntOrFPElementsAttr(t, BytesAttr(data)))


def _pad(op: hbir.PadOp):
    """Negative amounts crop (a slice); the others concatenate blocks of the
    fill code (``numerics.pad_code``: as the interpreter pads)."""
    import numpy as np

    from hbir.dialects.hbir import numpy_dtype
    from hbir.runtime.numerics import pad_code

    element = op.input.type.element_type
    fill = pad_code(op.value.value.data, numpy_dtype(element))
    low, high = op.low.get_values(), op.high.get_values()
    shape = list(shape_of(op.input))
    new: list[Operation] = []
    x = op.input
    if any(v < 0 for v in (*low, *high)):
        begin = [max(-lo, 0) for lo in low]
        end = [n - max(-hi, 0) for n, hi in zip(shape, high, strict=True)]
        shape = [e - b for b, e in zip(begin, end, strict=True)]
        new.append(_slice(x, TensorType(element, shape), begin, end, [1] * len(shape)))
        x = new[-1].output
    for dim, (lo, hi) in enumerate(zip(low, high, strict=True)):
        parts = []
        for amount in (lo, hi):
            if amount > 0:
                block = list(shape)
                block[dim] = amount
                new.append(constant(np.full(block, fill), element))
                parts.append(new[-1].output)
            else:
                parts.append(None)
        if parts == [None, None]:
            continue
        shape[dim] += max(lo, 0) + max(hi, 0)
        inputs = [v for v in (parts[0], x, parts[1]) if v is not None]
        new.append(
            npu.ConcatOp.create(
                operands=inputs,
                result_types=[TensorType(element, shape)],
                properties={"dim": i64_attr(dim)},
            )
        )
        x = new[-1].output
    if not new:  # no padding at all: a view
        new.append(npu.ReshapeOp.create(operands=[x], result_types=[op.output.type]))
    return new, [new[-1].results[0]]


RULES: dict[type[Operation], Rule] = {
    hbir.Conv2dOp: _conv,
    hbir.ConvTranspose2dOp: _conv_transpose,
    hbir.LinearOp: lambda op: _gemm(op, True),
    hbir.MatmulOp: lambda op: _gemm(op, False),
    hbir.AddOp: _eltwise("add"),
    hbir.SubOp: _eltwise("sub"),
    hbir.MulOp: _eltwise("mul"),
    hbir.MaximumOp: _eltwise("maximum"),
    hbir.MinimumOp: _eltwise("minimum"),
    hbir.FloorDivideOp: _eltwise("floor_divide"),
    hbir.RemainderOp: _eltwise("remainder"),
    hbir.ReluOp: _relu,
    hbir.ClipOp: _clip,
    qnt.RequantizeOp: _requantize,
    hbir.CastOp: _cast,
    hbir.LutOp: _lut,
    hbir.ReduceSumOp: _reduce("sum"),
    hbir.ReduceMaxOp: _reduce("max"),
    hbir.ReduceMinOp: _reduce("min"),
    hbir.ReduceMeanOp: _reduce("mean"),
    hbir.GlobalAvgPool2dOp: _global_avg,
    hbir.MaxPool2dOp: _pool("max"),
    hbir.AvgPool2dOp: _pool("avg"),
    hbir.Resize2dOp: _resize,
    hbir.GridSampleOp: _grid_sample,
    hbir.ConcatOp: _copy_as(npu.ConcatOp, ("dim",)),
    hbir.SliceOp: _copy_as(npu.SliceOp, ("begin", "end", "step")),
    hbir.ReshapeOp: _copy_as(npu.ReshapeOp, ()),
    hbir.TransposeOp: _copy_as(npu.TransposeOp, ("perm",)),
    hbir.SplitOp: _split,
    hbir.FlipOp: _flip,
    hbir.PadOp: _pad,
    hbir.TopkOp: _topk,
    hbir.ArgmaxOp: _arg_extreme(True),
    hbir.ArgminOp: _arg_extreme(False),
    hbir.GatherOp: _copy_as(npu.GatherOp, ("dim",)),
    hbir.IndexSelectOp: _copy_as(npu.IndexSelectOp, ("dim",)),
    hbir.IndexCopyOp: _copy_as(npu.IndexCopyOp, ("dim",)),
    hbir.MaxPool2dIndicesOp: _copy_as(
        npu.MaxPoolIndicesOp, ("kernel", "stride", "padding", "dilation", "ceil_mode")
    ),
    hbir.MaxUnpool2dOp: _copy_as(npu.MaxUnpoolOp, ("size",)),
    hbir.RoiResizeOp: _copy_as(
        npu.RoiResizeOp, ("size", "interpolate_mode", "expansion_mode", "pad_value")
    ),
    hbir.CompareOp: _copy_as(npu.CompareOp, ("kind", "scales")),
    hbir.SelectOp: _copy_as(npu.SelectOp, ()),
}

_EXACT = "qnt.exact"


def cpu_reason(op: Operation) -> str | None:
    """Why ``op`` stays on the CPU, or None when it is lowered to the NPU."""
    if isinstance(op, qnt.QuantizeOp | qnt.DequantizeOp):
        return op.name.split(".")[1]
    why = op.attributes.get(ATTR_CPU_REASON)
    if ATTR_DEVICE not in op.attributes and _fp16_function(op) is not None:
        return None  # npu.fp16_map
    if op_device(op) == "cpu" or not _all_int(op):
        if isinstance(why, StringAttr):
            return why.data
        return FP16_REASON if _is_fp16(op) else "float"
    if _EXACT in op.attributes:
        return "marked qnt.exact"
    if type(op) in RULES:
        return None
    declared = op_table.CPU_REASONS.get(op.name)
    if declared is None:
        raise CompileError(
            f"npu-lower: '{op.name}' at {op.location} has no npu lowering, and the "
            "op table (runtime/op_table.py) does not place it on the CPU"
        )
    return declared


# ------------------------------------------------------------------ islands


def _close_island(
    island: list[Operation], before: Operation, ids: dict[Operation, int]
) -> None:
    """Replace consecutive CPU ops by one ``npu.cpu_call`` placed before ``before``
    (its origin: the island's op IDs; its value: the first result's op's)."""
    inside = set(island)
    defined = {r for op in island for r in op.results}
    args: list[SSAValue] = []
    for op in island:
        for v in op.operands:
            if v not in defined and v not in args:
                args.append(v)
    outs = [
        r
        for op in island
        for r in op.results
        if any(u.operation not in inside for u in r.uses)
    ]
    block = Block(arg_types=[a.type for a in args])
    mapper: dict[SSAValue, SSAValue] = dict(zip(args, block.args, strict=True))
    for op in island:
        clone = op.clone(value_mapper=mapper)
        for old, new in zip(op.results, clone.results, strict=True):
            mapper[old] = new
        block.add_op(clone)
    block.add_op(npu.YieldOp(*[mapper[o] for o in outs]))
    reasons = sorted({r for op in island if (r := cpu_reason(op))})
    call = npu.CpuCallOp(
        args, [o.type for o in outs], Region(block), ", ".join(reasons)
    )
    call.location = island[0].location
    npu.set_origin(call, [ids[op] for op in island if op in ids])
    first = outs[0].owner if outs else None
    if first in ids and outs[0] is first.results[0]:
        npu.set_value_of(call, (ids[first], None))
    Rewriter.insert_op(call, InsertPoint.before(before))
    for old, new in zip(outs, call.res, strict=True):
        old.replace_uses_with_if(new, lambda use: use.operation not in inside)
    for op in reversed(island):
        erase(op)


ATTR_ACC_MAY_SATURATE = "npu.acc_may_saturate"


def _code_bits(value: SSAValue) -> int:
    """The width a gemm operand's codes can need: its type's, less the bits that a
    right shift by a power of two took off (convert's ``gemm_operand_shifts``:
    ``|round(q / 2**s)| <= 2**(bits-1-s)``)."""
    bits = value.type.element_type.width.data
    owner = value.owner
    if isinstance(owner, npu.RescaleOp) and owner.multiplier is not None:
        multiplier, shift = owner.multiplier.get_values(), owner.shift.get_values()
        if tuple(multiplier) == (1,) and len(shift) == 1 and shift[0] > 0:
            bits -= shift[0]
    return bits


def _mark_accumulator(op: Operation) -> None:
    """Mark a gemm whose worst-case exact sum exceeds the 32-bit accumulator (it
    saturates there, in quantized.bc as on the NPU: a named numeric cause)."""
    from hbir.passes.march import accumulator_fits

    if not isinstance(op, npu.ConvOp | npu.ConvTransposeOp | npu.GemmOp):
        return
    w = shape_of(op.weight)
    if isinstance(op, npu.ConvOp):
        terms = w[1] * w[2] * w[3]
    elif isinstance(op, npu.ConvTransposeOp):
        terms = (w[0] // op.groups.value.data) * w[1] * w[2]
    else:
        terms = w[-1] if op.transpose_b.value.data else w[-2]
    bits = [_code_bits(v) for v in (op.input, op.weight)]
    if not accumulator_fits(terms, *bits):
        op.attributes[ATTR_ACC_MAY_SATURATE] = BoolAttr.from_bool(True)


def _stamp(op: Operation, new_ops: list[Operation], values, op_id: int) -> None:
    """The debug origin of ``op``'s lowering: every new op computes (part of) op
    ``op_id``; the one whose result replaces op's first result (or is its NHWC
    form, transposed back by a following new op) is that op's value."""
    for n in new_ops:
        npu.set_origin(n, [op_id])
        if not n.results:
            continue
        if values and n.results[0] is values[0]:
            npu.set_value_of(n, (op_id, None))
            continue
        for t in new_ops:
            if (
                isinstance(t, npu.TransposeOp)
                and t.input is n.results[0]
                and values
                and t.output is values[0]
            ):
                npu.set_value_of(n, (op_id, tuple(t.perm.get_values())))


def lower_function(f: func.FuncOp) -> None:
    ids = {op: i for i, op in op_ids(f).items()}  # quantized.bc's %N
    island: list[Operation] = []
    for op in list(f.body.block.ops):
        if isinstance(op, func.ReturnOp):
            if island:
                _close_island(island, op, ids)
            break
        if op.dialect_name() == "npu":  # already lowered
            if island:
                _close_island(island, op, ids)
                island = []
            continue
        if isinstance(op, hbir.ConstantOp):
            c = npu.ConstantOp(op.value)
            c.location = op.location
            if op in ids:
                _stamp(op, [c], [c.output], ids[op])
            Rewriter.insert_op(c, InsertPoint.before(op))
            op.output.replace_all_uses_with(c.output)
            erase(op)
            continue
        reason = cpu_reason(op)
        rule = _fp16_map if _fp16_function(op) is not None else RULES.get(type(op))
        lowered = None if reason else rule(op)
        if lowered is None:
            island.append(op)
            continue
        if island:
            _close_island(island, op, ids)
            island = []
        new_ops, values = lowered
        if op in ids:
            _stamp(op, new_ops, values, ids[op])
        for n in new_ops:
            n.location = op.location
            _mark_accumulator(n)
            Rewriter.insert_op(n, InsertPoint.before(op))
        for old, new in zip(op.results, values, strict=True):
            old.replace_all_uses_with(new)
        erase(op)
    remove_dead_constants(f)


def remove_dead_constants(f: func.FuncOp) -> None:
    for op in list(f.body.block.ops):
        if isinstance(op, npu.ConstantOp) and not op.output.uses:
            erase(op)


def check_quantized(module: ModuleOp) -> None:
    """The compile phase takes quantized.bc: refuse qat.bc (fake quantization)."""
    for op in module.walk():
        if isinstance(op, qnt.ConstFakeQuantOp):
            raise CompileError(
                f"{op.name} at {op.location}: compile takes a converted model "
                "(quantized.bc); this one still has fake quantization (qat.bc): "
                "run hbir.convert(qat_bc, march) first"
            )


def require_lowered(module: ModuleOp, pass_name: str, after: bool = False) -> None:
    """What is legal from npu-lower on (the compile phase's conversion target):
    a function's top level holds npu ops and ``func.return``; hbir / qnt ops only
    inside ``npu.cpu_call`` islands, each with its reason. The passes after
    npu-lower check it of what they take; npu-lower of what it leaves
    (``after``: an op it left is its own bug)."""
    for f in module.body.block.ops:
        if not isinstance(f, func.FuncOp):
            continue
        for op in f.body.block.ops:
            if op.dialect_name() in ("hbir", "qnt"):
                raise CompileError(
                    f"{pass_name}: '{op.name}' at {op.location} is not lowered to the "
                    "npu dialect"
                    + (
                        " (npu-lower left it: a compiler bug)"
                        if after
                        else ": run npu-lower first (hbir-opt --compile-to="
                        f"{pass_name} runs the phase up to it)"
                    )
                )
            if isinstance(op, npu.CpuCallOp) and not (op.reason and op.reason.data):
                raise CompileError(
                    f"{pass_name}: the npu.cpu_call at {op.location} gives no reason "
                    "for running on the CPU"
                )


@dataclass(frozen=True)
class NpuLowerPass(ModulePass):
    """Lower hbir / qnt ops to the npu dialect (NHWC spatial ops, CPU islands)."""

    name = "npu-lower"

    march: str = "nash-e"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_quantized(op)
        for f in op.body.block.ops:
            if isinstance(f, func.FuncOp):
                lower_function(f)
        require_lowered(op, self.name, after=True)
