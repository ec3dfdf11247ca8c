"""``horizon_plugin_pytorch.march``: the march a script targets.

``set_march`` sets the default march of ``prepare``/``export`` (recorded in
qat.bc), ``hbir.convert`` and ``hbir.compile`` (``hbir/default_march.py``); an
explicit march argument still wins, and a qat.bc prepared for another march is
refused by convert, naming both.
"""

from __future__ import annotations

import functools

from hbir.default_march import default_march, set_default_march
from hbir.passes.march import March

__all__ = ["March", "get_march", "is_nash_series", "set_march", "with_march"]


def set_march(march: str) -> None:
    """Target ``march`` ("nash-e", "nash-p", ... or ``March.NASH_E``) from now on."""
    set_default_march(march)


def get_march() -> str | None:
    """The march ``set_march`` set (None before it is called)."""
    return default_march()


def is_nash_series(march: str | None = None) -> bool:
    """Whether ``march`` (default: the current one) is a J6 ("nash") march."""
    march = get_march() if march is None else march
    return march is not None and str(march).startswith("nash")


def with_march(func):
    """Decorator: ``func(..., march=None)`` gets ``get_march()`` for a march the
    caller did not give (an explicit one still wins)."""

    @functools.wraps(func)
    def call(*args, march=None, **kwargs):
        return func(*args, march=get_march() if march is None else march, **kwargs)

    return call
