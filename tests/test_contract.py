"""The numeric contract, end to end: every zoo model at every consistency level.

qat.export.pt (``pre_export`` of the VALIDATION model: qat.pt with its table ops'
exact tables, the one allowed difference) -> qat.bc -> quantized.bc -> the
compiled npu program -> model.hbm (written and loaded back), fed the same inputs,
compared element by element: every pair must be bit-identical (docs/contract.md). On a failure the
message names where the numbers first part: ``hbir doctor``'s finding (stage pair,
op, cause) up to quantized.bc, the first compile pass that changes them, and the
first model.hbm instruction that computes a quantized.bc op differently
(``hb_verifier``'s trace).
"""

import numpy as np
import pytest
import torch
import zoo
from zoo_stages import calibrated

import hbir
from hbir.compile import compile_passes, lower_to_npu
from hbir.dialects import make_context
from hbir.profiler.doctor import diagnose
from hbir.quantization import export, pre_export
from hbir.tools import hb_verifier

pytestmark = pytest.mark.slow  # not in the fast tier (docs/testing.md)

LEVELS = [None, 0, 1, 2]
INPUTS = 3


def _outputs(function, inputs, reference: bool = True) -> list[np.ndarray]:
    names = function.inputs.names if hasattr(function.inputs, "names") else None
    if names is None:
        names = [d.name for d in function.inputs]
    feed = dict(zip(names, (np.asarray(x) for x in inputs), strict=True))
    if reference:
        return list(function.feed(feed, reference=True).values())
    return list(function.feed(feed).values())


def _first_compile_pass_changing(quantized, inputs) -> str:
    current, ctx = quantized.clone(), make_context()
    want = _outputs(quantized["forward"], inputs)
    for p in compile_passes("nash-e"):
        p.apply(ctx, current.module.op)
        got = _outputs(current["forward"], inputs)
        if any(not np.array_equal(w, g) for w, g in zip(want, got, strict=True)):
            return f"the first compile pass that changes them: {p.name}"
    return "no single compile pass changes them"


@pytest.mark.parametrize("level", LEVELS, ids=["default", "level0", "level1", "level2"])
@pytest.mark.parametrize("name", zoo.NAMES)
def test_every_stage_is_bit_identical(name, level, tmp_path):
    qat, example = calibrated(name, tmp_path, level=level, qat_steps=2)
    qat_export = pre_export(qat)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    program = lower_to_npu(quantized, "nash-e")
    hbir.save(quantized, str(tmp_path / "quantized.bc"))
    hbir.compile(quantized, tmp_path / "model.hbm", "nash-e")
    hbm = hbir.load(str(tmp_path / "model.hbm"))
    batch = len(example[0])
    for inputs in zoo.batches(name, INPUTS, batch=batch, seed=300):
        with torch.no_grad():
            out = qat_export(*inputs)
        stages = {
            "qat.export.pt": [
                t.numpy() for t in (out if isinstance(out, tuple) else (out,))
            ],
            "qat.bc": _outputs(qat_bc["forward"], inputs),
            "quantized.bc": _outputs(quantized["forward"], inputs),
            "npu program": _outputs(program["forward"], inputs),
            "model.hbm": _outputs(hbm.functions[0], inputs, reference=False),
        }
        names = list(stages)
        for a, b in zip(names, names[1:], strict=False):
            pairs = zip(stages[a], stages[b], strict=True)
            differ = sum(int(np.count_nonzero(x != y)) for x, y in pairs)
            if differ:
                pytest.fail(f"{name} level {level}: {a} -> {b}: {differ} elements "
                            f"differ; {_where(a, b, qat, qat_bc, quantized, inputs, tmp_path)}")  # fmt: skip


def _where(a, b, qat, qat_bc, quantized, inputs, tmp_path) -> str:
    """Where the numbers of stages ``a`` and ``b`` first part."""
    if b in ("qat.bc", "quantized.bc"):
        found = diagnose(qat, [inputs], qat_bc=qat_bc, quantized_bc=quantized)
        return found.text()
    if b == "npu program":
        return _first_compile_pass_changing(quantized, inputs)
    bc = hb_verifier.load_model(str(tmp_path / "quantized.bc"))
    hbm = hb_verifier.load_model(str(tmp_path / "model.hbm"))
    feed = dict(zip([d.name for d in hbm.function.inputs], inputs, strict=True))
    feed = {k: np.asarray(v) for k, v in feed.items()}
    return hb_verifier.first_instruction_mismatch(bc, hbm, feed, None, (0, 1)) or (
        "no instruction computes a quantized.bc op differently"
    )
