"""``horizon_plugin_pytorch.quantization.hbdk4``: export to HBIR (qat.bc)."""

from hbir.quantization.export import export
from hbir.quantization.pre_export import pre_export

__all__ = ["export", "pre_export"]
