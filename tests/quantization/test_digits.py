"""QAT really trains: scikit-learn's handwritten digits, float -> calibration -> QAT.

The 8x8 digits ship with scikit-learn (no download). A small conv net is trained in
float, prepared, calibrated, fine-tuned with QAT for a few epochs, and evaluated in
VALIDATION: its accuracy must be within 1 % of the float model's.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hbir.quantization import (
    DeQuantStub,
    FakeQuantState,
    MovingAverageMinMaxObserver,
    QuantStub,
    get_qconfig,
    prepare,
    set_fake_quantize,
)

datasets = pytest.importorskip("sklearn.datasets")


class DigitsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 4 * 4, 10)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(self.quant(x))))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.dequant(self.fc(x.flatten(1)))


def _data():
    digits = datasets.load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
    y = torch.tensor(digits.target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    split = int(0.75 * len(y))
    return (x[:split], y[:split]), (x[split:], y[split:])


def _train(model, data, epochs, lr, seed):
    x, y = data
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=g).split(64):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def _accuracy(model, data):
    x, y = data
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def test_qat_on_digits_is_within_one_percent_of_float(tmp_path):
    train, test = _data()
    torch.manual_seed(0)
    model = DigitsNet()
    _train(model.train(), train, epochs=12, lr=3e-3, seed=1)
    float_accuracy = _accuracy(model.eval(), test)
    assert float_accuracy > 0.95

    qconfig = get_qconfig(observer=MovingAverageMinMaxObserver)
    qat_model = prepare(model, train[0][:8], qconfig, out_dir=tmp_path)
    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for batch in train[0].split(128):
            qat_model(batch)
    set_fake_quantize(qat_model, FakeQuantState.VALIDATION)
    calibrated_accuracy = _accuracy(qat_model, test)

    qat_model.train()
    set_fake_quantize(qat_model, FakeQuantState.QAT)
    _train(qat_model, train, epochs=3, lr=1e-4, seed=2)
    qat_model.eval()
    set_fake_quantize(qat_model, FakeQuantState.VALIDATION)
    qat_accuracy = _accuracy(qat_model, test)

    print(
        f"digits: float {float_accuracy:.4f}, calibrated {calibrated_accuracy:.4f}, "
        f"QAT {qat_accuracy:.4f}"
    )
    assert qat_accuracy >= float_accuracy - 0.01
    # The evaluated model really is quantized: logits sit on the output grid.
    with torch.no_grad():
        logits = qat_model(test[0])
    scale = qat_model.fc.activation_post_process.scale
    assert torch.equal(torch.round(logits / scale) * scale, logits)
