"""``horizon_plugin_pytorch.quantization``: prepare, fake quantization, qconfigs.

The submodules the reference documents (``prepare``, ``qconfig``,
``qconfig_setter``, ``qconfig_template``, ``observer_v2``, ``fake_quantize``,
``stubs``, ``hbdk4``) are here too; ``hbir.plugin.quantization.prepare`` is
the function, as in the reference, and ``import
hbir.plugin.quantization.prepare`` the module.
"""

from hbir.plugin.quantization.fake_quantize import (
    FakeCast,
    FakeQuantize,
    FakeQuantState,
    set_fake_quantize,
)
from hbir.plugin.quantization.observer_v2 import (
    ClipObserver,
    FixedScaleObserver,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MSEObserver,
    PerChannelMinMaxObserver,
)
from hbir.plugin.quantization.prepare import prepare
from hbir.plugin.quantization.qconfig import QConfig, get_qconfig
from hbir.plugin.quantization.qconfig_setter import QconfigSetter
from hbir.plugin.quantization.stubs import DeQuantStub, QuantStub
from hbir.quantization import pre_export
from hbir.quantization.dtypes import QuantDType, float16, qint8, qint16, qint32

__all__ = [
    "ClipObserver",
    "DeQuantStub",
    "FakeCast",
    "FakeQuantState",
    "FakeQuantize",
    "FixedScaleObserver",
    "HistogramObserver",
    "MSEObserver",
    "MinMaxObserver",
    "MovingAverageMinMaxObserver",
    "PerChannelMinMaxObserver",
    "QConfig",
    "QconfigSetter",
    "QuantDType",
    "QuantStub",
    "get_qconfig",
    "pre_export",
    "prepare",
    "float16",
    "qint16",
    "qint32",
    "qint8",
    "set_fake_quantize",
]
