"""check-march: mark the quantized ops a march cannot run as CPU (float) islands.

For every op on dequantized codes, the limits of ``passes/march.py`` are checked;
an op that breaks one gets ``hbir.device = "cpu"`` and ``hbir.cpu_reason``, and the
lowering passes leave it float between its dequantize and quantize.

Before::

    %y = hbir.conv2d %x, %w : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> ...

with ``%x`` and ``%w`` both dequantized from si16, after (nash-e)::

    %y = hbir.conv2d %x, %w {hbir.device = "cpu", hbir.cpu_reason = "input and
        weight cannot both be int16 on nash-e"} : ...

Ops within the limits are not touched. An unknown march is an error.

An op or dtype the march lacks altogether (``MarchLimits.lacks``: an op on a
unit it does not have, such as ``hbir.topk`` on nash-b, which has no SPU; f16 on a
march without fp16; bf16 anywhere) is refused, a located error naming the op and
the march::

    error: 'hbir.topk' op is not supported on nash-b: it runs on the SPU, which
        nash-b lacks (Horizon's J6B deployment guide)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    AnyFloat,
    Float16Type,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import shape_of
from hbir.errors import HbirOpError
from hbir.passes import fixed_point as fp
from hbir.passes.march import MARCHES, MarchLimits, get_march
from hbir.runtime import op_table

_GEMMS = hbir.ops_lowered_as(op_table.GEMM)


class MarchLimitError(HbirOpError):
    """An integer op (already lowered) that the march cannot run: it has no float
    form left to fall back to on the CPU."""


class MarchSupportError(HbirOpError):
    """An op, or a dtype it reads or makes, that the march lacks altogether."""


# float CPU islands, fake quantization and the consistency casts: every march
_HOST_FLOATS = {"f32", "f64"}


def _float_types(op: Operation) -> set[str]:
    """The float element types (but f32 / f64) ``op`` reads or makes."""
    found = set()
    for v in (*op.operands, *op.results):
        t = v.type.element_type if isinstance(v.type, TensorType) else v.type
        if isinstance(t, AnyFloat) and t.name not in _HOST_FLOATS:
            found.add(t.name)
    return found


def check_support(module: ModuleOp, march: MarchLimits) -> None:
    """Refuse the first op the march lacks, or that reads or makes a dtype it
    lacks (``MarchLimits.lacks``: the one table)."""
    for op in module.walk():
        if isinstance(op, ModuleOp | FuncOp):
            continue
        why = march.lacks(op.name, _float_types(op))
        if why is None:
            continue
        if _rounds_to_f16(op):  # a FakeCast's rounding: name the op it serves
            fp16 = _fp16_op(op)
            raise Float16MarchError(
                fp16,
                fp.where(fp16),
                f"runs in fp16 (the float16 qconfig) but {march.name} has no fp16 "
                f"({'/'.join(f'int{b}' for b in march.operand_bits)} only): give it "
                "an integer dtype, or convert for a march with fp16 "
                f"({', '.join(m for m, x in MARCHES.items() if 16 in x.float_bits)})",
            )
        raise MarchSupportError(op, fp.where(op), why)


def _rounds_to_f16(op: Operation) -> bool:
    return isinstance(op, hbir.CastOp) and isinstance(
        hbir.tensor_type(op.output).element_type, Float16Type
    )


def _codes(value) -> fp.Codes | None:
    """An operand's codes, also behind the float64 cast of consistency level 2
    (sink-dequantize folds that cast before convert-gemm reads the codes)."""
    owner = value.owner
    if isinstance(owner, hbir.CastOp) and hbir.is_float(owner.input.type):
        value = owner.input
    return fp.codes_of(value)


def _integer_codes(value) -> fp.Codes | None:
    """An integer operand as its own codes (an op convert already lowered)."""
    if hbir.is_float(value.type):
        return None
    width = hbir.tensor_type(value).element_type.width.data
    return fp.Codes(value, np.ones(1, np.float32), None, width)


def _check_integer_gemm(op: Operation, march: MarchLimits) -> None:
    """Refuse an integer gemm beyond the march's limits (no CPU fallback)."""
    if not isinstance(op, _GEMMS) or hbir.is_float(op.operands[0].type):
        return
    why = _gemm_reason(op, march, _integer_codes)
    if why is not None:
        raise MarchLimitError(
            op,
            fp.where(op),
            f"is already integer and {why}: an integer op has no float form to run "
            f"on the CPU. Run check-march on the float model (qat.bc), before "
            f"convert lowers it",
        )


def _gemm_reason(op: Operation, march: MarchLimits, codes=_codes) -> str | None:
    x, w = (codes(v) for v in op.operands[:2])
    if x is None or w is None:
        return None
    if x.bits == 16 and w.bits == 16 and not march.gemm_both_int16:
        return f"input and weight cannot both be int16 on {march.name}"
    if isinstance(op, hbir.Conv2dOp | hbir.ConvTranspose2dOp):
        kernel = shape_of(op.weight)[2:]
        channels = max(shape_of(op.input)[1], shape_of(op.output)[1])
        if max(kernel) > march.max_kernel:
            return f"kernel {list(kernel)} exceeds {march.max_kernel} on {march.name}"
        if channels > march.max_channels:
            return f"{channels} channels exceed {march.max_channels} on {march.name}"
        if max(op.stride.get_values()) > march.max_stride:
            return f"stride exceeds {march.max_stride} on {march.name}"
        if max(op.dilation.get_values()) > march.max_dilation:
            return f"dilation exceeds {march.max_dilation} on {march.name}"
        return None
    dims = shape_of(op.operands[0])[-2:] + shape_of(op.results[0])[-1:]
    if max(dims) > march.max_gemm_dim:
        return f"gemm dim {max(dims)} exceeds {march.max_gemm_dim} on {march.name}"
    return None


def _int32_bias(op: Operation, codes: fp.Codes | None) -> bool:
    """An int32 constant added to an accumulator (the bias of an affine step).

    Like a conv bias it joins the int32 accumulator, so no int32 operand is read.
    """
    return (
        isinstance(op, hbir.AddOp | hbir.SubOp)
        and codes is not None
        and codes.bits == 32
        and isinstance(codes.codes.owner, hbir.ConstantOp)
    )


class Float16MarchError(MarchSupportError):
    """An fp16 op (the float16 qconfig) on a march without fp16."""


def _fp16_op(cast: hbir.CastOp) -> Operation:
    """The op a rounding to f16 belongs to: the op whose output it rounds, or,
    rounding a quantized value (an fp16 op's input), the op that reads it."""
    producer = cast.input.owner
    if isinstance(producer, Operation) and not isinstance(
        producer, qnt.ConstFakeQuantOp | qnt.DequantizeOp | hbir.CastOp
    ):
        return producer
    for back in cast.output.uses:  # the cast back to f32, then its first reader
        readers = {use.operation for use in back.operation.results[0].uses}
        later = back.operation.next_op
        while later is not None:
            if later in readers:
                return later
            later = later.next_op
    return cast


def reason(op: Operation, march: MarchLimits) -> str | None:
    """Why ``march`` cannot run ``op`` in fixed point, or None."""
    if isinstance(op, qnt.QuantizeOp | qnt.DequantizeOp | qnt.RequantizeOp):
        return None
    operands = op.operands[:2] if isinstance(op, _GEMMS) else op.operands
    for v in operands:
        codes = _codes(v)
        if _int32_bias(op, codes):
            continue
        if codes is not None and codes.bits not in march.operand_bits:
            return f"int{codes.bits} operands are not supported on {march.name}"
    if isinstance(op, _GEMMS):
        return _gemm_reason(op, march)
    if isinstance(op, hbir.Resize2dOp) and op.mode.data != "nearest":
        if op.weight_bits is None:  # torch's float weights, not the NPU's
            return f"{op.mode.data} resize with float weights has no integer form"
    return None


@dataclass(frozen=True)
class CheckMarchPass(ModulePass):
    """Mark ops the march cannot run (hbir.device = "cpu", with the reason)."""

    name = "check-march"

    march: str = "nash-e"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        march = get_march(self.march)
        check_support(op, march)
        for inner in op.walk():
            _check_integer_gemm(inner, march)
            why = reason(inner, march)
            if why is not None:
                inner.attributes[fp.ATTR_DEVICE] = StringAttr("cpu")
                inner.attributes[fp.ATTR_CPU_REASON] = StringAttr(why)
