"""The float models of ``benchmarks/execution.py``, written as users write them.

* ``resnet18``: the ResNet-18-like benchmark model (torchvision's layout:
  7x7/2 stem, 3x3/2 max pool, four stages of two basic blocks, 64..512 channels,
  global average pool, 1000-way linear) at 224x224.
* ``mobilenet_v2``: the MobileNetV2 layout (inverted residuals with ReLU6, width
  1.0, 1280-channel head) at 224x224.
* ``transformer``: the benchmark encoder block (sequence 128, width 256, 4
  heads, pre-norm, GELU MLP of width 1024).
* ``vit_tiny``: timm's ``vit_tiny_patch16_224`` layout, written out (16x16
  patches, width 192, 12 pre-norm blocks of 3 heads and a GELU MLP of 768, a
  class token and learned position embeddings, 1000-way head) at 224x224.

Each model has ``QuantStub`` / ``DeQuantStub`` around the deployed part; BatchNorm
statistics are randomised so that the folded weights are not trivial.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hbir.quantization import DeQuantStub, QuantStub


def _conv_bn(cin, cout, kernel, stride=1, groups=1):
    pad = kernel // 2
    return [
        nn.Conv2d(cin, cout, kernel, stride, pad, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (
            nn.Sequential(*_conv_bn(cin, cout, 1, stride))
            if stride != 1 or cin != cout
            else None
        )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    size = 224

    def __init__(self, classes=1000):
        super().__init__()
        self.quant = QuantStub()
        self.stem = nn.Sequential(*_conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True))
        self.pool = nn.MaxPool2d(3, 2, 1)
        widths, blocks, cin = (64, 128, 256, 512), [], 64
        for i, cout in enumerate(widths):
            stride = 1 if i == 0 else 2
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout)]
            cin = cout
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.layers(self.pool(self.stem(self.quant(x))))
        return self.dequant(self.fc(torch.flatten(self.avgpool(x), 1)))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [*_conv_bn(cin, hidden, 1), nn.ReLU6(inplace=True)]
        layers += [*_conv_bn(hidden, hidden, 3, stride, hidden), nn.ReLU6(inplace=True)]
        layers += _conv_bn(hidden, cout, 1)
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    size = 224
    # (expansion, output channels, repeats, first stride), torchvision's table
    SETTINGS = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(self, classes=1000):
        super().__init__()
        self.quant = QuantStub()
        layers = [*_conv_bn(3, 32, 3, 2), nn.ReLU6(inplace=True)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [*_conv_bn(cin, 1280, 1), nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(1280, classes)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.features(self.quant(x))
        return self.dequant(self.fc(torch.flatten(self.avgpool(x), 1)))


class EncoderBlock(nn.Module):
    """Pre-norm encoder block: attention (4 heads) and a GELU MLP, residual adds."""

    seq, dim, heads = 128, 256, 4

    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.norm1 = nn.LayerNorm(self.dim)
        self.qkv = nn.Linear(self.dim, 3 * self.dim)
        self.proj = nn.Linear(self.dim, self.dim)
        self.norm2 = nn.LayerNorm(self.dim)
        self.fc1 = nn.Linear(self.dim, 4 * self.dim)
        self.fc2 = nn.Linear(4 * self.dim, self.dim)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        n, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.reshape(n, s, h, d // h).transpose(1, 2)
        k = k.reshape(n, s, h, d // h).transpose(1, 2)
        v = v.reshape(n, s, h, d // h).transpose(1, 2)
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (d // h) ** -0.5, -1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(n, s, d)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return self.dequant(x)


class _VitBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        n, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.reshape(n, s, h, d // h).transpose(1, 2)
        k = k.reshape(n, s, h, d // h).transpose(1, 2)
        v = v.reshape(n, s, h, d // h).transpose(1, 2)
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (d // h) ** -0.5, -1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(n, s, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class VitTiny(nn.Module):
    """timm's ``vit_tiny_patch16_224`` layout (class token, no distillation)."""

    size, patch, dim, depth, heads = 224, 16, 192, 12, 3

    def __init__(self, classes=1000):
        super().__init__()
        tokens = (self.size // self.patch) ** 2 + 1
        self.quant = QuantStub()
        self.patch_embed = nn.Conv2d(3, self.dim, self.patch, self.patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, self.dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, self.dim) * 0.02)
        self.blocks = nn.Sequential(
            *[_VitBlock(self.dim, self.heads) for _ in range(self.depth)]
        )
        self.norm = nn.LayerNorm(self.dim, eps=1e-6)
        self.head = nn.Linear(self.dim, classes)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.patch_embed(self.quant(x)).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.dequant(self.head(x[:, 0]))


MODELS = {
    "resnet18": ResNet18,
    "mobilenet_v2": MobileNetV2,
    "transformer": EncoderBlock,
    "vit_tiny": VitTiny,
}


def build(name: str, seed: int = 0) -> nn.Module:
    """The float model ``name`` in eval mode, deterministic weights and BN stats."""
    torch.manual_seed(seed)
    model = MODELS[name]()
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
    return model.eval()


def example(name: str, batch: int = 1, seed: int = 1) -> torch.Tensor:
    """A random input batch of the model's shape."""
    g = torch.Generator().manual_seed(seed)
    cls = MODELS[name]
    if name == "transformer":
        return torch.randn(batch, cls.seq, cls.dim, generator=g)
    return torch.randn(batch, 3, cls.size, cls.size, generator=g)
