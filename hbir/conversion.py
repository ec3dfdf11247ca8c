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
    """``<location>: '<op>' runs on the CPU: <why>`` for every float island op."""
    from hbir.passes.fixed_point import ATTR_CPU_REASON, op_device

    lines = []
    for f in quantized.functions:
        for op in f.op.walk():
            if op is f.op or isinstance(op, ReturnOp) or op_device(op) != "cpu":
                continue
            why = op.attributes.get(ATTR_CPU_REASON)
            reason = (
                why.data
                if isinstance(why, StringAttr)
                else "no fake quantization around it (float)"
            )
            where, _ = diagnostics.describe_location(op)
            lines.append(f"{where}: '{op.name}' runs on the CPU: {reason}")
    return lines
