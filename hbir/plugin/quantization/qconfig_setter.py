"""``horizon_plugin_pytorch.quantization.qconfig_setter``: the OE 3.x templates."""

from hbir.quantization.qconfig import QconfigSetter
from hbir.quantization.templates import (
    ConvDtypeTemplate,
    MatmulDtypeTemplate,
    ModuleNameTemplate,
    SensitivityTemplate,
)

__all__ = [
    "ConvDtypeTemplate",
    "MatmulDtypeTemplate",
    "ModuleNameTemplate",
    "QconfigSetter",
    "SensitivityTemplate",
]
