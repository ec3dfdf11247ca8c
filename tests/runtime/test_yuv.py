"""runtime/yuv.py against independent references: PIL, float BT.601, torch."""

import numpy as np
import pytest
import torch
from PIL import Image

from hbir.dialects.hbir import ImagePreprocessOp
from hbir.runtime import numerics, yuv


def photos() -> list[np.ndarray]:
    """scikit-learn's two sample photos (427 x 640 RGB), cropped to even sizes."""
    from sklearn.datasets import load_sample_images

    return [im[:426] for im in load_sample_images().images]


def all_colours(n: int = 1 << 20, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (1024, n // 1024, 3)).astype(np.uint8)


def pil_ycbcr(rgb: np.ndarray) -> np.ndarray:
    return np.asarray(Image.fromarray(rgb).convert("YCbCr")).astype(np.int64)


@pytest.mark.parametrize("image", ["random", "china", "flower"])
def test_rgb_to_ycbcr_is_pil_exactly(image):
    rgb = {"random": all_colours}.get(image, lambda: photos()[image == "flower"])()
    np.testing.assert_array_equal(yuv.rgb_to_ycbcr(rgb), pil_ycbcr(rgb))


def test_rgb_to_ycbcr_is_bt601_within_one_level():
    rgb = all_colours().astype(np.float64)
    r, g, b = np.moveaxis(rgb, -1, 0)
    y = 0.299 * r + 0.587 * g + 0.114 * b
    ref = np.stack([y, 128 + (b - y) / 1.772, 128 + (r - y) / 1.402], -1)
    err = yuv.rgb_to_ycbcr(rgb.astype(np.uint8)) - ref
    # a floor of a sum of rounded Q6 terms: -1.007 .. 0.046 measured
    assert -1.01 < err.min() and err.max() < 0.05


def test_chroma_downsampling_is_pil_reduce():
    for rgb in photos():
        ycbcr = yuv.rgb_to_ycbcr(rgb)
        y, uv = yuv.rgb_to_nv12(rgb)
        np.testing.assert_array_equal(y[..., 0], ycbcr[..., 0])
        for c in (0, 1):
            plane = Image.fromarray(ycbcr[..., c + 1].astype(np.uint8))
            np.testing.assert_array_equal(uv[..., c], np.asarray(plane.reduce(2)))


def test_nv12_decodes_to_its_blocks():
    rgb = photos()[0]
    y, uv = yuv.rgb_to_nv12(rgb)
    assert y.shape == (426, 640, 1) and uv.shape == (213, 320, 2)
    full = yuv.nv12_to_yuv444(y, uv)
    for i, j in [(0, 0), (1, 1), (100, 33), (425, 639)]:
        assert list(full[i, j]) == [y[i, j, 0], *uv[i // 2, j // 2]]
    # a YUV444 image with constant 2 x 2 chroma blocks survives NV12 exactly
    again = yuv.yuv444_to_nv12(full)
    np.testing.assert_array_equal(again[1], uv)


def test_odd_sizes_are_refused():
    with pytest.raises(ValueError, match="even height and width"):
        yuv.rgb_to_nv12(np.zeros((5, 6, 3), np.uint8))
    with pytest.raises(ValueError, match="UV plane has shape"):
        yuv.nv12_to_yuv444(np.zeros((4, 6, 1)), np.zeros((2, 2, 2)))


def test_yuv_to_rgb_is_the_float_bt601_inverse_within_rounding():
    yuv444 = all_colours().astype(np.int64)
    got = yuv.yuv_to_rgb(yuv444, "full")
    y, cb, cr = np.moveaxis(yuv444.astype(np.float64), -1, 0)
    cb, cr = cb - 128, cr - 128
    ref = np.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb])
    ref = np.clip(np.moveaxis(ref, 0, -1), 0, 255)
    assert np.abs(got - ref).max() <= 0.51  # the libjpeg Q16 rounding (measured)


def test_pil_round_trip_bound_on_photos():
    """RGB -> PIL YCbCr -> our BT.601 decoding: at most 3 levels off, 0.77 on
    average (measured: 3 / 0.773 china, 3 / 0.731 flower)."""
    for rgb in photos():
        back = yuv.yuv_to_rgb(yuv.rgb_to_ycbcr(rgb))
        err = np.abs(back - rgb.astype(np.int64))
        assert err.max() <= 3
        assert err.mean() < 0.78


@pytest.mark.parametrize("csc", yuv.CSC_MODES)
def test_convert_colour_modes(csc):
    v = all_colours(4096).astype(np.int64)
    got = yuv.convert_colour(v, csc)
    planes = np.moveaxis(v, -1, 0)
    if "full" in csc:
        ref = np.stack(numerics.yuv_to_rgb_bt601_full(*planes), -1)
    elif "video" in csc:
        ref = np.stack(numerics.yuv_to_rgb_bt601_video(*planes), -1)
    else:
        ref = v
    if csc.endswith("bgr") or csc == "bgr_to_rgb":
        ref = ref[..., [2, 1, 0]]
    np.testing.assert_array_equal(got, ref)


def test_dialect_and_numerics_agree_on_the_modes():
    assert ImagePreprocessOp.CSC_MODES == yuv.CSC_MODES
    assert set(yuv.USER_MODES.values()) == set(yuv.CSC_MODES)


def test_normalise_is_torchvision():
    v = np.arange(256).reshape(1, 256, 1).repeat(3, -1)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    got = yuv.normalise(v, 255, mean, std)
    img = torch.from_numpy(np.moveaxis(v, -1, 0).astype(np.float32)).div(255)
    ref = (img - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
    np.testing.assert_array_equal(got, np.moveaxis(ref.numpy(), 0, -1))


def test_preprocess_table_is_fake_quant_of_the_float_path():
    mean, std, scale = (128.0, 120.0, 100.0), (128.0, 64.0, 32.0), 0.0078125
    table = yuv.preprocess_table(1, mean, std, scale, 0, -128, 127)
    v = np.arange(256).reshape(256, 1).repeat(3, -1)
    real = torch.from_numpy(yuv.normalise(v, 1, mean, std))
    codes = torch.fake_quantize_per_tensor_affine(real, scale, 0, -128, 127) / scale
    np.testing.assert_array_equal(table.T, codes.round().numpy().astype(np.int64))
    x = np.random.default_rng(1).integers(-128, 128, (1, 4, 4, 3)).astype(np.int8)
    got = yuv.preprocess_codes(x, "none", table)
    want = numerics.quantize(
        yuv.preprocess(x, "none", 1, mean, std), scale, 0, -128, 127
    )
    np.testing.assert_array_equal(got, want)
