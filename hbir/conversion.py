"""``hbir.convert``: qat.bc (fake quantization) -> quantized.bc (fixed point).

The same as ``hbir-opt -p 'convert{march=...}'`` (the ``convert`` pass and its
sub-passes in ``passes/``), on a clone of the model, verified afterwards.
"""

from __future__ import annotations

import warnings

from xdsl.dialects.builtin import StringAttr
from xdsl.dialects.func import ReturnOp

from hbir import diagnostics
from hbir.default_march import choose_march
from hbir.dialects import make_context
from hbir.module import Module, require_module
from hbir.passes.march import March

__all__ = ["March", "convert", "cpu_advice", "inexact_advice"]


def convert(
    qat_bc: Module, march: str | March | None = None, advice: bool = False
) -> Module:
    """The fixed-point model for ``march`` ("nash-e", "nash-p", ... or
    ``hbir.March``; None: the default ``set_march`` chose,
    ``hbir/default_march.py``). A qat.bc prepared or exported under
    ``set_march`` for another march is refused, naming both; an op or dtype
    the march lacks is refused, naming the op and the march (check-march).

    With ``advice=True`` every op left float (a CPU island) is printed with its
    location and the reason, one line each, and so is every op qat.bc marks
    ``qnt.inexact`` (which convert also announces with a warning: quantized.bc may
    differ from qat.bc there, for the named cause). A model that is already
    converted is refused; one with no fake quantization (a float model) converts
    with a warning, every op on the CPU.
    """
    from hbir.passes.convert import ConvertPass
    from hbir.passes.march import UnknownMarchError, get_march

    require_module(qat_bc, "hbir.convert", "convert")
    march = choose_march(march, "hbir.convert")
    try:
        march = get_march(march).name
    except UnknownMarchError as e:
        raise diagnostics.HbirError(str(e)) from None
    made_for = qat_bc.prepared_march
    if made_for is not None and made_for != march:
        raise diagnostics.HbirError(
            f"hbir.convert: the qat.bc was prepared for {made_for} (set_march), "
            f"not {march}: convert it for {made_for}, or set_march('{march}') "
            "before prepare and export again"
        )
    inexact = inexact_advice(qat_bc)
    if inexact:
        from hbir.dialects import qnt

        marked = (op for f in qat_bc.functions for op in f.op.walk())
        causes = sorted({qnt.inexact(op) for op in marked} - {None})
        warnings.warn(
            f"convert: {len(inexact)} op(s) of qat.bc are marked qnt.inexact "
            f"({', '.join(causes)}): quantized.bc may differ from qat.bc there "
            "(hbir.convert(..., advice=True) lists them)",
            UserWarning,
            stacklevel=2,
        )
    quantized = qat_bc.clone()
    ConvertPass(march).apply(make_context(), quantized.module.op)
    diagnostics.verify(quantized.module.op, filename="after convert")
    if advice:
        for line in cpu_advice(quantized) + inexact:
            print(line)
    return quantized


def inexact_advice(qat_bc: Module) -> list[str]:
    """``<location>: '<op>' (%N of @f) may differ from qat.bc: <cause>`` for every
    op marked ``qnt.inexact`` (docs/contract.md lists the causes)."""
    from hbir.dialects import qnt
    from hbir.dialects.op_ids import op_ids

    lines = []
    for f in qat_bc.functions:
        ids = {op: n for n, op in op_ids(f.op).items()}
        for op in f.op.walk():
            cause = qnt.inexact(op)
            if cause is None:
                continue
            where, _ = diagnostics.describe_location(op, filename="")
            where = where or f"@{f.name}"
            lines.append(
                f"{where}: '{op.name}' (%{ids.get(op, '?')} of @{f.name}) may "
                f"differ from qat.bc: {cause} ({qnt.INEXACT_CAUSES[cause]})"
            )
    return lines


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
