"""The four fake-quantization states and the switch that sets them on a model.

| state         | fake quant | observers | model mode |
|---------------|------------|-----------|------------|
| QAT           | on         | update    | train()    |
| CALIBRATION   | off        | update    | eval()     |
| VALIDATION    | on         | frozen    | eval()     |
| _FLOAT        | off        | frozen    | eval()     |

A forward in the wrong mode raises and says what to call, because a silently wrong
mode (observers drifting during evaluation, frozen scales during training) is the
classic QAT mistake.
"""

from __future__ import annotations

import enum
import sys
import warnings

from torch import nn

from hbir.quantization.fake_cast import FakeCast
from hbir.quantization.fake_quantize import FakeQuantize


class FakeQuantState(enum.Enum):
    QAT = "qat"
    CALIBRATION = "calibration"
    VALIDATION = "validation"
    _FLOAT = "float"


# state -> (fake quant enabled, observer enabled, needs train mode)
_SETTINGS = {
    FakeQuantState.QAT: (True, True, True),
    FakeQuantState.CALIBRATION: (False, True, False),
    FakeQuantState.VALIDATION: (True, False, False),
    FakeQuantState._FLOAT: (False, False, False),
}


def set_fake_quantize(model: nn.Module, state: FakeQuantState) -> None:
    """Put every ``FakeQuantize`` of ``model`` into ``state``.

    QAT needs ``model.train()``; the other states need ``model.eval()``.
    """
    if not isinstance(state, FakeQuantState):
        raise TypeError(f"state must be a FakeQuantState, got {state!r}")
    fake_quant, observe, needs_training = _SETTINGS[state]
    if model.training != needs_training:
        mode, call = (
            ("eval", "model.train()") if needs_training else ("train", "model.eval()")
        )
        raise RuntimeError(
            f"set_fake_quantize(model, FakeQuantState.{state.name}) needs the model in "
            f"{'train' if needs_training else 'eval'} mode but it is in {mode} mode: "
            f"call {call} first"
        )
    for name, module in model.named_modules():
        if isinstance(module, FakeQuantize):
            module.configure(state, fake_quant, observe, needs_training, name)
        elif isinstance(module, FakeCast):  # nothing to observe: on but in _FLOAT
            module.enable_fake_quant(state is not FakeQuantState._FLOAT)
    _drop_calibration_check(model)
    if state is FakeQuantState.VALIDATION:
        # Checked at the first forward, not now: a checkpoint may still be loaded.
        model.register_forward_pre_hook(_check_calibrated_once)


def uncalibrated(model: nn.Module) -> list[str]:
    """The enabled fake quants of ``model`` that have observed nothing (their
    scale is the initial 1.0)."""
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, FakeQuantize)
        and bool(m.fake_quant_enabled[0])
        and not m.activation_post_process.has_data()
    ]


def warn_uncalibrated(model: nn.Module, when: str, stacklevel: int = 3) -> None:
    """Warn, naming them, when fake quants of ``model`` were never calibrated."""
    blind = uncalibrated(model)
    if not blind:
        return
    shown = ", ".join(blind[:3]) + (
        f" and {len(blind) - 3} more" if len(blind) > 3 else ""
    )
    warnings.warn(
        f"{when}: {len(blind)} fake quant(s) have observed nothing ({shown}): their "
        "scale is the initial 1.0, so values round to whole numbers (often all "
        "zeros); calibrate first: model.eval(), set_fake_quantize(model, "
        "FakeQuantState.CALIBRATION), a few batches, then VALIDATION again",
        stacklevel=stacklevel,
    )


def _check_calibrated_once(model: nn.Module, args) -> None:
    """Forward pre-hook of ``set_fake_quantize(model, VALIDATION)``: on the first
    forward, warn about fake quants that were never calibrated; then it is gone.
    (A module-level function, so a model saved whole still pickles.)"""
    _drop_calibration_check(model)
    warn_uncalibrated(
        model, "the first forward in FakeQuantState.VALIDATION", _user_level()
    )


def _user_level() -> int:
    """The ``stacklevel`` of the first frame outside torch and hbir (the user's
    ``model(x)``), counted from ``warn_uncalibrated``'s ``warnings.warn``."""
    import os

    import torch

    inside = (
        os.path.dirname(torch.__file__),
        os.path.dirname(os.path.dirname(__file__)),
    )
    frame, level = sys._getframe(1), 2  # the caller of this helper is level 2
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


def _drop_calibration_check(model: nn.Module) -> None:
    hooks = model._forward_pre_hooks
    for key in [k for k, hook in hooks.items() if hook is _check_calibrated_once]:
        del hooks[key]
