"""ConsistencyStrategy: how closely the fake-quant model must match fixed point.

Set the level before ``prepare``; the prepared model records it as
``_consistency_level`` with the flags export writes into the module:

* ``None`` (not set): statistical scales; ``_high_precision_qpp=False``,
  ``_fuse_requantize=True``.
* 0: statistical scales; ``_high_precision_qpp=True``, ``_fuse_requantize=False``
  (high-precision requantization, no requantize fusion after convert).
* 1: as 0, plus power-of-two activation scales.
* 2: as 1, plus power-of-two weight scales, an int32-grid bias and exact (float64)
  accumulation in conv/linear/matmul/add/sub/mul/mean/sum and the layer-norm /
  batch-norm affine step (below level 2, add/sub/mul/matmul/mean/sum already run in
  float64 on their exact dequantized inputs: ``exact_inputs``).

Levels are cumulative. Level 2 makes the fake-quant forward of the GEMM-like ops equal
the integer kernel bit for bit (docs/quantization.md, "Consistency levels"): with
power-of-two scales every requantization is a shift, which half-to-even rounding
makes exact.
"""

from __future__ import annotations

from hbir.quantization.options import current_options, set_defaults
from hbir.quantization.qconfig import QConfig


class ConsistencyStrategy:
    """The reference API's consistency level: a shim over the quantization
    options' ``consistency_level`` (``hbir/quantization/options.py``), which
    ``prepare`` reads (reset with ``None``)."""

    @classmethod
    def set_consistency_level(cls, level: int | None) -> None:
        set_defaults(consistency_level=level)

    @classmethod
    def get_consistency_level(cls) -> int | None:
        return current_options().consistency_level


def qconfig_for_level(qconfig: QConfig, level: int | None) -> QConfig:
    """Power-of-two activation (level >= 1) and weight (level 2) scales."""
    if level is None or level < 1:
        return qconfig
    changes = {"activation": qconfig.activation.replace(pot=True)}
    if isinstance(qconfig.input, tuple):
        changes["input"] = tuple(spec.replace(pot=True) for spec in qconfig.input)
    elif qconfig.input is not None:
        changes["input"] = qconfig.input.replace(pot=True)
    if level >= 2 and qconfig.weight is not None:
        changes["weight"] = qconfig.weight.replace(pot=True)
    return qconfig.replace(**changes)


def model_flags(level: int | None) -> dict[str, object]:
    """The attributes ``prepare`` sets on the model for ``level``."""
    return {
        "_consistency_level": level,
        "_high_precision_qpp": level is not None,
        "_fuse_requantize": level is None,
    }
