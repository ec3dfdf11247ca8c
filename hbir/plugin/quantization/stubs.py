"""``horizon_plugin_pytorch.quantization.stubs``."""

from hbir.quantization.stubs import DeQuantStub, QuantStub

__all__ = ["DeQuantStub", "QuantStub"]
