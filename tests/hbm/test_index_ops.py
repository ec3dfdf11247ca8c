"""Selection, integer indices and masks, all the way to model.hbm (issue 27).

The post-processing of real heads: a segmentation argmax as the model's output,
top-k decoding (scores, ``topk``, the boxes read at its indices with ``gather``,
``index_select`` and ``boxes[:, idx]``), CenterNet's decode (its peak mask
``max_pool == heat``, the class and location from a flat top-k index by ``//``
and ``%``), ``max(dim)`` and ``sort``, and token
models whose input is int64 ids (``nn.Embedding`` of the ids and of an ``arange``
buffer of positions). Each goes through prepare, calibration, export, convert and
compile; at every stage the outputs, the int64 indices among them, must equal the
previous stage's bit for bit (qat.export.pt, qat.bc, quantized.bc, model.hbm).

Equal values are where engines part: torch's CPU ``topk`` returns the later of
two equal elements first, and a fake-quantized tensor has many. The tie rule of
``runtime/selection.py`` (the lower index first) is followed by every stage, which
the planted ties below check against a reference written here.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo_stages import validated

import hbir
from hbir.compile import lower_to_npu
from hbir.dialects import npu
from hbir.quantization import (
    ConsistencyStrategy,
    FakeQuantState,
    export,
    pre_export,
    prepare,
    set_fake_quantize,
)


class Segmenter(nn.Module):
    """A segmentation head whose output is the class map (argmax over classes)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.classes = nn.Conv2d(8, 5, 1)

    def forward(self, x):
        logits = self.classes(self.body(x))
        return logits, logits.argmax(dim=1)


class TopkDecoder(nn.Module):
    """A dense detection head decoded as CenterNet / FCOS deployments do it in the
    model: the best locations by score, their boxes and features read back."""

    def __init__(self, k: int = 6):
        super().__init__()
        self.k = k
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.score = nn.Conv2d(8, 3, 1)
        self.box = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        f = F.relu(self.stem(x))
        scores = self.score(f).sigmoid().flatten(2)  # N, classes, HW
        best, _ = scores.max(dim=1)  # N, HW
        values, where = best.topk(self.k, dim=1)
        boxes = self.box(f).flatten(2)  # N, 4, HW
        picked = boxes.gather(2, where.unsqueeze(1).expand(-1, 4, -1))
        first = boxes.transpose(1, 2)[:, where[0]]  # boxes[:, idx]
        ranked = torch.sort(best, dim=1, descending=True)
        feats = f.flatten(2).index_select(2, where[0, :2])
        return values, where, picked, first, ranked.indices, feats


class CenterNetTopk(nn.Module):
    """CenterNet's ``_topk`` and decode: the top-k over classes x locations, the
    class and the x, y of each from the flat index (``//``, ``%``, as values of
    scale 1), the boxes from the sizes read there."""

    def __init__(self, k: int = 8):
        super().__init__()
        self.k = k
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.heat = nn.Conv2d(8, 3, 1)
        self.wh = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        f = F.relu(self.stem(x))
        heat = self.heat(f).sigmoid()
        keep = (F.max_pool2d(heat, 3, 1, 1) == heat).float()  # its _nms: peaks
        heat = heat * keep
        n, c, h, w = heat.shape
        scores, inds = heat.flatten(1).topk(self.k)
        classes = (inds // (h * w)).float()
        where = inds % (h * w)
        ys, xs = (where // w).float(), (where % w).float()
        wh = self.wh(f).flatten(2).gather(2, where.unsqueeze(1).expand(-1, 2, -1))
        half_w, half_h = wh[:, 0] / 2, wh[:, 1] / 2
        boxes = torch.stack([xs - half_w, ys - half_h, xs + half_w, ys + half_h], -1)
        return boxes, scores, classes, xs, inds, scores > 0.3


class TokenModel(nn.Module):
    """Token and position embeddings (GPT-2's): int64 ids in, logits and the
    predicted token out."""

    def __init__(self, vocab: int = 40, length: int = 6, width: int = 12):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(length, width)
        self.register_buffer("position_ids", torch.arange(length))
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        h = self.tokens(ids) + F.embedding(self.position_ids, self.positions.weight)
        logits = self.head(F.gelu(h))
        return logits, logits.argmax(-1)


class PillarScatter(nn.Module):
    """PointPillars' scatter: each pillar's feature (a max over its points) written
    into a zero BEV canvas at its flat grid index, then a BEV conv."""

    def __init__(self, nx: int = 4, ny: int = 4):
        super().__init__()
        self.nx, self.ny = nx, ny
        self.pfn = nn.Linear(4, 8)
        self.bev = nn.Conv2d(8, 6, 3, padding=1)

    def forward(self, points, flat):
        feats = torch.relu(self.pfn(points)).amax(1)  # pillars x 8
        canvas = torch.zeros(8, self.nx * self.ny)
        canvas[:, flat] = feats.t()
        return self.bev(canvas.view(1, 8, self.ny, self.nx))


class OpenPcdetScatter(nn.Module):
    """PointPillars' scatter as OpenPCDet's ``PointPillarScatter`` writes it (one
    sample): the flat index computed from the int64 pillar coordinates
    ``(batch, z, y, x)``, ``.type(torch.long)``, the canvas written there."""

    def __init__(self, nx: int = 6, ny: int = 5, c: int = 8):
        super().__init__()
        self.nx, self.ny, self.c = nx, ny, c
        self.pfn = nn.Linear(4, c)
        self.bev = nn.Conv2d(c, 4, 3, padding=1)

    def forward(self, points, coords):
        pillar_features = torch.relu(self.pfn(points)).amax(1)
        spatial_feature = torch.zeros(self.c, self.nx * self.ny)
        indices = coords[:, 1] + coords[:, 2] * self.nx + coords[:, 3]
        indices = indices.type(torch.long)
        spatial_feature[:, indices] = pillar_features.t()
        return self.bev(spatial_feature.view(1, self.c, self.ny, self.nx))


def _pillar_coords(n):
    g = torch.Generator().manual_seed(7)
    out = []
    for _ in range(n):
        flat = torch.randperm(30, generator=g)[:7]
        zeros = torch.zeros(7, dtype=torch.long)
        coords = torch.stack([zeros, zeros, flat // 6, flat % 6], 1)
        out.append((torch.randn(7, 3, 4, generator=g), coords))
    return out


def _pillars(n):
    g = torch.Generator().manual_seed(7)
    return [
        (torch.randn(5, 3, 4, generator=g), torch.randperm(16, generator=g)[:5])
        for _ in range(n)
    ]


class Masked(nn.Module):
    """Masks computed from the data used as ``where`` / ``masked_fill`` do: a
    leaky ReLU written with ``where``, a fill where another map is low, the larger
    of two maps of different grids."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        y, z = self.a(x), self.b(x)
        leaky = torch.where(y > 0, y, y * 0.1)
        filled = y.masked_fill(z < -0.2, -1.0)
        larger = torch.where(z > y, z, y)
        return leaky, filled, larger


class PaddedAttention(nn.Module):
    """Token attention with a padding mask from the ids (``ids == 0``) filled into
    the scores, as BERT-style encoders without a float mask write it."""

    def __init__(self, vocab: int = 40, width: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.qk = nn.Linear(width, 2 * width)

    def forward(self, ids):
        h = self.embed(ids)
        q, k = self.qk(h).chunk(2, -1)
        scores = q @ k.transpose(1, 2) * 0.35
        scores = scores.masked_fill((ids == 0).unsqueeze(1), -8.0)
        return scores.softmax(-1) @ h


def _padded_ids(n, vocab=40, shape=(2, 6)):
    ids = _ids(n, vocab, shape)
    for x in ids:
        x[:, -2:] = 0  # padding at the end
    return ids


def _images(n, shape=(2, 3, 6, 6)):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(shape, generator=g) for _ in range(n)]


def _ids(n, vocab=40, shape=(2, 6)):
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, vocab, shape, generator=g) for _ in range(n)]


CASES = {
    "segmenter": (Segmenter, _images),
    "topk_decoder": (TopkDecoder, _images),
    "centernet_topk": (CenterNetTopk, _images),
    "token_model": (TokenModel, _ids),
    "pillar_scatter": (PillarScatter, _pillars),
    "openpcdet_scatter": (OpenPcdetScatter, _pillar_coords),
    "masked": (Masked, _images),
    "padded_attention": (PaddedAttention, lambda n: _padded_ids(n)),
}


def _args(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def _calibrated(model, inputs, out_dir):
    """Prepared and calibrated (``validated`` feeds one float input only)."""
    qat = prepare(model.eval(), _args(inputs[0]), out_dir=out_dir)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for x in inputs:
            qat(*_args(x))
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat


def _stages(model, inputs, tmp_path, level=None):
    """Every stage's outputs for every input: name -> [list of arrays]
    (``level``: the consistency level prepare runs at)."""
    ConsistencyStrategy.set_consistency_level(level)
    try:
        if isinstance(inputs[0], torch.Tensor) and inputs[0].is_floating_point():
            qat = validated(model, inputs, tmp_path)
        else:
            qat = _calibrated(model, inputs, tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    qat_bc = export(qat, _args(inputs[0]))
    exported = pre_export(qat)
    quantized = hbir.convert(qat_bc, "nash-e")
    hbir.compile(quantized, str(tmp_path / "model.hbm"), "nash-e")
    hbm = hbir.load(str(tmp_path / "model.hbm"))
    got = {name: [] for name in ("qat.export.pt", "qat.bc", "quantized.bc", "hbm")}
    for x in inputs:
        with torch.no_grad():
            outputs = exported(*_args(x))
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        got["qat.export.pt"].append([y.numpy() for y in outputs])
        feed = {f"_input_{i}": v.numpy() for i, v in enumerate(_args(x))}
        for name, f in (
            ("qat.bc", qat_bc["forward"]),
            ("quantized.bc", quantized["forward"]),
            ("hbm", hbm["forward"]),
        ):
            result = f.feed(feed, **({"reference": True} if name != "hbm" else {}))
            got[name].append(list(result.values()))
    return got, quantized, hbm


@pytest.mark.parametrize("level", [None, 2], ids=["default", "level2"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_selection_and_indices_are_bit_identical_at_every_stage(name, level, tmp_path):
    make, inputs_of = CASES[name]
    torch.manual_seed(0)
    got, quantized, hbm = _stages(make(), inputs_of(3), tmp_path, level)
    stages = list(got)
    for before, after in zip(stages, stages[1:], strict=False):
        for a_outputs, b_outputs in zip(got[before], got[after], strict=True):
            for i, (a, b) in enumerate(zip(a_outputs, b_outputs, strict=True)):
                assert a.dtype == b.dtype and a.shape == b.shape, (before, after, i)
                assert a.tobytes() == b.tobytes(), f"{after} differs from {before}: {i}"
    program = lower_to_npu(quantized).module
    islands = {op.reason.data for op in program.walk() if isinstance(op, npu.CpuCallOp)}
    assert islands <= {"quantize", "dequantize"}, islands  # selection on the NPU
    on_cpu = {  # the instructions model.hbm runs on the CPU
        debug.op
        for code in hbm.program.functions
        for instruction, debug in zip(code.instructions, code.debug, strict=True)
        if instruction.unit == "cpu"
    }
    assert on_cpu <= {"qnt.quantize", "qnt.dequantize"}, on_cpu


class Ties(nn.Module):
    """Values that fake quantization makes equal, ranked and located."""

    def forward(self, x):
        values, indices = torch.topk(x, 4, dim=1)
        order = x.sort(dim=1, stable=False)[1]
        return values, indices, x.argmax(1), order, x  # x: the input on its grid


def test_equal_values_are_ranked_by_index_in_every_stage(tmp_path):
    # codes of one scale: many exact ties in each row (and a negative zero)
    x = torch.tensor([[0.5, 1.0, 1.0, -0.0, 1.0, 0.25, 0.0, 1.0]] * 2)
    x[1] = x[1].flip(0)
    inputs = [x, x * -1.0, x.roll(3, 1)]
    got, _, _ = _stages(Ties(), inputs, tmp_path)
    for x, hbm_outputs in zip(inputs, got["hbm"], strict=True):
        values, indices, argmax, order, on_grid = hbm_outputs
        codes = x.numpy()  # values on the int8 grid of 1/127 steps keep their order
        want = np.argsort(-codes, axis=1, kind="stable")  # lower index first
        np.testing.assert_array_equal(indices, want[:, :4])
        np.testing.assert_array_equal(argmax, want[:, 0])
        np.testing.assert_array_equal(order, np.argsort(codes, axis=1, kind="stable"))
        # the values are the input's, on its grid, at those indices
        picked = np.take_along_axis(on_grid, want[:, :4], 1)
        np.testing.assert_array_equal(values, picked)
    # the planted ties are ones torch's own top-k orders differently
    assert not torch.equal(
        torch.topk(inputs[0], 4, dim=1).indices,
        torch.tensor(np.argsort(-inputs[0].numpy(), axis=1, kind="stable")[:, :4]),
    )


def test_an_id_out_of_range_is_a_located_error_in_every_engine(tmp_path):
    model, inputs = TokenModel(), _ids(2)
    qat = _calibrated(model, inputs, tmp_path)
    qat_bc = export(qat, (inputs[0],))
    quantized = hbir.convert(qat_bc, "nash-e")
    hbir.compile(quantized, str(tmp_path / "model.hbm"), "nash-e")
    hbm = hbir.load(str(tmp_path / "model.hbm"))
    bad = inputs[0].clone()
    bad[1, 2] = 40  # the vocabulary has 40 tokens
    feed = {"_input_0": bad.numpy()}
    for f in (qat_bc["forward"], quantized["forward"], hbm["forward"]):
        with pytest.raises(
            hbir.HbirError, match="index 40 is out of range for size 40"
        ):
            f.feed(feed)


class IndexMath(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, ids):
        return self.fc(F.one_hot(ids, 8).float()) + (ids + 1).float().unsqueeze(-1)


def test_centernet_s_classes_and_locations_are_its_flat_index_s(tmp_path):
    """The decoded class, x and y are the flat top-k index's, exactly, in
    model.hbm (a reference computed here from the index output)."""
    got, _, _ = _stages(CenterNetTopk(), _images(2, (2, 3, 8, 8)), tmp_path)
    for _boxes, scores, classes, xs, inds, confident in got["hbm"]:
        assert confident.dtype == bool  # a mask output
        np.testing.assert_array_equal(confident, scores > np.float32(0.3))
        np.testing.assert_array_equal(classes, (inds // 64).astype(np.float32))
        np.testing.assert_array_equal(xs, (inds % 8).astype(np.float32))


def test_arithmetic_on_integer_inputs_is_refused_at_prepare(tmp_path):
    with pytest.raises(hbir.HbirError, match="it computes with integer indices"):
        prepare(IndexMath().eval(), (torch.randint(0, 8, (2, 3)),), out_dir=tmp_path)


def test_the_doctor_finds_nothing_in_a_clean_token_model(tmp_path):
    """int64 ids are data, not a normalised image: no input-range finding, and the
    index outputs are compared as they are through model.hbm."""
    from hbir.profiler import diagnose

    inputs = _ids(2)
    qat = _calibrated(TokenModel(), inputs, tmp_path)
    qat_bc = export(qat, (inputs[0],))
    quantized = hbir.convert(qat_bc, "nash-e")
    hbm = hbir.compile(quantized, tmp_path / "model.hbm")
    d = diagnose(qat, inputs, qat_bc=qat_bc, quantized_bc=quantized, model_hbm=hbm)
    assert d.finding is None, d.text()
    assert d.stages[-1] == "model.hbm"
    assert all(pair.layers for pair in d.pairs)


class Truncated(nn.Module):
    def forward(self, x):
        return x.index_select(1, (x[0] * 3).long().clamp(0, 3))


def test_a_cast_of_values_to_integers_is_refused_at_prepare(tmp_path):
    with pytest.raises(hbir.HbirError, match="a cast of quantized values to integer"):
        prepare(Truncated().eval(), (torch.randn(2, 4),), out_dir=tmp_path)
