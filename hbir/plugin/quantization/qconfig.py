"""``horizon_plugin_pytorch.quantization.qconfig``."""

from hbir.quantization.qconfig import QConfig, get_qconfig

__all__ = ["QConfig", "get_qconfig"]
