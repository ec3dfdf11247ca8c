"""hbir.profiler: consistency analysis across the deployment stages.

``QuantAnalysis`` (the reference profiler's API: bad cases, per-layer
comparison, sensitivity), ``diagnose`` (``hbir doctor``: the first stage pair
beyond its contract, its first op and the cause) and ``bisect_float_fallback``
(the smallest float region that restores a metric, as a bc_editor config).
Ops are aligned across stages by their torch origin (``origin.py``). See
``docs/analysis.md``.
"""

from hbir.profiler.bisect import Bisection, bisect_float_fallback
from hbir.profiler.doctor import CAUSES, Diagnosis, diagnose
from hbir.profiler.quant_analysis import QuantAnalysis

__all__ = [
    "CAUSES",
    "Bisection",
    "Diagnosis",
    "QuantAnalysis",
    "bisect_float_fallback",
    "diagnose",
]
