"""hbir: an open training-to-deployment compiler for quantized neural networks.

The public face: load and save models, inspect and run them. Importing ``hbir``
does not import torch; running a model (``Function.feed``) does.
"""

import os
import sys
import types

from hbir import source_tree

source_tree.use(os.path.dirname(__file__))  # a checkout's own subpackages

from hbir.errors import (  # noqa: E402
    HbirError,
    HbirFileError,
    HbirOutputError,
    HbirParseError,
    HbirVerifyError,
)

# The model API (numpy, the interpreter) loads on first use, so tools that only
# parse and print (``hbir-opt --help``) start fast.
_LAZY = {
    "Argument": "hbir.module",
    "convert": "hbir.conversion",
    "compile": "hbir.compile",
    "FeedError": "hbir.module",
    "Function": "hbir.module",
    "March": "hbir.conversion",
    "Module": "hbir.module",
    "ModelTypeError": "hbir.module",
    "run_dataset": "hbir.module",
    "Hbm": "hbir.hbm",
    "load": "hbir.hbm",  # a .hbm file -> Hbm, any other model file -> Module
    "save": "hbir.module",
    "statistics": "hbir.hbm.statistics",
    "hbm_perf": "hbir.hbm.perf",
    "HbmFormatError": "hbir.hbm.errors",
    "visualize": "hbir.visualize",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hbir' has no attribute {name!r}")


class _Package(types.ModuleType):
    """The type of ``hbir``: Python's import sets each imported submodule as an
    attribute of its package, so ``import hbir.convert`` (``from hbir.convert import
    ...``) would replace the function ``hbir.convert`` by the module (the same for
    ``hbir.compile``). The function stays."""

    def __setattr__(self, name: str, value) -> None:
        if name in ("convert", "compile", "visualize") and isinstance(
            value, types.ModuleType
        ):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "Argument",
    "compile",
    "convert",
    "FeedError",
    "Function",
    "March",
    "ModelTypeError",
    "HbirError",
    "HbirFileError",
    "HbirOutputError",
    "HbirParseError",
    "HbirVerifyError",
    "Hbm",
    "HbmFormatError",
    "hbm_perf",
    "Module",
    "load",
    "run_dataset",
    "save",
    "statistics",
    "visualize",
]
