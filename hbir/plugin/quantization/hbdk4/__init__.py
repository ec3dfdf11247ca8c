"""``horizon_plugin_pytorch.quantization.hbdk4``: export to HBIR (qat.bc)."""

from hbir.quantization.export import check, export, is_exporting
from hbir.quantization.pre_export import pre_export

__all__ = ["check", "export", "is_exporting", "pre_export"]
