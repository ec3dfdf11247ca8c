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
import warnings

from torch import nn

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
    blind = []
    for name, module in model.named_modules():
        if isinstance(module, FakeQuantize):
            module.configure(state, fake_quant, observe, needs_training, name)
            if not module.activation_post_process.has_data():
                blind.append(name)
    if state is FakeQuantState.VALIDATION and blind:
        shown = ", ".join(blind[:3]) + (
            f" and {len(blind) - 3} more" if len(blind) > 3 else ""
        )
        warnings.warn(
            f"set_fake_quantize(VALIDATION): {len(blind)} fake quant(s) have observed "
            f"nothing ({shown}): their scale is the initial 1.0; calibrate "
            "(FakeQuantState.CALIBRATION and a few batches) first",
            stacklevel=2,
        )
