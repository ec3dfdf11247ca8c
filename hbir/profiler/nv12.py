"""The NV12 stage and its contract with ``quantized.bc``.

``nv12_quantized.bc`` is ``quantized.bc`` with camera nodes inserted before
convert (``insert_transpose`` + ``insert_image_preprocess`` +
``insert_image_convert("nv12")``, ``docs/image-input.md``). It runs on the NV12
planes of the same frames (``hbir.data.rgb_to_nv12``). The contract ("nv12" in
``stages.CONTRACTS``) allows two differences: the colour conversion and the
chroma subsampling. The codes that enter the model body therefore differ
pixel by pixel, and every layer after them differs too. The check has two parts:

1. **Entering codes.** Per input, quantized.bc's input ``qnt.quantize`` result is
   compared with the NV12 model's ``hbir.image_preprocess`` result after its layout
   moves (the transposes ``insert_transpose`` made). Chroma subsampling replaces
   the chroma of each 2 x 2 block by the block's mean. Decoding is linear in Y, U
   and V (apart from rounding and clipping), so the block's **mean** RGB is kept
   while single pixels move by up to 76 levels. The statistic is the mean over the
   batch of |difference of the 2 x 2 block means|, in 8-bit levels (code LSB times
   ``scale * divisor * std[c]``). Its bound is ``BOUND_LEVELS`` = 2 levels.
   Measured with the right mode (``yuvbt601full2rgb`` on data made by
   ``rgb_to_nv12``): 0.74 / 0.71 levels on scikit-learn's two sample photos
   (426 x 640), 0.74 on 100 16 x 16 crops of them, 0.98 on uniform random
   images (at most 1.29 for a single image, where clipping at 0 / 255 breaks
   linearity). Wrong modes on the same frames: ``yuvbt601video2rgb`` (studio
   range on full-range frames) 9.70 / 8.11 on the photos, 9.46 on the crops,
   4.08 on random images; ``yuvbt601full2bgr`` 17.9 / 44.8 / 29.1 / 27.2;
   ``bgr2rgb`` (YUV read as BGR) 53.7 / 62.7 / 57.2 / 30.8; ``None`` 58.7 /
   59.7 / 59.7 / 35.3. Through the zoo resnet of ``tests/profiler`` (input grid
   1 / 127.5, so 1 LSB = 1.004 levels; the grid's rounding included), per batch
   of two 16 x 16 frames over 50 batches of photo crops / of random images: right
   mode 0.72 / 0.97 on average, at most 1.05 / 1.16; ``yuvbt601video2rgb`` at
   least 4.83 / 3.75 (8.84 / 4.06 on average); ``yuvbt601full2bgr`` at least
   2.80 / 23.8 (30.2 / 27.8); ``bgr2rgb`` at least 42.6 / 28.0; ``None`` at least
   40.7 / 32.2. The worst batch over the stream is checked, so one coloured
   batch is enough. A wrong mode whose effect stays below 2 levels on every
   batch (the studio-range mode on frames that are all mid-grey, a channel swap
   on grey frames) is not seen, and it does little harm on such frames.
2. **The body.** ``quantized.bc`` is run again with the NV12 model's entering
   codes in place of its own. Its outputs must then equal the NV12 model's
   **bit for bit**, because beyond the input the two models are the same convert
   of the same qat.bc.

A break of (1), or entering codes of another shape, is the cause "input
preprocessing or layout" at the ``hbir.image_preprocess`` op (its ID in
nv12_quantized.bc, the input it was inserted on, its location). A break of (2)
is a "tool bug" at the first layer that differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from xdsl.ir import BlockArgument, Operation

from hbir.profiler import origin as og
from hbir.profiler import stages as st

BOUND_LEVELS = 2.0


@dataclass(frozen=True)
class Entry:
    """Where one input (by its name in quantized.bc) enters the model body."""

    input: str
    tap: Operation  # its result: the codes the first layer reads
    axes: str | None = None  # layout of those codes ("NCHW"), None if unknown
    preprocess: Operation | None = None  # the NV12 model's hbir.image_preprocess


def _names(function) -> list[str]:
    return [a.name for a in function.inputs]


def plain_entries(function) -> dict[str, Entry]:
    """quantized.bc: each input's ``qnt.quantize``."""
    from hbir.dialects import qnt

    names = _names(function)
    found = {}
    for arg in function.op.body.block.args:
        for use in arg.uses:
            if isinstance(use.operation, qnt.QuantizeOp):
                found[names[arg.index]] = Entry(names[arg.index], use.operation)
                break
    return found


def nv12_entries(function) -> dict[str, Entry]:
    """nv12_quantized.bc: each ``hbir.image_preprocess`` and its layout moves, by
    the name the input had before ``insert_image_convert`` (``<name>_y`` -> name)."""
    from hbir.dialects import hbir, qnt

    names = _names(function)
    found = {}
    for op in function.op.walk():
        if not isinstance(op, hbir.ImagePreprocessOp):
            continue
        source = op.input
        if isinstance(source.owner, hbir.ImageConvertOp):
            source = source.owner.y
        if not isinstance(source, BlockArgument):
            continue
        name = names[source.index]
        if name.endswith("_y"):
            name = name[: -len("_y")]
        tap, axes, value = op, "NHWC", op.output
        while value.has_one_use():
            user = value.get_user_of_unique_use()
            if isinstance(user, hbir.TransposeOp) and axes is not None:
                axes = "".join(axes[p] for p in user.perm.get_values())
            elif isinstance(user, hbir.ReshapeOp):
                axes = None
            elif not isinstance(user, qnt.QuantizeOp | hbir.TransposeOp):
                break
            tap, value = user, user.results[0]
            if isinstance(user, qnt.QuantizeOp):
                break  # a float preprocess (no table): its quantize makes the codes
        found[name] = Entry(name, tap, axes, op)
    return found


class EntryStage(st.Stage):
    """quantized.bc, recording each input's entering codes (``Record.taps``)."""

    def taps(self, function) -> dict[Operation, str]:
        return {e.tap: name for name, e in plain_entries(function).items()}


class Nv12Stage(st.Stage):
    """nv12_quantized.bc on NV12 planes (each batch a tuple in the order of its
    inputs, e.g. ``(y, uv)``), recording each input's entering codes."""

    def taps(self, function) -> dict[Operation, str]:
        entries = nv12_entries(function)
        if not entries:
            raise st.StageError(
                f"{self.name}: the model has no hbir.image_preprocess: insert the "
                "camera nodes (insert_image_preprocess, insert_image_convert) into "
                "qat.bc before convert"
            )
        return {e.tap: name for name, e in entries.items()}


# ------------------------------------------------------------------ the check


@dataclass
class InputDiff:
    """One input's entering codes, quantized.bc vs nv12_quantized.bc, worst over
    batches (levels: 8-bit image levels)."""

    input: str
    block_levels: float = 0.0  # mean |diff of 2 x 2 block means|, worst batch
    pixel_levels: float = 0.0  # mean |diff| per element, worst batch
    max_levels: float = 0.0  # largest single difference
    shapes: tuple | None = None  # (baseline shape, nv12 shape) if they differ


SWAPPED = "the U and V planes swapped"


@dataclass
class Nv12Check:
    """The two parts of the nv12 contract (see the module), over a stream.

    When the entering codes break the bound on a batch, the usual mistakes are
    tried on it (``hypotheses``): the planes with U and V swapped (NV21 frames),
    and the model decoding with each other colour conversion (studio against
    full range, RGB against BGR). A hypothesis that keeps every such batch
    within the bound is named in the finding."""

    inputs: dict[str, InputDiff] = field(default_factory=dict)
    body: dict[tuple[str, int], float] = field(default_factory=dict)
    body_outputs: float = 0.0
    # input -> hypothesis -> worst block levels over the batches that broke
    hypotheses: dict[str, dict[str, float]] = field(default_factory=dict)
    _variants: dict = field(default_factory=dict, repr=False)

    def add(self, base: st.Stage, nv12: st.Stage, ra, rb, inputs, planes=None) -> None:
        """Add one batch: ``ra`` / ``rb`` the records of ``base`` (quantized.bc on
        ``inputs``) and ``nv12`` (on the same frames' ``planes``)."""
        entries = nv12_entries(nv12.function)
        plain = plain_entries(base.function)
        for name, entry in entries.items():
            diff = self.inputs.setdefault(name, InputDiff(name))
            a, b = ra.taps.get(name), rb.taps.get(name)
            if a is None or b is None:
                diff.shapes = (None if a is None else a.shape, None)
                continue
            if a.shape != b.shape:
                diff.shapes = (a.shape, b.shape)
                continue
            quantize = plain.get(name)
            scale = float(quantize.tap.scales.get_values()[0]) if quantize else 1.0
            levels = _levels_per_lsb(entry, scale, a.ndim)
            block, pixel, worst = entering_difference(a, b, entry.axes, levels)
            if block > BOUND_LEVELS and planes is not None:
                self._try(name, entry, nv12, planes, a, levels)
            diff.block_levels = max(diff.block_levels, block)
            diff.pixel_levels = max(diff.pixel_levels, pixel)
            diff.max_levels = max(diff.max_levels, worst)
        if any(d.shapes for d in self.inputs.values()):
            return
        feed = base.feed(inputs)
        replay = _replay(base.function, feed, plain, rb.taps, base.grids)
        for key, layer in rb.layers.items():
            other = replay.layers.get(key)
            if other is None or other.value.shape != layer.value.shape:
                continue
            d = float(np.max(np.abs(other.value - layer.value), initial=0.0))
            if d > 0:
                self.body[key] = max(self.body.get(key, 0.0), d)
        for x, y in zip(replay.outputs, rb.outputs, strict=False):
            if x.shape == y.shape:
                d = float(np.max(np.abs(x - y), initial=0.0))
                self.body_outputs = max(self.body_outputs, d)

    def _try(self, name, entry, nv12, planes, codes, levels) -> None:
        """Each hypothesis on one batch: the block difference it leaves."""
        found = self.hypotheses.setdefault(name, {})
        for label, stage, feed in self._candidates(entry, nv12, planes):
            taps = stage.record(feed).taps
            other = taps.get(name)
            if other is None or other.shape != codes.shape:
                found[label] = float("inf")
                continue
            block = entering_difference(codes, other, entry.axes, levels)[0]
            found[label] = max(found.get(label, 0.0), block)

    def _candidates(self, entry, nv12, planes):
        swapped = tuple(
            np.ascontiguousarray(np.asarray(p)[..., ::-1])
            if np.asarray(p).shape[-1:] == (2,)
            else p
            for p in planes
        )
        yield SWAPPED, nv12, swapped
        current = entry.preprocess.csc.data
        if not current.startswith("yuv_"):
            return
        for csc in type(entry.preprocess).CSC_MODES:
            if csc == current or not csc.startswith("yuv_"):
                continue
            if csc not in self._variants:
                self._variants[csc] = _with_csc(nv12, entry, csc)
            yield f'csc = "{csc}"', self._variants[csc], planes

    def _named(self, name: str) -> str:
        """The hypothesis that explains input ``name``'s difference, as a
        sentence, or ""."""
        tried = self.hypotheses.get(name, {})
        fits = sorted((v, k) for k, v in tried.items() if v <= BOUND_LEVELS)
        if not fits:
            return ""
        levels, label = fits[0]
        if label == SWAPPED:
            return (
                f"; with {SWAPPED} the codes agree ({levels:.2f} levels): the "
                "frames carry V before U (NV21), or the planes were made with U "
                "and V swapped"
            )
        csc = label.split('"')[1]
        return (
            f"; decoded with {label} the codes agree ({levels:.2f} levels): the "
            f"frames are {'studio' if 'video' in csc else 'full'}-range "
            f"{csc.rsplit('_', 1)[-1].upper()}: insert the camera nodes with that "
            "colour conversion"
        )

    def problem(self, a: str, b: str, nv12: st.Stage, order):
        """(entry or key, cause, detail, lsb) of the first break, or None."""
        entries = nv12_entries(nv12.function)
        for name, d in self.inputs.items():
            entry = entries.get(name)
            if d.shapes is not None:
                return (
                    entry,
                    "input preprocessing or layout",
                    f"input '{name}' enters the model body as {d.shapes[1]} in {b} "
                    f"but as {d.shapes[0]} in {a}: a wrong insert_transpose "
                    "permutation or image layout",
                    None,
                )
            if d.block_levels > BOUND_LEVELS:
                csc = entry.preprocess.csc.data
                return (
                    entry,
                    "input preprocessing or layout",
                    f"the codes entering the model from input '{name}' differ from "
                    f"{a}'s by {d.block_levels:.2f} levels on average over 2 x 2 "
                    f"blocks (chroma subsampling keeps block means: bound "
                    f"{BOUND_LEVELS:g}; per pixel {d.pixel_levels:.2f} mean, "
                    f"{d.max_levels:.0f} max): its colour conversion "
                    f'(csc = "{csc}"), mean / std or divisor do not match the '
                    "frames and what the model was trained on" + self._named(name),
                    d.block_levels,
                )
        for key in order:
            if key in self.body:
                return (
                    key,
                    "tool bug",
                    f"{og.key_text(key)} differs by {self.body[key]:g} between "
                    f"{a} fed {b}'s entering codes and {b}: beyond the input the "
                    "two must be bit-identical",
                    None,
                )
        if self.body_outputs > 0:
            return (
                next(iter(order), ("?", 0)),
                "tool bug",
                f"the outputs of {a} fed {b}'s entering codes differ from {b}'s by "
                f"{self.body_outputs:g} while every aligned layer is identical",
                None,
            )
        return None


def _with_csc(nv12: st.Stage, entry: Entry, csc: str) -> st.Stage:
    """``nv12``'s model (a copy) decoding its input with colour conversion
    ``csc``."""
    from xdsl.dialects.builtin import StringAttr

    from hbir.dialects.op_ids import op_ids
    from hbir.module import Module

    index = {op: n for n, op in op_ids(nv12.function.op).items()}[entry.preprocess]
    copy = Module(nv12.model.module.op.clone())
    name = nv12.function.name
    op = op_ids(copy[name].op)[index]
    op.properties["csc"] = StringAttr(csc)
    return Nv12Stage(nv12.name, copy, nv12.grids)


def entering_difference(a, b, axes, levels) -> tuple[float, float, float]:
    """(mean |diff of 2 x 2 block means|, mean |diff|, max |diff|) in levels of
    two code tensors of layout ``axes`` (block means only when H and W are known)."""
    d = (b.astype(np.float64) - a.astype(np.float64)) * levels
    pixel, worst = float(np.mean(np.abs(d))), float(np.max(np.abs(d), initial=0.0))
    if axes is None or "H" not in axes or "W" not in axes:
        return pixel, pixel, worst
    h, w = axes.index("H"), axes.index("W")
    d = np.moveaxis(d, (h, w), (-2, -1))
    hh, ww = d.shape[-2] // 2 * 2, d.shape[-1] // 2 * 2
    d = d[..., :hh, :ww].reshape(*d.shape[:-2], hh // 2, 2, ww // 2, 2)
    return float(np.mean(np.abs(d.mean(axis=(-3, -1))))), pixel, worst


def _levels_per_lsb(entry: Entry, scale: float, ndim: int):
    """8-bit levels per code LSB: ``scale * divisor * std[c]`` along C."""
    pre = entry.preprocess
    std = np.abs(np.asarray(pre.std.get_values(), np.float64))
    factor = scale * pre.divisor.value.data
    if entry.axes is not None and "C" in entry.axes and std.size > 1:
        shape = [1] * ndim
        shape[entry.axes.index("C")] = std.size
        return factor * std.reshape(shape)
    return factor * float(np.mean(std))


def _replay(function, feed, plain: Mapping[str, Entry], codes, grids) -> og.Record:
    """Record ``function`` on ``feed`` with each input's entering codes replaced
    by ``codes[name]`` (the interpreter's hook writes into the array it reads)."""
    replace = {e.tap: codes[name] for name, e in plain.items() if name in codes}

    def write(op, results):
        new = replace.get(op)
        if new is not None and results[0].shape == new.shape:
            results[0][...] = new.astype(results[0].dtype)

    return og.record_hbir(function, feed, grids, on_op_first=write)
