"""Everyday ops of detection and segmentation models, all the way to model.hbm.

Each small graph (resizes and upsampling modules, a value concatenated with itself
or repeated, the padding modules and unfold, an FPN neck) is prepared, calibrated, exported, converted and
compiled; the ``model.hbm`` loaded back from its file and quantized.bc's own
fast feed (its compiled program, in memory) must both give outputs bit-identical
to quantized.bc's as the interpreter defines it (``reference=True``).
The first two are the regressions of issue 26: every bilinear ``F.interpolate``
failed to write ("resize keeps the dtype"), and ``torch.cat([y, y])`` after a conv
crashed npu-layout ("Cannot detach a toplevel operation").
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo_stages import validated

import hbir
from hbir.quantization import DeQuantStub, QuantStub, export


class _Head(nn.Module):
    """quant -> conv -> ``body`` -> dequant (the op under test after a conv)."""

    def __init__(self, body, channels=4):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.body = body

    def forward(self, x):
        return self.dequant(self.body(self, F.relu(self.conv(self.quant(x)))))


class _Fpn(nn.Module):
    """A two-level FPN neck: lateral 1x1 convs, a top-down nearest upsample and
    add, a 3x3 output conv per level (torchvision's FeaturePyramidNetwork shape)."""

    def __init__(self, mode="nearest"):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.lat0, self.lat1 = nn.Conv2d(8, 8, 1), nn.Conv2d(16, 8, 1)
        self.out0, self.out1 = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 3, 1, 1)
        self.mode = mode

    def forward(self, x):
        c0 = F.relu(self.stem(self.quant(x)))
        c1 = F.relu(self.down(c0))
        p1 = self.lat1(c1)
        up = F.interpolate(p1, size=c0.shape[-2:], mode=self.mode)
        p0 = self.lat0(c0) + up
        return self.dequant(self.out0(p0)), self.dequant(self.out1(p1))


class _Upsampled(_Head):
    """``_Head`` whose body is an upsampling module (a submodule prepare sees)."""

    def __init__(self, module):
        super().__init__(lambda m, y: m.up(y))
        self.up = module


class _BiasedAttention(nn.Module):
    """Attention over the positions with a learned bias (MaxViT / CoAtNet's
    relative position bias, passed as SDPA's float ``attn_mask``)."""

    def __init__(self, tokens: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(tokens, tokens) * 0.5)

    def forward(self, x):
        t = x.flatten(2).transpose(1, 2).unsqueeze(1)
        y = F.scaled_dot_product_attention(t, t, t, attn_mask=self.bias)
        return y.squeeze(1).transpose(1, 2).reshape(x.shape)


class _StdConv(nn.Conv2d):
    """timm's StdConv2d: the weight standardised per output channel each forward."""

    def forward(self, x):
        w = self.weight
        w = (w - w.mean((1, 2, 3), keepdim=True)) / (
            w.std((1, 2, 3), keepdim=True) + 1e-5
        )
        return F.conv2d(x, w, self.bias, self.stride, self.padding)


GRAPHS = {
    "bilinear-scale": lambda: _Head(
        lambda m, y: F.interpolate(y, scale_factor=2.0, mode="bilinear")
    ),
    "bilinear-size-align-corners": lambda: _Head(
        lambda m, y: F.interpolate(y, size=(13, 7), mode="bilinear", align_corners=True)
    ),
    "nearest-size": lambda: _Head(lambda m, y: F.interpolate(y, size=(16, 12))),
    "upsample-module": lambda: _Upsampled(nn.Upsample(scale_factor=2)),
    "upsample-bilinear-module": lambda: _Upsampled(
        nn.Upsample(scale_factor=2, mode="bilinear")
    ),
    "upsampling-nearest2d": lambda: _Upsampled(nn.UpsamplingNearest2d(scale_factor=2)),
    "cat-self": lambda: _Head(lambda m, y: torch.cat([y, y], 1)),
    "cat-self-thrice-spatial": lambda: _Head(lambda m, y: torch.cat([y, y, y], 3)),
    "repeat": lambda: _Head(lambda m, y: y.repeat(1, 2, 1, 1)),
    "repeat-spatial": lambda: _Head(lambda m, y: y.repeat(1, 1, 2, 3)),
    "add-self": lambda: _Head(lambda m, y: y + y),
    "stack-self": lambda: _Head(lambda m, y: torch.stack([y, y], 1)),
    "tile": lambda: _Head(lambda m, y: torch.tile(y, (1, 2, 1, 1))),
    "repeat-interleave": lambda: _Head(lambda m, y: y.repeat_interleave(2, dim=1)),
    "pixel-shuffle": lambda: _Upsampled(nn.PixelShuffle(2)),
    "zero-pad-module": lambda: _Upsampled(nn.ZeroPad2d((1, 2, 0, 1))),
    # Swin's: amounts computed from sizes (to a multiple of the window)
    "pad-to-a-multiple": lambda: _Head(
        lambda m, y: F.pad(
            y, (0, (4 - y.shape[-1] % 4) % 4, 0, (5 - y.shape[-2] % 5) % 5)
        )
    ),
    "constant-pad-module": lambda: _Upsampled(nn.ConstantPad2d(1, -0.75)),
    "reflection-pad-module": lambda: _Upsampled(nn.ReflectionPad2d((2, 1, 1, 2))),
    "replication-pad-module": lambda: _Upsampled(nn.ReplicationPad2d(2)),
    "circular-pad-module": lambda: _Upsampled(nn.CircularPad2d((1, 1, 2, 0))),
    "unfold-module": lambda: _Upsampled(nn.Unfold(3, dilation=2, padding=1)),
    "max-values-along-a-dim": lambda: _Head(lambda m, y: y - y.max(1, True)[0]),
    "min-of-two-tensors": lambda: _Head(lambda m, y: torch.min(y, y.flip(-1) * 0.5)),
    "max-over-everything": lambda: _Head(lambda m, y: y * torch.max(y).sigmoid()),
    "weight-standardised-conv": lambda: _Upsampled(_StdConv(4, 5, 3, padding=1)),
    "attention-with-a-learned-bias": lambda: _Upsampled(_BiasedAttention(48)),
    # each relu folds into its own requantize (one stayed a float island and broke
    # compile's qnt.exact check)
    "two-relus-of-one-value": lambda: _Head(
        lambda m, y: y.relu().flatten(2) @ y.clamp(0, 1).flatten(2).transpose(1, 2)
    ),
    "fpn-nearest": lambda: _Fpn(),
    "fpn-bilinear": lambda: _Fpn("bilinear"),
}


def _outputs(result: dict) -> list[np.ndarray]:
    return [np.asarray(result[k]) for k in sorted(result)]


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_everyday_ops_reach_a_bit_identical_model_hbm(name, tmp_path):
    torch.manual_seed(0)
    inputs = [torch.randn(1, 3, 8, 6) for _ in range(3)]
    qat = validated(GRAPHS[name](), inputs, tmp_path)
    quantized = hbir.convert(export(qat, (inputs[0],)), "nash-e")
    hbir.compile(quantized, str(tmp_path / "model.hbm"), "nash-e")
    hbm = hbir.load(str(tmp_path / "model.hbm"))
    for x in inputs:
        feed = {"_input_0": x.numpy()}
        want = _outputs(quantized["forward"].feed(feed, reference=True))
        for engine, f in (("model.hbm", hbm["forward"]), ("feed", quantized[0])):
            got = _outputs(f.feed(feed))
            assert len(want) == len(got)
            for w, g in zip(want, got, strict=True):
                assert w.dtype == g.dtype and w.shape == g.shape
                assert w.tobytes() == g.tobytes(), f"{name}: {engine} differs"


def test_feeds_of_one_model_from_several_threads_are_right(tmp_path):
    """The compiled program's memories are one per function: a feed while another
    thread's runs takes the prepared plan (the same numbers), never the arenas."""
    import threading

    torch.manual_seed(0)
    inputs = [torch.randn(1, 3, 8, 6) for _ in range(8)]
    qat = validated(GRAPHS["fpn-bilinear"](), inputs, tmp_path)
    quantized = hbir.convert(export(qat, (inputs[0],)), "nash-e")
    f = quantized[0]
    want = [_outputs(f.feed({"_input_0": x.numpy()}, reference=True)) for x in inputs]
    got: dict[int, list] = {}

    def work(i: int) -> None:
        for _ in range(5):
            got.setdefault(i, []).append(
                _outputs(f.feed({"_input_0": inputs[i].numpy()}))
            )

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, runs in got.items():
        for outs in runs:
            assert [o.tobytes() for o in outs] == [w.tobytes() for w in want[i]]


def test_a_compiler_bug_leaves_feed_working_and_says_so(tmp_path, monkeypatch):
    """quantized.bc's feed runs its compiled program; should compiling crash, feed
    warns, names the cause in ``fast_feed.engine`` and runs the prepared plan."""
    from hbir import fast_feed
    from hbir.passes import npu_layout

    torch.manual_seed(0)
    inputs = [torch.randn(1, 3, 8, 6) for _ in range(2)]
    qat = validated(GRAPHS["cat-self"](), inputs, tmp_path)
    quantized = hbir.convert(export(qat, (inputs[0],)), "nash-e")

    def crash(f):
        raise KeyError("planted")

    monkeypatch.setattr(npu_layout, "layout_function", crash)
    feed = {"_input_0": inputs[0].numpy()}
    with pytest.warns(RuntimeWarning, match="compiler bug.*KeyError"):
        got = quantized[0].feed(feed)
    assert fast_feed.engine(quantized).startswith("plan (compile failed")
    want = quantized[0].feed(feed, reference=True)
    assert got["_output_0"].tobytes() == want["_output_0"].tobytes()


class _FloatHead(nn.Module):
    """A backbone conv and a head (conv, residual scale, layer norm, attention,
    gelu, mean, sigmoid) that bc_editor keeps in float."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.c1, self.c2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, 1, 1)
        self.ln, self.fc, self.c3 = (
            nn.LayerNorm(16),
            nn.Linear(16, 16),
            nn.Conv2d(16, 4, 1),
        )

    def forward(self, x):
        y = F.relu(self.c1(self.quant(x)))
        z = self.c2(y) * 0.5 + y
        t = z.flatten(2).transpose(1, 2)
        a = torch.softmax(self.fc(self.ln(t)) @ t.transpose(1, 2), -1) @ t
        w = a.transpose(1, 2).reshape(z.shape) + z.mean((2, 3), keepdim=True)
        return self.dequant(torch.sigmoid(self.c3(F.gelu(w))))


def test_a_head_kept_in_float_is_bit_identical_in_model_hbm(tmp_path):
    """Float CPU islands compute the same float operations in the same order in
    the interpreter, quantized.bc's fast feed and model.hbm: every fake quant
    after the backbone conv removed (bc_editor's float fallback), outputs equal
    to the bit."""
    import re

    from hbir.passes.remove_fake_quant import parse_ids, remove_fake_quants

    torch.manual_seed(0)
    inputs = [torch.randn(1, 3, 8, 8) for _ in range(3)]
    qat_bc = export(validated(_FloatHead(), inputs, tmp_path), (inputs[0],))
    asm = qat_bc.module.get_asm()
    ids = [int(n) for n in re.findall(r'%(\d+) = "qnt.const_fake_quant"', asm)]
    removed = remove_fake_quants(qat_bc.module.op, parse_ids(ids[3:]))
    assert len(removed) > 10
    quantized = hbir.convert(qat_bc, "nash-e")
    hbir.compile(quantized, str(tmp_path / "model.hbm"), "nash-e")
    hbm = hbir.load(str(tmp_path / "model.hbm"))
    for x in inputs:
        feed = {"_input_0": x.numpy()}
        want = _outputs(qat_bc["forward"].feed(feed, reference=True))
        engines = {
            "quantized.bc": quantized["forward"].feed(feed, reference=True),
            "feed": quantized[0].feed(feed),
            "model.hbm": hbm["forward"].feed(feed),
        }
        for engine, result in engines.items():
            got = _outputs(result)
            for w, g in zip(want, got, strict=True):
                assert w.tobytes() == g.tobytes(), f"{engine} differs from qat.bc"
