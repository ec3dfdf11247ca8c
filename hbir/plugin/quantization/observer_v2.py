"""``horizon_plugin_pytorch.quantization.observer_v2``: the observers."""

from hbir.quantization.observers import (
    ClipObserver,
    FixedScaleObserver,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MSEObserver,
    PerChannelMinMaxObserver,
)

__all__ = [
    "ClipObserver",
    "FixedScaleObserver",
    "HistogramObserver",
    "MSEObserver",
    "MinMaxObserver",
    "MovingAverageMinMaxObserver",
    "PerChannelMinMaxObserver",
]
