"""hbir: an open training-to-deployment compiler for quantized neural networks.

The public face: load and save models, inspect and run them. Importing ``hbir``
does not import torch; running a model (``Function.feed``) does.
"""

from hbir.diagnostics import (
    HbirError,
    HbirFileError,
    HbirParseError,
    HbirVerifyError,
)
from hbir.module import (
    Argument,
    FeedError,
    Function,
    Module,
    load,
    save,
    statistics,
)

__all__ = [
    "Argument",
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
