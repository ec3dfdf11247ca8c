"""``diagnose``: the first stage pair beyond its contract, its first op, and the cause.

Runs every stage the user has on each input batch (one batch in memory at a
time), compares neighbours layer by layer (``compare.Comparison``, aligned by
origin), and checks each pair against its contract (``stages.CONTRACTS``). For the
first pair that breaks it, the first op (in execution order) whose output breaks
it is named with its ID in ``qat.bc`` (what ``bc_editor`` takes), its torch
origin and source line, and one cause from ``CAUSES``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np

from hbir.dialects import qnt
from hbir.module import Module
from hbir.profiler import metrics, nv12, quant_loss
from hbir.profiler import origin as og
from hbir.profiler import stages as st
from hbir.profiler.compare import Comparison

CAUSES = (
    "lookup-table approximation",
    "requantization tie",
    "float CPU island",
    "graph mismatch",
    "input preprocessing or layout",
    "march limit",
    "stale or corrupted quantized.bc",
    "stale or corrupted model.hbm",
    "stale or foreign checkpoint",
    "input normalisation",
    "observer still on",
    *quant_loss.CAUSES,
    # an op qat.bc marks qnt.inexact, with its cause (qnt.INEXACT_CAUSES)
    *(f"inexact: {cause}" for cause in qnt.INEXACT_CAUSES),
    "tool bug",
)
# Torch calls that export or convert may fold away (moves, stubs): their absence
# in a later stage is not a graph mismatch.
_MAY_VANISH = (
    "DeQuantStub",
    "QuantStub",
    "flatten",
    "view",
    "reshape",
    "permute",
    "transpose",
    "getitem",
    "unsqueeze",
    "squeeze",
    "contiguous",
    "Identity",
    "Dropout",
)


@dataclass
class Finding:
    """The first op of a stage pair beyond its contract, and why."""

    baseline: str
    analysis: str
    layer: str  # "<path>#<call>"
    torch_op: str
    op_id: int | None  # %N in qat.bc
    analysis_op_id: int | None  # %N in the analysis model, if HBIR
    hbir_op: str
    source: str  # torch file:line
    cause: str
    detail: str
    lsb: float | None = None  # an input finding: the block difference in levels
    # An input finding (the NV12 stage): the input the op was inserted on, the
    # op's location, and the qat.bc op (of the input's QuantStub) op_id names.
    input: str | None = None
    location: str = ""
    baseline_op: str = ""
    instruction: int | None = None  # model.hbm: the instruction computing the op


@dataclass
class PairResult:
    baseline: str
    analysis: str
    contract: str
    within: bool
    output_atol: list[float]
    worst_lsb: float
    layers: list[dict] = field(default_factory=list)
    histogram: list[int] = field(default_factory=list)
    # The nv12 contract: per input, the entering codes' difference in levels
    # (profiler/nv12.py's InputDiff).
    inputs: list[dict] = field(default_factory=list)


@dataclass
class Diagnosis:
    pairs: list[PairResult]
    finding: Finding | None
    batches: int
    stages: list[str]
    # float model -> qat.pt (profiler/quant_loss.py), when qat.pt is a torch model
    quant_loss: quant_loss.QuantLoss | None = None

    @property
    def ok(self) -> bool:
        return self.finding is None

    def text(self) -> str:
        """One screen: every pair's verdict, then the finding."""
        lines = [
            f"hbir doctor: {self.batches} batch(es), stages: "
            + " -> ".join(self.stages)
        ]
        for p in self.pairs:
            verdict = "within contract" if p.within else "BEYOND CONTRACT"
            atol = max(p.output_atol, default=0.0)
            lines.append(
                f"  {p.baseline:>13} -> {p.analysis:<13} [{p.contract}] "
                f"{verdict}: output max|diff| {atol:.6g}, worst layer "
                f"{p.worst_lsb:.3g} LSB"
            )
        q = self.quant_loss
        if q is not None:
            verdict = "within tolerance" if q.within else "BEYOND TOLERANCE"
            spread = (
                ""
                if q.within or q.found or not q.sensitive
                else " (spread over the model: no one layer, int16 or range "
                "recovers it)"
            )
            lines.append(
                f"  {'float':>13} -> {'qat.pt':<13} [tolerance] {verdict}: output "
                f"cosine {q.cosine:.6g} (tolerance {q.tolerance:g}){spread}"
            )
        f = self.finding
        if f is None:
            lines.append("every stage is within its contract")
            return "\n".join(lines)
        if f.input is not None:
            lines += [
                f"first stage pair beyond contract: {f.baseline} -> {f.analysis}",
                f"first op: %{f.analysis_op_id} '{f.hbir_op}' in {f.analysis}, "
                f"inserted on input '{f.input}' (location: {f.location})",
                f"  feeds {f.layer} ({f.torch_op}): "
                + ", ".join(
                    part
                    for part in (
                        f"%{f.op_id} '{f.baseline_op}' in qat.bc"
                        if f.op_id is not None
                        else "",
                        f"torch source {f.source}" if f.source else "",
                    )
                    if part
                ),
                f"cause: {f.cause}: {f.detail}",
            ]
            return "\n".join(lines)
        if f.cause == "observer still on":  # nothing could be compared
            lines += [
                f"qat.pt is not frozen: {f.layer} and others still observe",
                f"cause: {f.cause}: {f.detail}",
            ]
            return "\n".join(lines)
        op = f"%{f.op_id}" if f.op_id is not None else "(not in qat.bc)"
        if f.baseline in ("data", "float"):  # every pair is within
            lines += [
                "every stage is within its contract, but "
                + (
                    "the data is not what the model was calibrated on"
                    if f.baseline == "data"
                    else "qat.pt itself is far from the float model"
                ),
                f"first op: {op} in qat.bc '{f.hbir_op}' <- {f.layer} ({f.torch_op})",
                f"  torch source: {f.source or 'unknown'}",
                f"cause: {f.cause}: {f.detail}",
            ]
            return "\n".join(lines)
        lines += [
            f"first stage pair beyond contract: {f.baseline} -> {f.analysis}",
            f"first op: {op} in qat.bc '{f.hbir_op}' <- {f.layer} ({f.torch_op})",
            f"  torch source: {f.source or 'unknown'}",
        ]
        if f.instruction is not None:
            lines.append(
                f"  in {f.analysis}: instruction #{f.instruction}, computing "
                f"%{f.analysis_op_id} of quantized.bc"
            )
        elif f.analysis_op_id is not None and f.analysis != "qat.bc":
            lines.append(f"  in {f.analysis}: %{f.analysis_op_id}")
        lines.append(f"cause: {f.cause}: {f.detail}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "batches": self.batches,
            "stages": self.stages,
            "pairs": [asdict(p) for p in self.pairs],
            "finding": asdict(self.finding) if self.finding else None,
            "quant_loss": _loss_json(self.quant_loss),
            "causes": list(CAUSES),
        }


def _batches(data: Iterable) -> Iterable[tuple]:
    for item in data:
        yield tuple(item) if isinstance(item, tuple | list) else (item,)


def diagnose(
    qat_model,
    data: Iterable,
    march: str = "nash-e",
    *,
    qat_bc=None,
    quantized_bc=None,
    nv12_quantized_bc=None,
    nv12_data: Iterable | None = None,
    model_hbm=None,
    float_model=None,
    cosine_tolerance: float | None = quant_loss.COSINE_TOLERANCE,
    out_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> Diagnosis:
    """Find the first stage pair beyond contract, its first op and the cause.

    ``qat_model`` is the prepared model (``qat.pt``, in VALIDATION); ``data`` an
    iterable of input tuples (or tensors) with the exported batch size. Stages not
    given are made: ``pre_export(qat_model)``, ``export(qat_model, first batch)``,
    ``hbir.convert(qat_bc, march)``. With ``out_dir``, ``report.json`` and
    ``report.html`` are written there.

    ``nv12_quantized_bc`` (qat.bc with camera nodes inserted, converted) joins the
    road after quantized.bc; ``nv12_data`` then yields the same frames as ``data``
    as NV12 planes, batch for batch: tuples in the order of its inputs, e.g. the
    ``(y, uv)`` of ``hbir.data.rgb_to_nv12``. Its contract with quantized.bc is
    checked by ``profiler/nv12.py``.

    ``model_hbm`` (an ``Hbm``, compiled from quantized.bc, or from
    nv12_quantized.bc when that is given) ends the road: the compile stage
    (``profiler/compile_stage.py``), exact, recorded through its debug table.

    qat.pt is also compared with the float model (``float_model``, else qat.pt
    with every fake quant off) by output cosine: when every stage is within its
    contract but qat.pt is below ``cosine_tolerance``, the sensitive layer and
    the measured remedies (int16, a wider range) are the finding
    (``profiler/quant_loss.py``); ``cosine_tolerance=None`` skips the float
    model.
    """
    import hbir
    from hbir.quantization import export, pre_export

    if (nv12_quantized_bc is None) != (nv12_data is None):
        raise st.StageError(
            "diagnose: the NV12 stage needs both nv12_quantized_bc and nv12_data "
            "(the NV12 planes of the same frames as data)"
        )
    it = iter(_batches(data))
    first = next(it, None)
    if first is None:
        raise st.StageError("diagnose: data is empty: give at least one input batch")
    observing = _observing(qat_model)
    if observing is not None:
        return observing
    checkpoint = None
    if qat_bc is None:
        qat_bc = export(qat_model, first)
    else:  # a qat.bc of its own: is it the export of this qat.pt?
        given = qat_bc

        def checkpoint(key, diff):
            return _checkpoint_cause(key, diff, given, export(qat_model, first))

    fresh = hbir.convert(qat_bc, march)
    if quantized_bc is None:
        quantized_bc = fresh
    func = qat_bc["forward"].op
    grids = og.fake_quant_grids(func)
    road = [
        st.Stage("qat.pt", qat_model),
        st.Stage("qat.export.pt", pre_export(qat_model)),
        st.Stage("qat.bc", qat_bc),
        st.Stage("quantized.bc", quantized_bc, grids),
    ]
    planes = None
    if nv12_quantized_bc is not None:
        road[-1] = nv12.EntryStage("quantized.bc", quantized_bc, grids)
        road.append(nv12.Nv12Stage("nv12_quantized.bc", nv12_quantized_bc, grids))
        planes = iter(_batches(nv12_data))
    if model_hbm is not None:
        from hbir.profiler.compile_stage import HbmStage

        source = road[-1].model
        road.append(HbmStage("model.hbm", model_hbm, grids, source=source))
    nv12_check = nv12.Nv12Check()
    data_check = _input_check(qat_model)
    float_check = _float_check(qat_model, float_model, cosine_tolerance)
    pairs = list(zip(road, road[1:], strict=False))
    comparisons = [Comparison() for _ in pairs]
    lut_errors: dict[tuple[str, int], tuple[float, int, int]] = {}
    unexplained: dict[tuple[str, int], float] = {}
    count = 0
    total = len(data) if hasattr(data, "__len__") else None
    batches = _progress([first], it, progress, total)
    for inputs in batches:
        if data_check is not None:
            data_check.add(inputs)
        if float_check is not None:
            float_check.add(inputs)
        feeds = [inputs] * len(road)
        if planes is not None:
            frame = _next_planes(planes, count)
            for i, stage in enumerate(road):  # the NV12 model and what it compiled to
                if stage.name in ("nv12_quantized.bc", "model.hbm"):
                    feeds[i] = frame
        records = [s.record(x) for s, x in zip(road, feeds, strict=True)]
        for (a, b), comp, ra, rb in zip(
            pairs, comparisons, records, records[1:], strict=False
        ):
            comp.add(ra, rb, grids)
            kind = st.contract(a.name, b.name)
            if kind == "lut":
                _lut_local_errors(a.model, b.model, ra, inputs, lut_errors)
                _unexplained(a.model, b.model, ra, rb, unexplained)
            elif kind == "nv12":
                nv12_check.add(a, b, ra, rb, inputs, feeds[_position(road, b)])
        count += 1
    if planes is not None and next(planes, None) is not None:
        raise st.StageError(
            f"diagnose: nv12_data has more batches than data ({count}): give the "
            "NV12 planes of the same frames, batch for batch"
        )
    results, finding = [], None
    ids = {k: _op_id(func, op) for k, op in main_ops(func).items()}
    origins = {k: og.origin_of(op) for k, op in og.layer_ops(func).items()}
    for (a, b), comp in zip(pairs, comparisons, strict=True):
        kind = st.contract(a.name, b.name)
        problem = _first_problem(
            kind,
            a,
            b,
            comp,
            (lut_errors, unexplained, nv12_check),
            quantized_bc,
            fresh,
            checkpoint,
        )
        results.append(
            _pair_result(a.name, b.name, kind, comp, problem is None, ids, origins)
        )
        if kind == "nv12":
            results[-1].inputs = [asdict(d) for d in nv12_check.inputs.values()]
        if problem is not None and finding is None:
            key, cause, detail, lsb = problem
            if isinstance(key, nv12.Entry):
                finding = _input_finding(a, b, key, cause, detail, lsb, ids, func)
            else:
                finding = _finding(a, b, key, cause, detail, lsb, comp, ids, func)
    if finding is None and data_check is not None:
        finding = _data_finding(data_check, func, ids)
    loss = None
    if float_check is not None:  # measured only when nothing else explains it
        loss = float_check.result(measure=finding is None)
        if finding is None and loss.found:
            finding = _loss_finding(loss, func, ids)
    diagnosis = Diagnosis(results, finding, count, [s.name for s in road], loss)
    if out_dir is not None:
        from hbir.profiler.report import write_report

        write_report(diagnosis, out_dir)
    return diagnosis


def _observing(qat_model) -> Diagnosis | None:
    """qat.pt with observers still running (CALIBRATION or QAT state): its scales
    move with every batch, so no later stage is the same model; a finding at the
    first such fake quant, before anything is exported."""
    from torch import nn

    from hbir.quantization.fake_quantize import FakeQuantize

    if not isinstance(qat_model, nn.Module):
        return None
    names = [
        name
        for name, m in qat_model.named_modules()
        if isinstance(m, FakeQuantize) and bool(m.observer_enabled[0])
    ]
    if not names:
        return None
    state = next(
        (m._state.name for m in qat_model.modules() if isinstance(m, FakeQuantize)),
        None,
    )
    shown = ", ".join(names[:3]) + (
        f" and {len(names) - 3} more" if len(names) > 3 else ""
    )
    finding = Finding(
        "qat.pt",
        "qat.pt",
        names[0].removesuffix(".activation_post_process"),
        "FakeQuantize",
        None,
        None,
        "",
        "",
        "observer still on",
        f"{len(names)} fake quant(s) of qat.pt still observe ({shown})"
        + (f", in FakeQuantState.{state}" if state else "")
        + ": their scales move with every batch, so no later stage computes the "
        "same model; evaluate and export in VALIDATION: model.eval(); "
        "set_fake_quantize(model, FakeQuantState.VALIDATION)",
    )
    return Diagnosis([], finding, 0, ["qat.pt"])


def _input_check(qat_model):
    from torch import fx

    from hbir.profiler.input_check import InputCheck, input_ranges

    if not isinstance(qat_model, fx.GraphModule):
        return None
    ranges = input_ranges(qat_model)
    return InputCheck(ranges) if ranges else None


def _float_check(qat_model, float_model, tolerance):
    from torch import nn

    if not isinstance(qat_model, nn.Module) or tolerance is None:
        return None
    if float_model is not None and not isinstance(float_model, nn.Module):
        raise st.StageError(
            f"diagnose: float_model must be the float torch model (an nn.Module), "
            f"got {type(float_model).__name__}"
        )
    return quant_loss.FloatCheck(qat_model, float_model, tolerance)


def _loss_finding(loss, func, ids) -> Finding:
    """A finding at the op of the fake quant the quantization loss names."""
    owner = loss.fake_quant.rsplit(".", 1)[0]
    key = (owner, 0)
    op = main_ops(func).get(key)
    origin = og.origin_of(op) if op is not None else None
    return Finding(
        "float",
        "qat.pt",
        og.key_text(key),
        origin.torch_op if origin else "",
        ids.get(key),
        None,
        op.name if op is not None else "",
        origin.source if origin else "",
        loss.cause,
        loss.detail(),
    )


def _loss_json(loss) -> dict | None:
    if loss is None:
        return None
    return {
        "cosine": loss.cosine,
        "batch": loss.batch,
        "tolerance": loss.tolerance,
        "within": loss.within,
        "sensitive": [list(s) for s in loss.sensitive],
        "remedies": [asdict(r) for r in loss.remedies],
    }


def _data_finding(check, func, ids) -> Finding | None:
    """A finding at the input QuantStub when the data does not look like the
    calibration data (``profiler/input_check.py``)."""
    found = check.problem()
    if found is None:
        return None
    r, detail = found
    op = main_ops(func).get(r.key)
    origin = og.origin_of(op) if op is not None else None
    return Finding(
        "data",
        "qat.pt",
        og.key_text(r.key),
        origin.torch_op if origin else "",
        ids.get(r.key),
        None,
        op.name if op is not None else "",
        origin.source if origin else "",
        "input normalisation",
        detail,
    )


def _position(road, stage) -> int:
    return next(i for i, s in enumerate(road) if s is stage)


def _next_planes(planes, index: int) -> tuple:
    batch = next(planes, None)
    if batch is None:
        raise st.StageError(
            f"diagnose: nv12_data has {index} batch(es), data has more: give the "
            "NV12 planes of the same frames, batch for batch"
        )
    return batch


def _input_finding(a, b, entry, cause, detail, lsb, ids, func) -> Finding:
    """A finding at the NV12 model's ``hbir.image_preprocess``: its ID there, the
    input it was inserted on, and the torch call that input feeds (the QuantStub
    whose ID in qat.bc bc_editor takes)."""
    from xdsl.dialects.builtin import UnknownLoc

    from hbir.dialects.op_ids import op_ids

    pre = entry.preprocess
    analysis_id = {op: n for n, op in op_ids(b.function.op).items()}.get(pre)
    quantize = nv12.plain_entries(a.function).get(entry.input)
    origin = og.origin_of(quantize.tap) if quantize is not None else None
    key = origin.key if origin is not None else None
    loc = pre.location
    where = (
        "unknown (inserted by insert_image_preprocess)"
        if isinstance(loc, UnknownLoc)
        else str(loc)
    )
    op = main_ops(func).get(key) if key is not None else None
    return Finding(
        a.name,
        b.name,
        og.key_text(key) if key is not None else entry.input,
        origin.torch_op if origin else "",
        ids.get(key),
        analysis_id,
        pre.name,
        origin.source if origin else "",
        cause,
        detail,
        lsb,
        input=entry.input,
        location=where,
        baseline_op=op.name if op is not None else "",
    )


def _progress(head, rest, enabled, total: int | None = None):
    """The batches, behind a tqdm bar (with its total and so an ETA, when the
    data has a length) when ``enabled``."""
    import itertools

    stream = itertools.chain(head, rest)
    if not enabled:
        return stream
    try:
        from tqdm import tqdm
    except ImportError:
        return stream
    return tqdm(stream, desc="hbir doctor", unit="batch", total=total)


def _op_id(func, op) -> int | None:
    from hbir.dialects.op_ids import op_ids

    for n, o in op_ids(func).items():
        if o is op:
            return n
    return None


def main_ops(func) -> dict:
    """Per origin, the op that computes it: the last op of that origin outside
    the qnt dialect (a conv, not the fake quant of its output), else its last op."""
    from hbir.dialects.hbir import ConstantOp

    found = dict(og.layer_ops(func))
    for op in func.body.block.ops:
        origin = og.origin_of(op)
        if origin is None or not op.results or isinstance(op, ConstantOp):
            continue
        if not op.name.startswith("qnt."):
            found[origin.key] = op
    return found


def _pair_result(a, b, kind, comp: Comparison, within, ids, origins) -> PairResult:
    lsbs = [d.lsb for d in comp.layers.values() if d.lsb is not None]
    hist = np.zeros(21, np.int64)
    for d in comp.layers.values():
        hist += d.hist
    rows = []
    for d in comp.layers.values():
        rows.append(
            {
                "layer": d.name,
                "op_id": ids.get(d.key),
                "analysis_op_id": d.op_id,
                "op_type": d.analy_op_type,
                "source": d.source
                or (origins[d.key].source if origins.get(d.key) else ""),
                "atol": d.atol,
                "lsb": d.lsb,
                "cosine": d.cosine,
            }
        )
    return PairResult(
        a,
        b,
        kind,
        within,
        list(comp.output_atol),
        max(lsbs, default=0.0),
        rows,
        hist.tolist(),
    )


# ------------------------------------------------------------------ contracts


def _keys(module) -> set:
    """The origin keys of the ops of ``module``'s forward."""
    return {o.key for op in module["forward"].op.walk() if (o := og.origin_of(op))}


def _first_problem(
    kind, a, b, comp: Comparison, lut_checks, quantized, fresh, checkpoint=None
):
    """(key, cause, detail, lsb) of the first op beyond the contract, or None.
    ``checkpoint(key, diff)``: the cause of a qat.bc that differs from qat.pt's
    own export (``_checkpoint_cause``), when qat.bc was given."""
    lut_errors, unexplained, nv12_check = lut_checks
    vanished = [
        k
        for k, t in comp.only_baseline.items()
        if not t.endswith(_MAY_VANISH) and not t.split("[")[0].endswith(_MAY_VANISH)
    ]
    if isinstance(b.model, Module):
        # Missing from the recording is not missing from the graph (a
        # multi-result op may go unrecorded); and what convert itself removes
        # is missing from its own output too.
        vanished = [k for k in vanished if k not in _keys(b.model)]
        if b.name == "quantized.bc" and fresh is not None:
            vanished = [k for k in vanished if k in _keys(fresh)]
    order = list(comp.layers) + list(comp.only_analysis)
    differs = any(d.atol > 0 or d.mismatch for d in comp.layers.values())
    # A compiled model computes some ops only in tiles or fused into others: the
    # values it does not have whole are not a different graph.
    graph_checked = b.kind != "hbm"
    if graph_checked and (comp.only_analysis or (vanished and differs)):
        extra = next(iter(comp.only_analysis), None)
        if extra is not None:
            layer = comp.only_analysis[extra]
            return (
                extra,
                "graph mismatch",
                f"{og.key_text(extra)} ({layer.op_type}) is in {b.name} but not in "
                f"{a.name}: the exported graph is not the QAT model's (a branch on "
                "a flag such as `if deploy:`, or a different model was exported)",
                None,
            )
        key = vanished[0]
        return (
            key,
            "graph mismatch",
            f"{og.key_text(key)} ({comp.only_baseline[key]}) is in {a.name} but "
            f"not in {b.name}",
            None,
        )
    if kind == "nv12":
        return nv12_check.problem(a.name, b.name, b, order)
    if b.kind == "hbm" and b.mismatch:
        if not any(x > 0 for x in comp.output_atol):
            return None
        return (
            next(iter(comp.only_baseline), ("?", 0)),
            "stale or corrupted model.hbm",
            f"model.hbm was not compiled from this {a.name}: {b.mismatch}; compile "
            f"it again (hbir compile {a.name} -o model.hbm)",
            None,
        )
    if kind == "lut":
        for key in comp.layers:
            if key in unexplained:
                return (
                    key,
                    "tool bug",
                    f"{og.key_text(key)} is not a table op and differs by "
                    f"{unexplained[key]:g} between {a.name} and {b.name} on the "
                    "same inputs: only table ops may differ there",
                    comp.layers[key].lsb,
                )
            if key in lut_errors:
                lsb, bits, tables = lut_errors[key]
                bound = st.LUT_BOUND_LSB.get(bits, 1.0)
                # Both sides are rounded to the output grid: the float function's
                # rounding adds up to half an LSB to the table's bound.
                if lsb > bound + 0.5:
                    return (
                        key,
                        "lookup-table approximation",
                        f"the table of {og.key_text(key)} (num_tables={tables}) is "
                        f"{lsb:g} LSB from its float function on the same input "
                        f"(bound {bound:g} LSB for int{bits} outputs); raise "
                        "num_tables",
                        lsb,
                    )
        return None
    for key in order:
        d = comp.layers.get(key)
        if d is None or not (d.atol > 0 or d.mismatch):
            continue
        if b.name == "quantized.bc":
            cause, detail = _convert_cause(key, d, quantized, fresh, a.model)
        elif b.name == "qat.bc" and checkpoint is not None:
            cause, detail = checkpoint(key, d)
        elif b.kind == "hbm":
            cause, detail = b.cause(key, d)
        else:
            cause, detail = (
                "tool bug",
                f"{og.key_text(key)} differs by {d.atol:g} between {a.name} and "
                f"{b.name}, which must be bit-identical",
            )
        return key, cause, detail, d.lsb
    if any(x > 0 for x in comp.output_atol):
        return (
            None
            if kind != "exact"
            else (
                next(iter(comp.layers), ("?", 0)),
                "tool bug",
                "the outputs differ while every aligned layer is identical",
                None,
            )
        )
    return None


def _convert_cause(key, d, quantized, fresh, qat_bc=None) -> tuple[str, str]:
    """Why quantized.bc differs from qat.bc at ``key``."""
    from hbir.passes.fixed_point import ATTR_CPU_REASON, op_device

    if isinstance(qat_bc, Module):
        for op in qat_bc["forward"].op.walk():
            o = og.origin_of(op)
            cause = qnt.inexact(op) if o is not None and o.key == key else None
            if cause is not None:
                return (
                    f"inexact: {cause}",
                    f"{og.key_text(key)} is marked qnt.inexact in qat.bc: "
                    f"{qnt.INEXACT_CAUSES[cause]}",
                )

    func = quantized["forward"].op
    mine = [op for op in func.walk() if (o := og.origin_of(op)) and o.key == key]
    for op in mine:
        if op_device(op) == "cpu":
            reason = op.attributes.get(ATTR_CPU_REASON)
            if reason is not None:
                return "march limit", f"'{op.name}' runs on the CPU: {reason.data}"
            return (
                "float CPU island",
                f"'{op.name}' runs in float on the CPU (no fake quantization "
                "around it): its float result is not qat.bc's fixed-point one",
            )
    ref_func = fresh["forward"].op
    theirs = [op for op in ref_func.walk() if (o := og.origin_of(op)) and o.key == key]
    ids = {op: n for n, op in _ids(func).items()}
    for mine_op, ref_op in zip(mine, theirs, strict=False):
        changed = _changed_property(mine_op, ref_op)
        if changed:
            return (
                "stale or corrupted quantized.bc",
                f"%{ids.get(mine_op)} '{mine_op.name}' in quantized.bc has "
                f"{changed}, but convert makes it from qat.bc with a different value: "
                "quantized.bc is not what convert makes of this qat.bc (edited, "
                "corrupted, or converted from another qat.bc): convert it again "
                "(hbir convert qat.bc -o quantized.bc)",
            )
    lsb = d.lsb
    if lsb is not None and lsb <= 1.0:
        return (
            "requantization tie",
            f"{og.key_text(key)} differs by 1 LSB: a value exactly between two "
            "codes rounded the other way",
        )
    return (
        "tool bug",
        f"{og.key_text(key)} differs by {d.atol:g}"
        + (f" ({lsb:g} LSB)" if lsb is not None else "")
        + " and no named cause explains it",
    )


def _checkpoint_cause(key, d, qat_bc, own) -> tuple[str, str]:
    """Why a given qat.bc differs from qat.export.pt at ``key``: when it is not
    the export of this qat.pt (``own``: exported now), the first op whose
    constant or property differs, with its values."""
    from hbir.dialects.hbir import TensorConstant, dense_array

    ops = list(qat_bc["forward"].op.walk())
    theirs = list(own["forward"].op.walk())
    ids = {op: n for n, op in _ids(qat_bc["forward"].op).items()}
    same_graph = len(ops) == len(theirs) and all(
        x.name == y.name for x, y in zip(ops, theirs, strict=True)
    )
    if not same_graph:
        return (
            "stale or foreign checkpoint",
            f"qat.bc is not the export of this qat.pt ({len(ops)} ops against "
            f"{len(theirs)} in qat.pt's own export): export it again from the "
            "qat.pt you evaluate",
        )
    for x, y in zip(ops, theirs, strict=True):
        if isinstance(x, TensorConstant):
            va, vb = dense_array(x.value), dense_array(y.value)
            if va.shape == vb.shape and np.array_equal(va, vb, equal_nan=True):
                continue
            where = _constant_owner(x)
            if va.shape != vb.shape:
                what = f"shape {list(va.shape)}, qat.pt's export {list(vb.shape)}"
            else:
                e = metrics.first_difference(va, vb)
                what = (
                    f"{e.value!r} at {e.index}, qat.pt's export has {e.other!r} "
                    f"({e.count} of {e.size} elements differ)"
                )
        else:
            changed = _changed_property(x, y)
            if not changed:
                continue
            where, what = _constant_owner(x), f"{changed} (not so in qat.pt's export)"
        return (
            "stale or foreign checkpoint",
            f"qat.bc was exported from another model state: %{ids.get(x)} "
            f"'{x.name}'{where} has {what}; export it again from the qat.pt you "
            "evaluate (or evaluate the checkpoint it came from)",
        )
    return (
        "tool bug",
        f"{og.key_text(key)} differs by {d.atol:g} between qat.export.pt and qat.bc, "
        "which must be bit-identical (qat.bc is qat.pt's own export)",
    )


def _constant_owner(op) -> str:
    """`` (of <torch call>)``: the origin of the op, or of the first op using it."""
    origin = og.origin_of(op)
    if origin is None:
        user = next((u.operation for r in op.results for u in r.uses), None)
        origin = og.origin_of(user) if user is not None else None
    return f" (of {og.key_text(origin.key)})" if origin is not None else ""


def _ids(func):
    from hbir.dialects.op_ids import op_ids

    return op_ids(func)


def _changed_property(a, b) -> str:
    """The first property of op ``a`` whose value differs from ``b``'s (the same
    op kind), as ``name[index] = value (expected other)`` for arrays and dense
    constants, else ``name = value``; "" when none differs."""
    if a.name != b.name:
        return ""
    for name, value in a.properties.items():
        other = b.properties.get(name)
        if other is None or str(other) == str(value):
            continue
        x, y = _property_array(value), _property_array(other)
        e = None
        if x is not None and y is not None and x.shape == y.shape:
            e = metrics.first_difference(x, y)
        if e is not None:
            return (
                f"{name}{e.index} = {e.value!r} (expected {e.other!r}; "
                f"{e.count} of {e.size} elements differ)"
            )
        text = str(value)
        return f"{name} = {text[:60]}{'...' if len(text) > 60 else ''}"
    return ""


def _property_array(value) -> np.ndarray | None:
    """A property's values as an array: a dense array or a dense constant."""
    from xdsl.dialects.builtin import DenseArrayBase, DenseIntOrFPElementsAttr

    from hbir.dialects.hbir import dense_array

    if isinstance(value, DenseArrayBase):
        return np.asarray(value.get_values())
    if isinstance(value, DenseIntOrFPElementsAttr):
        return dense_array(value)
    return None


def _lut_local_errors(pt_model, export_model, record, inputs, errors) -> None:
    """Each table op of ``export_model`` on ``pt_model``'s own input for it: the
    table's error alone (in LSB of its output grid), worst over batches."""
    import torch

    from hbir.quantization.lut_modules import LutModule

    keys = og.torch_keys(pt_model)
    for node, key in keys.items():
        if node.op != "call_module":
            continue
        module = export_model.get_submodule(node.target)
        if not isinstance(module, LutModule) or key not in record.layers:
            continue
        args = node.all_input_nodes
        if len(args) != 1 or keys.get(args[0]) not in record.layers:
            continue
        x = torch.from_numpy(record.layers[keys[args[0]]].value)
        fq = module.activation_post_process
        scale = float(fq.scale.reshape(-1)[0])
        with torch.no_grad():
            y = module(x).float().numpy()
        lsb = float(np.max(np.abs(y - record.layers[key].value), initial=0.0)) / scale
        worst = errors.get(key, (0.0, 0, 0))[0]
        errors[key] = (max(worst, lsb), fq.dtype.bits, module.num_tables)


def _unexplained(pt_model, export_model, ra, rb, found) -> None:
    """Ops other than table ops whose output differs while their inputs do not."""
    from hbir.quantization.lut_modules import LutModule

    keys = og.torch_keys(pt_model)
    for node, key in keys.items():
        la, lb = ra.layers.get(key), rb.layers.get(key)
        if la is None or lb is None or np.array_equal(la.value, lb.value):
            continue
        if node.op == "call_module" and isinstance(
            export_model.get_submodule(node.target), LutModule
        ):
            continue
        inputs = [keys.get(n) for n in node.all_input_nodes]
        if all(
            k is None
            or k not in ra.layers
            or k not in rb.layers
            or np.array_equal(ra.layers[k].value, rb.layers[k].value)
            for k in inputs
        ):
            diff = float(np.max(np.abs(la.value - lb.value), initial=0.0))
            found[key] = max(found.get(key, 0.0), diff)


def _finding(a, b, key, cause, detail, lsb, comp, ids, func) -> Finding:
    ops = main_ops(func)
    op = ops.get(key)
    origin = og.origin_of(op) if op is not None else None
    d = comp.layers.get(key)
    extra = comp.only_analysis.get(key)
    if origin is None and extra is not None:
        origin = extra.origin
    analysis_id = d.op_id if d is not None else (extra.op_id if extra else None)
    instruction = d.instruction if d is not None else None
    return Finding(
        a.name,
        b.name,
        og.key_text(key),
        origin.torch_op if origin else (d.base_op_type if d else ""),
        ids.get(key),
        analysis_id if b.kind in ("hbir", "hbm") else None,
        op.name if op is not None else "",
        origin.source if origin else "",
        cause,
        detail,
        lsb,
        instruction=instruction,
    )


def _torch_load(path: str, what: str, weights_only: bool):
    """``torch.load(path)``; any failure is a ``HbirFileError`` naming the file
    (the only cause is its content: not a ``torch.save`` file, or another kind)."""
    import torch

    from hbir.diagnostics import HbirFileError

    try:
        return torch.load(path, weights_only=weights_only)
    except OSError as e:
        raise HbirFileError(f"{path}: cannot read {what}: {e.strerror or e}") from None
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HbirFileError(
            f"{path}: cannot read {what}: not a torch.save file of one "
            f"({type(e).__name__}: {first[:200]})"
        ) from None


def load_inputs(path: str) -> list[tuple]:
    """Input batches from a ``torch.save`` file: a tensor (one batch), a tuple of
    tensors (one batch of a multi-input model), or a list of those; or a ``.npy``
    array (one batch)."""
    import torch

    from hbir.diagnostics import HbirFileError

    if str(path).endswith(".npy"):
        try:
            return [(torch.from_numpy(np.load(path, allow_pickle=False)),)]
        except (OSError, ValueError, TypeError) as e:
            raise HbirFileError(f"{path}: cannot read input batches: {e}") from None
    value = _torch_load(path, "input batches", weights_only=True)
    if isinstance(value, torch.Tensor):
        return [(value,)]
    if isinstance(value, tuple):
        return [value]
    if isinstance(value, list) and value:
        return [tuple(v) if isinstance(v, tuple | list) else (v,) for v in value]
    if isinstance(value, list):
        raise HbirFileError(f"{path}: an empty list: give at least one input batch")
    raise HbirFileError(
        f"{path}: expected a tensor, a tuple of tensors or a list of batches, "
        f"got {type(value).__name__}"
    )


def load_float_model(path: str):
    """The float model: an ``nn.Module`` saved whole with ``torch.save``."""
    from torch import nn

    from hbir.diagnostics import HbirFileError

    model = _torch_load(path, "the float model", weights_only=False)
    if not isinstance(model, nn.Module):
        raise HbirFileError(
            f"{path}: expected the float model saved whole (torch.save(model, "
            f"path)), got {type(model).__name__}"
        )
    return model.eval()


def load_qat_model(
    path: str, factory: str | None = None, example_inputs=None, qconfig=None
):
    """qat.pt: a prepared model saved whole, or its ``state_dict`` with the
    ``module:factory`` that builds the model (``hbir.quantization.checkpoint``)."""
    from hbir.quantization.checkpoint import load_qat

    return load_qat(path, factory, example_inputs, qconfig)
