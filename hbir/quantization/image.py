"""Colour transforms for training on what the camera input will deliver.

A model deployed with an NV12 input (``Argument.insert_image_convert("nv12")``)
sees the chroma of each 2 x 2 block averaged, a loss an RGB-trained model never
saw. ``bgr_to_yuv444`` applies that loss in training: BGR -> YUV (PIL's
full-range BT.601 encoding) -> NV12 (rounded 2 x 2 chroma means) -> YUV444
(each chroma sample repeated over its block) -- the very functions of
``runtime/yuv.py`` that make NV12 data (``hbir.data``) and that the inserted
``hbir.image_convert`` decodes with. A model trained on
``(bgr_to_yuv444(bgr) - 128) / 128`` and deployed with
``insert_image_preprocess(mode=None, divisor=1, mean=[128] * 3, std=[128] * 3)``
then ``insert_image_convert("nv12")`` receives bit for bit its training input
when fed ``hbir.data.rgb_to_nv12`` of the same image.

Images are ``N x 3 x H x W`` (or ``3 x H x W``) tensors of values in [0, 255],
float or uint8; the result has the input's dtype and device. The transforms are
integer data preparation (no gradient), as in the reference toolchain.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from hbir.runtime import yuv


def _planes(input: torch.Tensor, what: str) -> np.ndarray:
    """``... x 3 x H x W`` values in [0, 255] -> ``... x H x W x 3`` int64."""
    if input.dim() < 3 or input.shape[-3] != 3:
        raise ValueError(
            f"{what}: expected a ... x 3 x H x W image, got shape {tuple(input.shape)}"
        )
    x = input.detach().cpu()
    if x.is_floating_point():
        if not torch.equal(x, x.round()):
            raise ValueError(
                f"{what}: expected integer pixel values in [0, 255] (uint8 or "
                f"whole floats), got fractions; scale images to 0..255 first"
            )
    x = x.to(torch.int64).numpy()
    if x.size and (x.min() < 0 or x.max() > 255):
        raise ValueError(f"{what}: pixel values must be in [0, 255]")
    return np.moveaxis(x, -3, -1)


def _tensor(planes: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    out = torch.from_numpy(np.ascontiguousarray(np.moveaxis(planes, -1, -3)))
    return out.to(device=like.device, dtype=like.dtype)


def bgr_to_yuv444(input: torch.Tensor, channel_reversal: bool = False) -> torch.Tensor:
    """BGR (RGB with ``channel_reversal=True``) -> NV12 -> YUV444, values 0..255."""
    rgb = _planes(input, "bgr_to_yuv444")
    if not channel_reversal:
        rgb = rgb[..., ::-1]
    y, uv = yuv.rgb_to_nv12(rgb)
    return _tensor(yuv.nv12_to_yuv444(y, uv), input)


class BgrToYuv444(nn.Module):
    """``bgr_to_yuv444`` as a module (a training-data transform)."""

    def __init__(self, channel_reversal: bool = False):
        super().__init__()
        self.channel_reversal = channel_reversal

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return bgr_to_yuv444(input, self.channel_reversal)


def _check_swing(swing: str, what: str) -> None:
    if swing not in yuv.SWINGS:
        raise ValueError(f"{what}: swing must be one of {yuv.SWINGS}, got {swing!r}")


def rgb2centered_yuv(input: torch.Tensor, swing: str = "studio") -> torch.Tensor:
    """RGB -> YUV444 minus 128 (no chroma subsampling). ``swing="full"``: PIL's
    full-range encoding, -128..127; ``"studio"``: video range, Y -112..107, U/V
    -112..112 (BT.601 Q8)."""
    _check_swing(swing, "rgb2centered_yuv")
    rgb = _planes(input, "rgb2centered_yuv")
    full = yuv.rgb_to_ycbcr(rgb) if swing == "full" else yuv.rgb_to_yuv_video(rgb)
    return _tensor(full - 128, input)


def bgr2centered_yuv(input: torch.Tensor, swing: str = "studio") -> torch.Tensor:
    """``rgb2centered_yuv`` of a BGR image."""
    return rgb2centered_yuv(input.flip(-3), swing)


def centered_yuv2rgb(input: torch.Tensor, swing: str = "studio") -> torch.Tensor:
    """Centred YUV444 -> RGB, 0..255, with the deployed model's integer BT.601
    decoding (``mode="yuvbt601full2rgb"`` for "full", ``"yuvbt601video2rgb"`` for
    "studio")."""
    _check_swing(swing, "centered_yuv2rgb")
    x = input.detach().cpu()
    if x.dim() < 3 or x.shape[-3] != 3:
        raise ValueError(
            f"centered_yuv2rgb: expected ... x 3 x H x W, got {tuple(x.shape)}"
        )
    planes = np.moveaxis(x.to(torch.int64).numpy(), -3, -1) + 128
    return _tensor(yuv.yuv_to_rgb(planes, swing), input)
