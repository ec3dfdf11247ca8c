"""insert_roi_resize: a camera frame and a run-time roi, resized to the model's
input, bit-identical from qat.bc to model.hbm.

The reference here is written in the test, independently of numerics: the NV12
frame decoded to YUV444 by repeating each chroma pair over its 2 x 2 pixels, the
roi (left, top, right, bottom inclusive) cut from the frame padded by ``np.pad``
(constant bytes or the edge), then resized pixel by pixel in plain Python: torch's
``align_corners=False`` source coordinate, its fraction rounded to 1/128, the
weighted sum of the four neighbours rounded half to even; nearest takes pixel
``floor(dst * in / out)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from compile_models import validated
from torch import nn

import hbir
from hbir.hbm.text import assemble, disassemble
from hbir.passes.function_io import InputEditError
from hbir.quantization import export
from hbir.runtime import numerics, yuv

FRAME = (14, 18)  # height, width of the camera frame
SIZE = (6, 8)  # the model's input


# ----------------------------------------------------------------- the reference


def _taps(size: int, out: int, mode: str) -> list[tuple[int, int, int, int]]:
    """Per output index: (low, high, weight of low, weight of high) in 1/128."""
    taps = []
    for d in range(out):
        if mode == "nearest":
            taps.append((d * size // out, 0, 128, 0))
            continue
        src = max((d + 0.5) * size / out - 0.5, 0.0)
        low = min(math.floor(src), size - 1)
        high = min(low + 1, size - 1)
        w = int(np.rint((src - low) * 128))
        taps.append((low, high, 128 - w, w))
    return taps


def reference(y, uv, roi, size, mode, pad_mode, pad_value):
    """The centred ``N x H x W x C`` int8 image (see the module docstring)."""
    y = np.asarray(y, np.int64)
    frames = (
        y
        if uv is None
        else np.concatenate([y, np.asarray(uv, np.int64).repeat(2, 1).repeat(2, 2)], -1)
    )
    out = np.zeros((len(frames), *size, frames.shape[-1]), np.int64)
    m = numerics.ROI_LIMIT  # a margin no roi can cross
    for n, (left, top, right, bottom) in enumerate(np.asarray(roi).tolist()):
        channels = []
        for c in range(frames.shape[-1]):
            plane = frames[n, :, :, c]
            if pad_mode == "border":
                padded = np.pad(plane, 24, mode="edge")
            else:
                byte = pad_value[0 if c == 0 else 1] % 256
                padded = np.pad(plane, 24, constant_values=byte)
            channels.append(padded[top + 24 : bottom + 25, left + 24 : right + 25])
        crop = np.stack(channels, -1)
        assert m > 24 and crop.shape[:2] == (bottom - top + 1, right - left + 1)
        rows = _taps(crop.shape[0], size[0], mode)
        cols = _taps(crop.shape[1], size[1], mode)
        for i, (r0, r1, wr0, wr1) in enumerate(rows):
            for j, (c0, c1, wc0, wc1) in enumerate(cols):
                acc = (
                    wr0 * wc0 * crop[r0, c0]
                    + wr0 * wc1 * crop[r0, c1]
                    + wr1 * wc0 * crop[r1, c0]
                    + wr1 * wc1 * crop[r1, c1]
                )
                out[n, i, j] = np.rint(acc / 2**14)  # exact: a power of two
    return (out - 128).astype(np.int8)


def _frame(rng, n=2, gray=False):
    y = rng.integers(0, 256, (n, *FRAME, 1)).astype(np.uint8)
    uv = rng.integers(0, 256, (n, FRAME[0] // 2, FRAME[1] // 2, 2)).astype(np.uint8)
    return y, None if gray else uv


# inside, the whole frame, leaving it on every side, one pixel, upscaled, odd corners
ROIS = [
    [[2, 3, 13, 10], [0, 0, 17, 13]],
    [[-5, -4, 9, 6], [10, 8, 25, 19]],
    [[7, 7, 7, 7], [1, 2, 4, 3]],
    [[-20, 0, 3, 13], [17, 13, 17, 13]],
]


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("pad_mode", ["constant", "border"])
def test_roi_resize_equals_a_crop_and_resize_written_here(mode, pad_mode):
    rng = np.random.default_rng(7)
    for gray in (False, True):
        for roi in ROIS:
            y, uv = _frame(rng, gray=gray)
            pad = (16, -128) if not gray else (200,)
            roi = np.asarray(roi, np.int32)
            got = yuv.roi_resize(y, uv, roi, SIZE, mode, pad_mode, pad)
            want = reference(y, uv, roi, SIZE, mode, pad_mode, pad)
            np.testing.assert_array_equal(got, want, err_msg=f"{roi.tolist()}")


def test_the_whole_frame_at_its_own_size_is_image_convert():
    rng = np.random.default_rng(1)
    y, uv = _frame(rng)
    roi = np.array([[0, 0, FRAME[1] - 1, FRAME[0] - 1]] * 2, np.int32)
    for mode in ("bilinear", "nearest"):
        got = yuv.roi_resize(y, uv, roi, FRAME, mode, "constant", (0, -128))
        np.testing.assert_array_equal(got, yuv.center(yuv.nv12_to_yuv444(y, uv)))


def test_a_roi_that_is_no_region_is_refused_by_name():
    rng = np.random.default_rng(2)
    y, uv = _frame(rng, n=1)
    for bad in ([[5, 2, 4, 8]], [[0, 9, 3, 8]], [[-8193, 0, 3, 3]], [[0, 0, 8192, 3]]):
        with pytest.raises(numerics.RoiError, match="is not a region"):
            yuv.roi_resize(
                y, uv, np.array(bad, np.int32), SIZE, "bilinear", "constant", (0, -128)
            )
    with pytest.raises(numerics.RoiError, match="1 x 4 integers"):
        yuv.roi_resize(
            y, uv, np.zeros((1, 3), np.int32), SIZE, "bilinear", "constant", (0, -128)
        )


def test_a_large_frame_reads_only_the_pixels_the_taps_need():
    """The reference's 8192 x 8192 frame: only the sampled rows and columns are
    decoded (a full YUV444 copy would be 1.6 GB)."""
    y = np.zeros((1, 8192, 8192, 1), np.uint8)
    uv = np.full((1, 4096, 4096, 2), 128, np.uint8)
    y[0, 4000:4100, 5000:5100] = 255
    roi = np.array([[5000, 4000, 5099, 4099]], np.int32)
    got = yuv.roi_resize(y, uv, roi, (4, 4), "bilinear", "constant", (0, -128))
    assert got.shape == (1, 4, 4, 3)
    assert (got[..., 0] == 127).all() and (got[..., 1:] == 0).all()


# ----------------------------------------------------------------- through compile


class Net(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3, padding=1)
        self.fc = nn.Linear(4 * SIZE[0] * SIZE[1], 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def _qat_bc(tmp_path, gray: bool):
    torch.manual_seed(5)
    c = 1 if gray else 3
    inputs = [torch.rand(2, c, *SIZE) * 4 - 2 for _ in range(4)]
    model = export(validated(Net(c), inputs, tmp_path), (inputs[0],))
    node = model.functions[0].inputs[0].insert_transpose(permutes=[0, 3, 1, 2])
    csc = None if gray else "yuvbt601full2rgb"
    return model, node.insert_image_preprocess(csc, 1, [128.0] * c, [128.0] * c)


@pytest.mark.parametrize(
    "mode, gray, pad_mode",
    [
        ("nv12", False, "constant"),
        ("nv12", False, "border"),
        ("gray", True, "constant"),
    ],
)
def test_every_stage_is_bit_identical_and_equals_the_model_fed_the_reference(
    tmp_path, mode, gray, pad_mode
):
    model, node = _qat_bc(tmp_path, gray)
    plain = model.clone()  # the model fed the centred image directly
    interp = "nearest" if pad_mode == "border" else "bilinear"
    pad = (30, -100)
    inputs = node.insert_roi_resize(mode, interp, pad_mode, pad, frame=FRAME)
    planes = ("y", "roi") if gray else ("y", "uv", "roi")
    assert [a.name for a in inputs] == [f"_input_0_{p}" for p in planes]
    assert inputs[0].shape == (2, *FRAME, 1) and inputs[-1].dtype == np.int32
    assert inputs[-1].shape == (2, 4)
    quantized = hbir.convert(model, "nash-e")
    hbir.compile(quantized, tmp_path / "model.hbm", "nash-e")
    loaded = hbir.Hbm(str(tmp_path / "model.hbm"))
    layouts = [d.layout for d in loaded["forward"].inputs]
    assert layouts == (["Y", "ROI"] if gray else ["NV12_Y", "NV12_UV", "ROI"])
    rng = np.random.default_rng(11)
    plain_q = hbir.convert(plain, "nash-e")
    for roi in ROIS:
        y, uv = _frame(rng, gray=gray)
        roi = np.asarray(roi, np.int32)
        feed = {"_input_0_y": y, "_input_0_roi": roi}
        if not gray:
            feed["_input_0_uv"] = uv
        image = reference(y, uv, roi, SIZE, interp, pad_mode, pad[: 1 if gray else 2])
        want = plain["forward"].feed({"_input_0": image})["_output_0"]
        outs = [
            f.feed(feed)["_output_0"]
            for f in (model["forward"], quantized["forward"], loaded["forward"])
        ]
        np.testing.assert_array_equal(outs[0], want)
        np.testing.assert_array_equal(
            outs[1], plain_q["forward"].feed({"_input_0": image})["_output_0"]
        )
        np.testing.assert_array_equal(outs[1], outs[2])


def test_a_bad_roi_is_a_located_error_in_every_engine(tmp_path):
    model, node = _qat_bc(tmp_path, False)
    node.insert_roi_resize("nv12", frame=FRAME)
    quantized = hbir.convert(model, "nash-e")
    hbir.compile(quantized, tmp_path / "model.hbm", "nash-e")
    loaded = hbir.load(str(tmp_path / "model.hbm"))
    text = disassemble(loaded.program)  # the .hbms text form takes the opcode too
    assert "roi_resize" in text and disassemble(assemble(text)) == text
    y, uv = _frame(np.random.default_rng(0))
    roi = np.array([[0, 0, 5, 5], [9, 0, 3, 5]], np.int32)  # right < left
    feed = {"_input_0_y": y, "_input_0_uv": uv, "_input_0_roi": roi}
    for f in (model["forward"], quantized["forward"], loaded["forward"]):
        with pytest.raises(hbir.HbirError, match=r"roi \[9, 0, 3, 5\] of image 1"):
            f.feed(feed)
    with pytest.raises(hbir.HbirError, match="_input_0_roi"):
        quantized["forward"].feed({**feed, "_input_0_roi": roi.astype(np.int64)})


def test_insertion_refuses_what_it_cannot_feed(tmp_path):
    model, node = _qat_bc(tmp_path, False)
    err = InputEditError
    with pytest.raises(err, match="unknown interp_mode 'bicubic'"):
        node.insert_roi_resize("nv12", "bicubic", frame=FRAME)
    with pytest.raises(err, match="unknown pad_mode 'reflect'"):
        node.insert_roi_resize("nv12", pad_mode="reflect", frame=FRAME)
    with pytest.raises(err, match=r"pad_value \(0, 300\) must be"):
        node.insert_roi_resize("nv12", pad_value=(0, 300), frame=FRAME)
    with pytest.raises(err, match="nv12 needs an even height and width"):
        node.insert_roi_resize("nv12", frame=(13, 18))
    with pytest.raises(err, match=r"frame \(0, 18\) must be"):
        node.insert_roi_resize("nv12", frame=(0, 18))
    with pytest.raises(err, match="needs an NHWC image with 1 channel"):
        node.insert_roi_resize("gray", frame=FRAME)
    # the default frame is the reference's largest
    y, uv, roi = node.insert_roi_resize("nv12")
    assert (y.shape, uv.shape, roi.shape) == (
        (2, 8192, 8192, 1),
        (2, 4096, 4096, 2),
        (2, 4),
    )
    quantized = hbir.convert(model, "nash-e")
    with pytest.raises(err, match="already converted"):
        quantized["forward"].inputs["_input_0_y"].insert_roi_resize("gray")


def test_the_reference_8192_frame_compiles_and_every_stage_agrees(tmp_path):
    """The default frame: the resizer reads it in DDR (the DMA queue), so compile
    needs no SRAM for it, and only the sampled pixels are decoded."""
    model, node = _qat_bc(tmp_path, False)
    node.insert_roi_resize("nv12")
    quantized = hbir.convert(model, "nash-e")
    hbir.compile(quantized, tmp_path / "model.hbm", "nash-e")
    loaded = hbir.load(str(tmp_path / "model.hbm"))
    rng = np.random.default_rng(3)
    y = np.zeros((2, 8192, 8192, 1), np.uint8)
    uv = np.full((2, 4096, 4096, 2), 128, np.uint8)
    y[:, 8000:, 8100:] = rng.integers(0, 256, (2, 192, 92, 1))
    roi = np.array([[8100, 8000, 8191, 8191], [8150, 8100, 8191, 8191]], np.int32)
    feed = {"_input_0_y": y, "_input_0_uv": uv, "_input_0_roi": roi}
    outs = [
        f.feed(feed)["_output_0"]
        for f in (model["forward"], quantized["forward"], loaded["forward"])
    ]
    crop = reference(
        y[:, 8000:, 8100:],
        uv[:, 4000:, 4050:],
        roi - [8100, 8000] * 2,
        SIZE,
        "bilinear",
        "constant",
        (0, -128),
    )
    plain = _qat_bc(tmp_path, False)[0]
    want = plain["forward"].feed({"_input_0": crop})["_output_0"]
    np.testing.assert_array_equal(outs[0], want)
    np.testing.assert_array_equal(outs[1], outs[2])
