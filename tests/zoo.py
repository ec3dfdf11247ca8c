"""The model zoo every stage is tested on (prepare, export, convert, compile).

Each entry is a small float model written the way users write them, with
``QuantStub`` / ``DeQuantStub`` around the part to deploy:

* ``resnet``: conv-bn-relu stem, max pool, two basic blocks (one downsampling with a
  1x1 conv-bn shortcut, a ``self.relu`` shared by both calls as torchvision does),
  global average pool, linear.
* ``mobilenet``: conv-bn-hardswish stem, an inverted residual block (1x1 expand with
  relu6, depthwise 3x3 with relu6, squeeze-excite with sigmoid, 1x1 project, residual
  add), hardswish head.
* ``transformer``: pre-norm block with layer norm, two-head softmax attention
  (matmul, transpose, scale), residual adds, and a gelu MLP.
* ``posenc``: sin/cos positional encoding of positions over a wide range (0..1000),
  rsqrt (RMS) and reciprocal normalisation, and the other table ops (exp, log, sqrt,
  tanh, silu, hardsigmoid, cos).
* ``multi_io``: two inputs (image, vector) and two outputs (logits, feature map) with
  cat, sub, mean, max/avg pooling, a transposed conv and a clamp.
* ``fpn_head``: a two-level feature pyramid whose levels differ 4x in range, one
  detection head (conv tower) shared by both levels as RetinaNet / FCOS do, and a
  YOLO-style decode that writes into slices of the head's output in place.
* ``const_tables``: float constants added to, subtracted from and multiplied with
  quantized values before table ops (``log(|x| + 0.1)``, ``rsqrt(|x| + 0.1)``), on
  a zero canvas filled by slice assignment (padding written by hand).
* ``sparse_bev``: the best locations of a score map (``topk``), their features
  read back (``gather``) and written into a zero canvas at those locations
  (PointPillars' ``canvas[:, idx] = feats``), a conv over the canvas; the scores,
  the int64 locations and the class map (``argmax``) are outputs.

``build(name)`` returns ``(model, example_inputs)`` with deterministic weights and
non-trivial batch-norm statistics; ``batches(name, n)`` yields calibration inputs;
``qconfig(name)`` is the qconfig the model is meant to be prepared with (int16 where a
range needs it).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hbir.quantization import DeQuantStub, QconfigSetter, QuantStub, get_qconfig, qint16

NAMES = (
    "resnet",
    "mobilenet",
    "transformer",
    "posenc",
    "multi_io",
    "fpn_head",
    "const_tables",
    "sparse_bev",
)


def conv_bn(cin, cout, kernel, stride=1, groups=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    )


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (
            conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None
        )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNetLike(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.quant = QuantStub()
        self.stem = nn.Sequential(conv_bn(3, 8, 3), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.layer1 = BasicBlock(8, 8)
        self.layer2 = BasicBlock(8, 16, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.pool(self.stem(self.quant(x)))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.dequant(self.fc(x))

    @staticmethod
    def inputs(batch=2, generator=None):
        return (torch.randn(batch, 3, 16, 16, generator=generator),)


class InvertedResidual(nn.Module):
    def __init__(self, channels, expand):
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Sequential(conv_bn(channels, hidden, 1), nn.ReLU6())
        self.depthwise = nn.Sequential(
            conv_bn(hidden, hidden, 3, groups=hidden), nn.ReLU6()
        )
        self.se_pool = nn.AdaptiveAvgPool2d(1)
        self.se_reduce = nn.Conv2d(hidden, 4, 1)
        self.se_expand = nn.Conv2d(4, hidden, 1)
        self.project = conv_bn(hidden, channels, 1)

    def forward(self, x):
        y = self.depthwise(self.expand(x))
        gate = torch.sigmoid(self.se_expand(F.relu(self.se_reduce(self.se_pool(y)))))
        y = self.project(y * gate)
        return x + y


class MobileNetLike(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.quant = QuantStub()
        self.stem = nn.Sequential(conv_bn(3, 8, 3, stride=2), nn.Hardswish())
        self.block = InvertedResidual(8, 3)
        self.head = nn.Sequential(nn.Conv2d(8, 16, 1), nn.Hardswish())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.head(self.block(self.stem(self.quant(x))))
        return self.dequant(self.fc(self.pool(x).flatten(1)))

    @staticmethod
    def inputs(batch=2, generator=None):
        return (torch.randn(batch, 3, 16, 16, generator=generator),)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        attn = F.softmax(scores, dim=-1)
        y = torch.matmul(attn, v).permute(0, 2, 1, 3)
        return self.out(y.reshape(x.shape[0], x.shape[1], -1))


class TransformerBlock(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.quant = QuantStub()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * dim, dim)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        x = x + self.attn(self.norm1(x))
        x = x + self.fc2(self.act(self.fc1(self.norm2(x))))
        return self.dequant(x)

    @staticmethod
    def inputs(batch=2, generator=None):
        return (torch.randn(batch, 8, 16, generator=generator),)


class PosEncNet(nn.Module):
    """Positions 0..1000 encoded with sin/cos, then table-op-heavy normalisation."""

    def __init__(self, dim=8):
        super().__init__()
        self.quant_pos = QuantStub()
        self.quant_x = QuantStub()
        freqs = torch.exp(torch.arange(dim // 2) * (-math.log(100.0) / (dim // 2)))
        self.register_buffer("freqs", freqs)
        self.proj = nn.Linear(dim, dim)
        self.dequant = DeQuantStub()

    def forward(self, pos, x):
        angle = self.quant_pos(pos).unsqueeze(-1) * self.freqs
        enc = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)
        h = self.quant_x(x) + enc
        h = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-5)
        h = self.proj(h)
        h = h * torch.reciprocal((h * h).sum(-1, keepdim=True) + 1.0)
        a = torch.tanh(h) + F.silu(h) * torch.sqrt(h * h + 1.0)
        b = torch.log(h * h + 1.0) - torch.exp(h * h * -0.5)
        c = F.hardsigmoid(h) * torch.cos(h)
        return self.dequant(a + b + c)

    @staticmethod
    def inputs(batch=2, generator=None):
        pos = torch.rand(batch, 6, generator=generator) * 1000.0
        pos[:, 0] = 1000.0  # every batch spans the full range
        return pos, torch.randn(batch, 6, 8, generator=generator)


class MultiIO(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.quant_img = QuantStub()
        self.quant_vec = QuantStub()
        self.conv = nn.Sequential(conv_bn(3, 8, 3), nn.ReLU())
        self.maxpool = nn.MaxPool2d(2)
        self.avgpool = nn.AvgPool2d(2)
        self.up = nn.ConvTranspose2d(16, 4, 2, stride=2)
        self.vec_fc = nn.Linear(6, 8)
        self.fc = nn.Linear(16, classes)
        self.dequant_logits = DeQuantStub()
        self.dequant_map = DeQuantStub()

    def forward(self, img, vec):
        feat = self.conv(self.quant_img(img))
        pooled = torch.cat([self.maxpool(feat), self.avgpool(feat)], dim=1)
        fmap = torch.clamp(self.up(pooled), -2.0, 2.0)
        v = self.vec_fc(self.quant_vec(vec))
        summary = pooled.mean(dim=(2, 3))
        logits = self.fc(torch.cat([summary[:, :8] - v, summary[:, 8:]], dim=1))
        return self.dequant_logits(logits), self.dequant_map(fmap)

    @staticmethod
    def inputs(batch=2, generator=None):
        return torch.randn(batch, 3, 8, 8, generator=generator), torch.randn(
            batch, 6, generator=generator
        )


class FpnHead(nn.Module):
    def __init__(self, anchors=2, outputs=6):
        super().__init__()
        self.quant = QuantStub()
        self.stem = nn.Sequential(conv_bn(3, 8, 3), nn.ReLU())
        self.down = conv_bn(8, 8, 3, stride=2)
        self.tower = nn.Sequential(
            nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, anchors * outputs, 1)
        )
        self.anchors, self.outputs = anchors, outputs
        self.dequant = DeQuantStub()

    def _decode(self, y, stride: float):
        n, _, h, w = y.shape
        y = y.view(n, self.anchors, self.outputs, h, w).permute(0, 1, 3, 4, 2)
        y = y.contiguous().sigmoid()
        y[..., 0:2] = (y[..., 0:2] * 2.0 - 0.5) * stride
        y[..., 2:4] = (y[..., 2:4] * 2.0) ** 2 * 4.0
        return y.view(n, -1, self.outputs)

    def forward(self, x):
        p3 = self.stem(self.quant(x))
        p4 = self.down(p3) * 4.0  # the coarser level has a 4x wider range
        levels = [self._decode(self.tower(p), s) for p, s in ((p3, 8.0), (p4, 16.0))]
        return self.dequant(torch.cat(levels, 1))

    @staticmethod
    def inputs(batch=2, generator=None):
        return (torch.randn(batch, 3, 8, 8, generator=generator),)


class ConstTables(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.dequant = DeQuantStub()

    def forward(self, x):
        y = self.conv(self.quant(x))
        canvas = torch.zeros(y.shape[0], 4, 10, 10)
        canvas[:, :, 1:-1, 1:-1] = y
        a = canvas.abs() + 0.1
        out = torch.cat([torch.log(a), torch.rsqrt(a), 0.1 - canvas, canvas * 0.3], 1)
        return self.dequant(out)

    @staticmethod
    def inputs(batch=2, generator=None):
        return (torch.randn(batch, 3, 8, 8, generator=generator),)


class SparseBev(nn.Module):
    def __init__(self, k=6):
        super().__init__()
        self.quant = QuantStub()
        self.stem = nn.Sequential(conv_bn(3, 8, 3), nn.ReLU())
        self.score = nn.Conv2d(8, 3, 1)
        self.bev = nn.Conv2d(8, 4, 3, padding=1)
        self.k = k
        self.dequant = DeQuantStub()

    def forward(self, x):
        f = self.stem(self.quant(x))
        n, c, h, w = f.shape
        scores = self.score(f)
        best, where = scores.flatten(2).amax(1).topk(self.k, dim=1)
        feats = f.flatten(2).gather(2, where.unsqueeze(1).expand(-1, c, -1))
        canvas = torch.zeros(n, c, h * w)
        canvas[:, :, where[0]] = feats
        bev = self.bev(canvas.view(n, c, h, w))
        return self.dequant(bev), self.dequant(best), where, scores.argmax(1)

    @staticmethod
    def inputs(batch=2, generator=None):
        return (torch.randn(batch, 3, 8, 8, generator=generator),)


_CLASSES = {
    "resnet": ResNetLike,
    "mobilenet": MobileNetLike,
    "transformer": TransformerBlock,
    "posenc": PosEncNet,
    "multi_io": MultiIO,
    "fpn_head": FpnHead,
    "const_tables": ConstTables,
    "sparse_bev": SparseBev,
}


def _randomize_batch_norms(model: nn.Module, generator: torch.Generator) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=generator) + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)


def build(name: str, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A zoo model in eval mode (deterministic weights) and example inputs."""
    torch.manual_seed(seed)
    model = _CLASSES[name]()
    generator = torch.Generator().manual_seed(seed)
    _randomize_batch_norms(model, generator)
    return model.eval(), model.inputs(generator=generator)


def batches(name: str, count: int, batch: int = 4, seed: int = 1):
    """``count`` input tuples for calibration or QAT steps."""
    generator = torch.Generator().manual_seed(seed)
    return [_CLASSES[name].inputs(batch, generator) for _ in range(count)]


def qconfig(name: str) -> QconfigSetter | None:
    """How the model is meant to be prepared (None: the default qconfig)."""
    if name == "posenc":
        # Positions span 0..1000: int16 keeps a 0.03 step; so do the frequencies (a
        # buffer, quantized by a generated stub) and the angle.
        int16 = ("quant_pos", "_generated_quant_stub_0", "_generated_mul_0")
        return QconfigSetter(module_name=dict.fromkeys(int16, qint16))
    if name == "transformer":
        return QconfigSetter(get_qconfig(), module_type={"matmul": qint16})
    return None
