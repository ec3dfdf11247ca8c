"""The quantization options: rounding mode, consistency level, validation mode.

One explicit object instead of three switches::

    from hbir.quantization import QuantOptions, using

    opts = QuantOptions(rounding="half_up", consistency_level=1)
    qat = prepare(model, example, options=opts)      # explicit, for this call
    with using(fixed_point_validation=False):        # a scoped change
        accuracy = evaluate(qat)

* ``rounding``: how fake quantization rounds its codes (``"half_even"``, torch's;
  ``"half_up"``, the legacy mode: export marks the module ``legacy_round``);
* ``consistency_level``: ``None``, 0, 1 or 2 (``docs/quantization.md``), read by
  ``prepare`` and recorded on the prepared model;
* ``fixed_point_validation``: whether VALIDATION computes the integer
  pipeline's arithmetic (the default, bit-identical to ``quantized.bc``) or the
  faster float forward.

:func:`current_options` is what is in force: the innermost :func:`using` block's (per
thread and task: a ``contextvars`` variable), else the process's defaults. The
reference toolchain's setters — ``set_round_mode``, ``ConsistencyStrategy.
set_consistency_level`` — and ``float_validation()`` are thin shims that set the
defaults or open a block; loading a ``FakeQuantize`` state dict saved before
version 2 switches the default rounding to half-up, as the reference does.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from hbir.errors import HbirValueError
from hbir.runtime import numerics

__all__ = ["QuantOptions", "current_options", "set_defaults", "using"]

LEVELS = (None, 0, 1, 2)


@dataclass(frozen=True)
class QuantOptions:
    """How fake quantization computes (see the module)."""

    rounding: str = numerics.HALF_EVEN
    consistency_level: int | None = None
    fixed_point_validation: bool = True

    def __post_init__(self) -> None:
        if self.rounding not in numerics.ROUNDING_MODES:
            raise HbirValueError(
                f"round mode must be one of {numerics.ROUNDING_MODES}, "
                f"got {self.rounding!r}"
            )
        level = self.consistency_level
        if isinstance(level, bool) or level not in LEVELS:
            raise HbirValueError(
                f"consistency level must be 0, 1, 2 or None, got {level!r}"
            )
        if not isinstance(self.fixed_point_validation, bool):
            raise HbirValueError(
                "fixed_point_validation must be True or False, got "
                f"{self.fixed_point_validation!r}"
            )

    def replace(self, **changes) -> QuantOptions:
        return dataclasses.replace(self, **changes)


_defaults = QuantOptions()
_scoped: contextvars.ContextVar[QuantOptions | None] = contextvars.ContextVar(
    "hbir_quant_options", default=None
)


def current_options() -> QuantOptions:
    """The options in force: the innermost ``using`` block's, else the defaults."""
    scoped = _scoped.get()
    return _defaults if scoped is None else scoped


def set_defaults(**changes) -> None:
    """Change the process's defaults (what the reference API's setters do)."""
    global _defaults
    _defaults = _defaults.replace(**changes)
    scoped = _scoped.get()
    if scoped is not None:  # inside a block, the change shows there too
        _scoped.set(scoped.replace(**changes))


@contextlib.contextmanager
def using(opts: QuantOptions | None = None, /, **changes) -> Iterator[QuantOptions]:
    """A block in which ``opts`` (default: the options in force) with ``changes``
    are in force; the previous options come back after it."""
    chosen = (current_options() if opts is None else opts).replace(**changes)
    token = _scoped.set(chosen)
    try:
        yield chosen
    finally:
        _scoped.reset(token)
