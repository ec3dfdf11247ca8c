"""``horizon_plugin_pytorch.nn.functional``: colour conversions."""

from hbir.quantization.image import (
    bgr2centered_yuv,
    bgr_to_yuv444,
    centered_yuv2rgb,
    rgb2centered_yuv,
)

__all__ = ["bgr2centered_yuv", "bgr_to_yuv444", "centered_yuv2rgb", "rgb2centered_yuv"]
