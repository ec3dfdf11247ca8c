"""End to end on real photos: an RGB model deployed on NV12 camera frames.

    python examples/nv12_e2e.py [--out out/nv12]

Data: 32 x 32 crops of scikit-learn's two sample photos (china.jpg, flower.jpg);
the task is which photo and which half (top / bottom) a crop comes from, 4 classes.
Two small CNNs are trained on the same crops:

* "rgb": on the RGB crops, normalised ``(rgb - 128) / 128``;
* "b2y": on ``bgr_to_yuv444`` of the crops (BGR -> NV12 -> YUV444, so training sees
  the chroma subsampling), normalised the same way.

Each goes prepare -> calibrate -> export (qat.bc) -> convert (quantized.bc), and
again with the reference toolchain's canonical NV12 insertion before convert
(insert_transpose + insert_image_preprocess + insert_image_convert("nv12"): mode
"yuvbt601full2rgb" for rgb, None for b2y) -> nv12_quantized.bc, fed the NV12 planes
``hbir.data.rgb_to_nv12`` makes of the same crops. The table compares, per model,
nv12_quantized.bc with quantized.bc fed the training-form input: the input
difference in 8-bit levels, and the output logits in LSBs.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_sample_images  # noqa: E402
from torch import nn  # noqa: E402

import hbir  # noqa: E402
from hbir import data  # noqa: E402
from hbir.quantization import (  # noqa: E402
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    bgr_to_yuv444,
    export,
    prepare,
    set_fake_quantize,
)
from hbir.runtime import yuv  # noqa: E402

BATCH, SIZE = 50, 32


class PhotoNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 8 * 8, 4)

    def forward(self, x):
        x = F.relu(self.conv1(self.quant(x)))
        x = F.relu(self.conv2(x))
        return self.dequant(self.fc(x.flatten(1)))


def crops(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` RGB crops (N x 32 x 32 x 3 uint8) and labels photo * 2 + half."""
    images = [im[:426] for im in load_sample_images().images]
    rng = np.random.default_rng(seed)
    out, labels = [], []
    for _ in range(count):
        label = int(rng.integers(4))
        im = images[label // 2]
        half = im.shape[0] // 2
        i = int(rng.integers(0, half - SIZE)) + (label % 2) * half
        j = int(rng.integers(0, im.shape[1] - SIZE))
        out.append(im[i : i + SIZE, j : j + SIZE])
        labels.append(label)
    return np.stack(out), np.array(labels)


def rgb_input(rgb: np.ndarray) -> torch.Tensor:
    """N x H x W x 3 values in [0, 255] -> the normalised NCHW float input."""
    return (torch.from_numpy(rgb).permute(0, 3, 1, 2).float() - 128) / 128


def b2y_input(rgb: np.ndarray) -> torch.Tensor:
    bgr = torch.from_numpy(np.ascontiguousarray(rgb[..., ::-1])).permute(0, 3, 1, 2)
    return (bgr_to_yuv444(bgr.float()) - 128) / 128


def train(x: torch.Tensor, y: torch.Tensor) -> nn.Module:
    torch.manual_seed(0)
    model = PhotoNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(6):
        for idx in torch.randperm(len(y), generator=g).split(32):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def deploy(model: nn.Module, x: torch.Tensor, mode, out: Path, name: str):
    """qat.bc -> quantized.bc, and the NV12 variant -> nv12_quantized.bc."""
    qat = prepare(model, x[:BATCH], out_dir=out / name)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in x.split(100):
            qat(batch)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    qat_bc = export(qat, (x[:BATCH],))
    quantized = hbir.convert(qat_bc, "nash-e")
    func = qat_bc.functions[0]
    for input in func.inputs[::-1]:
        node = input.insert_transpose(permutes=[0, 3, 1, 2])
        node = node.insert_image_preprocess(
            mode=mode, divisor=1, mean=[128, 128, 128], std=[128, 128, 128]
        )
        node.insert_image_convert("nv12")
    nv12 = hbir.convert(qat_bc, "nash-e")
    hbir.save(quantized, out / name / "quantized.bc")
    hbir.save(nv12, out / name / "nv12_quantized.bc")
    return quantized, nv12, float(qat.fc.activation_post_process.scale[0])


def run(module: hbir.Module, feeds: list[dict]) -> np.ndarray:
    return np.concatenate([module["forward"].feed(f)["_output_0"] for f in feeds])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/nv12")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    start = time.perf_counter()

    def step(text: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {text}", flush=True)

    train_rgb, train_y = crops(1200, seed=0)
    test_rgb, test_y = crops(200, seed=1)
    step(f"{len(train_y)} training and {len(test_y)} test crops of the sample photos")
    planes = [data.rgb_to_nv12(b) for b in np.split(test_rgb, len(test_y) // BATCH)]
    nv12_feeds = [{"_input_0_y": y, "_input_0_uv": uv} for y, uv in planes]
    # what the NV12 models' inserted nodes feed the network (runtime/yuv.py)
    yuv444 = np.concatenate([yuv.nv12_to_yuv444(y, uv) for y, uv in planes])
    seen = {
        "rgb": rgb_input(yuv.convert_colour(yuv444, "yuv_bt601_full_to_rgb")),
        "b2y": rgb_input(yuv444),  # (v - 128) / 128 of the YUV444 planes
    }

    rows = []
    for name, to_input, mode in (
        ("rgb", rgb_input, "yuvbt601full2rgb"),
        ("b2y", b2y_input, None),
    ):
        step(f"{name}: train, prepare, calibrate, export, convert, insert NV12")
        x_train, x_test = to_input(train_rgb), to_input(test_rgb)
        model = train(x_train, torch.from_numpy(train_y))
        quantized, nv12, lsb = deploy(model, x_train, mode, out, name)
        feeds = [{"_input_0": b.numpy()} for b in x_test.split(BATCH)]
        ref = run(quantized, feeds)
        got = run(nv12, nv12_feeds)
        levels = ((seen[name] - x_test) * 128).abs()
        rows.append(
            (
                name,
                (ref.argmax(1) == test_y).mean(),
                (got.argmax(1) == test_y).mean(),
                (got.argmax(1) == ref.argmax(1)).mean(),
                float(levels.max()),
                float(levels.mean()),
                np.abs(got - ref).max() / lsb,
            )
        )

    print()
    print(
        f"{'model':<5} | {'quantized.bc':>12} | {'nv12_quantized.bc':>17} | "
        f"{'top-1 agree':>11} | {'input max':>9} | {'input mean':>10} | "
        f"max LSB out"
    )
    print(
        f"{'-' * 5}-+-{'-' * 12}-+-{'-' * 17}-+-{'-' * 11}-+-{'-' * 9}-+-"
        f"{'-' * 10}-+-{'-' * 11}"
    )
    for name, acc_q, acc_n, agree, imax, imean, lsb_diff in rows:
        print(
            f"{name:<5} | {acc_q:>12.2%} | {acc_n:>17.2%} | {agree:>11.2%} | "
            f"{imax:>9.0f} | {imean:>10.3f} | {lsb_diff:>11.2f}"
        )
    print(
        "\n(accuracy of each stage; input: |NV12 model input - training-form input| "
        "in 8-bit levels; out: logits vs quantized.bc)"
    )
    print(f"artifacts in {out}/; done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
