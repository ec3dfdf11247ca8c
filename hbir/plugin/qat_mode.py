"""``horizon_plugin_pytorch.qat_mode``: ``ConsistencyStrategy``."""

from hbir.quantization.consistency import ConsistencyStrategy

__all__ = ["ConsistencyStrategy"]
