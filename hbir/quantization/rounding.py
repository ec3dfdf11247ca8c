"""The global rounding mode of fake quantization.

Half-to-even is the default and is what ``torch.fake_quantize_per_*_affine`` computes.
Half-up (``floor(x * fl32(1/s) + 0.5)``, the addition exact) is the legacy mode of
older deployments; export reads :func:`is_legacy_round` to mark the module
``legacy_round``. Loading a ``FakeQuantize`` state dict saved before version 2
switches to the legacy mode, as the reference toolchain does.
"""

from __future__ import annotations

from hbir.runtime import numerics

_mode: str = numerics.HALF_EVEN


def set_round_mode(mode: str) -> None:
    """Select ``"half_even"`` (default) or ``"half_up"`` (legacy) rounding."""
    global _mode
    if mode not in numerics.ROUNDING_MODES:
        raise ValueError(
            f"round mode must be one of {numerics.ROUNDING_MODES}, got {mode!r}"
        )
    _mode = str(mode)


def get_round_mode() -> str:
    return _mode


def is_legacy_round() -> bool:
    """True when fake quantization rounds half up (export writes ``legacy_round``)."""
    return _mode == numerics.HALF_UP
