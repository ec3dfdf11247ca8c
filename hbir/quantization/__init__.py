"""hbir.quantization: everything a user does in PyTorch before export.

The workflow of the reference toolchain::

    ConsistencyStrategy.set_consistency_level(1)  # optional, before prepare
    qat = prepare(float_model, example_inputs)  # also writes the two check files
    qat.eval(); set_fake_quantize(qat, FakeQuantState.CALIBRATION); run calibration data
    qat.train(); set_fake_quantize(qat, FakeQuantState.QAT); train
    qat.eval(); set_fake_quantize(qat, FakeQuantState.VALIDATION); evaluate
    qat_export_pt = pre_export(qat); qat_bc = export(qat, example_inputs)

See docs/quantization.md.
"""

import sys
import types

from hbir.quantization.consistency import ConsistencyStrategy
from hbir.quantization.distributed import ObserverStateError
from hbir.quantization.dtypes import (
    FloatDType,
    QuantDType,
    float16,
    qint8,
    qint16,
    qint32,
)
from hbir.quantization.fake_cast import FakeCast
from hbir.quantization.fake_quantize import FakeQuantize, fake_quantize
from hbir.quantization.image import (
    BgrToYuv444,
    bgr2centered_yuv,
    bgr_to_yuv444,
    centered_yuv2rgb,
    rgb2centered_yuv,
)
from hbir.quantization.observers import (
    ClipObserver,
    FixedScaleObserver,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MSEObserver,
    PerChannelMinMaxObserver,
)
from hbir.quantization.options import QuantOptions, current_options, using
from hbir.quantization.pre_export import PreExportError, pre_export
from hbir.quantization.prepare import UnsupportedOpError, prepare
from hbir.quantization.qat_modules import float_validation
from hbir.quantization.qconfig import FakeQuantSpec, QConfig, QconfigSetter, get_qconfig
from hbir.quantization.rounding import get_round_mode, is_legacy_round, set_round_mode
from hbir.quantization.states import FakeQuantState, set_fake_quantize
from hbir.quantization.stubs import DeQuantStub, QuantStub
from hbir.quantization.tracing import PrepareError, set_source_root

# Export builds xDSL IR: it loads on first use, so the torch side (prepare, fake
# quantization, pre_export) imports no xDSL module.


def __getattr__(name: str):
    if name == "ExportError":
        from hbir.quantization.export import ExportError

        return ExportError
    raise AttributeError(f"module 'hbir.quantization' has no attribute {name!r}")


class _Package(types.ModuleType):
    """``hbir.quantization.export`` is the function, loaded on first use.

    The submodule of the same name loads lazily, and the import system binds it
    to the package's ``export`` attribute whenever it first loads (whoever imports
    it); the setter below keeps the function in its place.
    """

    @property
    def export(self):
        from hbir.quantization.export import export

        return export

    @export.setter
    def export(self, submodule) -> None:
        pass


sys.modules[__name__].__class__ = _Package


__all__ = [
    "BgrToYuv444",
    "ClipObserver",
    "bgr2centered_yuv",
    "bgr_to_yuv444",
    "centered_yuv2rgb",
    "rgb2centered_yuv",
    "ConsistencyStrategy",
    "DeQuantStub",
    "ExportError",
    "FakeQuantSpec",
    "FakeQuantState",
    "FakeCast",
    "FakeQuantize",
    "FixedScaleObserver",
    "HistogramObserver",
    "MinMaxObserver",
    "MovingAverageMinMaxObserver",
    "MSEObserver",
    "ObserverStateError",
    "PerChannelMinMaxObserver",
    "PreExportError",
    "PrepareError",
    "QConfig",
    "QconfigSetter",
    "FloatDType",
    "QuantDType",
    "QuantOptions",
    "QuantStub",
    "UnsupportedOpError",
    "current_options",
    "export",
    "fake_quantize",
    "float_validation",
    "get_qconfig",
    "get_round_mode",
    "is_legacy_round",
    "pre_export",
    "prepare",
    "qint16",
    "qint32",
    "float16",
    "qint8",
    "set_fake_quantize",
    "set_round_mode",
    "set_source_root",
    "using",
]
