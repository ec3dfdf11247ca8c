"""Camera-format data for models with NV12 or gray inputs.

The reference toolchain makes NV12 test data with PIL: ``img.convert("YCbCr")``,
the U and V planes down-sized 2x, interleaved U V U V. ``rgb_to_nv12`` does
exactly that (``runtime/yuv.py`` reproduces PIL's integer YCbCr conversion and its
``reduce(2)`` bit for bit), so its planes feed ``nv12_quantized.bc`` directly::

    y, uv = hbir.data.rgb_to_nv12(image)     # numpy H x W x 3 (or N x ...) or PIL
    out = nv12_model["forward"].feed({"img_y": y, "img_uv": uv})

Planes are NHWC uint8 arrays: ``y`` is ``N x H x W x 1``, ``uv`` is
``N x H/2 x W/2 x 2`` (a single image gets N = 1). ``nv12_buffer`` /
``from_nv12_buffer`` convert to and from the contiguous H x W x 3/2 byte buffer a
camera delivers; ``nv12_to_rgb`` decodes for viewing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hbir.errors import HbirError
from hbir.runtime import yuv


class ImageDataError(HbirError, ValueError):
    """An image that cannot become NV12 / gray planes (also a ``ValueError``)."""


def _rgb_array(image: Any, layout: str) -> np.ndarray:
    """``N x H x W x 3`` uint8 RGB from numpy (H x W x 3 or batched) or PIL."""
    if layout not in ("rgb", "bgr"):
        raise ImageDataError(f"layout must be 'rgb' or 'bgr', got {layout!r}")
    if type(image).__module__.startswith("PIL."):
        image = np.asarray(image.convert("RGB"))
        layout = "rgb"
    x = np.asarray(image)
    if x.ndim == 3:
        x = x[None]
    if x.ndim != 4 or x.shape[-1] != 3:
        raise ImageDataError(
            f"expected an H x W x 3 (or N x H x W x 3) image, got shape {x.shape}"
        )
    if x.dtype != np.uint8:
        raise ImageDataError(
            f"expected uint8 pixels (0..255), got {x.dtype}; convert with "
            f"np.clip(x, 0, 255).astype(np.uint8)"
        )
    return x[..., ::-1] if layout == "bgr" else x


def rgb_to_nv12(image: Any, layout: str = "rgb") -> tuple[np.ndarray, np.ndarray]:
    """An RGB (or ``layout="bgr"``) uint8 image -> NV12 planes ``(y, uv)``.

    Height and width must be even (one chroma pair per 2 x 2 pixels).
    """
    rgb = _rgb_array(image, layout)
    h, w = rgb.shape[1:3]
    if h % 2 or w % 2:
        raise ImageDataError(
            f"the image is {h} x {w}: NV12 needs an even height and width; crop "
            f"it, e.g. image[:{h - h % 2}, :{w - w % 2}]"
        )
    return yuv.rgb_to_nv12(rgb)


def rgb_to_gray(image: Any, layout: str = "rgb") -> np.ndarray:
    """An RGB (or BGR) uint8 image -> the gray plane ``y`` (``N x H x W x 1``): the
    Y of ``rgb_to_nv12``, for ``insert_image_convert("gray")``."""
    return yuv.rgb_to_ycbcr(_rgb_array(image, layout))[..., :1].astype(np.uint8)


def nv12_to_rgb(y: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """NV12 planes -> ``N x H x W x 3`` uint8 RGB (full-range BT.601), for viewing:
    ``PIL.Image.fromarray(nv12_to_rgb(y, uv)[0])``."""
    try:
        return yuv.nv12_to_rgb(y, uv)
    except ValueError as e:
        raise ImageDataError(str(e)) from None


def nv12_buffer(y: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """Planes -> the camera's byte layout, one ``H*W*3/2`` uint8 row per image:
    the Y plane, then the interleaved UV plane."""
    y, uv = np.asarray(y, np.uint8), np.asarray(uv, np.uint8)
    n = y.shape[0]
    return np.concatenate([y.reshape(n, -1), uv.reshape(n, -1)], axis=1)


def from_nv12_buffer(
    buffer: np.ndarray, height: int, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """``N x H*W*3/2`` (or one flat) NV12 buffer -> planes ``(y, uv)``."""
    b = np.asarray(buffer, np.uint8)
    b = b[None] if b.ndim == 1 else b
    if height % 2 or width % 2 or b.shape[-1] != height * width * 3 // 2:
        raise ImageDataError(
            f"an NV12 buffer of {height} x {width} (both even) has "
            f"{height * width * 3 // 2} bytes, got {b.shape[-1]}"
        )
    y = b[:, : height * width].reshape(-1, height, width, 1)
    uv = b[:, height * width :].reshape(-1, height // 2, width // 2, 2)
    return y, uv
