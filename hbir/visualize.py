"""``hbir.visualize``: a model as an offline graph (HTML with an inline SVG).

The reference's ``visualize(m, onnx_file=None, use_netron=False)`` turns the
model into ONNX for netron; ``onnx_file=`` does that here too where the ``onnx``
package is installed (``hbir/visualize_onnx.py``). The page needs no server
and no download: one HTML file per call, one box per op of the function's top
level (its op ID ``%N`` as ``get_asm()`` prints it, the op name, each
result's type and the torch origin), the function's inputs on top, its outputs
at the bottom, an edge per operand. Ops are placed in rows by their depth (the
longest path from an input), so data flows downwards.
"""

from __future__ import annotations

import html
import os

from xdsl.dialects.func import ReturnOp
from xdsl.ir import BlockArgument, Operation

from hbir import diagnostics
from hbir.errors import HbirError, HbirOutputError
from hbir.module import Module, require_module

__all__ = ["visualize"]

BOX_W, BOX_H, GAP_X, GAP_Y = 260, 62, 30, 46


def op_origin(op: Operation) -> str:
    """The op's torch origin (``file:line:col (name)``), or its name, or ""."""
    where, _ = diagnostics.describe_location(op, filename="")
    if where.startswith(": "):  # no file: only the op's own name
        where = where.split(f"'{op.name}'", 1)[-1].strip(" ()")
    return where


def _label_lines(op: Operation, ids: dict[Operation, int]) -> list[str]:
    head = f"%{ids[op]} {op.name}" if op in ids else op.name
    types = ", ".join(str(r.type) for r in op.results) or "(no result)"
    return [head, types, op_origin(op)]


def _depths(ops: list[Operation]) -> dict[Operation, int]:
    depth: dict[Operation, int] = {}
    for op in ops:  # block order is a topological order
        producers = [v.owner for v in op.operands if isinstance(v.owner, Operation)]
        depth[op] = 1 + max((depth.get(p, 0) for p in producers), default=0)
    return depth


def _svg(function) -> str:
    from hbir.dialects.op_ids import op_ids

    body = function.op.body.block
    ids = {op: n for n, op in op_ids(function.op).items()}
    ops = [op for op in body.ops]
    depth = _depths(ops)
    rows: dict[int, list] = {0: list(body.args)}
    for op in ops:
        row = depth[op] + 1 if isinstance(op, ReturnOp) else depth[op]
        rows.setdefault(row, []).append(op)
    place: dict[object, tuple[float, float]] = {}
    width = max(len(r) for r in rows.values()) * (BOX_W + GAP_X) + GAP_X
    parts = []
    names = [a.name for a in function.inputs]
    for r, items in sorted(rows.items()):
        y = GAP_Y + r * (BOX_H + GAP_Y)
        for i, item in enumerate(items):
            x = GAP_X + i * (BOX_W + GAP_X)
            place[item] = (x, y)
            if isinstance(item, BlockArgument):
                lines = [f"input {names[item.index]}", str(item.type), ""]
                fill = "#e8f1fb"
            elif isinstance(item, ReturnOp):
                outs = ", ".join(a.name for a in function.outputs)
                lines, fill = [f"return {outs}", "", ""], "#eef7e8"
            else:
                lines = _label_lines(item, ids)
                fill = "#fff5e0" if item.name.startswith("qnt.") else "#ffffff"
            parts.append(
                f'<g class="op"><rect x="{x}" y="{y}" width="{BOX_W}" '
                f'height="{BOX_H}" rx="6" fill="{fill}" stroke="#555"/>'
                + "".join(
                    f'<text x="{x + 8}" y="{y + 17 + 18 * k}" font-size="'
                    f'{12 if k == 0 else 10}">{html.escape(t[:44])}</text>'
                    for k, t in enumerate(lines)
                )
                + "<title>"
                + html.escape("\n".join(t for t in lines if t))
                + "</title></g>"
            )
    edges = []
    for op in ops:
        x2, y2 = place[op]
        for v in op.operands:
            source = v if isinstance(v, BlockArgument) else v.owner
            if source not in place:
                continue  # a value from inside a region
            x1, y1 = place[source]
            edges.append(
                f'<line x1="{x1 + BOX_W / 2}" y1="{y1 + BOX_H}" '
                f'x2="{x2 + BOX_W / 2}" y2="{y2}" stroke="#888" '
                'marker-end="url(#arrow)"/>'
            )
    height = GAP_Y + (max(rows) + 1) * (BOX_H + GAP_Y)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}"><defs><marker id="arrow" viewBox="0 0 10 10" refX="10" '
        'refY="5" markerWidth="6" markerHeight="6" orient="auto">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#888"/></marker></defs>'
        + "".join(edges)
        + "".join(parts)
        + "</svg>"
    )


def visualize(
    m: Module,
    onnx_file: str | os.PathLike | None = None,
    use_netron: bool = False,
    html_file: str | os.PathLike | None = None,
) -> str:
    """The model's functions as an offline HTML page (returned; written to
    ``html_file`` if given). ``onnx_file``: also write the graph as ONNX for
    netron (``hbir/visualize_onnx.py``; needs the ``onnx`` package).
    ``use_netron`` (the reference starts a netron server and a browser) is
    refused by name: open the ONNX file in netron yourself."""
    require_module(m, "hbir.visualize", "visualize")
    if use_netron:
        raise HbirError(
            "hbir.visualize: use_netron is not provided (no browser server); "
            "write visualize(m, onnx_file='model.onnx') and open it in netron, or "
            "visualize(m, html_file='model.html') for an offline HTML page"
        )
    if onnx_file is not None:
        from hbir.visualize_onnx import write_onnx

        write_onnx(m, onnx_file)
    title = "hbir model" + (f" for {m.march}" if m.march else "")
    sections = [f"<h2>@{html.escape(f.name)}</h2>\n{_svg(f)}" for f in m.functions]
    page = (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>"
        f"{html.escape(title)}</title></head>\n<body style='font-family:"
        f"monospace'>\n<h1>{html.escape(title)}</h1>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )
    if html_file is not None:
        try:
            with open(html_file, "w") as f:
                f.write(page)
        except OSError as e:
            raise HbirOutputError(html_file, "hbir.visualize's page", e) from None
    return page
