"""The process's default march: what ``set_march`` chose.

The reference toolchain sets the march once per script
(``horizon_plugin_pytorch.march.set_march("nash-e")``, before the model is
built); ``hbir.plugin.march.set_march`` is a shim over :func:`set_default_march`.
``prepare`` records the default on the QAT model, export writes it into qat.bc
(``hbir.prepared_march``), and ``hbir.convert`` / ``hbir.compile`` use it when no
march is passed; an explicit march still wins, and a model made for another
march is refused by name (docs/reference-api.md).

This module imports nothing heavy: the torch side reads the default without
loading xDSL; setting it checks the name against the march table
(``passes/march.py``), the one list of marches.
"""

from __future__ import annotations

_default: str | None = None


def set_default_march(name: str | None) -> None:
    """Set (None: clear) the default march; an unknown name is refused
    (``UnknownMarchError``, naming the known marches)."""
    global _default
    if name is None:
        _default = None
        return
    from hbir.passes.march import get_march

    _default = get_march(str(name)).name


def default_march() -> str | None:
    """The march :func:`set_default_march` set, or None."""
    return _default


def choose_march(explicit, call: str) -> str:
    """The march a call uses: ``explicit`` if given, else the default; neither is a
    located error naming both ways to give one."""
    if explicit is not None:
        return str(explicit)
    if _default is None:
        from hbir.errors import HbirValueError

        raise HbirValueError(
            f"{call}: no march: pass one (e.g. march='nash-e') or call "
            "hbir.plugin.march.set_march('nash-e') first"
        )
    return _default
