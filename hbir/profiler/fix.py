"""``hbir doctor --fix``: apply a finding's mechanical remedy to a copy, measure again.

For each cause with a remedy a machine can apply, :func:`remedy` makes the
change on copies (the user's models, files and data are never touched), runs
``diagnose`` again on the same batches and returns the change with the pair's
figures before and after:

* lookup-table approximation: ``num_tables`` of that table op doubled until the
  op is within its bound (at most 4 times);
* stale or foreign checkpoint: qat.bc exported again from qat.pt;
* stale or corrupted quantized.bc: quantized.bc converted again from qat.bc;
* stale or corrupted model.hbm: model.hbm compiled again from quantized.bc;
* observer still on: qat.pt put in eval mode and ``FakeQuantState.VALIDATION``;
* input normalisation: the data normalised as the finding names;
* quantization loss in qat.pt (``profiler/quant_loss.py``): the measured
  remedy that recovered the worst batch, on a copy of qat.pt: the layer in
  int16 ("int8 too coarse"), or its scale widened to the data's largest
  ``|x|`` ("clipped calibration range"); every later stage made again from
  the copy. The figure before and after is the cosine with the float model.

The other causes need a person (a graph that differs, a march limit, a tool bug).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from hbir.profiler import quant_loss
from hbir.profiler.doctor import Diagnosis, PairResult, diagnose


@dataclass
class Fix:
    """A remedy applied to copies, and what diagnose says after it."""

    cause: str
    applied: str  # what was changed, in words (on a copy)
    before: PairResult | None  # the finding's pair before the change, if it has one
    after: Diagnosis
    # float -> qat.pt before the change (a quantization-loss finding)
    before_loss: quant_loss.QuantLoss | None = None

    @property
    def worked(self) -> bool:
        return self.after.ok

    def text(self) -> str:
        lines = [f"fix ({self.cause}): {self.applied} (on a copy: no file changed)"]
        if self.before is not None:
            lines.append(f"  before: {_pair(self.before)}")
        pair = _same_pair(self.after, self.before)
        if pair is not None:
            lines.append(f"  after:  {_pair(pair)}")
        if self.before_loss is not None:
            lines.append(f"  before: {_loss(self.before_loss)}")
            if self.after.quant_loss is not None:
                lines.append(f"  after:  {_loss(self.after.quant_loss)}")
        verdict = (
            "every stage is within its contract"
            if self.worked
            else f"still beyond contract: {self.after.finding.cause}"
        )
        lines.append(f"  after the fix {verdict}")
        return "\n".join(lines)


def _pair(p: PairResult) -> str:
    atol = max(p.output_atol, default=0.0)
    return (
        f"{p.baseline} -> {p.analysis} output max|diff| {atol:.6g}, worst layer "
        f"{p.worst_lsb:.3g} LSB"
    )


def _loss(q: quant_loss.QuantLoss) -> str:
    return f"float -> qat.pt output cosine {q.cosine:.6g} (tolerance {q.tolerance:g})"


def _same_pair(d: Diagnosis, like: PairResult | None) -> PairResult | None:
    if like is None:
        return None
    return next(
        (
            p
            for p in d.pairs
            if (p.baseline, p.analysis) == (like.baseline, like.analysis)
        ),
        None,
    )


def remedy(
    diagnosis: Diagnosis,
    qat_model,
    data: list,
    march: str = "nash-e",
    **stages,
) -> Fix | None:
    """The finding's remedy (see the module) applied to copies, with diagnose
    run again on ``data`` (the batches as a list) and the same other
    ``stages`` (``diagnose``'s keywords), or None when the cause has none."""
    f = diagnosis.finding
    if f is None:
        return None
    before = next(
        (
            p
            for p in diagnosis.pairs
            if (p.baseline, p.analysis) == (f.baseline, f.analysis)
        ),
        None,
    )

    def again(model=qat_model, batches=data, **changed) -> Diagnosis:
        return diagnose(model, batches, march, **(stages | changed))

    stages = {k: v for k, v in stages.items() if k not in ("out_dir", "progress")}

    handler: Callable | None = _REMEDIES.get(f.cause)
    if handler is None:
        return None
    found = handler(diagnosis, qat_model, data, stages | {"march": march}, again)
    if found is None:
        return None
    applied, after = found
    loss = diagnosis.quant_loss if f.cause in quant_loss.CAUSES else None
    return Fix(f.cause, applied, before, after, loss)


# Every artifact made from qat.pt, dropped when qat.pt or qat.bc changes: diagnose
# makes them again from the copy.
_MADE_AGAIN = {
    "qat_bc": None,
    "quantized_bc": None,
    "nv12_quantized_bc": None,
    "nv12_data": None,
    "model_hbm": None,
}


def _tables(d, qat_model, data, stages, again):
    f = d.finding
    path = f.layer.rsplit("#", 1)[0]
    model = copy.deepcopy(qat_model)
    try:
        module = model.get_submodule(path)
    except AttributeError:
        return None
    tables = module.num_tables
    after = None
    for _ in range(4):
        tables *= 2
        module.num_tables = tables
        # qat.bc and what follows carry the tables: made again from the copy
        after = again(model, **_MADE_AGAIN)
        if after.finding is None or after.finding.layer != f.layer:
            break
    return f"{path}.num_tables = {tables}", after


def _export_again(d, qat_model, data, stages, again):
    return "qat.bc exported again from qat.pt", again(**_MADE_AGAIN)


def _convert_again(d, qat_model, data, stages, again):
    import hbir
    from hbir.quantization import export

    qat_bc = stages.get("qat_bc") or export(qat_model, _first(data))
    quantized = hbir.convert(qat_bc, stages["march"])
    return "quantized.bc converted again from qat.bc", again(quantized_bc=quantized)


def _compile_again(d, qat_model, data, stages, again):
    import hbir
    from hbir.quantization import export

    source = stages.get("nv12_quantized_bc") or stages.get("quantized_bc")
    if source is None:  # diagnose converted qat.bc itself: so does the fix
        qat_bc = stages.get("qat_bc") or export(qat_model, _first(data))
        source = hbir.convert(qat_bc, stages["march"])
    hbm = hbir.compile(source, None, source.march)
    return "model.hbm compiled again from quantized.bc", again(model_hbm=hbm)


def _validation(d, qat_model, data, stages, again):
    from hbir.quantization import FakeQuantState, set_fake_quantize

    model = copy.deepcopy(qat_model).eval()
    set_fake_quantize(model, FakeQuantState.VALIDATION)
    return "qat.pt set to eval() and FakeQuantState.VALIDATION", again(model)


def _normalise(d, qat_model, data, stages, again):
    f = d.finding
    from hbir.profiler.input_check import NORMALISATIONS

    label = next(
        (name for name, _ in NORMALISATIONS if f"as {name} it" in f.detail), None
    )
    if label is None:  # no common normalisation fits: a person must look
        return None
    fn = dict(NORMALISATIONS)[label]
    position = _input_position(qat_model, f.layer)
    batches = []
    for batch in data:
        batch = list(batch) if isinstance(batch, tuple | list) else [batch]
        batch[position] = _apply(fn, batch[position])
        batches.append(tuple(batch))
    return f"the data normalised as {label}", again(batches=batches)


def _quantization(d, qat_model, data, stages, again):
    """The measured remedy the finding chose, on a copy of qat.pt."""
    loss = d.quant_loss
    remedy = loss.best if loss is not None else None
    if remedy is None:
        return None
    model = copy.deepcopy(qat_model)
    change = quant_loss.apply(model, remedy, loss.ranges)
    return change, again(model, **_MADE_AGAIN)


def _input_position(qat_model, layer: str) -> int:
    """The position of the model input whose QuantStub is ``layer``."""
    from hbir.profiler.input_check import input_ranges
    from hbir.profiler.origin import key_text

    return next(r.position for r in input_ranges(qat_model) if key_text(r.key) == layer)


def _first(data) -> tuple:
    batch = data[0]
    return tuple(batch) if isinstance(batch, tuple | list) else (batch,)


def _apply(fn, x):
    import torch

    return torch.as_tensor(fn(x.detach().double().numpy()), dtype=x.dtype)


_REMEDIES = {
    "lookup-table approximation": _tables,
    "stale or foreign checkpoint": _export_again,
    "stale or corrupted quantized.bc": _convert_again,
    "stale or corrupted model.hbm": _compile_again,
    "observer still on": _validation,
    "input normalisation": _normalise,
    quant_loss.INT16_CAUSE: _quantization,
    quant_loss.RANGE_CAUSE: _quantization,
}
