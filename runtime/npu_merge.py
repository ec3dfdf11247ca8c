"""Output-channel tiles of a conv whose inputs are provably the same bytes, summed
in one kernel call.

A layer whose weights do not fit the SRAM is split by the compiler into convs of
a few output channels each; every tile loads the same input from DDR and runs
its own conv. On the host, each call of the exact conv kernel (oneDNN's) costs a
fixed ~80 µs and small convs use it poorly, so the simulator computes the sums
of all the tiles' channels at the first tile, in one call of their concatenated
weights, and every tile then requantizes its own slice with its own prepared
epilogue into its own buffer: the same numbers, since a conv's output channels
are independent and the inputs are equal.

"Equal" is proved from the static program, never assumed: a tile's input buffer
must have been filled, entirely and last, by a ``dma_load`` from the same
source as the first tile's, with no write to that source in between
(``_origin``). Tiles that differ in anything else (geometry, input shape, an
unprepared epilogue) are not grouped, and a tile whose input came from
elsewhere (a tiling bug, say) runs on its own bytes as before.
"""

from __future__ import annotations

import numpy as np

from hbir.runtime import integer_ops, kernels
from hbir.runtime.hbm_program import ARENAS

_NCHW, _NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


class TileGroup:
    """The tiles of one group: their weights packed as one conv, and the sums of
    the last call (computed at the first tile, sliced by every tile)."""

    def __init__(self, fields: list[dict], x_dtype):
        first = fields[0]
        weight = np.concatenate([f["_packed"].weight for f in fields])
        self.packed = kernels.pack_conv2d(weight, x_dtype, first["groups"], reused=True)
        pads = integer_ops.pads4(first["padding"])
        self.geometry = (first["stride"], pads, first["dilation"])
        self.acc = None
        self.call = None  # oneDNN's call on the first tile's input, made once

    def sums(self, x_nhwc: np.ndarray) -> None:
        x = np.transpose(x_nhwc, _NCHW)
        if self.call is None:  # (the input buffer is the same on every run)
            self.call = kernels.OnednnConv.of(x, self.packed, *self.geometry) or False
        acc = self.call() if self.call else None
        if acc is None:  # not oneDNN's, or a sum reached 2**24
            acc = kernels.conv2d_sums(x, self.packed, *self.geometry)
        self.acc = acc


def run_tile(step) -> None:
    """A grouped tile: the group's sums (computed here at its first tile), this
    tile's channels, requantized into its buffer."""
    group, first, start, stop = step.extra
    if first:
        group.sums(step.ins[0])
    dst = step.outs[0]
    into = np.transpose(dst, _NCHW)
    y = step.fields["_fused"](group.acc[:, start:stop], step.out[1], into)
    if y is not into:
        dst[...] = np.transpose(y, _NHWC)


def group_channel_tiles(sim) -> list[list[int]]:
    """Runs of consecutive prepared convs with the same geometry whose inputs are
    the same bytes; each run of two or more becomes a group: its steps run
    ``run_tile``, and the tiles after the first read no operand."""
    code, steps = sim.code, sim.steps
    runs, key_of_run = [], None
    for i, step in enumerate(steps):
        if step.name != "conv":
            continue
        key = _key(sim, i)
        if key is not None and key == key_of_run:
            runs[-1].append(i)
        else:
            runs.append([i])
        key_of_run = key
    groups = [run for run in runs if len(run) > 1]
    for run in groups:
        x_dtype = np.dtype(code.buffers[code.instructions[run[0]].operands[0]].dtype)
        group = TileGroup([steps[i].fields for i in run], x_dtype)
        start = 0
        for n, i in enumerate(run):
            stop = start + steps[i].fields["_packed"].weight.shape[0]
            steps[i].run, steps[i].extra = run_tile, (group, n == 0, start, stop)
            start = stop
    return groups


def _key(sim, i: int):
    """What a conv must share with its neighbour to be grouped with it, or None
    when it cannot be grouped (unprepared, grouped channels)."""
    f = sim.steps[i].fields
    if "_fused" not in f or f["groups"] != 1:
        return None
    x = sim.code.buffers[sim.code.instructions[i].operands[0]]
    origin = _origin(sim, i, x.id)
    if origin is None:
        return None
    geometry = tuple(tuple(f[k]) for k in ("stride", "padding", "dilation"))
    kernel = f["_packed"].weight.shape[1:]
    return origin, x.shape, x.dtype, geometry, kernel, sim.steps[i].out[0][1:3]


def _origin(sim, i: int, key: int):
    """(the source buffer, the index of its last write) when, at instruction
    ``i``, buffer ``key`` holds exactly what a ``dma_load`` copied from that
    source; else None."""
    j = sim.writes.last_write(i, key)
    if j < 0:
        return None
    ins = sim.code.instructions[j]
    if sim.steps[j].name != "dma_load" or not same_bytes(sim, ins.results[0], key):
        return None
    source = ins.operands[0]
    return source, sim.writes.last_write(j, source)


def same_bytes(sim, a: int, b: int) -> bool:
    """Whether buffers ``a`` and ``b`` are the same bytes seen alike."""
    x, y = sim.code.buffers[a], sim.code.buffers[b]
    return a == b or (
        (x.space, x.offset, x.shape, x.dtype) == (y.space, y.offset, y.shape, y.dtype)
        and x.space in ARENAS
    )


def operands_read(step) -> tuple[bool, ...] | None:
    """A grouped tile reads its input only at the group's first tile, and never
    its weight or bias; None for a step that is not a grouped tile."""
    if step.run is not run_tile:
        return None
    first = step.extra[1]
    return (first,) + (False,) * (len(step.ins) - 1)
