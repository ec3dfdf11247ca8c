"""``horizon_plugin_pytorch.quantization.fake_quantize``."""

from hbir.quantization.fake_cast import FakeCast
from hbir.quantization.fake_quantize import FakeQuantize
from hbir.quantization.states import FakeQuantState, set_fake_quantize

__all__ = ["FakeCast", "FakeQuantState", "FakeQuantize", "set_fake_quantize"]
