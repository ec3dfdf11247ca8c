"""``horizon_plugin_pytorch.quantization.prepare``."""

from hbir.quantization.prepare import prepare

__all__ = ["prepare"]
