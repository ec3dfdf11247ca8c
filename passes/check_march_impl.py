"""Implementation of the ``check-march`` pass (passes/check_march.py),
imported when the pass runs so that ``hbir-opt --help`` stays light."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import shape_of
from hbir.passes import fixed_point as fp
from hbir.passes.march import March, get_march

_GEMMS = (hbir.Conv2dOp, hbir.ConvTranspose2dOp, hbir.LinearOp, hbir.MatmulOp)


def _gemm_reason(op: Operation, march: March) -> str | None:
    x, w = (fp.codes_of(v) for v in op.operands[:2])
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


def reason(op: Operation, march: March) -> str | None:
    """Why ``march`` cannot run ``op`` in fixed point, or None."""
    if isinstance(op, qnt.QuantizeOp | qnt.DequantizeOp | qnt.RequantizeOp):
        return None
    operands = op.operands[:2] if isinstance(op, _GEMMS) else op.operands
    for v in operands:
        codes = fp.codes_of(v)
        if _int32_bias(op, codes):
            continue
        if codes is not None and codes.bits not in march.operand_bits:
            return f"int{codes.bits} operands are not supported on {march.name}"
    if isinstance(op, _GEMMS):
        return _gemm_reason(op, march)
    return None


@dataclass(frozen=True)
class CheckMarchPassImpl(ModulePass):
    """Mark ops the march cannot run (hbir.device = "cpu", with the reason)."""

    name = "check-march"

    march: str = "nash-e"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        march = get_march(self.march)
        for inner in op.walk():
            why = reason(inner, march)
            if why is not None:
                inner.attributes[fp.ATTR_DEVICE] = StringAttr("cpu")
                inner.attributes[fp.ATTR_CPU_REASON] = StringAttr(why)
