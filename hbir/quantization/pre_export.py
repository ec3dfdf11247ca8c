"""``pre_export``: ``qat.pt`` -> ``qat.export.pt``, LUT ops as their exact tables.

The returned copy computes every LUT-ready module the way deployment will: the input
codes go through the fixed-point table of ``runtime/numerics.py`` (``lut_forward``),
and the output codes are dequantized. Everything else is unchanged, so the only
difference between ``qat.pt`` and ``qat.export.pt`` is the table approximation,
bounded per op and tunable with ``num_tables``; ``qat.bc`` then equals
``qat.export.pt`` bit for bit.
"""

from __future__ import annotations

import copy

from torch import nn

from hbir.errors import HbirError
from hbir.quantization.fake_quantize import FakeQuantize
from hbir.quantization.lut_modules import LutModule
from hbir.quantization.states import warn_uncalibrated


class PreExportError(HbirError, ValueError):
    """A model that is not ready for pre_export (train mode, observers on)."""


def check_frozen(model: nn.Module, what: str) -> None:
    """Eval mode and no observer running: the scales are final."""
    if model.training:
        raise PreExportError(
            f"{what} needs eval mode: call model.eval() and "
            "set_fake_quantize(model, FakeQuantState.VALIDATION) first"
        )
    for name, m in model.named_modules():
        if isinstance(m, FakeQuantize) and bool(m.observer_enabled[0]):
            raise PreExportError(
                f"{what}: fake quant '{name}' still has its observer enabled: call "
                "set_fake_quantize(model, FakeQuantState.VALIDATION) first"
            )


def pre_export(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose LUT-ready modules compute their fixed-point tables.

    Works on a whole prepared model or a sub-module
    (``model.head = pre_export(model.head)``). Set ``num_tables`` on a module of the
    result to change its table; set ``quantized_forward = False`` to fall back to the
    float function for diagnosis. The model must be in eval mode with observers off.
    """
    check_frozen(model, "pre_export")
    warn_uncalibrated(model, "pre_export")
    exported = copy.deepcopy(model)
    for m in exported.modules():
        if isinstance(m, LutModule):
            m.pre_exported = True
            m.quantized_forward = True
    return exported
