"""The shared vocabulary of the convert passes (not a pass itself).

Convert works on the *quantize / dequantize* form of a model: ``expand-fake-quant``
rewrites every ``qnt.const_fake_quant`` into ``qnt.quantize`` followed by
``qnt.dequantize`` (the same numbers), so every float value that fake quantization
produced is visibly ``dequantize(codes, scale)``. A lowering pass then replaces

    quantize(relu/clip*(float_op(dequantize(a), dequantize(b))))

by ``requantize(integer_op(a, b))``: the integer op is exact and the requantization
rounds once, from the exact accumulator, with a multiplier derived in float64 from
the float32 scales (``numerics.quantize_multiplier`` of ``s_acc * fl32(1/s_out)``,
the factor quantization itself multiplies by, see ``inv_scale``). Ops no pass
lowers stay float between a dequantize and a quantize: a float CPU island.

The helpers below read that form: which codes and scales feed a float value, which
quantize (through relu / clip) consumes it, and how to build a requantization.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import (
    BoolAttr,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    FileLineColLoc,
    IntegerAttr,
    ModuleOp,
    NameLoc,
    StringAttr,
    TensorType,
    UnknownLoc,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import ATTR_LEGACY_ROUND, si, tensor_type
from hbir.errors import HbirOpError
from hbir.runtime import numerics, op_table

ATTR_DEVICE = "hbir.device"
ATTR_CPU_REASON = "hbir.cpu_reason"
ATTR_FUSE_REQUANTIZE = "hbir.fuse_requantize"


@dataclass
class Codes:
    """A float value that is ``dequantize(codes)``: the codes and their grid."""

    codes: SSAValue
    scales: np.ndarray  # float32, one per tensor or per channel
    axis: int | None
    bits: int

    @property
    def per_tensor(self) -> bool:
        return self.scales.size == 1


_MOVES = hbir.ops_lowered_as(op_table.MOVE)


def where(op: Operation) -> str:
    """``file:line:col`` of an op (inside export's ``NameLoc`` too), for a pass's
    error message; else its location as printed."""
    loc = op.location
    if isinstance(loc, NameLoc):
        loc = loc.location
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    if isinstance(loc, UnknownLoc):  # IR text without locations: the op's name
        func = op.parent_op()
        while func is not None and not isinstance(func, FuncOp):
            func = func.parent_op()
        names = [r.name_hint for r in op.results if r.name_hint]
        where = f"@{func.sym_name.data}" if func is not None else "<module>"
        return where + (f" %{names[0]}" if names else f" '{op.name}'")
    return str(op.location)


def keeps_grid(op: Operation) -> bool:
    """An op that only moves or selects values (the op table's ``move`` family),
    so its result holds values of its input's grid: not a pad with a nonzero value,
    not a bilinear resize."""
    if not isinstance(op, _MOVES):
        return False
    if isinstance(op, hbir.PadOp) and op.value.value.data != 0.0:
        return False
    return not (isinstance(op, hbir.Resize2dOp) and op.mode.data != "nearest")


def codes_of(value: SSAValue) -> Codes | None:
    """The codes behind a float value produced by a zero-point-0 dequantize."""
    op = value.owner
    if not isinstance(op, qnt.DequantizeOp) or any(op.zeros.get_values()):
        return None
    axis = None if op.axis is None else op.axis.value.data
    if axis is not None and axis < 0:
        axis += len(hbir.shape_of(op.input))
    element = tensor_type(op.input).element_type
    return Codes(
        op.input,
        np.asarray(op.scales.get_values(), np.float32),
        axis,
        element.width.data,
    )


@dataclass
class Consumer:
    """The quantize that ends a float op's result, and the relu / clip on the way."""

    quantize: qnt.QuantizeOp
    chain: list[Operation]
    clip: tuple[int, int] | None  # in output codes; None when nothing clips

    @property
    def scale(self) -> float:
        return float(np.float32(self.quantize.scales.get_values()[0]))

    @property
    def inv_scale(self) -> np.float64:
        """``fl32(1/s)``: quantization multiplies by it (see ``inv_scale``)."""
        return inv_scale(self.quantize.scales.get_values()[0])

    @property
    def element(self) -> Attribute:
        return tensor_type(self.quantize.output).element_type


def inv_scale(scale) -> np.float64:
    """``fl32(1 / fl32(s))``, the factor quantization multiplies by
    (``numerics.inv_scale``)."""
    return numerics.inv_scale(scale)


def _single_use(value: SSAValue) -> Operation | None:
    uses = list(value.uses)
    return uses[0].operation if len(uses) == 1 else None


def is_plain_quantize(op: qnt.QuantizeOp) -> bool:
    """Per tensor, zero point 0, full range: what one requantize can replace."""
    return (
        op.axis is None
        and not any(op.zeros.get_values())
        and not op.narrowRange.value.data
    )


def consumer_of(value: SSAValue, rounding: str) -> Consumer | None:
    """The per-tensor, zero-point-0 quantize reached through single-use relu / clip."""
    return consumer_through(_single_use(value), rounding)


def consumer_through(user: Operation | None, rounding: str) -> Consumer | None:
    """``consumer_of`` from ``user``, one consumer of a value that may have others
    (a relu of a value that also feeds another op)."""
    chain: list[Operation] = []
    lo, hi = -math.inf, math.inf
    while isinstance(user, hbir.ReluOp | hbir.ClipOp):
        if is_cpu(user):
            return None
        if isinstance(user, hbir.ReluOp):
            lo = max(lo, 0.0)
        else:
            lo, hi = max(lo, user.min.value.data), min(hi, user.max.value.data)
        chain.append(user)
        user = _single_use(user.output)
    if not isinstance(user, qnt.QuantizeOp) or not is_plain_quantize(user):
        return None
    if chain and chain[-1].results[0] is not user.input:
        return None
    clip = None
    if chain:
        scale = np.float32(user.scales.get_values()[0])
        width = tensor_type(user.output).element_type.width.data
        clip = numerics.clip_codes(lo, hi, scale, width, rounding)
    return Consumer(user, chain, clip)


def rounding_of(op: Operation) -> str:
    """half_up when the module has ``hbir.legacy_round = true``."""
    return (
        numerics.HALF_UP
        if _module_flag(op, ATTR_LEGACY_ROUND, False)
        else (numerics.HALF_EVEN)
    )


def fuses_requantize(op: Operation) -> bool:
    """False at consistency level 0 (``hbir.fuse_requantize = false``)."""
    return _module_flag(op, ATTR_FUSE_REQUANTIZE, True)


def _module_flag(op: Operation, name: str, default: bool) -> bool:
    module = op
    while module is not None and not isinstance(module, ModuleOp):
        module = module.parent_op()
    if module is None:
        return default
    attr = module.attributes.get(name)
    return bool(attr.value.data) if isinstance(attr, IntegerAttr) else default


def is_cpu(op: Operation) -> bool:
    """Marked by check-march as something the march cannot run."""
    device = op.attributes.get(ATTR_DEVICE)
    return isinstance(device, StringAttr) and device.data == "cpu"


# Ops at a float island's edge or holding data; they run where their codes live.
_BOUNDARY_OPS = (qnt.QuantizeOp, qnt.DequantizeOp, hbir.ConstantOp)


def op_device(op: Operation) -> str:
    """Where ``op`` runs: its ``hbir.device`` (set by check-march), else "cpu" for
    float compute (a float island), else "npu". Quantize / dequantize (the NPU's
    vector unit converts at the island edges) and constants count as NPU."""
    device = op.attributes.get(ATTR_DEVICE)
    if isinstance(device, StringAttr):
        return device.data
    if isinstance(op, _BOUNDARY_OPS):
        return "npu"
    values = list(op.results) + list(op.operands)
    if any(isinstance(v.type, TensorType) and hbir.is_float(v.type) for v in values):
        return "cpu"
    return "npu"


def requantize(
    value: SSAValue,
    real: np.ndarray,
    element: Attribute,
    rounding: str,
    axis: int | None = None,
    clip: tuple[int, int] | None = None,
) -> qnt.RequantizeOp:
    """``round(value * real)`` into ``element``: one rounding, per channel if needed."""
    ms, ss = numerics.requantize_multipliers(real)
    return requantize_with(value, ms, ss, element, rounding, axis, clip)


def requantize_with(
    value: SSAValue,
    multiplier: np.ndarray,
    shift: np.ndarray,
    element: Attribute,
    rounding: str,
    axis: int | None = None,
    clip: tuple[int, int] | None = None,
) -> qnt.RequantizeOp:
    """A requantization with given per-channel (or single) multipliers and shifts."""
    ms, ss = [int(m) for m in multiplier], [int(s) for s in shift]
    return qnt.RequantizeOp(
        value,
        element,
        ms,
        ss,
        axis=axis if len(ms) > 1 else None,
        clip=clip,
        rounding=rounding,
    )


def replace_quantized(
    rewriter: PatternRewriter,
    op: Operation,
    consumer: Consumer,
    new_ops: list[Operation],
    result: SSAValue,
    clip_ops: list[Operation] | None = None,
) -> None:
    """Insert ``new_ops`` before ``op``; ``result`` replaces the consumer's codes.

    The float op, its relu / clip chain and the quantize are erased.
    """
    for new in new_ops + (clip_ops or []):
        new.location = op.location
        rewriter.insert(new, InsertPoint.before(op))
    rewriter.replace_all_uses_with(consumer.quantize.output, result)
    rewriter.erase(consumer.quantize)
    for chained in reversed(consumer.chain):
        rewriter.erase(chained)
    rewriter.erase(op)


class FixedPointError(HbirOpError):
    """IR that verifies but has no fixed-point form: a range whose float32 scale
    underflows or overflows, or a requantization factor beyond what a 31-bit
    multiplier and a legal shift hold (``numerics.SHIFT_RANGE``)."""


def check_scales(op: Operation, scales: np.ndarray) -> None:
    """Refuse float32 scales that are not positive and finite, at ``op``."""
    scales = np.asarray(scales, np.float32)
    bad = scales[~(np.isfinite(scales) & (scales > 0))]
    if bad.size:
        raise FixedPointError(
            op,
            where(op),
            f"has no integer grid: its range gives the float32 scale "
            f"{float(bad[0])!r} (a scale must be positive and finite in float32); "
            f"re-calibrate or widen the range",
        )


def check_requantization(op: Operation, multiplier, shift) -> None:
    """Refuse a requantization whose shift falls below the legal range (a factor
    of about ``2**62`` or more), at the quantize ``op`` that asks for it."""
    low = numerics.SHIFT_RANGE[0]
    shift = np.asarray(shift, np.int64)
    if shift.size and int(shift.min()) < low:
        worst = int(np.argmin(shift))
        factor = float(np.asarray(multiplier).reshape(-1)[worst]) * 2.0 ** -int(
            shift.reshape(-1)[worst]
        )
        raise FixedPointError(
            op,
            where(op),
            f"needs a requantization by {factor:.6g} (accumulator grid / output grid), "
            f"beyond what a 31-bit multiplier and a shift in [{low}, "
            f"{numerics.SHIFT_RANGE[1]}] hold (below 2**{31 - low}): the scales "
            f"around it are degenerate",
        )


def finish(
    acc: SSAValue,
    real: np.ndarray,
    consumer: Consumer,
    rounding: str,
    fuse: bool,
    axis: int | None = None,
) -> list[Operation]:
    """The requantization by ``real`` that ends a lowered op (``finish_with``)."""
    ms, ss = numerics.requantize_multipliers(real)
    return finish_with(acc, ms, ss, consumer, rounding, fuse, axis)


def finish_with(
    acc: SSAValue,
    multiplier: np.ndarray,
    shift: np.ndarray,
    consumer: Consumer,
    rounding: str,
    fuse: bool,
    axis: int | None = None,
) -> list[Operation]:
    """The requantization that ends a lowered op, relu / clip folded or not.

    With fusion (the default) the relu / clip is the requantization's ``clip``.
    Without (consistency level 0) the requantization saturates to the type and a
    separate integer ``hbir.clip`` follows: the same numbers, since rounding is
    monotone and clamping commutes with it.
    """
    check_requantization(consumer.quantize, multiplier, shift)
    element = consumer.element
    if fuse or consumer.clip is None:
        clip = consumer.clip
        return [requantize_with(acc, multiplier, shift, element, rounding, axis, clip)]
    req = requantize_with(acc, multiplier, shift, element, rounding, axis)
    lo, hi = consumer.clip
    return [req, hbir.ClipOp(req.output, float(lo), float(hi))]


def int_constant(values: np.ndarray, width: int) -> hbir.ConstantOp:
    """A signed integer constant (values must already fit)."""
    values = np.asarray(values, np.int64)
    lo, hi = numerics.qrange(width)
    assert values.size == 0 or (values.min() >= lo and values.max() <= hi)
    t = TensorType(si(width), list(values.shape))
    data = values.astype(hbir.numpy_dtype(si(width))).tobytes()
    return hbir.ConstantOp(DenseIntOrFPElementsAttr(t, BytesAttr(data)))


def float_constant(value: SSAValue) -> np.ndarray | None:
    """The values of a float ``hbir.constant`` (None for anything else)."""
    op = value.owner
    if not isinstance(op, hbir.ConstantOp) or not hbir.is_float(op.output.type):
        return None
    return hbir.dense_array(op.value).astype(np.float64)


def widen(value: SSAValue, width: int = 32) -> hbir.CastOp:
    """An exact integer widening cast (saturation cannot trigger)."""
    return hbir.CastOp(value, si(width))


def bool_attr(v: bool) -> BoolAttr:
    return BoolAttr.from_bool(v)
