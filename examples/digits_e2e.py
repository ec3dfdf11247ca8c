"""End to end on real data: scikit-learn's handwritten digits, float -> fixed point.

    python examples/digits_e2e.py [--out out/digits]

Trains a small CNN with LUT ops (SiLU, sigmoid) in float, prepares it, calibrates,
fine-tunes with QAT, then takes it through every stage of the workflow and writes
each artifact to ``--out``:

    qat.pt             the QAT model's state_dict (torch.load(..., weights_only=True)
                       reads it back into a fresh prepare: see docs/quantization.md)
    qat.export.pt      pre_export(qat.pt)'s state_dict: LUT ops as their exact tables
    qat.bc             export(qat.pt): HBIR with qnt.const_fake_quant
    quantized.bc       convert(qat.bc, "nash-e"): true fixed point
    (compiled)         lower_to_npu(quantized.bc, march="nash-e"): the npu program
                       (layout, fusion, tiles, DMA, memory plan) hbir.compile
                       emits, run in the interpreter
    model.hbm          hbir.compile(quantized.bc, "model.hbm", march="nash-e"): the
                       bytecode, loaded back with hbir.load and run on the
                       simulated NPU (bit-identical to quantized.bc)
    gray_quantized.bc  qat.bc fed by an 8-bit gray camera plane (insert_transpose,
                       insert_image_preprocess, insert_image_convert("gray")),
                       converted: the gray codes v = 15 p of each digit pixel p
                       (0..16) become p / 8 - 1 = (v / 120 - 1) / 1 exactly
    x.npy              one test batch (the export batch size): an input for
                       ``hbir run`` / ``hbir verify``
    model_check_result.txt, fx_graph.txt   written by prepare

Every stage also runs from the shell on these files (README, "The hbir command");
``--model examples/digits_e2e.py:DigitsNet --qconfig examples/digits_e2e.py:QCONFIG``
rebuilds the model qat.pt's state_dict belongs to.

and prints one table: stage | accuracy | top-1 agreement with qat.pt | max LSB
difference of the logits to the previous stage.
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
from sklearn.datasets import load_digits  # noqa: E402
from torch import nn  # noqa: E402

import hbir  # noqa: E402
from hbir.compile import lower_to_npu  # noqa: E402
from hbir.quantization import (  # noqa: E402
    DeQuantStub,
    FakeQuantState,
    MovingAverageMinMaxObserver,
    QuantStub,
    export,
    get_qconfig,
    pre_export,
    prepare,
    set_fake_quantize,
)

BATCH = 50  # the exported model's static batch
# The qconfig of prepare (the CLI's --qconfig examples/digits_e2e.py:QCONFIG).
QCONFIG = get_qconfig(observer=MovingAverageMinMaxObserver)


class DigitsNet(nn.Module):
    """conv-bn-silu, conv-bn-relu (stride 2), linear-sigmoid, linear."""

    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.act1 = nn.SiLU()
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.gate = nn.Sigmoid()
        self.fc2 = nn.Linear(64, 10)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.act1(self.bn1(self.conv1(self.quant(x))))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.gate(self.fc1(x.flatten(1)))
        return self.dequant(self.fc2(x))


def load_data():
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
    y = torch.tensor(digits.target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    test = len(y) - 450  # 450 test images: 9 batches of BATCH
    return (x[:test], y[:test]), (x[test:], y[test:])


def train(model, data, epochs, lr, seed):
    x, y = data
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=g).split(64):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def torch_logits(model, x) -> np.ndarray:
    with torch.no_grad():
        return model(x).numpy()


def hbir_logits(module, x) -> np.ndarray:
    """Logits of an ``hbir.Module`` or an ``Hbm``, batch by batch. A ``.bc`` runs
    as the interpreter defines it (``reference=True``): quantized.bc's own fast
    feed is its compiled program, the very program model.hbm holds."""
    f = module["forward"]

    def run(batch: np.ndarray) -> np.ndarray:
        if not isinstance(module, hbir.Module):
            return f(batch)
        (y,) = f.feed({f.inputs.names[0]: batch}, reference=True).values()
        return y

    return np.concatenate([run(batch.numpy()) for batch in x.split(BATCH)])


def gray_planes(x: torch.Tensor) -> torch.Tensor:
    """Normalised digits (p / 8 - 1) -> the gray camera plane, N x 8 x 8 x 1 uint8
    holding 15 p (0..240)."""
    p = (x + 1) * 8  # exact: the digit pixels 0..16
    return (p * 15).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/digits")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def step(text: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {text}", flush=True)

    (x_train, y_train), (x_test, y_test) = load_data()
    step(f"digits: {len(y_train)} training, {len(y_test)} test images")

    torch.manual_seed(0)
    model = DigitsNet()
    step("training the float model (12 epochs)")
    train(model.train(), (x_train, y_train), epochs=12, lr=3e-3, seed=1)
    model.eval()

    step("prepare, then calibrate on the training set")
    qat = prepare(model, x_train[:BATCH], QCONFIG, out_dir=out)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in x_train.split(128):
            qat(batch)
    step("QAT fine-tuning (3 epochs)")
    qat.train()
    set_fake_quantize(qat, FakeQuantState.QAT)
    train(qat, (x_train, y_train), epochs=3, lr=1e-4, seed=2)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    torch.save(qat.state_dict(), out / "qat.pt")  # tensors only: weights_only loads

    step("pre_export -> qat.export.pt")
    qat_export = pre_export(qat)
    torch.save(qat_export.state_dict(), out / "qat.export.pt")
    step("export -> qat.bc")
    qat_bc = export(qat, (x_test[:BATCH],))
    hbir.save(qat_bc, out / "qat.bc")
    np.save(out / "x.npy", x_test[:BATCH].numpy())  # one batch, for the CLI
    step("convert -> quantized.bc (nash-e)")
    quantized = hbir.convert(qat_bc, "nash-e")
    hbir.save(quantized, out / "quantized.bc")
    step("compile -> the npu program (nash-e)")
    compiled = lower_to_npu(quantized, march="nash-e")

    step("compile -> model.hbm (nash-e)")
    hbir.compile(quantized, out / "model.hbm", march="nash-e")

    step("gray camera input -> gray_quantized.bc")
    gray_bc = hbir.load(out / "qat.bc")
    node = gray_bc["forward"].inputs[0].insert_transpose(permutes=[0, 3, 1, 2])
    node = node.insert_image_preprocess(mode=None, divisor=120, mean=[1.0], std=[1.0])
    node.insert_image_convert("gray")
    hbir.save(hbir.convert(gray_bc, "nash-e"), out / "gray_quantized.bc")

    step("evaluating every stage on the test set")
    logits = {
        "float": torch_logits(model, x_test),
        "qat.pt": torch_logits(qat, x_test),
        "qat.export.pt": torch_logits(qat_export, x_test),
        "qat.bc": hbir_logits(hbir.load(out / "qat.bc"), x_test),
        "quantized.bc": hbir_logits(hbir.load(out / "quantized.bc"), x_test),
        "compiled": hbir_logits(compiled, x_test),
        "model.hbm": hbir_logits(hbir.load(out / "model.hbm"), x_test),
        "gray_quantized.bc": hbir_logits(
            hbir.load(out / "gray_quantized.bc"), gray_planes(x_test)
        ),
    }
    lsb = float(qat.fc2.activation_post_process.scale[0])
    reference = logits["qat.pt"].argmax(1)
    labels = y_test.numpy()
    print()
    print(f"{'stage':<17} | {'accuracy':>8} | {'top-1 = qat.pt':>14} | max LSB vs prev")
    print(f"{'-' * 17}-+-{'-' * 8}-+-{'-' * 14}-+-{'-' * 15}")
    previous = None
    for stage, values in logits.items():
        accuracy = (values.argmax(1) == labels).mean()
        agreement = (values.argmax(1) == reference).mean()
        diff = "-"
        if previous is not None:
            diff = f"{np.abs(values - previous).max() / lsb:.2f}"
        print(f"{stage:<17} | {accuracy:>8.2%} | {agreement:>14.2%} | {diff:>15}")
        previous = values
    identical = np.array_equal(logits["model.hbm"], logits["quantized.bc"])
    print(f"\nmodel.hbm bit-identical to quantized.bc: {identical}")
    print(f"artifacts in {out}/; done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
