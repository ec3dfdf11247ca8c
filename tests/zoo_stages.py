"""Shared helper: a zoo model taken through prepare and calibration to VALIDATION."""

import torch
import zoo

from hbir.quantization import (
    ConsistencyStrategy,
    FakeQuantState,
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
