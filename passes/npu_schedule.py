"""npu-schedule: DMA between DDR and SRAM, load / compute overlap, a cycle estimate.

Every compute op reads its operands from SRAM and writes its results there, so
the pass makes the traffic explicit: an ``npu.dma_load`` (DDR -> SRAM) in front
of each operand, weights included, and an ``npu.dma_store`` (SRAM -> DDR) after
each result. Views (``npu.reshape`` / ``npu.slice`` / ``npu.concat``), constants
and CPU islands stay in DDR.

Overlap: the DMA queue runs in order, so the loads of a compute op are moved up
to just behind the previous compute op — before that op's stores — whenever they
do not read what it stores and both working sets fit the SRAM together (double
buffering): the next tile loads while the current one computes.

Estimate: each op is placed on its unit's queue (``NpuModel.units``: tae, vae,
aae, dte, dma, cpu), starting when its operands are ready and its unit is free;
its length is MACs / MACs-per-cycle (TAE: one core's, times ``cores``, the
compile's ``core_num``: a gemm's MACs split evenly over the cores, assumed),
bytes / vector width (VAE / AAE / DTE), bytes / DDR bytes-per-cycle (DMA), 10
cycles per element on the CPU (assumed). ``npu.unit``, ``npu.start`` and
``npu.end`` go on every op, the total on the module (``npu.estimated_cycles``).
The numbers are an estimate for comparing schedules, not a simulator.

Before::

    %y = npu.conv %x, %w {...} : (...) -> tensor<2x16x16x8xsi8>

After::

    %a = npu.dma_load %x {npu.unit = "dma", npu.start = 0 : i64, npu.end = 32 : i64}
        : tensor<2x16x16x3xsi8>
    %b = npu.dma_load %w {...} : tensor<8x3x3x3xsi8>
    %c = npu.conv %a, %b {..., npu.unit = "tae", npu.start = 37 : i64, npu.end = 40
        : i64}
    %y = npu.dma_store %c {...} : tensor<2x16x16x8xsi8>
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from hbir.dialects import npu
from hbir.dialects.hbir import i64_attr, shape_of
from hbir.passes.march import NpuModel, get_npu
from hbir.passes.npu_lower import CompileError, require_lowered

ATTR_CYCLES = "npu.estimated_cycles"
CPU_CYCLES_PER_ELEMENT = 10  # (assumed)


def _insert_dma(f: func.FuncOp) -> list[Operation]:
    computes = []
    for op in list(f.body.block.ops):
        if not npu.is_compute(op):
            continue
        computes.append(op)
        loaded = []
        for v in op.operands:
            load = npu.DmaLoadOp(v)
            load.location = op.location
            npu.set_origin(load, npu.origin(op))
            Rewriter.insert_op(load, InsertPoint.before(op))
            loaded.append(load.output)
        op.operands = loaded
        for r in op.results:
            store = npu.DmaStoreOp(r)
            store.location = op.location
            npu.set_origin(store, npu.origin(op))
            Rewriter.insert_op(store, InsertPoint.after(op))
            r.replace_uses_with_if(
                store.output, lambda u, s=store: u.operation is not s
            )
    return computes


def _loads(op: Operation) -> list[npu.DmaLoadOp]:
    return [v.owner for v in op.operands if isinstance(v.owner, npu.DmaLoadOp)]


def _prefetch(computes: list[Operation], limit: int, align: int) -> int:
    """Move each op's loads up behind the previous compute op (double buffering)."""
    moved = 0
    for prev, op in zip(computes, computes[1:], strict=False):
        stores = {u.operation for r in prev.results for u in r.uses}
        loads = _loads(op)
        if not loads or any(ld.input.owner in stores for ld in loads):
            continue
        # every op between prev and op must not produce a loaded value
        between, cur = set(), prev.next_op
        while cur is not None and cur is not loads[0]:
            between.add(cur)
            cur = cur.next_op
        if cur is None or any(ld.input.owner in between for ld in loads):
            continue
        need = npu.working_set(prev, align) + sum(
            npu.aligned_bytes(ld.output.type, align) for ld in loads
        )
        if need > limit:
            continue
        for ld in loads:
            ld.detach()
            Rewriter.insert_op(ld, InsertPoint.after(prev))
        moved += 1
    return moved


def _bytes(v, align: int) -> int:
    return npu.aligned_bytes(v.type, align)


def _duration(op: Operation, model: NpuModel, align: int, cores: int = 1) -> int:
    unit = model.unit_of(op.name)
    if unit == "tae":
        out = shape_of(op.results[0])
        w = shape_of(op.operands[1])
        if isinstance(op, npu.GemmOp):
            k = shape_of(op.operands[0])[-1]
            macs = math.prod(out) * k
        elif isinstance(op, npu.ConvTransposeOp):
            macs = math.prod(shape_of(op.operands[0])) * math.prod(w[1:])
        else:
            macs = math.prod(out) * math.prod(w[1:])
        wide = any(
            isinstance(v.type, TensorType) and npu.element_bytes(v.type) > 1
            for v in op.operands[:2]
        )
        rate = model.macs_per_cycle_int16 if wide else model.macs_per_cycle_int8
        return max(1, math.ceil(macs / (rate * cores)))
    if unit == "dma":
        return max(
            1, math.ceil(_bytes(op.results[0], align) / model.ddr_bytes_per_cycle)
        )
    if unit == "cpu":
        elements = sum(math.prod(shape_of(r)) for r in op.results)
        return max(1, elements * CPU_CYCLES_PER_ELEMENT)
    moved = sum(_bytes(v, align) for v in list(op.operands) + list(op.results))
    return max(1, math.ceil(moved / model.vector_bytes))


def estimate(f: func.FuncOp, model: NpuModel, align: int, cores: int = 1) -> int:
    ready: dict = {}
    free: dict[str, int] = {}
    units: dict[str, StringAttr] = {}
    end_all = 0
    for op in f.body.block.ops:
        if isinstance(op, func.ReturnOp) or isinstance(op, npu.ConstantOp):
            continue
        unit = model.unit_of(op.name)
        if isinstance(op, npu.ReshapeOp | npu.SliceOp | npu.ConcatOp):
            unit = "view"
        start = max([ready.get(v, 0) for v in op.operands] + [free.get(unit, 0)])
        length = 0 if unit == "view" else _duration(op, model, align, cores)
        end = start + length
        if unit != "view":
            free[unit] = end
        for r in op.results:
            ready[r] = end
        op.attributes[npu.ATTR_UNIT] = units.setdefault(unit, StringAttr(unit))
        op.attributes[npu.ATTR_START] = i64_attr(start)
        op.attributes[npu.ATTR_END] = i64_attr(end)
        end_all = max(end_all, end)
    return end_all


@dataclass(frozen=True)
class NpuSchedulePass(ModulePass):
    """Insert DDR<->SRAM DMA, overlap loads with compute, estimate cycles."""

    name = "npu-schedule"

    march: str = "nash-e"
    cores: int = 1  # BPU cores a gemm's MACs are split over (compile's core_num)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name)
        if any(isinstance(o, npu.DmaLoadOp) for o in op.walk()):
            raise CompileError("npu-schedule: the module is already scheduled")
        model = get_npu(self.march)
        if not 1 <= self.cores <= model.cores:
            raise CompileError(
                f"npu-schedule: cores={self.cores}: {model.name} has "
                f"{model.cores} BPU core{'s' * (model.cores > 1)}"
            )
        align_attr = op.attributes.get(npu.ATTR_CHANNEL_ALIGN)
        align = align_attr.value.data if isinstance(align_attr, IntegerAttr) else 1
        limit_attr = op.attributes.get(npu.ATTR_SRAM_LIMIT)
        limit = (
            limit_attr.value.data
            if isinstance(limit_attr, IntegerAttr)
            else model.sram_bytes
        )
        total = 0
        for f in op.body.block.ops:
            if isinstance(f, func.FuncOp):
                computes = _insert_dma(f)
                _prefetch(computes, limit, align)
                total += estimate(f, model, align, self.cores)
        op.attributes[ATTR_CYCLES] = i64_attr(total)
