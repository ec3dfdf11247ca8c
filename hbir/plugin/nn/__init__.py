"""``horizon_plugin_pytorch.nn``: the colour-conversion module of b2y training."""

from hbir.plugin.nn import functional
from hbir.quantization.image import BgrToYuv444

__all__ = ["BgrToYuv444", "functional"]
