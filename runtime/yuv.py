"""Camera-image integer numerics: NV12 planes, BT.601 colour, input normalisation.

Pure numpy, channel-last arrays (``... x H x W x C``), values as integers. The one
definition of what ``hbir.image_convert`` and ``hbir.image_preprocess`` compute, of
how NV12 test data is made (``hbir.data``) and of the training-side colour ops
(``hbir.quantization.image``), so that all of them agree bit for bit.

NV12 (YUV 4:2:0 semi-planar), for an H x W image (H, W even)::

    Y  plane  H   x W      one byte per pixel
    UV plane  H/2 x W/2 x 2   U0 V0 U1 V1 ...: one (U, V) pair per 2 x 2 pixels

Encoding (RGB -> YCbCr) is PIL's ``Image.convert("YCbCr")`` exactly (the
reference toolchain makes its NV12 test data with PIL): each coefficient times
``2**6`` is a 256-entry table rounded as C's ``(int)(x + 0.5)``, the three table
entries are summed and shifted right by 6 (a floor), Cb / Cr then offset by 128::

    Y  = (Tr(.299) + Tg(.587) + Tb(.114)) >> 6
    Cb = (Tr(-.16874) + Tg(-.33126) + Tb(.5)) >> 6 + 128
    Cr = (Tr(.5) + Tg(-.41869) + Tb(-.08131)) >> 6 + 128

Chroma is down-sampled by the rounded mean of each 2 x 2 block,
``(a + b + c + d + 2) >> 2`` (PIL's ``reduce(2)``), and up-sampled by repeating
each sample over its 2 x 2 block (the NV12 input unit), so an NV12 image decodes to
the YUV444 image its chroma blocks describe with no further rounding.

Decoding (YUV -> RGB) is BT.601 in integers, defined in ``numerics``: full range as
libjpeg's ``jdcolor.c`` (Q16, each term rounded half up), video range as
Microsoft's Q8 formulas; results clipped to [0, 255]. A YUV -> RGB -> YUV round trip
is not exact (a level of rounding per conversion; measured in docs/image-input.md).

Centred form: an 8-bit value ``v`` in [0, 255] travels as the signed ``v - 128``
(si8, -128..127), what the NPU's image input unit produces (``is_signed``).

Normalisation is the float32 arithmetic of torchvision's ``ToTensor`` +
``Normalize``: ``(fl32(v) / fl32(divisor) - fl32(mean[c])) / fl32(std[c])``, each
step one correctly rounded float32 operation. Its integer form (after convert) is
one 256-entry code table per channel, ``quantize(normalise(v))``: exact, since
``v`` takes only 256 values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hbir.runtime import numerics

# ---- colour-conversion modes (hbir.image_preprocess's ``csc``) and the reference
# toolchain's names for them (insert_image_preprocess's ``mode``)
CSC_MODES = (
    "none",
    "yuv_bt601_full_to_rgb",
    "yuv_bt601_full_to_bgr",
    "yuv_bt601_video_to_rgb",
    "yuv_bt601_video_to_bgr",
    "bgr_to_rgb",
    "rgb_to_bgr",
)
USER_MODES: dict[str | None, str] = {
    None: "none",
    "skip": "none",
    "yuvbt601full2rgb": "yuv_bt601_full_to_rgb",
    "yuvbt601full2bgr": "yuv_bt601_full_to_bgr",
    "yuvbt601video2rgb": "yuv_bt601_video_to_rgb",
    "yuvbt601video2bgr": "yuv_bt601_video_to_bgr",
    "bgr2rgb": "bgr_to_rgb",
    "rgb2bgr": "rgb_to_bgr",
}
SWINGS = ("full", "studio")


# ----------------------------------------------------------------- encoding


def _pil_table(coefficient: float) -> np.ndarray:
    v = coefficient * np.arange(256) * 64.0
    return np.trunc(v + 0.5).astype(np.int64)  # C's (int)(v + 0.5)


_Y = [_pil_table(c) for c in (0.299, 0.587, 0.114)]
_CB = [_pil_table(c) for c in (-0.16874, -0.33126, 0.5)]
_CR = [_pil_table(c) for c in (0.5, -0.41869, -0.08131)]


def rgb_to_ycbcr(rgb: np.ndarray) -> np.ndarray:
    """``... x 3`` RGB in [0, 255] -> full-range YCbCr, exactly as PIL's "YCbCr"."""
    rgb = np.asarray(rgb)
    if rgb.shape[-1:] != (3,):
        raise ValueError(f"expected ... x 3 RGB, got shape {rgb.shape}")
    if rgb.size and (rgb.min() < 0 or rgb.max() > 255):
        raise ValueError("RGB values must be in [0, 255]")
    r, g, b = (rgb[..., i].astype(np.int64) for i in range(3))

    def mix(t):
        return (t[0][r] + t[1][g] + t[2][b]) >> 6

    return np.stack([mix(_Y), mix(_CB) + 128, mix(_CR) + 128], axis=-1)


def rgb_to_yuv_video(rgb: np.ndarray) -> np.ndarray:
    """``... x 3`` RGB -> video-range YUV (Y 16..235, U/V 16..240), Q8 integers."""
    rgb = np.asarray(rgb, np.int64)
    return np.stack(numerics.rgb_to_yuv_bt601_video(*np.moveaxis(rgb, -1, 0)), -1)


def _even_planes(h: int, w: int, what: str) -> None:
    if h % 2 or w % 2:
        raise ValueError(
            f"{what} is {h} x {w}: NV12 needs an even height and width "
            f"(one chroma pair per 2 x 2 pixels); crop or pad it to "
            f"{h + h % 2} x {w + w % 2}"
        )


def downsample_chroma(cbcr: np.ndarray) -> np.ndarray:
    """``... x H x W x 2`` chroma -> ``... x H/2 x W/2 x 2``: rounded 2 x 2 means."""
    c = np.asarray(cbcr, np.int64)
    _even_planes(c.shape[-3], c.shape[-2], "the chroma plane")
    s = (
        c[..., 0::2, 0::2, :]
        + c[..., 0::2, 1::2, :]
        + c[..., 1::2, 0::2, :]
        + c[..., 1::2, 1::2, :]
    )
    return (s + 2) >> 2


def yuv444_to_nv12(yuv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``... x H x W x 3`` YUV -> (Y ``... x H x W x 1``, UV ``... x H/2 x W/2 x 2``),
    both uint8."""
    yuv = np.asarray(yuv, np.int64)
    uv = downsample_chroma(yuv[..., 1:])
    return yuv[..., :1].astype(np.uint8), uv.astype(np.uint8)


def rgb_to_nv12(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``... x H x W x 3`` RGB uint8 -> NV12 (Y, UV) planes, PIL's YCbCr encoding."""
    return yuv444_to_nv12(rgb_to_ycbcr(rgb))


# ----------------------------------------------------------------- decoding


def upsample_chroma(uv: np.ndarray) -> np.ndarray:
    """``... x H/2 x W/2 x 2`` -> ``... x H x W x 2``: each sample over its 2 x 2."""
    uv = np.asarray(uv)
    return uv.repeat(2, axis=-3).repeat(2, axis=-2)


def nv12_pixels(y: np.ndarray, uv: np.ndarray, rows, cols) -> np.ndarray:
    """The YUV444 pixels ``[len(rows), len(cols), 3]`` at ``rows`` x ``cols`` of
    one image's NV12 planes (Y ``H x W x 1``, UV ``H/2 x W/2 x 2``): each pixel's
    chroma is the pair of its 2 x 2 block (``upsample_chroma``)."""
    rows, cols = np.asarray(rows), np.asarray(cols)
    luma = y[rows[:, None], cols[None, :]].astype(np.int64)
    chroma = uv[rows[:, None] // 2, cols[None, :] // 2].astype(np.int64)
    return np.concatenate([luma, chroma], axis=-1)


def nv12_to_yuv444(y: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """NV12 planes (Y ``... x H x W x 1``, UV ``... x H/2 x W/2 x 2``) -> YUV444."""
    y, uv = np.asarray(y), np.asarray(uv)
    if y.shape[-1:] != (1,) or uv.shape[-1:] != (2,):
        raise ValueError(
            f"NV12 planes have shapes {y.shape}, {uv.shape}: expected "
            f"... x H x W x 1 and ... x H/2 x W/2 x 2"
        )
    h, w = y.shape[-3:-1]
    _even_planes(h, w, "the Y plane")
    if uv.shape != (*y.shape[:-3], h // 2, w // 2, 2):
        raise ValueError(
            f"UV plane has shape {uv.shape}, expected "
            f"{(*y.shape[:-3], h // 2, w // 2, 2)} for a Y plane of {y.shape}"
        )
    return np.concatenate([y, upsample_chroma(uv)], axis=-1).astype(np.int64)


def roi_resize(
    y: np.ndarray,
    uv: np.ndarray | None,
    roi: np.ndarray,
    size: Sequence[int],
    interpolation: str,
    expansion: str,
    pad_value: Sequence[int],
) -> np.ndarray:
    """``hbir.roi_resize``: each image's roi of its NV12 (or gray, ``uv`` None)
    frame, as YUV444 (``nv12_pixels``), resized to ``size`` and padded as
    ``numerics.roi_resize`` defines, centred: ``N x H x W x 3`` (or 1) int8.
    ``pad_value``: (Y, UV) bytes, or (Y,) for gray (``numerics.pad_byte``)."""
    y = np.asarray(y)
    n, h, w, _ = y.shape
    if uv is None:
        pad = (numerics.pad_byte(pad_value[0]),)

        def sample(i, rows, cols):
            return y[i][rows[:, None], cols[None, :]]

    else:
        uv = np.asarray(uv)
        _even_planes(h, w, "the Y plane")
        if uv.shape != (n, h // 2, w // 2, 2):
            raise ValueError(
                f"UV plane has shape {uv.shape}, expected {(n, h // 2, w // 2, 2)} "
                f"for a Y plane of {y.shape}"
            )
        py, puv = (numerics.pad_byte(v) for v in pad_value)
        pad = (py, puv, puv)

        def sample(i, rows, cols):
            return nv12_pixels(y[i], uv[i], rows, cols)

    frame = numerics.roi_resize(
        sample, (n, h, w), roi, tuple(size), interpolation, expansion, pad
    )
    return center(frame)


def yuv_to_rgb(yuv: np.ndarray, swing: str = "full") -> np.ndarray:
    """``... x 3`` YUV -> RGB with BT.601 integer decoding (``numerics``), clipped."""
    convert = {
        "full": numerics.yuv_to_rgb_bt601_full,
        "studio": numerics.yuv_to_rgb_bt601_video,
    }[swing]
    planes = np.moveaxis(np.asarray(yuv, np.int64), -1, 0)
    return np.stack(convert(*planes), axis=-1)


def nv12_to_rgb(y: np.ndarray, uv: np.ndarray, swing: str = "full") -> np.ndarray:
    """NV12 planes -> ``... x H x W x 3`` RGB uint8 (for viewing)."""
    return yuv_to_rgb(nv12_to_yuv444(y, uv), swing).astype(np.uint8)


def center(v: np.ndarray) -> np.ndarray:
    """[0, 255] -> the signed form ``v - 128`` (int8)."""
    return (np.asarray(v, np.int64) - 128).astype(np.int8)


def uncenter(x: np.ndarray) -> np.ndarray:
    """The signed form back to [0, 255] (int64)."""
    return np.asarray(x, np.int64) + 128


# ----------------------------------------------------------------- preprocessing


def convert_colour(v: np.ndarray, csc: str) -> np.ndarray:
    """Apply a ``CSC_MODES`` conversion to ``... x C`` values in [0, 255]."""
    v = np.asarray(v, np.int64)
    if csc == "none":
        return v
    if csc not in CSC_MODES:
        raise ValueError(f"unknown colour conversion {csc!r}: one of {CSC_MODES}")
    if v.shape[-1] != 3:
        raise ValueError(f"{csc} needs 3 channels, got {v.shape[-1]}")
    if csc in ("bgr_to_rgb", "rgb_to_bgr"):
        return v[..., ::-1]
    rgb = yuv_to_rgb(v, "studio" if "video" in csc else "full")
    return rgb[..., ::-1] if csc.endswith("bgr") else rgb


def normalise(
    v: np.ndarray, divisor: float, mean: Sequence[float], std: Sequence[float]
) -> np.ndarray:
    """``(fl32(v) / divisor - mean[c]) / std[c]`` in float32, channel last."""
    mean32 = np.asarray(mean, np.float32)
    std32 = np.asarray(std, np.float32)
    x = np.asarray(v).astype(np.float32) / np.float32(divisor)
    return ((x - mean32) / std32).astype(np.float32)


def preprocess(
    x: np.ndarray,
    csc: str,
    divisor: float,
    mean: Sequence[float],
    std: Sequence[float],
) -> np.ndarray:
    """``hbir.image_preprocess``: codes (int8 centred or uint8) -> float32 image."""
    x = np.asarray(x)
    v = uncenter(x) if x.dtype == np.int8 else x.astype(np.int64)
    return normalise(convert_colour(v, csc), divisor, mean, std)


def preprocess_table(
    divisor: float,
    mean: Sequence[float],
    std: Sequence[float],
    scale: float,
    zero_point: int,
    qmin: int,
    qmax: int,
    rounding: str = numerics.HALF_EVEN,
) -> np.ndarray:
    """``C x 256`` codes: ``table[c, v] = quantize(normalise(v)[c])`` for v in
    [0, 255] -- the integer form of normalisation followed by a quantization
    (``numerics.quantize``: float32 ``x * fl32(1 / scale)``, rounded, clamped)."""
    levels = np.arange(256)[:, None].repeat(len(mean), axis=1)
    real = normalise(levels, divisor, mean, std)
    codes = numerics.quantize(real, scale, zero_point, qmin, qmax, None, rounding)
    return codes.T


def preprocess_codes(
    x: np.ndarray,
    csc: str,
    table: np.ndarray,
) -> np.ndarray:
    """The integer ``hbir.image_preprocess``: colour conversion, then a per-channel
    table lookup (``preprocess_table``); int64 codes."""
    x = np.asarray(x)
    v = uncenter(x) if x.dtype == np.int8 else x.astype(np.int64)
    v = convert_colour(v, csc)
    channels = np.arange(v.shape[-1])
    return table[channels, v]
