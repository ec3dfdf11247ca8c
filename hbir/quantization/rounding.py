"""The rounding mode of fake quantization: the reference API's setter, a shim over
the quantization options (``hbir/quantization/options.py``).

Half-to-even is the default and is what ``torch.fake_quantize_per_*_affine`` computes.
Half-up (``floor(x * fl32(1/s) + 0.5)``, the addition exact) is the legacy mode of
older deployments; export reads :func:`is_legacy_round` to mark the module
``legacy_round``. Loading a ``FakeQuantize`` state dict saved before version 2
switches to the legacy mode, as the reference toolchain does.
"""

from __future__ import annotations

from hbir.quantization.options import current_options, set_defaults
from hbir.runtime import numerics


def set_round_mode(mode: str) -> None:
    """Select ``"half_even"`` (default) or ``"half_up"`` (legacy) rounding."""
    set_defaults(rounding=mode)


def get_round_mode() -> str:
    return current_options().rounding


def is_legacy_round() -> bool:
    """True when fake quantization rounds half up (export writes ``legacy_round``)."""
    return current_options().rounding == numerics.HALF_UP
