"""The perception suite: detection, segmentation, BEV and sequence models.

The heads are torchvision's own modules (RetinaNet, FCOS, DeepLabV3, LR-ASPP, FCN
and its feature pyramid network), called without their post-processing on a small
backbone; the rest are the blocks such models are built from, written as their
public code writes them (a YOLO neck with SPP and leaky ReLU, a CSP stage with Mish,
a pix2pix generator with reflection padding and instance norm, a DETR-style
``nn.Transformer`` with learned queries, a GPT-style block with causal attention,
a CRNN with a bidirectional LSTM, a
GRU over frame features, CenterNet's head decoded in the model (top-k peaks,
the size and offset gathered at them), a BEV sampler and deformable sampling
(``F.grid_sample`` at a camera projection and at predicted offsets), an LSS-style lift
from camera features to a depth-binned volume, a Hugging Face style attention layer
with ``softmax(dtype=torch.float32)`` and an ``erf`` GELU, a temporal transformer
over frame features). Random weights, BatchNorm statistics re-estimated on random
data; every model returns one tensor (multi-output heads flattened and
concatenated, as a deployment would export them).

``float_model`` and ``input_shape`` are what ``timm_suite.run_stages`` reads
(``suite=``), so the suite runs through the same stages and contract checks as
the timm suite (``test_perception.py``).
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timm_import import declare_torchvision_schemas  # noqa: E402
from timm_suite import Boundary, reestimate_batch_norms  # noqa: E402


def _torchvision():
    declare_torchvision_schemas()
    import torchvision

    return torchvision


def _conv_bn(cin: int, cout: int, stride: int = 1, act=nn.ReLU) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), act()
    )


class Backbone(nn.Module):
    """Three stages of stride 2, 4 and 8 (channels 16, 32, 64)."""

    def __init__(self, act=nn.ReLU):
        super().__init__()
        self.stem = _conv_bn(3, 16, 2, act)
        self.c4 = _conv_bn(16, 32, 2, act)
        self.c8 = _conv_bn(32, 64, 2, act)

    def forward(self, x):
        c2 = self.stem(x)
        c4 = self.c4(c2)
        return c2, c4, self.c8(c4)


class Detector(nn.Module):
    """Backbone -> torchvision FPN (with its max-pool extra level) -> a dense head
    shared by the four levels; the head's outputs concatenated on the last dim."""

    def __init__(self, head: str):
        super().__init__()
        tv = _torchvision()
        from torchvision.models.detection.fcos import FCOSHead
        from torchvision.models.detection.retinanet import RetinaNetHead
        from torchvision.ops.feature_pyramid_network import LastLevelMaxPool

        self.backbone = Backbone()
        self.fpn = tv.ops.FeaturePyramidNetwork(
            [16, 32, 64], 32, extra_blocks=LastLevelMaxPool()
        )
        if head == "retinanet":
            self.head = RetinaNetHead(32, num_anchors=3, num_classes=4)
        else:
            self.head = FCOSHead(32, num_anchors=1, num_classes=4, num_convs=2)

    def forward(self, x):
        c2, c4, c8 = self.backbone(x)
        levels = list(self.fpn({"c2": c2, "c4": c4, "c8": c8}).values())
        out = self.head(levels)
        return torch.cat([out[k] for k in sorted(out)], dim=-1)


class Segmenter(nn.Module):
    """Backbone -> a torchvision segmentation head -> bilinear to the input size."""

    def __init__(self, head: str):
        super().__init__()
        _torchvision()
        from torchvision.models.segmentation.deeplabv3 import DeepLabHead
        from torchvision.models.segmentation.fcn import FCNHead
        from torchvision.models.segmentation.lraspp import LRASPPHead

        self.backbone = Backbone()
        self.kind = head
        if head == "deeplabv3":
            self.head = DeepLabHead(64, 5, atrous_rates=(1, 2, 3))
        elif head == "lraspp":
            self.head = LRASPPHead(16, 64, 5, 32)
        else:
            self.head = FCNHead(64, 5)

    def forward(self, x):
        c2, _, c8 = self.backbone(x)
        if self.kind == "lraspp":
            y = self.head({"low": c2, "high": c8})
        else:
            y = self.head(c8)
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


class YoloNeck(nn.Module):
    """Darknet-style: conv-BN-leaky ReLU (0.1), SPP (max pools 5, 9, 13 with
    'same' padding, concatenated), a top-down nearest upsample concatenated with
    the stride-4 features, a detect conv viewed as [N, anchors, 5 + classes, H,
    W], permuted, sigmoid."""

    def __init__(self):
        super().__init__()
        leaky = functools.partial(nn.LeakyReLU, 0.1)
        self.backbone = Backbone(leaky)
        self.pools = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in (5, 9, 13))
        self.spp = nn.Sequential(
            nn.Conv2d(256, 32, 1, bias=False), nn.BatchNorm2d(32), leaky()
        )
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.merge = _conv_bn(64, 32, act=leaky)
        self.detect = nn.Conv2d(32, 3 * 9, 1)

    def forward(self, x):
        _, c4, c8 = self.backbone(x)
        s = self.spp(torch.cat([c8] + [p(c8) for p in self.pools], 1))
        y = self.merge(torch.cat([self.up(s), c4], 1))
        n, _, h, w = y.shape
        p = self.detect(y).view(n, 3, 9, h, w).permute(0, 1, 3, 4, 2)
        return torch.sigmoid(p.reshape(n, -1, 9))


class CspStage(nn.Module):
    """A CSPDarknet stage with Mish: split in two halves (``chunk``), residual
    blocks on one, the halves concatenated and fused."""

    def __init__(self):
        super().__init__()
        self.stem = _conv_bn(3, 32, 2, nn.Mish)
        self.blocks = nn.ModuleList(
            nn.Sequential(_conv_bn(16, 16, act=nn.Mish), _conv_bn(16, 16, act=nn.Mish))
            for _ in range(2)
        )
        self.fuse = nn.Sequential(nn.Conv2d(32, 32, 1), nn.BatchNorm2d(32), nn.Mish())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        a, b = self.stem(x).chunk(2, dim=1)
        for block in self.blocks:
            b = b + block(b)
        y = self.fuse(torch.cat([a, b], 1))
        return F.log_softmax(self.fc(self.pool(y).flatten(1)), dim=1)


class _ResnetBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
            nn.ReLU(True),
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
        )

    def forward(self, x):
        return x + self.body(x)


class Pix2PixGenerator(nn.Module):
    """The CycleGAN / pix2pix ResNet generator, small: reflection padding,
    instance norm, strided convs down, resnet blocks, transposed convs up,
    tanh."""

    def __init__(self):
        super().__init__()
        layers = [nn.ReflectionPad2d(3), nn.Conv2d(3, 8, 7), nn.InstanceNorm2d(8)]
        layers += [nn.ReLU(True)]
        for c in (8, 16):
            layers += [nn.Conv2d(c, 2 * c, 3, 2, 1), nn.InstanceNorm2d(2 * c)]
            layers += [nn.ReLU(True)]
        layers += [_ResnetBlock(32), _ResnetBlock(32)]
        for c in (32, 16):
            layers += [nn.ConvTranspose2d(c, c // 2, 3, 2, 1, output_padding=1)]
            layers += [nn.InstanceNorm2d(c // 2), nn.ReLU(True)]
        layers += [nn.ReflectionPad2d(3), nn.Conv2d(8, 3, 7), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class LiftSplat(nn.Module):
    """An LSS-style lift: per camera pixel a softmax over ``D`` depth bins and
    ``C`` context features, their outer product (``einsum``) a [N, C, D, H, W]
    volume, flattened to [N, C * D, H, W] and encoded by a strided conv stack
    (the bird's-eye-view encoder, without the voxel scatter)."""

    def __init__(self, depth: int = 6, context: int = 8):
        super().__init__()
        self.depth, self.context = depth, context
        self.backbone = Backbone()
        self.head = nn.Conv2d(64, depth + context, 1)
        self.bev = nn.Sequential(
            _conv_bn(depth * context, 32), _conv_bn(32, 32, 2), nn.Conv2d(32, 4, 1)
        )

    def forward(self, x):
        _, _, c8 = self.backbone(x)
        y = self.head(c8)
        depth = y[:, : self.depth].softmax(dim=1)
        feats = y[:, self.depth :]
        volume = torch.einsum("ndhw,nchw->ncdhw", depth, feats)
        return self.bev(volume.flatten(1, 2))


class HfSelfAttention(nn.Module):
    """A BERT layer as Hugging Face writes it: query / key / value linears, heads
    by ``view`` + ``permute``, scores ``/ math.sqrt(head_dim)``, ``softmax(...,
    dtype=torch.float32)``, dropout, the context ``permute`` + ``view`` back, an
    output dense + residual + LayerNorm, an ``erf`` GELU intermediate."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.query, self.key, self.value = (nn.Linear(d, d) for _ in range(3))
        self.dropout = nn.Dropout(0.1)
        self.dense = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d, eps=1e-12)
        self.intermediate = nn.Linear(d, 2 * d)
        self.output = nn.Linear(2 * d, d)
        self.out_norm = nn.LayerNorm(d, eps=1e-12)

    def _heads(self, x):
        n, length, _ = x.shape
        return x.view(n, length, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, hidden):
        q, k, v = (self._heads(f(hidden)) for f in (self.query, self.key, self.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.dropout(F.softmax(scores, dim=-1, dtype=torch.float32))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        context = context.view(hidden.shape)
        hidden = self.norm(self.dense(context) + hidden)
        h = self.intermediate(hidden)
        h = h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0)))
        return self.out_norm(self.output(h) + hidden)


class TemporalFusion(nn.Module):
    """Frame features over time ([N, T, D]): per-frame projection, attention over
    the frames by ``einsum`` with a softmax, a gated (sigmoid) residual, the mean
    over time, a softplus-activated score head."""

    def __init__(self, d: int = 24):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.q, self.k, self.v = (nn.Linear(d, d) for _ in range(3))
        self.gate = nn.Linear(d, d)
        self.head = nn.Linear(d, 4)
        self.scale = 1.0 / math.sqrt(d)

    def forward(self, x):
        x = F.elu(self.proj(x))
        scores = torch.einsum("ntd,nsd->nts", self.q(x), self.k(x)) * self.scale
        attended = torch.einsum("nts,nsd->ntd", scores.softmax(-1), self.v(x))
        x = x + torch.sigmoid(self.gate(x)) * attended
        return F.softplus(self.head(x.mean(dim=1)))


class DetrHead(nn.Module):
    """DETR's shape: backbone features as tokens plus a learned position
    embedding, ``nn.Transformer`` (encoder and decoder layers, torch's own) with
    learned object queries expanded to the batch, class logits and sigmoid boxes
    concatenated."""

    def __init__(self, d: int = 16, queries: int = 5):
        super().__init__()
        self.backbone = Backbone()
        self.input_proj = nn.Conv2d(64, d, 1)
        self.pos = nn.Parameter(torch.randn(1, 64, d) * 0.1)
        self.query = nn.Parameter(torch.randn(1, queries, d))
        self.transformer = nn.Transformer(d, 2, 1, 1, 32, dropout=0.0, batch_first=True)
        self.classes = nn.Linear(d, 4)
        self.boxes = nn.Linear(d, 4)

    def forward(self, x):
        _, _, c8 = self.backbone(x)
        tokens = self.input_proj(c8).flatten(2).transpose(1, 2) + self.pos
        queries = self.query.expand(x.shape[0], -1, -1)
        h = self.transformer(tokens, queries)
        return torch.cat([self.classes(h), self.boxes(h).sigmoid()], dim=-1)


class Crnn(nn.Module):
    """CRNN text recognition: a conv stack pooled to height 1, the width as the
    sequence, a bidirectional two-layer LSTM, per-step class log-probabilities
    (the CTC head's input)."""

    def __init__(self, classes: int = 11):
        super().__init__()
        self.features = nn.Sequential(
            _conv_bn(3, 16),
            nn.MaxPool2d(2),
            _conv_bn(16, 32),
            nn.MaxPool2d(2),
            _conv_bn(32, 32),
            nn.MaxPool2d((8, 1)),
        )
        self.rnn = nn.LSTM(32, 16, num_layers=2, bidirectional=True)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        f = self.features(x).squeeze(2).permute(2, 0, 1)  # [W, N, C]
        out, _ = self.rnn(f)
        return F.log_softmax(self.fc(out), dim=-1)


class GruTracker(nn.Module):
    """A temporal model over per-frame features ([N, T, D]): a GRU from a
    zero initial state, the last hidden state to a motion / score head."""

    def __init__(self, d: int = 24, hidden: int = 16):
        super().__init__()
        self.embed = nn.Linear(d, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 6)

    def forward(self, x):
        h0 = torch.zeros(1, x.shape[0], self.gru.hidden_size)
        _, h = self.gru(F.relu(self.embed(x)), h0)
        return self.head(h[-1])


class CenterNetDecode(nn.Module):
    """CenterNet's head with its decoding in the model, as deployments export it
    (its ``_topk`` and ``ctdet_decode``): class heatmaps, size and offset maps on a
    stride-4 backbone; the top-k peaks over classes x locations (``topk``), the
    class and location from the flat index (``//``, ``%``), x and y from the
    location, the size and offset read there (``gather``), the boxes."""

    def __init__(self, classes: int = 3, k: int = 10):
        super().__init__()
        self.backbone = Backbone()
        self.heat = nn.Sequential(_conv_bn(32, 32), nn.Conv2d(32, classes, 1))
        self.wh = nn.Conv2d(32, 2, 3, padding=1)
        self.offset = nn.Conv2d(32, 2, 3, padding=1)
        self.k = k

    def forward(self, x):
        _, c4, _ = self.backbone(x)
        heat = self.heat(c4).sigmoid()
        heat = heat * (F.max_pool2d(heat, 3, 1, 1) == heat).float()  # _nms: peaks
        n, classes, h, w = heat.shape
        scores, inds = heat.flatten(1).topk(self.k)  # over classes x locations
        cls = (inds // (h * w)).float()
        where = inds % (h * w)
        ys, xs = (where // w).float(), (where % w).float()
        at = where.unsqueeze(1).expand(-1, 2, -1)
        wh = self.wh(c4).flatten(2).gather(2, at)  # N, 2, K
        offset = self.offset(c4).flatten(2).gather(2, at)
        xs, ys = xs + offset[:, 0], ys + offset[:, 1]
        half_w, half_h = wh[:, 0] / 2, wh[:, 1] / 2
        boxes = torch.stack([xs - half_w, ys - half_h, xs + half_w, ys + half_h], -1)
        return torch.cat([boxes, scores.unsqueeze(-1), cls.unsqueeze(-1)], -1).flatten(
            1
        )


class BevSampler(nn.Module):
    """Image features lifted to a BEV grid by sampling (BEVFormer / Simple-BEV
    style): each BEV cell's projection into the image, a fixed grid made from a
    camera matrix at construction, read with ``F.grid_sample``; then a BEV head."""

    def __init__(self, cells: int = 12):
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Sequential(_conv_bn(64, 32), nn.Conv2d(32, 6, 1))
        xs = torch.linspace(-10.0, 10.0, cells)
        zs = torch.linspace(2.0, 30.0, cells)
        z, x = torch.meshgrid(zs, xs, indexing="ij")
        u = 0.9 * x / z  # a pinhole camera, focal 0.9 in normalised image units
        v = 1.5 / z - 0.2  # the ground plane 1.5 below the camera
        self.register_buffer("grid", torch.stack([u, v], -1).unsqueeze(0))

    def forward(self, x):
        _, _, c8 = self.backbone(x)
        grid = self.grid.expand(x.shape[0], -1, -1, -1)
        bev = F.grid_sample(c8, grid, align_corners=False)
        return self.head(bev).flatten(1)


class DeformableSampling(nn.Module):
    """Deformable attention's core on one level (Deformable DETR): per location,
    a few sampling offsets and their attention weights predicted from the query,
    the value map read at the offset points with ``F.grid_sample``, the samples
    weighted and summed."""

    def __init__(self, d: int = 32, points: int = 3):
        super().__init__()
        self.backbone = Backbone()
        self.value = nn.Conv2d(64, d, 1)
        self.offsets = nn.Conv2d(64, 2 * points, 3, padding=1)
        self.weights = nn.Conv2d(64, points, 1)
        self.out = nn.Conv2d(d, d, 1)
        self.points = points

    def forward(self, x):
        _, _, c8 = self.backbone(x)
        n, _, h, w = c8.shape
        value = self.value(c8)
        base_y, base_x = torch.meshgrid(
            torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij"
        )
        base = torch.stack([base_x, base_y], -1)  # h, w, 2
        offsets = torch.tanh(self.offsets(c8)) * 0.25
        weights = self.weights(c8).softmax(1)
        total = 0
        for p in range(self.points):
            grid = base + offsets[:, 2 * p : 2 * p + 2].permute(0, 2, 3, 1)
            sampled = F.grid_sample(value, grid, align_corners=True)
            total = total + sampled * weights[:, p : p + 1]
        return self.out(total).flatten(1)


class GptBlock(nn.Module):
    """A GPT-style decoder block as minGPT writes it: pre-LayerNorm, one qkv
    linear split in three, causal ``scaled_dot_product_attention``, a tanh-GELU
    MLP, residuals; then a decoder layer of torch's own with a causal mask made
    from the sequence length (``generate_square_subsequent_mask``)."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(
            nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d)
        )
        self.decoder = nn.TransformerDecoderLayer(
            d, heads, 2 * d, dropout=0.0, batch_first=True
        )

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(n, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(n, t, d))
        x = x + self.mlp(self.ln2(x))
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        return self.decoder(x, x, tgt_mask=mask, tgt_is_causal=True)


# name -> (builder, input shape of one sample, note)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], str]] = {
    "retinanet_fpn": (lambda: Detector("retinanet"), (3, 64, 64), "torchvision"),
    "fcos_fpn": (lambda: Detector("fcos"), (3, 64, 64), "torchvision; GroupNorm"),
    "deeplabv3": (lambda: Segmenter("deeplabv3"), (3, 64, 64), "torchvision"),
    "lraspp": (lambda: Segmenter("lraspp"), (3, 64, 64), "torchvision"),
    "fcn": (lambda: Segmenter("fcn"), (3, 64, 64), "torchvision"),
    "yolo_neck": (YoloNeck, (3, 64, 64), "leaky ReLU, SPP, nn.Upsample"),
    "csp_mish": (CspStage, (3, 32, 32), "Mish, chunk, log_softmax"),
    "pix2pix": (Pix2PixGenerator, (3, 32, 32), "reflection pad, instance norm"),
    "lift_splat": (LiftSplat, (3, 64, 64), "depth softmax, einsum outer product"),
    "hf_attention": (HfSelfAttention, (8, 32), "softmax(dtype=), erf GELU"),
    "temporal_fusion": (TemporalFusion, (5, 24), "einsum attention, elu, softplus"),
    "detr_transformer": (DetrHead, (3, 64, 64), "nn.Transformer, learned queries"),
    "crnn": (Crnn, (3, 32, 32), "bidirectional 2-layer LSTM over the width"),
    "gpt_block": (GptBlock, (8, 32), "causal SDPA, decoder layer with tgt_mask"),
    "gru_tracker": (GruTracker, (6, 24), "GRU from a zero state, its last state"),
    "centernet_decode": (CenterNetDecode, (3, 64, 64), "top-k, // and %, gather"),
    "bev_sampler": (BevSampler, (3, 64, 64), "grid_sample at a camera projection"),
    "deformable_sampling": (DeformableSampling, (3, 64, 64), "grid_sample, offsets"),
}


@functools.lru_cache(maxsize=1)
def float_model(name: str) -> nn.Module:
    """``name`` with random weights and BatchNorm statistics re-estimated on random
    data, in its boundary stubs (cached: the suite takes it through two levels)."""
    builder, shape, _ = MODELS[name]
    torch.manual_seed(0)
    inner = builder()
    g = torch.Generator().manual_seed(1)
    reestimate_batch_norms(
        inner, [torch.randn(4, *shape, generator=g) for _ in range(2)]
    )
    return Boundary(inner).eval()


def input_shape(name: str, n: int) -> tuple[int, ...]:
    """A batch of ``n`` inputs of ``name``."""
    return (n, *MODELS[name][1])
