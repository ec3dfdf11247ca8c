"""Lookup-table error: every LUT op against the correctly rounded function.

Run: ``python benchmarks/lut_error_table.py`` (about a minute) prints the markdown
tables of ``docs/lut-numerics.md``; ``--tune [OP ...]`` instead searches the
smallest ``num_tables`` per op (every op, or those named) that meets the targets and
prints ``DEFAULT_NUM_TABLES`` (several minutes for all).

Each case is an op with a calibrated input interval, as an observer would see it:
the input scale covers the interval symmetrically (``absmax / 127.5`` for int8,
``absmax / 32767.5`` for int16) and the output scale covers ``|f|`` over the input
codes inside the interval. The error of a table is
``|apply_lut(table, q) - lut_reference_codes(op, q, ...)|`` in output LSBs over
every input code of the dtype, including codes outside the interval (negative
codes of log/rsqrt/sqrt/reciprocal follow the domain conventions). Cells show the
maximum and, in brackets, the share of codes that differ. Deterministic.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from hbir.runtime import numerics  # noqa: E402

TYPICAL = numerics.LUT_TYPICAL_RANGES
# Kinked ops: where a kink falls inside a segment depends on the input range, so
# their int8-output target must hold over a sweep of ranges, not at one lucky one.
KINKED = ("hardsigmoid", "hardswish")
KINK_SWEEP = [(-r, r) for r in (3, 4, 5, 6, 7, 8, 9, 10, 12, 16)]
PAIRS = ((8, 8), (8, 16), (16, 8), (16, 16))
GROWTH = (6, 12, 24, 48, 96, 126, 192, 384)
RANGES = (2, 4, 8, 16, 300)
RANGE_OPS = ("sigmoid", "tanh", "exp", "gelu", "silu", "sin", "cos")


def case_scales(
    op: str, interval: tuple[float, float], in_bits: int, out_bits: int
) -> tuple[float, float]:
    """Observer-style float32 scales for ``op`` calibrated on ``interval``."""
    lo, hi = interval
    s_in = float(numerics.scale_from_absmax(np.float32(max(-lo, hi)), in_bits))
    qmin, qmax = numerics.qrange(in_bits)
    x = numerics.dequantize(np.arange(qmin, qmax + 1), s_in, 0).astype(np.float64)
    x = x[(x > lo if lo == 0 else x >= lo) & (x <= hi)]
    absmax = np.max(np.abs(numerics.LUT_FUNCTIONS[op](x)))
    return s_in, float(numerics.scale_from_absmax(np.float32(absmax), out_bits))


def table_error(
    op: str,
    interval: tuple[float, float],
    in_bits: int,
    out_bits: int,
    num_tables: int | None = None,
) -> tuple[int, float]:
    """(max error in output LSBs, % of input codes that differ) over every code."""
    s_in, s_out = case_scales(op, interval, in_bits, out_bits)
    table = numerics.build_lut(op, s_in, in_bits, s_out, out_bits, num_tables)
    qmin, qmax = numerics.qrange(in_bits)
    q = np.arange(qmin, qmax + 1)
    ref = numerics.lut_reference_codes(op, q, s_in, s_out, out_bits)
    diff = np.abs(numerics.apply_lut(table, q) - ref)
    return int(diff.max()), float(np.mean(diff != 0) * 100)


def cell(error: tuple[int, float]) -> str:
    worst, share = error
    if not worst:
        return "0"
    return f"{worst} ({share:.0f} %)" if share >= 10 else f"{worst} ({share:.2g} %)"


def interval_name(interval: tuple[float, float]) -> str:
    lo, hi = interval
    return f"(0, {hi:g}]" if lo == 0 else f"[{lo:g}, {hi:g}]"


def default_table() -> list[str]:
    lines = [
        "| op | input interval | default num_tables | int8→int8 | int8→int16 "
        "| int16→int8 | int16→int16 |",
        "|---|---|---|---|---|---|---|",
    ]
    for op, intervals in TYPICAL.items():
        for interval in intervals:
            cells = [cell(table_error(op, interval, *pair)) for pair in PAIRS]
            lines.append(
                f"| {op} | {interval_name(interval)} | "
                f"{numerics.DEFAULT_NUM_TABLES[op]} | " + " | ".join(cells) + " |"
            )
    return lines


def growth_table(out_bits: int) -> list[str]:
    header = " | ".join(f"N={n}" for n in GROWTH)
    lines = [f"| op | input interval | {header} |", "|---|---|" + "---|" * len(GROWTH)]
    for op, intervals in TYPICAL.items():
        for interval in intervals:
            cells = [cell(table_error(op, interval, 16, out_bits, n)) for n in GROWTH]
            lines.append(
                f"| {op} | {interval_name(interval)} | " + " | ".join(cells) + " |"
            )
    return lines


def range_table() -> list[str]:
    """int16→int16 error at the default num_tables as the input range widens."""
    header = " | ".join(f"±{r:g}" for r in RANGES)
    lines = [f"| op | {header} |", "|---|" + "---|" * len(RANGES)]
    for op in RANGE_OPS:
        cells = []
        for r in RANGES:
            interval = (-r, 0) if op == "exp" else (-r, r)
            cells.append(cell(table_error(op, interval, 16, 16)))
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return lines


def meets_targets(op: str, num_tables: int) -> bool:
    """int8 outputs within 1 LSB; int16 outputs of smooth ops within 2 LSB."""
    for interval in KINK_SWEEP if op in KINKED else TYPICAL[op]:
        if table_error(op, interval, 16, 8, num_tables)[0] > 1:
            return False
        if op not in KINKED and table_error(op, interval, 16, 16, num_tables)[0] > 2:
            return False
    return True


def tune(op: str, window: int = 10) -> int:
    """The smallest multiple of 6 that meets the targets, as do the next ``window``."""
    passed: list[int] = []
    n = 6
    while len(passed) <= window:
        passed = passed + [n] if meets_targets(op, n) else []
        n += 6
    return passed[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tune", action="store_true", help="search num_tables")
    parser.add_argument("ops", nargs="*", help="the ops to tune (default: all)")
    args = parser.parse_args()
    if args.tune:
        print("DEFAULT_NUM_TABLES = {")
        for op in args.ops or TYPICAL:
            print(f'    "{op}": {tune(op)},', flush=True)
        print("}")
        return
    print("### Error at the default num_tables\n")
    print("\n".join(default_table()))
    for out_bits in (8, 16):
        print(f"\n### int16 input → int{out_bits} output, as num_tables grows\n")
        print("\n".join(growth_table(out_bits)))
    print(
        "\n### int16 input → int16 output at the default num_tables, by input range\n"
    )
    print("\n".join(range_table()))


if __name__ == "__main__":
    main()
