"""Training-side colour transforms: the same numerics as the deployed input."""

import numpy as np
import pytest
import torch
import zoo_stages
from PIL import Image
from torch import nn

import hbir
from hbir import data
from hbir.quantization import (
    BgrToYuv444,
    bgr2centered_yuv,
    bgr_to_yuv444,
    centered_yuv2rgb,
    export,
    rgb2centered_yuv,
)


def crops(n=2, size=16, seed=0) -> np.ndarray:
    from sklearn.datasets import load_sample_images

    images, rng = load_sample_images().images, np.random.default_rng(seed)
    out = []
    for k in range(n):
        im = images[k % 2]
        i, j = rng.integers(0, 400), rng.integers(0, 600)
        out.append(im[i : i + size, j : j + size])
    return np.stack(out)


def nchw(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def test_bgr_to_yuv444_is_pil_ycbcr_with_nv12_chroma():
    rgb = crops()
    got = bgr_to_yuv444(nchw(rgb[..., ::-1]).float())
    assert got.dtype == torch.float32 and got.shape == (2, 3, 16, 16)
    for k in range(2):
        ycbcr = np.asarray(Image.fromarray(rgb[k]).convert("YCbCr"))
        np.testing.assert_array_equal(got[k, 0].numpy(), ycbcr[..., 0])
        for c in (1, 2):
            small = np.asarray(Image.fromarray(ycbcr[..., c]).reduce(2))
            big = small.repeat(2, 0).repeat(2, 1)
            np.testing.assert_array_equal(got[k, c].numpy(), big)
    rgb_in = BgrToYuv444(channel_reversal=True)(nchw(rgb))
    assert rgb_in.dtype == torch.uint8
    np.testing.assert_array_equal(rgb_in.float().numpy(), got.numpy())


def test_centered_yuv_ranges_and_inverse():
    rng = np.random.default_rng(0)
    rgb = torch.from_numpy(rng.integers(0, 256, (1, 3, 64, 64))).float()
    full = rgb2centered_yuv(rgb, swing="full")
    ycbcr = np.asarray(
        Image.fromarray(rgb[0].permute(1, 2, 0).numpy().astype(np.uint8)).convert(
            "YCbCr"
        )
    )
    np.testing.assert_array_equal(full[0].permute(1, 2, 0).numpy(), ycbcr - 128.0)
    studio = rgb2centered_yuv(rgb)
    assert studio[:, 0].min() >= -112 and studio[:, 0].max() <= 107
    assert studio[:, 1:].min() >= -112 and studio[:, 1:].max() <= 112
    torch.testing.assert_close(bgr2centered_yuv(rgb.flip(1)), studio, rtol=0, atol=0)
    for swing, bound in (("full", 3), ("studio", 3)):
        back = centered_yuv2rgb(rgb2centered_yuv(rgb, swing), swing)
        assert (back - rgb).abs().max() <= bound


def test_bad_inputs():
    with pytest.raises(ValueError, match="fractions"):
        bgr_to_yuv444(torch.rand(1, 3, 4, 4))
    with pytest.raises(ValueError, match="3 x H x W"):
        bgr_to_yuv444(torch.zeros(1, 4, 4, 3))
    with pytest.raises(ValueError, match="swing"):
        rgb2centered_yuv(torch.zeros(1, 3, 2, 2), swing="pc")


def test_b2y_trained_model_sees_its_training_input_from_nv12(tmp_path):
    """Trained on (bgr_to_yuv444(bgr) - 128) / 128, deployed with mode None and
    mean = std = 128 on NV12 made by hbir.data: the same outputs, bit for bit."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten())
    bgr = [nchw(crops(2, 16, seed=s)[..., ::-1]).float() for s in range(4)]
    train = [(bgr_to_yuv444(b) - 128) / 128 for b in bgr]
    qat = zoo_stages.validated(model, train, tmp_path)
    qat_bc = export(qat, (train[0],))
    quantized = hbir.convert(qat_bc, "nash-e")
    func = qat_bc[0]
    node = func.inputs[0].insert_transpose([0, 3, 1, 2])
    node = node.insert_image_preprocess(None, 1, [128] * 3, [128] * 3)
    node.insert_image_convert("nv12")
    nv12 = hbir.convert(qat_bc, "nash-e")
    for b, x in zip(bgr, train, strict=True):
        y, uv = data.rgb_to_nv12(b.permute(0, 2, 3, 1).numpy().astype(np.uint8), "bgr")
        feed = {"_input_0_y": y, "_input_0_uv": uv}
        np.testing.assert_array_equal(
            func.feed(feed)["_output_0"], qat(x).detach().numpy()
        )
        np.testing.assert_array_equal(nv12[0].feed(feed)["_output_0"], quantized[0](x))
