"""hbir: an open training-to-deployment compiler for quantized neural networks.

The public face: load and save models, inspect and run them. Importing ``hbir``
does not import torch; running a model (``Function.feed``) does.
"""

from hbir.errors import (
    HbirError,
    HbirFileError,
    HbirParseError,
    HbirVerifyError,
)

# The model API (numpy, the interpreter) loads on first use, so tools that only
# parse and print (``hbir-opt --help``) start fast.
_LAZY = {
    "Argument": "hbir.module",
    "convert": "hbir.conversion",
    "FeedError": "hbir.module",
    "Function": "hbir.module",
    "Module": "hbir.module",
    "load": "hbir.module",
    "save": "hbir.module",
    "statistics": "hbir.module",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hbir' has no attribute {name!r}")


__all__ = [
    "Argument",
    "convert",
    "FeedError",
    "Function",
    "HbirError",
    "HbirFileError",
    "HbirParseError",
    "HbirVerifyError",
    "Module",
    "load",
    "save",
    "statistics",
]
