"""Shared helpers: a zoo model taken through prepare and calibration to
VALIDATION; a prepared model taken through every later stage, bit for bit."""

import numpy as np
import torch
import zoo

import hbir
from hbir.quantization import (
    ConsistencyStrategy,
    FakeQuantState,
    export,
    pre_export,
    prepare,
    set_fake_quantize,
)


def calibrated(name: str, tmp_path, level=None, qat_steps: int = 0):
    """The prepared, calibrated (and optionally QAT-trained) model in VALIDATION."""
    ConsistencyStrategy.set_consistency_level(level)
    try:
        model, example = zoo.build(name)
        qat = prepare(model, example, zoo.qconfig(name), out_dir=tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for inputs in zoo.batches(name, 4):
            qat(*inputs)
    if qat_steps:
        qat.train()
        set_fake_quantize(qat, FakeQuantState.QAT)
        opt = torch.optim.SGD(qat.parameters(), lr=1e-3)
        for inputs in zoo.batches(name, qat_steps, seed=5):
            out = qat(*inputs)
            out = out if isinstance(out, tuple | list) else (out,)
            loss = sum(o.pow(2).mean() for o in out if o.is_floating_point())
            opt.zero_grad()
            loss.backward()
            opt.step()
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat, example


def validated(model, inputs, out_dir, qconfig=None, options=None):
    """``model`` prepared on ``inputs[0]`` (with ``options``), calibrated on every
    input, in VALIDATION."""
    qat = prepare(model.eval(), (inputs[0],), qconfig, out_dir=out_dir, options=options)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for x in inputs:
            qat(x)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat


def _arrays(result) -> list[np.ndarray]:
    """A feed's outputs (by name) or a torch forward's (one or a tuple)."""
    if isinstance(result, dict):
        return [np.asarray(result[k]) for k in sorted(result)]
    if isinstance(result, tuple | list):
        return [r.detach().numpy() for r in result]
    return [result.detach().numpy()]


def every_stage_bit_identical(
    qat, inputs, tmp_path, march: str = "nash-e"
) -> set[tuple[str, str]]:
    """Export, convert and compile ``qat`` (in VALIDATION, prepared on
    ``inputs[0]``) for ``march`` and assert, on every input: qat.bc == qat.export.pt,
    quantized.bc (the interpreter) == qat.bc, the model.hbm loaded back ==
    quantized.bc, bit for bit, and model.hbm runs nothing on the CPU but the
    quantize / dequantize at its edges. Returns model.hbm's (op, unit) pairs."""
    qat_bc = export(qat, (inputs[0],))
    exported = pre_export(qat)
    quantized = hbir.convert(qat_bc, march)
    hbm = hbir.compile(quantized, tmp_path / "model.hbm", march)
    loaded = hbir.load(str(tmp_path / "model.hbm"))
    for x in inputs:
        feed = {"_input_0": x.numpy()}
        with torch.no_grad():
            want = _arrays(exported(x))
        bc = _arrays(qat_bc["forward"].feed(feed))
        q = _arrays(quantized["forward"].feed(feed, reference=True))
        got = _arrays(loaded["forward"].feed(feed))
        assert len(want) == len(bc) == len(q) == len(got)
        for w, b, r, h in zip(want, bc, q, got, strict=True):
            assert b.tobytes() == w.tobytes(), "qat.bc differs from qat.export.pt"
            np.testing.assert_array_equal(r, b, "quantized.bc differs from qat.bc")
            assert h.dtype == r.dtype, "model.hbm's dtype differs"
            assert h.tobytes() == r.tobytes(), "model.hbm differs from quantized.bc"
    units = {
        (debug.op, instruction.unit)
        for code in hbm.program.functions
        for instruction, debug in zip(code.instructions, code.debug, strict=True)
    }
    on_cpu = {op for op, unit in units if unit == "cpu"}
    assert on_cpu <= {"qnt.quantize", "qnt.dequantize"}, on_cpu
    return units
