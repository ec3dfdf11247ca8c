"""``hbir.hbm_perf``: the estimated speed of a ``model.hbm`` on its march.

The cost model is the one ``npu-schedule`` applied when the model was compiled
(``passes/npu_schedule.py``): every instruction carries its unit and its start
and end cycle, from the march's ``NpuModel`` (``passes/march.py``): MACs over MACs
per cycle on the TAE, bytes over the vector width on VAE / AAE / DTE, bytes over
the DDR bytes per cycle for DMA, a fixed cost per element on the CPU. Here those
numbers are read back and summed:

* a function's **cycles** are its makespan, the last instruction's end (units
  overlap, so it is less than the sum of the busy cycles);
* **latency** is cycles over the march's clock, **FPS** one over the latency
  (one call of the function, whatever its batch; 0 for a function without
  instructions);
* **DDR bytes** are the bytes every instruction reads from or writes to DDR
  (``ddr``, ``io`` and ``const`` buffers, their channel-aligned sizes): DMA loads
  and stores, and the CPU islands, which work in DDR; views move nothing;
* **SRAM peak** and **DDR peak** are the memory plan's (``npu-plan-memory``);
* a **layer** is the instructions of one torch call (their debug entries share a
  location), with busy cycles per unit; the CPU instructions of a call are a
  layer of their own (``cpu_op`` names the op, e.g. the output's
  ``qnt.dequantize``), so a CPU island's time is never billed to the NPU layer
  whose location it shares.

These are estimates from assumed march parameters (``docs/compile.md``), for
comparing models and schedules, not measurements.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import asdict, dataclass, field

from hbir.passes.march import NpuModel, get_npu
from hbir.runtime.hbm_opcodes import BY_NUMBER
from hbir.runtime.hbm_program import DebugEntry, FunctionCode, Instruction

__all__ = ["FunctionCost", "LayerCost", "estimate", "hbm_perf", "render_html"]

DDR_SPACES = ("ddr", "io", "const")
COMPUTE_UNITS = ("tae", "vae", "aae", "cpu")
VIEW_UNIT = "view"  # npu-schedule's unit of reshape / slice / concat views
UNIT_COLOURS = {
    "tae": "#1f77b4",
    "vae": "#ff7f0e",
    "aae": "#2ca02c",
    "dte": "#9467bd",
    "dma": "#8c564b",
    "cpu": "#d62728",
}


@dataclass
class LayerCost:
    """The instructions of one torch call."""

    name: str  # the torch location, or "%N op" when the op has none
    opcode: str  # its first compute instruction's mnemonic (else its first's)
    op_ids: list[int] = field(default_factory=list)
    instructions: int = 0
    units: dict[str, int] = field(default_factory=dict)  # busy cycles per unit
    start: int = 0
    end: int = 0
    ddr_bytes: int = 0
    cpu_op: str = ""  # a CPU island: the quantized.bc op it runs ("" on the NPU)

    @property
    def cycles(self) -> int:
        """Busy cycles summed over its units."""
        return sum(self.units.values())


@dataclass
class FunctionCost:
    name: str
    cycles: int
    latency_us: float
    fps: float
    ddr_bytes: int
    sram_peak_bytes: int
    ddr_peak_bytes: int
    const_bytes: int
    units: dict[str, int]  # busy cycles per unit
    layers: list[LayerCost]


def layer_name(debug: DebugEntry) -> str:
    """What groups instructions into a layer: the torch location they share."""
    if debug.loc:
        return debug.loc
    if debug.op_ids:
        return f"%{debug.op_ids[-1]} {debug.op}"
    return "(no origin)"


def short_name(name: str) -> str:
    """A layer's label in the chart: the torch module path (and call, after the
    first) of ``file:line:col (path|op#call)``, else the name itself."""
    m = re.search(r"\((?P<path>[^|()]*)\|[^()]*#(?P<call>\d+)\)$", name)
    if m is None:
        return name
    return m["path"] if m["call"] == "0" else f"{m['path']}#{m['call']}"


def ddr_bytes(instruction: Instruction, code: FunctionCode) -> int:
    """Bytes ``instruction`` reads from or writes to DDR (see the module)."""
    if instruction.unit == VIEW_UNIT:
        return 0
    ids = (*instruction.operands, *instruction.results)
    return sum(code.buffers[i].size for i in ids if code.buffers[i].space in DDR_SPACES)


def estimate(code: FunctionCode, npu: NpuModel) -> FunctionCost:
    """The cost of one function (see the module)."""
    layers: dict[tuple[str, str], LayerCost] = {}
    units: dict[str, int] = {}
    for instruction, debug in zip(code.instructions, code.debug, strict=True):
        name = layer_name(debug)
        cpu_op = debug.op if instruction.unit == "cpu" else ""
        layer = layers.get((name, cpu_op))
        mnemonic = BY_NUMBER[instruction.opcode].name
        if layer is None:
            layer = layers[name, cpu_op] = LayerCost(
                name,
                mnemonic,
                start=instruction.start,
                end=instruction.end,
                cpu_op=cpu_op,
            )
        computed = any(unit in COMPUTE_UNITS for unit in layer.units)
        if instruction.unit in COMPUTE_UNITS and not computed:
            layer.opcode = mnemonic
        layer.instructions += 1
        layer.op_ids.extend(n for n in debug.op_ids if n not in layer.op_ids)
        busy = instruction.end - instruction.start
        if instruction.unit != VIEW_UNIT:
            layer.units[instruction.unit] = layer.units.get(instruction.unit, 0) + busy
            units[instruction.unit] = units.get(instruction.unit, 0) + busy
        layer.start = min(layer.start, instruction.start)
        layer.end = max(layer.end, instruction.end)
        layer.ddr_bytes += ddr_bytes(instruction, code)
    cycles = max((i.end for i in code.instructions), default=0)
    latency_us = cycles / npu.clock_mhz
    return FunctionCost(
        name=code.name,
        cycles=cycles,
        latency_us=latency_us,
        fps=1e6 / latency_us if cycles else 0.0,
        ddr_bytes=sum(layer.ddr_bytes for layer in layers.values()),
        sram_peak_bytes=code.sram_peak_bytes,
        ddr_peak_bytes=code.ddr_peak_bytes,
        const_bytes=sum(b.size for b in code.buffers.values() if b.space == "const"),
        units=dict(sorted(units.items())),
        layers=list(layers.values()),
    )


def report(name: str, march: str, costs: list[FunctionCost]) -> dict:
    """What ``<model>.json`` holds."""
    npu = get_npu(march)
    functions = []
    for cost in costs:
        data = asdict(cost)
        for layer, entry in zip(cost.layers, data["layers"], strict=True):
            entry["cycles"] = layer.cycles
        functions.append(data)
    return {
        "model": name,
        "march": march,
        "clock_mhz": npu.clock_mhz,
        "int8_macs_per_cycle": npu.macs_per_cycle_int8,  # of one core
        "cores": npu.cores,
        "ddr_bytes_per_cycle": npu.ddr_bytes_per_cycle,
        "functions": functions,
    }


def hbm_perf(model: str | os.PathLike, output_dir: str | os.PathLike = ".") -> dict:
    """Estimate ``model`` (a ``.hbm`` path) on its march: prints
    ``FPS=…, latency = … us, DDR = … bytes`` per function, writes
    ``<output_dir>/<model>.json`` and ``<output_dir>/<model>.html`` (a per-layer
    bar chart, no network needed) and returns the JSON's content."""
    import hbir
    from hbir.errors import HbirFileError, HbirOutputError

    path = os.fspath(model)
    if not path.endswith(".hbm"):
        raise HbirFileError(f"hbir.hbm_perf: {path}: expected a .hbm file")
    hbm = hbir.load(path)
    npu = get_npu(hbm.march)
    costs = [estimate(code, npu) for code in hbm.program.functions]
    stem = os.path.splitext(os.path.basename(path))[0]
    data = report(stem, hbm.march, costs)
    out = os.fspath(output_dir)
    try:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"{stem}.json"), "w") as f:
            json.dump(data, f, indent=1)
        with open(os.path.join(out, f"{stem}.html"), "w") as f:
            f.write(render_html(data))
    except OSError as e:
        raise HbirOutputError(out, "hbm_perf's report (output_dir=)", e) from None
    for cost in costs:
        which = f"@{cost.name}: " if len(costs) > 1 else ""
        print(
            f"{which}FPS={cost.fps:.2f}, latency = {cost.latency_us:.2f} us, "
            f"DDR = {cost.ddr_bytes} bytes"
        )
    return data


# ------------------------------------------------------------------ the page

_STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; margin-bottom: 16px; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; }
"""
_ROW = 18  # pixels per layer in the chart
_LABEL = 320  # pixels for the layer names
_BAR = 560  # pixels for the longest bar


def _chart(function: dict) -> str:
    """Per-layer busy cycles as horizontal bars, one segment per unit."""
    layers = function["layers"]
    top = max([layer["cycles"] for layer in layers] + [1])
    height = _ROW * len(layers) + 4
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_LABEL + _BAR + 120}" '
        f'height="{height}" font-size="11">'
    ]
    for row, layer in enumerate(layers):
        y = row * _ROW + 2
        name = html.escape(layer["name"])
        island = f" ({layer['cpu_op']})" if layer["cpu_op"] else ""
        label = html.escape(f"{short_name(layer['name'])} {layer['opcode']}{island}")
        parts.append(
            f'<text x="{_LABEL - 6}" y="{y + 12}" text-anchor="end">{label}</text>'
        )
        x = float(_LABEL)
        for unit, cycles in sorted(layer["units"].items()):
            width = _BAR * cycles / top
            colour = UNIT_COLOURS.get(unit, "#7f7f7f")
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{y}" width="{max(width, 0.5):.1f}" '
                f'height="{_ROW - 4}" fill="{colour}"><title>{name}: {unit} '
                f"{cycles} cycles</title></rect>"
            )
            x += width
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 12}">{layer["cycles"]}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(data: dict) -> str:
    """One self-contained page: the totals and a per-layer bar chart per function."""
    title = f"hbm_perf: {html.escape(data['model'])} on {html.escape(data['march'])}"
    body = [f"<h1>{title}</h1>"]
    legend = "".join(
        f'<span><i style="background:{c}"></i>{u}</span>'
        for u, c in UNIT_COLOURS.items()
    )
    for function in data["functions"]:
        rows = [
            ("cycles", function["cycles"]),
            ("latency (us)", f"{function['latency_us']:.2f}"),
            ("FPS", f"{function['fps']:.2f}"),
            ("DDR bytes", function["ddr_bytes"]),
            ("SRAM peak bytes", function["sram_peak_bytes"]),
            ("DDR peak bytes", function["ddr_peak_bytes"]),
            ("constant bytes", function["const_bytes"]),
        ]
        rows += [(f"{u} busy cycles", c) for u, c in function["units"].items()]
        table = "".join(f'<tr><th>{k}</th><td class="n">{v}</td></tr>' for k, v in rows)
        body += [
            f"<h2>@{html.escape(function['name'])}</h2>",
            f"<table>{table}</table>",
            "<p>Busy cycles per layer (torch call), by unit; units overlap, so "
            "the layers add up to more than the function's cycles.</p>",
            f'<p class="legend">{legend}</p>',
            _chart(function),
        ]
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
