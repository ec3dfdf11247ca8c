"""npu-plan-memory: a buffer for every value, reused once its value is dead.

Every value gets a place (``npu.buffer = {space, offset, size}`` on the op that
defines it; ``npu.buffers = [...]`` for several results, the function's inputs on
``func.func`` as ``npu.arg_buffers``):

* ``sram``: what ``npu.dma_load`` and the compute ops produce (after
  ``npu-schedule``; without it every value is in DDR);
* ``ddr``: every other activation — the function's inputs, what ``npu.dma_store``,
  views, concats and CPU islands produce;
* ``const``: constants (weights, biases, tables), laid out once, never reused;
* an ``npu.reshape`` aliases its input's buffer (same bytes, no copy).

Liveness: a value lives from the op that defines it to its last use (function
results to the end). Buffers are placed first-fit, in definition order, at the
lowest 64-byte-aligned offset that no live buffer overlaps, so a dead value's
bytes are reused. Sizes are the channel-aligned tensor sizes
(``npu.aligned_bytes``).

Reported on the module: ``npu.ddr_peak_bytes`` (the DDR activation arena) next
to ``npu.ddr_total_bytes`` (every DDR activation in its own buffer: what reuse
saves), ``npu.sram_peak_bytes`` (never above ``npu.sram_limit``: checked here,
and each op's working set by ``npu.verify_sram``) and ``npu.const_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from hbir.dialects import npu
from hbir.dialects.hbir import i64_attr
from hbir.passes.npu_lower import CompileError, require_lowered

ALIGN = 64
ATTR_BUFFERS = "npu.buffers"
ATTR_ARG_BUFFERS = "npu.arg_buffers"
ATTR_DDR_PEAK = "npu.ddr_peak_bytes"
ATTR_DDR_TOTAL = "npu.ddr_total_bytes"
ATTR_SRAM_PEAK = "npu.sram_peak_bytes"
ATTR_CONST = "npu.const_bytes"


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _space(op: Operation | None) -> str:
    if op is None:
        return "ddr"
    if isinstance(op, npu.ConstantOp):
        return "const"
    if isinstance(op, npu.DmaLoadOp) or npu.is_compute(op):
        return "sram"
    return "ddr"


class _Arena:
    """First-fit placement of live intervals in one memory space."""

    def __init__(self):
        self.live: list[tuple[int, int, int]] = []  # (offset, size, last use)
        self.peak = 0
        self.total = 0

    def place(self, size: int, now: int, last: int) -> int:
        self.live = [a for a in self.live if a[2] >= now]
        offset = 0
        for o, s, _ in sorted(self.live):
            if offset + size <= o:
                break
            offset = max(offset, o + s)
        self.live.append((offset, size, last))
        self.peak = max(self.peak, offset + size)
        self.total += size
        return offset


def _buffer(space: str, offset: int, size: int) -> DictionaryAttr:
    return DictionaryAttr(
        {
            "space": StringAttr(space),
            "offset": i64_attr(offset),
            "size": i64_attr(size),
        }
    )


def plan_function(f: func.FuncOp, align: int) -> dict[str, _Arena]:
    ops = list(f.body.block.ops)
    index = {op: i for i, op in enumerate(ops)}
    end = len(ops)

    def last_use(v: SSAValue) -> int:
        found = -1
        for u in v.uses:
            user = u.operation
            while user.parent_op() is not f and user.parent_op() is not None:
                user = user.parent_op()  # a use inside a CPU island
            i = index.get(user, end)
            if isinstance(user, func.ReturnOp):
                i = end
            if isinstance(user, npu.ReshapeOp):  # the alias lives on
                i = max(i, max((last_use(r) for r in user.results), default=i))
            found = max(found, i)
        return found

    arenas = {"ddr": _Arena(), "sram": _Arena(), "const": _Arena()}
    aliases: dict[SSAValue, DictionaryAttr] = {}
    args = []
    for a in f.body.block.args:
        size = _round(npu.aligned_bytes(a.type, align))
        b = _buffer("ddr", arenas["ddr"].place(size, -1, last_use(a)), size)
        aliases[a] = b
        args.append(b)
    f.attributes[ATTR_ARG_BUFFERS] = ArrayAttr(args)
    for i, op in enumerate(ops):
        if isinstance(op, func.ReturnOp) or not op.results:
            continue
        buffers = []
        for r in op.results:
            if isinstance(op, npu.ReshapeOp) and op.input in aliases:
                b = aliases[op.input]
            else:
                space = _space(op)
                size = _round(npu.aligned_bytes(r.type, align))
                last = end if space == "const" else max(last_use(r), i)
                b = _buffer(space, arenas[space].place(size, i, last), size)
            aliases[r] = b
            buffers.append(b)
        if len(buffers) == 1:
            op.attributes[npu.ATTR_BUFFER] = buffers[0]
        else:
            op.attributes[ATTR_BUFFERS] = ArrayAttr(buffers)
    return arenas


@dataclass(frozen=True)
class NpuPlanMemoryPass(ModulePass):
    """Liveness-based buffer reuse in SRAM and DDR; report the peaks."""

    name = "npu-plan-memory"

    march: str = "nash-e"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name)
        align_attr = op.attributes.get(npu.ATTR_CHANNEL_ALIGN)
        align = align_attr.value.data if isinstance(align_attr, IntegerAttr) else 1
        peaks = {"ddr": 0, "sram": 0, "const": 0}
        total = 0
        for f in op.body.block.ops:
            if isinstance(f, func.FuncOp):
                arenas = plan_function(f, align)
                for k, a in arenas.items():
                    peaks[k] = max(peaks[k], a.peak)
                total = max(total, arenas["ddr"].total)
        op.attributes[ATTR_DDR_PEAK] = i64_attr(peaks["ddr"])
        op.attributes[ATTR_DDR_TOTAL] = i64_attr(total)
        op.attributes[ATTR_SRAM_PEAK] = i64_attr(peaks["sram"])
        op.attributes[ATTR_CONST] = i64_attr(peaks["const"])
        limit = op.attributes.get(npu.ATTR_SRAM_LIMIT)
        if isinstance(limit, IntegerAttr) and peaks["sram"] > limit.value.data:
            raise CompileError(
                f"npu-plan-memory: the SRAM plan needs {peaks['sram']} bytes, the "
                f"march has {limit.value.data}"
            )
