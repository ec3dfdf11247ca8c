"""npu-tile: split every op whose working set does not fit SRAM into row tiles.

An op's working set is every operand and every result it touches at once, sized
with the channel alignment (``npu.working_set``); the march's SRAM
(``passes/march.py``, ``NpuModel.sram_bytes``; the ``sram_bytes`` option
overrides it) bounds it. An op that does not fit is split along its rows into the
fewest tiles that each fit:

* conv / pool (NHWC; a pool not in ceil mode): output rows ``[r0, r1)`` read
  input rows ``[r0*s - pad, (r1-1)*s - pad + d*(k-1) + 1)`` (the halo),
  clamped to the input; the clamped part becomes the tile's own padding
  (``padding = [top, left, bottom, right]``; an average pool's windows count
  against it as against the whole pool's, ``numerics.avg_pool_counts``);
* elementwise / rescale / cast / lut / reduce (not over dim 1): the same rows of
  every operand that has them (broadcast operands whole);
* gemm: rows of its first operand (the weight whole);
* a conv or linear gemm whose weight does not fit: output-channel tiles, each
  with its rows of the weight, bias and per-channel requantization (new
  constants) and the whole input (a grouped conv: tiles of whole groups, or
  parts of one group, each reading its groups' input channels through an
  ``npu.slice``), joined along the channel axis; a channel tile that still does
  not fit is split into row tiles.

Each tile reads ``npu.slice`` views and the tiles' results are joined by an
``npu.concat`` (a view: the tiles write side by side in one buffer); tile ops are
marked ``npu.tile = array<i64: index, count>``. The module records the limit
(``npu.sram_limit``), and from then on the verifier checks every compute op
against it (``npu.verify_sram``): an op that cannot be tiled to fit (one row too
large, or one output channel's weight larger than SRAM) is an error naming the op.

Before (SRAM 64 KiB)::

    %y = npu.conv %x, %w {padding = array<i64: 1, 1>, ...} :
        (tensor<1x64x64x16xsi8>, ...) -> tensor<1x64x64x16xsi8>

After::

    %x0 = npu.slice %x {begin = array<i64: 0, 0, 0, 0>, end = array<i64: 1, 17, 64,
        16>, ...}
    %y0 = npu.conv %x0, %w {padding = array<i64: 1, 1, 0, 1>, npu.tile = array<i64:
        0, 4>} : ... -> tensor<1x16x64x16xsi8>
    ...
    %y = npu.concat %y0, %y1, %y2, %y3 {dim = 1 : i64}
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from hbir.dialects import npu
from hbir.dialects.hbir import dense_array, i64_attr, ints, shape_of
from hbir.passes.march import get_npu
from hbir.passes.npu_lower import CompileError, constant, erase, require_lowered


def _slice(value: SSAValue, axis: int, lo: int, hi: int) -> npu.SliceOp:
    shape = list(shape_of(value))
    begin, end = [0] * len(shape), list(shape)
    begin[axis], end[axis] = lo, hi
    out_shape = list(shape)
    out_shape[axis] = hi - lo
    t = value.type
    assert isinstance(t, TensorType)
    return npu.SliceOp.create(
        operands=[value],
        result_types=[TensorType(t.element_type, out_shape)],
        properties={
            "begin": ints(begin),
            "end": ints(end),
            "step": ints([1] * len(shape)),
        },
    )


def _rows(total: int, n: int) -> list[tuple[int, int]]:
    step = -(-total // n)
    return [(i, min(i + step, total)) for i in range(0, total, step)]


def _with_rows(t: TensorType, axis: int, rows: int) -> TensorType:
    shape = list(t.get_shape())
    shape[axis] = rows
    return TensorType(t.element_type, shape)


def _spatial_tile(op, r0: int, r1: int):
    """Input rows (with halo) and the tile's own padding for output rows [r0, r1)."""
    if isinstance(op, npu.ConvOp):
        kh = shape_of(op.weight)[1]
        t, lf, b, r = op.pads()
        dh = op.dilation.get_values()[0]
    else:
        kh = op.kernel.get_values()[0]
        p = op.padding.get_values()
        t, lf, b, r = (p[0], p[1], p[0], p[1]) if len(p) == 2 else p
        dh = op.dilation.get_values()[0]
    sh = op.stride.get_values()[0]
    h = shape_of(op.input)[1]
    start = r0 * sh - t
    end = (r1 - 1) * sh - t + dh * (kh - 1) + 1
    lo, hi = max(start, 0), min(end, h)
    top = lo - start
    bottom = end - hi
    return lo, hi, (top, lf, bottom, r)


def _tileable(op: Operation) -> int | None:
    """The axis ``op`` tiles along, or None."""
    out = shape_of(op.results[0])
    if len(out) < 2 or out[1 if not isinstance(op, npu.GemmOp) else -2] < 2:
        return None
    if isinstance(op, npu.ConvOp):
        return 1
    if isinstance(op, npu.PoolOp):  # (ceil mode's last window: not tiled)
        return None if op.ceil_mode.value.data else 1
    if isinstance(op, npu.TransposeOp):
        return 1
    if isinstance(op, npu.GemmOp):
        return len(out) - 2 if len(shape_of(op.input)) == len(out) else None
    if isinstance(
        op, npu.EltwiseOp | npu.RescaleOp | npu.CastOp | npu.LutOp | npu.Fp16MapOp
    ):
        axis = getattr(op, "axis", None)
        if axis is not None and axis.value.data % len(out) == 1:
            return None
        return 1
    if isinstance(op, npu.ReduceOp):
        dims = [d % len(shape_of(op.input)) for d in op.dims.get_values()]
        if 1 in dims or not op.keepdim.value.data:
            return None
        return 1
    return None


def _build_tile(op: Operation, axis: int, r0: int, r1: int):
    """(new ops, the tile's result) computing rows [r0, r1) of ``op``'s result."""
    ops: list[Operation] = []
    out_t = _with_rows(op.results[0].type, axis, r1 - r0)
    props = dict(op.properties)
    if isinstance(op, npu.ConvOp | npu.PoolOp):
        lo, hi, pads = _spatial_tile(op, r0, r1)
        s = _slice(op.operands[0], axis, lo, hi)
        ops.append(s)
        operands = [s.output, *op.operands[1:]]
        props["padding"] = ints(pads)
    elif isinstance(op, npu.TransposeOp):
        s = _slice(op.operands[0], op.perm.get_values()[axis], r0, r1)
        ops.append(s)
        operands = [s.output]
    elif isinstance(op, npu.GemmOp):
        s = _slice(op.operands[0], axis, r0, r1)
        ops.append(s)
        operands = [s.output, *op.operands[1:]]
    else:
        full = shape_of(op.results[0])[axis]
        operands = []
        for v in op.operands:
            shape = shape_of(v)
            k = axis - (len(shape_of(op.results[0])) - len(shape))
            if k >= 0 and shape[k] == full:
                s = _slice(v, k, r0, r1)
                ops.append(s)
                operands.append(s.output)
            else:
                operands.append(v)
    tile = type(op).create(
        operands=operands,
        result_types=[out_t],
        properties=props,
        attributes=dict(op.attributes),
    )
    ops.append(tile)
    return ops, tile


def _channel_tileable(op: Operation) -> bool:
    """A conv or a linear gemm: its output channels (the weight's first axis)
    can be computed apart (a grouped conv's from its groups' input channels)."""
    if isinstance(op, npu.ConvOp):
        return True
    return isinstance(op, npu.GemmOp) and bool(op.transpose_b.value.data)


def _channel_tilings(op: Operation):
    """The output-channel tilings of ``op``, fewest tiles first: each a list of
    tiles ``(c0, c1, k0, k1, groups)``, output channels ``[c0, c1)`` computed
    from input channels ``[k0, k1)`` as a conv of ``groups`` groups, the
    largest tile first. An ungrouped conv or a linear gemm: every tile reads
    the whole input. A grouped conv: tiles of whole groups, each on its
    groups' input channels; past one group a tile, each group in equal parts,
    each part on its group's input channels alone (one group)."""
    channels = shape_of(op.results[0])[-1]
    cin = shape_of(op.operands[0])[-1]
    groups = op.groups.value.data if isinstance(op, npu.ConvOp) else 1
    if groups == 1:
        for n in range(2, channels + 1):
            yield [(c0, c1, 0, cin, 1) for c0, c1 in _rows(channels, n)]
        return
    per_out, per_in = channels // groups, cin // groups
    for n in range(2, groups + 1):
        yield [
            (g0 * per_out, g1 * per_out, g0 * per_in, g1 * per_in, g1 - g0)
            for g0, g1 in _rows(groups, n)
        ]
    for n in range(2, per_out + 1):
        yield [
            (g * per_out + c0, g * per_out + c1, g * per_in, (g + 1) * per_in, 1)
            for g in range(groups)
            for c0, c1 in _rows(per_out, n)
        ]


def _per_channel(attr, c0: int, c1: int):
    """A per-channel property's channels [c0, c1) (a per-tensor one as it is)."""
    if attr is None:
        return None
    values = list(attr.get_values())
    return attr if len(values) == 1 else ints(values[c0:c1])


def _constant_rows(value: SSAValue, c0: int, c1: int, at: Operation) -> SSAValue:
    """Rows [c0, c1) of a constant's first axis, as a new constant before ``at``."""
    src = value.owner
    c = constant(dense_array(src.value)[c0:c1], value.type.element_type)
    c.location = src.location
    npu.set_origin(c, npu.origin(src))
    Rewriter.insert_op(c, InsertPoint.before(at))
    return c.output


def _channel_tile_types(op: Operation, tile: tuple) -> list[TensorType]:
    """The types a tile ``(c0, c1, k0, k1, groups)`` works on: its input
    channels, its rows of the weight and bias, its output channels."""
    c0, c1, k0, k1, _ = tile
    x = op.operands[0].type
    axis = len(shape_of(op.results[0])) - 1
    types = [_with_rows(x, len(shape_of(op.operands[0])) - 1, k1 - k0)]
    types += [_with_rows(v.type, 0, c1 - c0) for v in op.operands[1:]]
    return types + [_with_rows(op.results[0].type, axis, c1 - c0)]


def tile_channels(op: Operation, limit: int, align: int) -> int:
    """Split a conv / linear whose weight does not fit into output-channel tiles
    (``_channel_tilings``): each reads its input channels (a grouped conv's
    groups: an ``npu.slice``; else the whole input) and its channels' weight
    rows, bias and requantization; the tiles are joined along the channel
    axis. A tile that still does not fit is then split into row tiles. The
    count (1: not done)."""
    if not _channel_tileable(op) or not all(
        isinstance(v.owner, npu.ConstantOp) for v in op.operands[1:]
    ):
        return 1
    for tiling in _channel_tilings(op):
        types = _channel_tile_types(op, tiling[0])
        params = sum(npu.aligned_bytes(t, align) for t in types[1:-1])
        whole = sum(npu.aligned_bytes(t, align) for t in types)
        if whole <= limit or (_tileable(op) is not None and 2 * params <= limit):
            break
    else:
        return 1
    x, cin = op.operands[0], shape_of(op.operands[0])[-1]
    axis = len(shape_of(op.results[0])) - 1
    tiles = []
    for i, (c0, c1, k0, k1, groups) in enumerate(tiling):
        read = x
        if (k0, k1) != (0, cin):  # its groups' input channels
            s = _slice(x, len(shape_of(x)) - 1, k0, k1)
            s.location = op.location
            npu.set_origin(s, npu.origin(op))
            Rewriter.insert_op(s, InsertPoint.before(op))
            read = s.output
        operands = [read]
        operands += [_constant_rows(v, c0, c1, op) for v in op.operands[1:]]
        props = dict(op.properties)
        for key in ("multiplier", "shift"):
            sliced = _per_channel(props.get(key), c0, c1)
            if sliced is not None:
                props[key] = sliced
        if isinstance(op, npu.ConvOp):
            props["groups"] = i64_attr(groups)
        t = type(op).create(
            operands=operands,
            result_types=[_with_rows(op.results[0].type, axis, c1 - c0)],
            properties=props,
            attributes=dict(op.attributes),
        )
        t.location = op.location
        t.attributes[npu.ATTR_TILE] = ints([i, len(tiling)])
        npu.set_value_of(t, None)  # a tile is part of the value
        Rewriter.insert_op(t, InsertPoint.before(op))
        tiles.append(t)
    cat = npu.ConcatOp.create(
        operands=[t.results[0] for t in tiles],
        result_types=[op.results[0].type],
        properties={"dim": i64_attr(axis)},
    )
    cat.location = op.location
    npu.absorb(cat, op, [])
    Rewriter.insert_op(cat, InsertPoint.before(op))
    op.results[0].replace_all_uses_with(cat.output)
    sliced = [v.owner for v in op.operands[1:]]
    erase(op)
    for c in sliced:  # the whole weight / bias, now unused
        if not c.output.uses:
            erase(c)
    for t in tiles:
        if npu.working_set(t, align) > limit:
            tile_op(t, limit, align)
    return len(tiling)


def _discard(built) -> None:
    """Erase the (never inserted) ops of a tiling that did not fit, so that they
    leave no uses behind on the values they read."""
    for ops, _ in built:
        for o in reversed(ops):
            o.erase()


def tile_op(op: Operation, limit: int, align: int) -> int:
    """Split ``op`` into the fewest row tiles that fit ``limit``; the count."""
    axis = _tileable(op)
    if axis is None:
        return 1
    rows = shape_of(op.results[0])[axis]
    # The first tile of any tiling reads a superset of what a one-row first tile
    # reads (its rows, their halo, the same weights): when that does not fit,
    # nothing will. Without this check, a linear whose weight alone is above
    # SRAM (ViT-B's MLP) built and discarded every tiling from 2 to all rows.
    ops, smallest = _build_tile(op, axis, 0, 1)
    fits = npu.working_set(smallest, align) <= limit
    _discard([(ops, smallest)])
    if not fits:
        return 1
    first = max(2, -(-npu.working_set(op, align) // limit))
    for n in range(min(first, rows), rows + 1):
        ranges = _rows(rows, n)
        built = [_build_tile(op, axis, r0, r1) for r0, r1 in ranges]
        if all(npu.working_set(t, align) <= limit for _, t in built):
            break
        _discard(built)
    else:
        return 1
    tiles = []
    for i, (ops, t) in enumerate(built):
        t.attributes[npu.ATTR_TILE] = ints([i, len(built)])
        npu.set_value_of(t, None)  # a tile is part of the value
        for o in ops:
            o.location = op.location
            npu.set_origin(o, npu.origin(op))
            Rewriter.insert_op(o, InsertPoint.before(op))
        tiles.append(t.results[0])
    cat = npu.ConcatOp.create(
        operands=tiles,
        result_types=[op.results[0].type],
        properties={"dim": i64_attr(axis)},
    )
    cat.location = op.location
    npu.absorb(cat, op, [])
    Rewriter.insert_op(cat, InsertPoint.before(op))
    op.results[0].replace_all_uses_with(cat.output)
    erase(op)
    return len(built)


@dataclass(frozen=True)
class NpuTilePass(ModulePass):
    """Split ops into row tiles (with halo) so each tile's working set fits SRAM."""

    name = "npu-tile"

    march: str = "nash-e"
    sram_bytes: int = 0  # 0: the march's SRAM

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name)
        model = get_npu(self.march)
        limit = self.sram_bytes or model.sram_bytes
        align_attr = op.attributes.get(npu.ATTR_CHANNEL_ALIGN)
        align = align_attr.value.data if isinstance(align_attr, IntegerAttr) else 1
        for f in op.body.block.ops:
            if not isinstance(f, func.FuncOp):
                continue
            for inner in list(f.body.block.ops):
                if npu.is_compute(inner) and npu.working_set(inner, align) > limit:
                    if tile_op(inner, limit, align) == 1:
                        tile_channels(inner, limit, align)
        op.attributes[npu.ATTR_SRAM_LIMIT] = i64_attr(limit)
        try:
            npu.verify_sram(op)
        except npu.SramError as e:
            raise CompileError(f"npu-tile: {e} (no row tiling makes it fit)") from None
