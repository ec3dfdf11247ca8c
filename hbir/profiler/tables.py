"""Text tables in the reference profiler's formats (``tabulate``'s psql and plain
styles, which the reference writes; written here so tabulate is not needed)."""

from __future__ import annotations

from collections.abc import Sequence


def cell(value, floatfmt: str = ".7f") -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, floatfmt)
    return str(value)


def psql(rows: Sequence[dict], showindex: bool = True, floatfmt: str = ".7f") -> str:
    """``tabulate(rows, headers="keys", tablefmt="psql", showindex=...)``."""
    if not rows:
        return ""
    headers = list(rows[0])
    table = [[cell(r.get(h), floatfmt) for h in headers] for r in rows]
    if showindex:
        headers = [""] + headers
        table = [[str(i)] + row for i, row in enumerate(table)]
    widths = [
        max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)
    ]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells):
        return (
            "| "
            + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))
            + " |"
        )

    out = [rule, line(headers), rule]
    out += [line(row) for row in table]
    out.append(rule)
    return "\n".join(out) + "\n"


def plain(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    """``tabulate(rows, headers, tablefmt="plain")``: columns separated by spaces."""
    table = [[cell(v, "g") for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in table]) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    out += [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table
    ]
    return "\n".join(line.rstrip() for line in out) + "\n"


def parse_psql(text: str) -> list[dict[str, str]]:
    """Rows of a psql table (the reports' tests and CI read them back)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    if not lines:
        return []
    split = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    headers = split[0]
    return [dict(zip(headers, row, strict=True)) for row in split[1:]]
