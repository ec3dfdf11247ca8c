"""``hbir.convert``: qat.bc (fake quantization) -> quantized.bc (fixed point).

The same as ``hbir-opt -p 'convert{march=...}'`` (the ``convert`` pass and its
sub-passes in ``passes/``), on a clone of the model, verified afterwards.
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr
from xdsl.dialects.func import ReturnOp

from hbir import diagnostics
from hbir.dialects import make_context
from hbir.module import Module, require_module
from hbir.passes.march import March

__all__ = ["March", "convert", "cpu_advice"]


def convert(qat_bc: Module, march: str | March, advice: bool = False) -> Module:
    """The fixed-point model for ``march`` ("nash-e", "nash-m" or ``hbir.March``).

    With ``advice=True`` every op left float (a CPU island) is printed with its
    location and the reason, one line each. A model that is already converted is
    refused; one with no fake quantization (a float model) converts with a
    warning, every op on the CPU.
    """
    from hbir.passes.convert import ConvertPass
    from hbir.passes.march import UnknownMarchError, get_march

    require_module(qat_bc, "hbir.convert", "convert")
    try:
        march = get_march(march).name
    except UnknownMarchError as e:
        raise diagnostics.HbirError(str(e)) from None
    quantized = qat_bc.clone()
    ConvertPass(march).apply(make_context(), quantized.module.op)
    diagnostics.verify(quantized.module.op, filename="after convert")
    if advice:
        for line in cpu_advice(quantized):
            print(line)
    return quantized


def cpu_advice(quantized: Module) -> list[str]:
    """``<location>: '<op>' (%N of @f) runs on the CPU: <why>`` for every float
    island op. The location is the op's torch origin (``file:line:col`` and
    ``module path|torch op#call``) when it has one; ``%N`` is its ID in the
    converted model (what ``quantized.module.get_asm()`` prints), so an op of a
    model without locations (parsed from text) is still found."""
    from hbir.dialects.op_ids import op_ids
    from hbir.passes.fixed_point import ATTR_CPU_REASON, op_device

    lines = []
    for f in quantized.functions:
        ids = {op: n for n, op in op_ids(f.op).items()}
        for op in f.op.walk():
            if op is f.op or isinstance(op, ReturnOp) or op_device(op) != "cpu":
                continue
            why = op.attributes.get(ATTR_CPU_REASON)
            reason = (
                why.data
                if isinstance(why, StringAttr)
                else "no fake quantization around it (float)"
            )
            at = f"%{ids[op]} of @{f.name}" if op in ids else f"@{f.name}"
            where, _ = diagnostics.describe_location(op, filename="")
            if where.startswith(": "):  # no file: the ID in the model says where
                origin = where.split(f"'{op.name}'", 1)[-1]  # " (path|op#n)" or ""
                where, at = f"@{f.name} %{ids.get(op, '?')}{origin}", ""
            lines.append(
                f"{where}: '{op.name}'{at and f' ({at})'} runs on the CPU: {reason}"
            )
    return lines
