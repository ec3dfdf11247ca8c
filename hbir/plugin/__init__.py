"""hbir.plugin: the reference toolchain's ``horizon_plugin_pytorch`` module paths.

A J6 user's script runs after one fixed prefix swap: ``horizon_plugin_pytorch``
-> ``hbir.plugin``, ``horizon_plugin_profiler`` -> ``hbir.profiler``,
``hbdk4.compiler`` -> ``hbir``. Every name here is hbir's own object,
re-exported at the path the reference documents (docs/reference-api.md lists
each, what hbir does with it and where it differs); nothing is implemented
twice.

Importing ``hbir.plugin`` loads nothing: ``set_march`` / ``get_march`` and the
submodules load on first use (``hbir.plugin.quantization`` is the torch side).
"""

import importlib

_LAZY = {
    "set_march": "hbir.plugin.march",
    "get_march": "hbir.plugin.march",
    "March": "hbir.plugin.march",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hbir.plugin' has no attribute {name!r}")


__all__ = ["March", "get_march", "set_march"]
