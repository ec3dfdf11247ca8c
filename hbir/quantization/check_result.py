"""The text files ``prepare`` writes: ``model_check_result.txt`` and ``fx_graph.txt``.

``model_check_result.txt`` follows the reference toolchain's sections (fusable modules
left unfused, modules called more than once, per-layer output and weight qconfigs,
dtype statistics) and adds what users of that tool ask for: which qconfig rule chose
each layer, which override rules set no module, the generated ``QuantStub``\\ s and
the ops left in float. Tables are psql-style, like ``tabulate(tablefmt="psql")``.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

from torch import fx

from hbir.quantization.fake_cast import FakeCast
from hbir.quantization.fake_quantize import FakeQuantize
from hbir.quantization.fusion import Unfused
from hbir.quantization.qat_modules import QATModule


@dataclass
class Report:
    """What ``prepare`` decided, for ``model_check_result.txt``."""

    level: int | None = None
    rule_labels: list[str] = field(default_factory=list)
    # rules that name a module (label -> where made): setting none is an error
    named_labels: dict[str, str] = field(default_factory=dict)
    call_counts: dict[str, tuple[int, str]] = field(default_factory=dict)
    unfused: list[Unfused] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    generated_stubs: list[tuple[str, str, str]] = field(default_factory=list)
    unquantized: list[tuple[str, str, str]] = field(default_factory=list)


def format_table(headers: list[str], rows: list[list]) -> str:
    """A psql-style table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(row):
        return (
            "| "
            + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
            + " |"
        )

    return "\n".join([rule, line(cells[0]), rule, *(line(r) for r in cells[1:]), rule])


def write_fx_graph(path: str, gm: fx.GraphModule) -> None:
    """``opcode | name | target | args | kwargs`` of every node."""
    rows = [[n.op, n.name, _target(n), n.args, n.kwargs] for n in gm.graph.nodes]
    with open(path, "w") as f:
        f.write(
            format_table(["opcode", "name", "target", "args", "kwargs"], rows) + "\n"
        )


def _target(node: fx.Node) -> str:
    if isinstance(node.target, str):
        return node.target
    try:
        return fx.node._get_qualified_name(node.target)
    except Exception:
        return repr(node.target)


def _observer(fq: FakeQuantize) -> str:
    name = type(fq.activation_post_process).__name__
    return name + (" (pot)" if fq.pot else "")


def _qat_modules(gm: fx.GraphModule) -> list[tuple[str, QATModule]]:
    """QAT modules in graph order, each once."""
    seen, result = set(), []
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target not in seen:
            seen.add(node.target)
            module = gm.get_submodule(node.target)
            if isinstance(module, QATModule):
                result.append((node.target, module))
    return result


def _input_dtypes(module: QATModule) -> str:
    if type(module).__name__ == "QuantStub":
        return "float"
    dtypes = [
        str(fq.dtype) if fq is not None else "float"
        for fq in module.input_fake_quants()
    ]
    return ", ".join(dtypes) or "-"


def _sections(gm: fx.GraphModule, report: Report) -> list[str]:
    level = "not set" if report.level is None else str(report.level)
    parts = [f"Consistency level: {level}"]

    if report.unfused:
        rows = [
            [" + ".join(u.names), " + ".join(u.types), u.reason] for u in report.unfused
        ]
        table = format_table(["name", "type", "why not fused"], rows)
        parts.append("Fusable modules are listed below:\n" + table)
    else:
        parts.append(
            "Fusable modules are listed below:\nNone: every fusable pattern was fused."
        )

    if report.call_counts:
        rows = [
            [name, kind, count] for name, (count, kind) in report.call_counts.items()
        ]
        table = format_table(["name", "type", "called times"], rows)
        note = (
            "Each call got its own QAT module (<name>_<k> after the first: own input "
            "and output scales); the calls of a weight module share its weight."
        )
        parts.append("Each module called times:\n" + table + "\n" + note)
    else:
        parts.append("All modules in the model run exactly once.")

    modules = _qat_modules(gm)
    applied = applied_rules(gm, report)
    rows = []
    for label in report.rule_labels:
        names = applied[label]
        # a name rule that sets nothing raises (prepare); a type rule warns; an
        # op-type template (written for any model) is listed only
        if not names and label.startswith("module_type["):
            warnings.warn(
                f"qconfig override {label} applied to no module", stacklevel=4
            )
        rows.append(
            [label, ", ".join(names) if names else "WARNING: applied to no module"]
        )
    if rows:
        parts.append(
            "Qconfig overrides and the modules they set:\n"
            + format_table(["rule", "applied to"], rows)
        )
    else:
        parts.append("Qconfig overrides: none (every module uses the default qconfig).")

    rows = [
        [
            name,
            type(m).__name__,
            _input_dtypes(m),
            m.activation_post_process.dtype,
            m.activation_post_process.ch_axis,
            _observer(m.activation_post_process),
            report.sources.get(name, "default"),
        ]
        for name, m in modules
    ]
    headers = [
        "Module Name",
        "Module Type",
        "Input dtype",
        "out dtype",
        "ch_axis",
        "observer",
        "qconfig from",
    ]
    parts.append("Each layer out qconfig:\n" + format_table(headers, rows))

    rows = [
        [
            name,
            type(m).__name__,
            m.weight_fake_quant.dtype,
            m.weight_fake_quant.ch_axis,
            _observer(m.weight_fake_quant),
        ]
        for name, m in modules
        if hasattr(m, "weight_fake_quant")
    ]
    headers = ["Module Name", "Module Type", "weight dtype", "ch_axis", "observer"]
    parts.append("Weight qconfig:\n" + format_table(headers, rows))

    stats = Counter(
        (type(m).__name__, _input_dtypes(m), str(m.activation_post_process.dtype))
        for _, m in modules
    )
    rows = [[*key, count] for key, count in sorted(stats.items())]
    parts.append(
        "input/output dtype statistics:\n"
        + format_table(["Module Type", "input dtype", "output dtype", "count"], rows)
    )

    if report.generated_stubs:
        table = format_table(["QuantStub", "quantizes", "why"], report.generated_stubs)
        parts.append("Generated QuantStubs:\n" + table)

    if report.unquantized:
        table = format_table(["node", "op", "why"], report.unquantized)
        parts.append("Ops left unquantized (run in float):\n" + table)
    else:
        parts.append("Ops left unquantized (run in float): none.")

    parts.append("Please check if these OPs qconfigs are expected.")
    return parts


def applied_rules(gm: fx.GraphModule, report: Report) -> dict[str, list[str]]:
    """Each qconfig rule -> the QAT modules it set (a module's source is the
    ``" + "``-joined labels of every rule that set it)."""
    applied: dict[str, list[str]] = {label: [] for label in report.rule_labels}
    fp16 = [  # an fp16 op's output FakeCast carries the rule that made it fp16
        n.target
        for n in gm.graph.nodes
        if n.op == "call_module" and isinstance(gm.get_submodule(n.target), FakeCast)
    ]
    for name in [name for name, _ in _qat_modules(gm)] + fp16:
        for label in report.sources.get(name, "default").split(" + "):
            applied.setdefault(label.split(" (")[0], []).append(name)
    return applied


def write_check_result(path: str, gm: fx.GraphModule, report: Report) -> None:
    with open(path, "w") as f:
        f.write("\n\n".join(_sections(gm, report)) + "\n")
