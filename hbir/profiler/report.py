"""``report.json`` (for CI) and ``report.html`` (one self-contained page, no network).

The page shows, per stage pair, the error of every layer along the network as a
bar chart (LSB of the layer's grid, drawn by an inline script into SVG), the
histogram of output-grid differences, the cause table, and links from every op
to its torch source line (the lines are embedded in the page, so the links work
offline).
"""

from __future__ import annotations

import html
import json
import os
import sys

from hbir.profiler.doctor import CAUSES, Diagnosis

_SCRIPT = """
const data = JSON.parse(document.getElementById('data').textContent);
const NS = 'http://www.w3.org/2000/svg';
function el(name, attrs) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}
data.pairs.forEach((pair, p) => {
  const svg = document.getElementById('chart-' + p);
  const values = pair.layers.map(l => l.lsb === null ? 0 : l.lsb);
  const top = Math.max(1, ...values);
  const w = 900, h = 220, bw = Math.max(2, (w - 60) / Math.max(1, values.length));
  svg.appendChild(el('line', {x1: 50, y1: 10, x2: 50, y2: h, stroke: '#333'}));
  svg.appendChild(el('line', {x1: 50, y1: h, x2: w, y2: h, stroke: '#333'}));
  const label = el('text', {x: 4, y: 16, 'font-size': 11});
  label.textContent = top.toPrecision(3) + ' LSB';
  svg.appendChild(label);
  values.forEach((v, i) => {
    const bh = (h - 10) * v / top;
    const bad = pair.finding_layer === pair.layers[i].layer;
    const r = el('rect', {x: 52 + i * bw, y: h - bh, width: Math.max(1, bw - 1),
      height: Math.max(bh, 1), fill: bad ? '#d62728' : (v > 0 ? '#ff7f0e'
      : '#2ca02c'), class: 'bar'});
    const t = el('title', {});
    t.textContent = pair.layers[i].layer + ': ' + v + ' LSB';
    r.appendChild(t);
    svg.appendChild(r);
  });
  // layer names under the bars (every k-th when they would overlap)
  const every = Math.max(1, Math.ceil(11 / bw));
  pair.layers.forEach((l, i) => {
    if (i % every) return;
    const x = 52 + i * bw + bw / 2, y = h + 6;
    const name = el('text', {x: x, y: y, 'font-size': 9, class: 'layer-name',
      transform: `rotate(60 ${x} ${y})`});
    name.textContent = l.layer.length > 28 ? l.layer.slice(0, 27) + '\u2026' : l.layer;
    svg.appendChild(name);
  });
  const hsvg = document.getElementById('hist-' + p);
  const counts = pair.histogram;
  const hmax = Math.max(1, ...counts);
  counts.forEach((c, i) => {
    const bh = 100 * Math.log1p(c) / Math.log1p(hmax);
    hsvg.appendChild(el('rect', {x: 10 + i * 20, y: 110 - bh, width: 18,
      height: Math.max(bh, 1), fill: i === 10 ? '#2ca02c' : '#1f77b4',
      class: 'hbar'}));
    const t = el('text', {x: 12 + i * 20, y: 124, 'font-size': 9});
    t.textContent = i - 10;
    hsvg.appendChild(t);
  });
});
document.body.setAttribute('data-rendered', 'yes');
"""


def _anchor(source: str) -> str:
    return "src-" + "".join(c if c.isalnum() else "-" for c in source)


def _source_link(source: str) -> str:
    if not source:
        return ""
    return f'<a href="#{_anchor(source)}">{html.escape(source)}</a>'


def find_source(file: str, root: str = ".") -> str:
    """The file a location's path names, wherever the report is made. Exported
    paths are relative to their project's root (``tracing.source_path``): tried
    under ``root``, the current folder and each folder above it, then against
    every loaded module's file (the user's script and modules are loaded when
    the doctor runs in their process). The first candidate if none exists."""
    if os.path.isabs(file):
        return file
    candidates = [os.path.join(root, file)]
    folder = os.path.abspath(os.getcwd())
    while True:
        candidates.append(os.path.join(folder, file))
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for path in candidates:
        if os.path.isfile(path):
            return path
    tail = os.sep + file.replace("/", os.sep)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(tail) and os.path.isfile(path):
            return path
    return candidates[0]


def _sources(diagnosis: Diagnosis, root: str) -> str:
    """The torch source lines the report names, embedded with anchors."""
    wanted = sorted(
        {row["source"] for p in diagnosis.pairs for row in p.layers if row["source"]}
        | ({diagnosis.finding.source} if diagnosis.finding else set()) - {""}
    )
    parts = []
    cache: dict[str, list[str]] = {}
    for source in wanted:
        file, _, line = source.rpartition(":")
        path = find_source(file, root)
        if path not in cache:
            try:
                with open(path) as f:
                    cache[path] = f.read().splitlines()
            except OSError:
                cache[path] = []
        lines = cache[path]
        n = int(line)
        text = lines[n - 1].strip() if 0 < n <= len(lines) else "(source not found)"
        parts.append(
            f'<tr id="{_anchor(source)}"><td><a href="file://'
            f'{html.escape(os.path.abspath(path))}">{html.escape(source)}</a></td>'
            f"<td><code>{html.escape(text)}</code></td></tr>"
        )
    return "<table><tr><th>source</th><th>line</th></tr>" + "".join(parts) + "</table>"


def render_html(diagnosis: Diagnosis, root: str = ".") -> str:
    data = diagnosis.to_json()
    for p in data["pairs"]:
        f = diagnosis.finding
        same = f and (f.baseline, f.analysis) == (p["baseline"], p["analysis"])
        p["finding_layer"] = f.layer if same else None
    body = [
        "<h1>hbir doctor</h1>",
        f"<pre>{html.escape(diagnosis.text())}</pre>",
        "<h2>Causes</h2><table><tr><th>cause</th><th>found</th><th>op</th>"
        "<th>detail</th></tr>",
    ]
    f = diagnosis.finding
    for cause in CAUSES:
        hit = f is not None and f.cause == cause
        op = f"%{f.op_id} {html.escape(f.layer)}" if hit and f.op_id is not None else ""
        if hit and f.op_id is None:
            op = html.escape(f.layer)
        if hit and f.input is not None:
            op = html.escape(
                f"%{f.analysis_op_id} {f.hbir_op} in {f.analysis} "
                f"(input {f.input}, feeds {f.layer})"
            )
        body.append(
            f"<tr class='{'hit' if hit else ''}'><td>{cause}</td>"
            f"<td>{'yes' if hit else ''}</td><td>{op}</td>"
            f"<td>{html.escape(f.detail) if hit else ''}"
            f" {_source_link(f.source) if hit else ''}</td></tr>"
        )
    body.append("</table>")
    for i, p in enumerate(diagnosis.pairs):
        verdict = "within contract" if p.within else "beyond contract"
        body.append(
            f"<h2>{html.escape(p.baseline)} &rarr; {html.escape(p.analysis)} "
            f"[{p.contract}]: {verdict}</h2>"
            f"<p>per-layer error along the network (LSB of each layer's grid)</p>"
            f'<svg id="chart-{i}" class="chart" width="900" height="360"></svg>'
            f"<p>differences in LSB (log scale counts, -10..10)</p>"
            f'<svg id="hist-{i}" width="440" height="130"></svg>'
            "<details><summary>layers</summary><table><tr><th>layer</th>"
            "<th>qat.bc ID</th><th>op</th><th>max|diff|</th><th>LSB</th>"
            "<th>source</th></tr>"
        )
        for row in p.layers:
            lsb = "" if row["lsb"] is None else f"{row['lsb']:.3g}"
            op_id = "" if row["op_id"] is None else f"%{row['op_id']}"
            body.append(
                f"<tr><td>{html.escape(row['layer'])}</td><td>{op_id}</td>"
                f"<td>{html.escape(row['op_type'])}</td><td>{row['atol']:.6g}</td>"
                f"<td>{lsb}</td><td>{_source_link(row['source'])}</td></tr>"
            )
        body.append("</table></details>")
    body.append("<h2>Torch source</h2>" + _sources(diagnosis, root))
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}"
        "tr.hit{background:#fdd}pre{background:#f6f6f6;padding:1em;white-space:pre-wrap}"
    )
    payload = json.dumps(data, default=float).replace("</", "<\\/")
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>hbir doctor"
        f"</title><style>{style}</style></head><body>{''.join(body)}"
        f'<script type="application/json" id="data">{payload}</script>'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


def write_report(diagnosis: Diagnosis, out_dir, root: str = ".") -> None:
    """``out_dir/report.json`` and ``out_dir/report.html``."""
    from hbir.errors import HbirOutputError

    try:
        _write_report(diagnosis, out_dir, root)
    except OSError as e:
        raise HbirOutputError(out_dir, "the doctor's report (out_dir=)", e) from None


def _write_report(diagnosis: Diagnosis, out_dir, root: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(diagnosis.to_json(), f, indent=1, default=float)
    with open(os.path.join(out_dir, "report.html"), "w") as f:
        f.write(render_html(diagnosis, root))
