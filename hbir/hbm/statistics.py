"""``hbir.statistics``: what a model is made of, for an ``hbir.Module`` or an ``Hbm``.

For a ``.bc`` model: op counts per function (``hbir.module.statistics``). For a
compiled model: per function, instruction counts by opcode (the mnemonics of
``runtime/hbm_opcodes.py``) and by unit, the constant bytes and the memory
plan's peaks, printed as the reference prints its op counts::

    ops encountered in func @forward
    \t conv : 3
    ...

followed by the unit counts and the memory figures, and returned as a dict::

    {"forward": {"opcodes": {"conv": 3, ...}, "units": {"tae": 3, ...},
                 "instructions": 40, "const_bytes": 1234,
                 "ddr_peak_bytes": 4096, "sram_peak_bytes": 2048}}
"""

from __future__ import annotations

from collections import Counter

from hbir.runtime.hbm_program import FunctionCode

__all__ = ["function_statistics", "statistics"]


def function_statistics(code: FunctionCode) -> dict:
    """The counts and sizes of one compiled function (see the module)."""
    from hbir.runtime.hbm_opcodes import BY_NUMBER

    opcodes = Counter(BY_NUMBER[i.opcode].name for i in code.instructions)
    units = Counter(i.unit for i in code.instructions)
    return {
        "opcodes": dict(sorted(opcodes.items())),
        "units": dict(sorted(units.items())),
        "instructions": len(code.instructions),
        "const_bytes": sum(b.size for b in code.buffers.values() if b.space == "const"),
        "ddr_peak_bytes": code.ddr_peak_bytes,
        "sram_peak_bytes": code.sram_peak_bytes,
    }


def statistics(model, by_device: bool = False) -> dict:
    """Counts per function of an ``Hbm`` (see the module) or of an ``hbir.Module``
    (``hbir.module.statistics``, where ``by_device`` applies)."""
    from hbir.module import Module
    from hbir.module import statistics as module_statistics

    if isinstance(model, Module):
        return module_statistics(model, by_device)
    from hbir.hbm import Hbm

    if not isinstance(model, Hbm):
        return module_statistics(model, by_device)  # its located type error
    result = {code.name: function_statistics(code) for code in model.program.functions}
    for name, stats in result.items():
        print(f"ops encountered in func @{name}")
        for opcode, count in stats["opcodes"].items():
            print(f"\t {opcode} : {count}")
        print(f"units of func @{name}")
        for unit, count in stats["units"].items():
            print(f"\t {unit} : {count}")
        print(
            f"\t instructions : {stats['instructions']}, constants : "
            f"{stats['const_bytes']} bytes, DDR peak : {stats['ddr_peak_bytes']} "
            f"bytes, SRAM peak : {stats['sram_peak_bytes']} bytes"
        )
    return result
