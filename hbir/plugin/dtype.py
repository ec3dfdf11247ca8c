"""``horizon_plugin_pytorch.dtype``: the quantized dtypes."""

from hbir.quantization.dtypes import QuantDType, qinfo, qint8, qint16, qint32

__all__ = ["QuantDType", "qinfo", "qint8", "qint16", "qint32"]
