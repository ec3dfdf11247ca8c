"""The planted faults of the analysis tests, each on a zoo model.

(a) a lookup-table op with too few tables, (b) an ``if deploy:`` branch that
changes the exported graph, (c) a corrupted requantization constant in
quantized.bc, (d) a wrong ``insert_image_preprocess`` mode in nv12_quantized.bc,
(e) a corrupted model.hbm, (f) an outlier channel too wide for int8 and (g) a
calibration range clipped below the data's (quantization loss in qat.pt).
Each returns what a user would have: the QAT model, data, and the artifacts, plus
what the tools must find.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import compile_models
import numpy as np
import torch
import zoo
import zoo_stages
from xdsl.dialects.builtin import DenseArrayBase, i64

import hbir
from hbir.data import rgb_to_nv12
from hbir.dialects import qnt
from hbir.profiler.origin import origin_of
from hbir.quantization import export

BATCH = 2  # the batch size export fixes


def data(name: str, count: int = 2, seed: int = 7) -> list[tuple[torch.Tensor, ...]]:
    return zoo.batches(name, count, batch=BATCH, seed=seed)


def zoo_line(text: str) -> int:
    """The line of tests/zoo.py holding ``text`` (the torch source of an op)."""
    lines = open(zoo.__file__).read().splitlines()
    (row,) = [i + 1 for i, line in enumerate(lines) if text in line]
    return row


def few_tables(tmp_path):
    """(a) The transformer's second layer norm's rsqrt (int16) with 6 tables."""
    qat, example = zoo_stages.calibrated("transformer", tmp_path)
    qat.get_submodule("norm2.rsqrt").num_tables = 6
    return qat, export(qat, example)


class DeployResNet(zoo.ResNetLike):
    """ResNetLike whose forward clamps the features when deploying."""

    deploy = False

    def forward(self, x):
        x = self.pool(self.stem(self.quant(x)))
        if self.deploy:
            x = torch.clamp(x, -1.0, 1.0)  # planted: only in the exported graph
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.dequant(self.fc(x))


def deploy_branch(tmp_path):
    """(b) qat.pt trained with deploy=False, qat.bc exported with deploy=True."""
    zoo._CLASSES["deploy_resnet"] = DeployResNet
    try:
        qat, example = zoo_stages.calibrated("deploy_resnet", tmp_path)
        DeployResNet.deploy = True
        deployed, _ = zoo_stages.calibrated("deploy_resnet", tmp_path)
    finally:
        DeployResNet.deploy = False
        del zoo._CLASSES["deploy_resnet"]
    return qat, export(deployed, example)


PLANTED_CONV = "layer1.conv2"


def corrupt_requantize(quantized: hbir.Module, path: str = PLANTED_CONV) -> None:
    """(c) Lower by one the shift of the conv at ``path``'s first requantization
    (the accumulator's, per tensor): every output of the conv doubles before its
    bias (in place). Raises IndexError when the conv has no requantization."""
    ops = [
        op
        for op in quantized.module.op.walk()
        if isinstance(op, qnt.RequantizeOp)
        and (o := origin_of(op)) is not None
        and o.module_path == path
    ]
    op = ops[0]
    shifts = list(op.shift.get_values())
    shifts[0] -= 1
    op.shift = DenseArrayBase.from_list(i64, shifts)


def corrupted_quantized(tmp_path):
    qat, example = zoo_stages.calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    corrupt_requantize(quantized)
    return qat, qat_bc, quantized


# ------------------------------------------------------- (d) NV12 camera input

PHOTO_SIZE = 16  # the zoo resnet's input is 3 x 16 x 16


def photo_crops(count: int, seed: int) -> np.ndarray:
    """``count`` RGB crops (N x 16 x 16 x 3 uint8) of scikit-learn's two sample
    photos, alternating china.jpg / flower.jpg."""
    from sklearn.datasets import load_sample_images

    images = load_sample_images().images
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        im = images[k % 2]
        i = int(rng.integers(0, im.shape[0] - PHOTO_SIZE))
        j = int(rng.integers(0, im.shape[1] - PHOTO_SIZE))
        out.append(im[i : i + PHOTO_SIZE, j : j + PHOTO_SIZE])
    return np.stack(out)


def photo_input(rgb: np.ndarray) -> torch.Tensor:
    """What the model is trained on: NCHW ``(rgb - 128) / 128``."""
    return (torch.from_numpy(rgb).permute(0, 3, 1, 2).float() - 128) / 128


@dataclass
class Nv12Case:
    qat: torch.nn.Module
    qat_bc: hbir.Module
    quantized: hbir.Module
    nv12: hbir.Module
    data: list  # float batches for qat.pt ... quantized.bc
    planes: list  # the same frames as NV12 (y, uv), batch for batch


def nv12_model(qat, example, mode, permutes=(0, 3, 1, 2)) -> hbir.Module:
    """nv12_quantized.bc: the canonical insertion with ``mode`` and ``permutes``."""
    qat_bc = export(qat, example)
    for input in qat_bc.functions[0].inputs[::-1]:
        node = input.insert_transpose(permutes=list(permutes))
        node = node.insert_image_preprocess(
            mode=mode, divisor=1, mean=[128] * 3, std=[128] * 3
        )
        node.insert_image_convert("nv12")
    return hbir.convert(qat_bc, "nash-e")


def nv12_case(tmp_path, mode="yuvbt601full2rgb", permutes=(0, 3, 1, 2), batches=3):
    """(d) The zoo resnet, calibrated on 16 x 16 photo crops, deployed on NV12 with
    ``mode`` (right: "yuvbt601full2rgb", as ``hbir.data.rgb_to_nv12`` makes
    full-range frames)."""
    model, _ = zoo.build("resnet")
    calibration = photo_input(photo_crops(16, seed=1))
    qat = zoo_stages.validated(
        model, list(calibration.split(BATCH)), tmp_path, zoo.qconfig("resnet")
    )
    example = (calibration[:BATCH],)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    frames = photo_crops(BATCH * batches, seed=3)
    data, planes = [], []
    for k in range(0, len(frames), BATCH):
        data.append((photo_input(frames[k : k + BATCH]),))
        planes.append(rgb_to_nv12(frames[k : k + BATCH]))
    nv12 = nv12_model(qat, example, mode, permutes)
    return Nv12Case(qat, qat_bc, quantized, nv12, data, planes)


# ------------------------------------------------------- (e) the compile stage


def corrupted_hbm(tmp_path, path: str = PLANTED_CONV, io_removed: bool = False):
    """The resnet's stages and its model.hbm with the first per-channel
    requantization multiplier of the conv at ``path`` halved in one channel (the
    container rewrites the checksums): (qat, qat_bc, quantized, hbm, index of the
    instruction, channel, old value, new value). With ``io_removed``, quantized.bc
    is the deployable variant: its input Quantize and output Dequantize removed
    (``remove_io_op``), so it and model.hbm take and give int8 codes."""
    from hbir.hbm import container

    qat, example = zoo_stages.calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    if io_removed:
        quantized["forward"].remove_io_op(op_types=["Quantize", "Dequantize"])
    program = hbir.compile(quantized, tmp_path / "model.hbm").program
    index, channel, old, new = compile_models.halve_a_multiplier(
        program, f"({path}|", channel=1
    )
    container.write(program, tmp_path / "bad.hbm")
    bad = hbir.load(tmp_path / "bad.hbm")
    return qat, qat_bc, quantized, bad, index, channel, old, new


# ------------------------------------------------ (f) quantization loss in qat.pt


class OutlierResNet(zoo.ResNetLike):
    """ResNetLike with an outlier channel after the stem: ``spread`` multiplies
    channel 0 by ``GAIN`` and ``unspread`` divides it back, so the per-tensor
    int8 grid of ``spread``'s output is set by channel 0 and the other seven
    channels (what the rest of the model reads) fall below one step."""

    GAIN = 400.0

    def __init__(self, classes=10):
        super().__init__(classes)
        gains = torch.ones(8)
        gains[0] = self.GAIN
        self.spread = torch.nn.Conv2d(8, 8, 1)
        self.unspread = torch.nn.Conv2d(8, 8, 1)
        with torch.no_grad():
            self.spread.weight.copy_(torch.diag(gains).reshape(8, 8, 1, 1))
            self.spread.bias.zero_()
            self.unspread.weight.copy_(torch.diag(1 / gains).reshape(8, 8, 1, 1))
            self.unspread.bias.zero_()

    def forward(self, x):
        x = self.pool(self.stem(self.quant(x)))
        x = self.unspread(self.spread(x))  # planted: an outlier channel (resnet)
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.dequant(self.fc(x))


def faults_line(text: str) -> int:
    """The line of this file holding ``text``."""
    lines = open(__file__).read().splitlines()
    (row,) = [i + 1 for i, line in enumerate(lines) if text in line]
    return row


def outlier_channel(tmp_path, qconfig=None):
    """(f) qat.pt of OutlierResNet (the default int8 qconfig, or ``qconfig``),
    calibrated as the zoo's models are."""
    model, example = zoo.build("resnet")  # the zoo resnet's weights and BNs
    planted = OutlierResNet()
    planted.load_state_dict(model.state_dict(), strict=False)
    batches = [b[0] for b in zoo.batches("resnet", 4)]
    qat = zoo_stages.validated(planted.eval(), batches, tmp_path, qconfig)
    return qat.eval(), example


CLIPPED_LAYER = "fc"  # the logits: their largest values are the answer


def clipped_range(tmp_path, percentile=0.8):
    """(g) The zoo resnet with ``CLIPPED_LAYER``'s output calibrated by a
    histogram observer clipping at ``percentile`` of ``|x|``: its largest
    values are cut."""
    from hbir.quantization import HistogramObserver, QconfigSetter, get_qconfig

    clipped = get_qconfig(HistogramObserver, observer_kwargs={"percentile": percentile})
    model, example = zoo.build("resnet")
    setter = QconfigSetter(module_name={CLIPPED_LAYER: clipped})
    batches = [b[0] for b in zoo.batches("resnet", 4)]
    qat = zoo_stages.validated(model, batches, tmp_path, setter)
    return qat.eval(), example


# ------------------------------------- (h) the digits, with an outlier channel


class OutlierDigits(torch.nn.Module):
    """A small conv net for scikit-learn's 8x8 digits with an outlier channel
    after its first conv (as ``OutlierResNet``): ``spread`` multiplies channel
    0 by ``GAIN``, ``unspread`` divides it back; neither is trained."""

    GAIN = 400.0

    def __init__(self):
        super().__init__()
        from hbir.quantization import DeQuantStub, QuantStub

        nn = torch.nn
        self.quant = QuantStub()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.spread = nn.Conv2d(16, 16, 1)
        self.unspread = nn.Conv2d(16, 16, 1)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)
        self.dequant = DeQuantStub()
        gains = torch.ones(16)
        gains[0] = self.GAIN
        with torch.no_grad():
            for conv, g in ((self.spread, gains), (self.unspread, 1 / gains)):
                conv.weight.copy_(torch.diag(g).reshape(16, 16, 1, 1))
                conv.bias.zero_()
                conv.weight.requires_grad_(False)
                conv.bias.requires_grad_(False)

    def forward(self, x):
        x = torch.relu(self.conv1(self.quant(x)))
        x = self.unspread(self.spread(x))  # planted: an outlier channel (digits)
        x = torch.relu(self.conv2(x))
        return self.dequant(self.fc(x.flatten(1)))


def digits(batch: int = 50):
    """scikit-learn's digits in [-1, 1]: (train images, train labels, test
    batches as a list of (images,), test labels)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
    y = torch.tensor(d.target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    split = 1300  # 497 test images: 9 batches of 50 (the exported batch size)
    test = [(x[i : i + batch],) for i in range(split, len(y) - batch + 1, batch)]
    return x[:split], y[:split], test, y[split : split + batch * len(test)]


def outlier_digits(tmp_path, qconfig=None):
    """(h) OutlierDigits trained in float (4 epochs), prepared (int8, or
    ``qconfig``) and calibrated on the training images: (qat, float model,
    test batches, test labels)."""
    import torch.nn.functional as F

    x, y, test, labels = digits()
    torch.manual_seed(0)
    model = OutlierDigits()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        for idx in torch.randperm(len(y), generator=g).split(64):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    calibration = list(x[:500].split(50))
    qat = zoo_stages.validated(copy.deepcopy(model), calibration, tmp_path, qconfig)
    return qat.eval(), model, test, labels
