"""``horizon_plugin_pytorch.quantization.qconfig_template``: the legacy
ready-made qconfigs, as ``QconfigSetter`` / template combinations."""

from __future__ import annotations

from hbir.quantization.dtypes import qint8, qint16
from hbir.quantization.observers import MinMaxObserver, MovingAverageMinMaxObserver
from hbir.quantization.qconfig import QconfigSetter, get_qconfig
from hbir.quantization.templates import SensitivityTemplate

__all__ = [
    "default_qat_8bit_fake_quant_qconfig",
    "sensitive_op_calibration_8bit_weight_16bit_act_qconfig_setter",
]

# int8 outputs (moving-average range, for QAT) and int8 per-channel weights
default_qat_8bit_fake_quant_qconfig = get_qconfig(observer=MovingAverageMinMaxObserver)


def sensitive_op_calibration_8bit_weight_16bit_act_qconfig_setter(
    table, ratio: float | int = 0.2
) -> QconfigSetter:
    """Calibration qconfigs: int8 everywhere, except the most sensitive ops'
    outputs (the top ``ratio`` of the activation rows of a sensitivity
    ``table``, or its ``.pt`` file) in int16; weights int8."""
    return QconfigSetter(
        get_qconfig(observer=MinMaxObserver),
        templates=[SensitivityTemplate(table, ratio, "activation", qint8, qint16)],
    )
