"""A batch on the simulated NPU: a batch-1 program run on N samples at once.

``model.hbm`` is compiled for batch 1: its memory plan, tiles and instructions
are one sample's. A batch of N runs that very program on N samples side by
side: each arena (DDR, SRAM, an io buffer) has one row per sample, sample ``i``
keeps every buffer at the plan's offset in row ``i``, so buffers that share
bytes in the plan share them in every row and nothing of the program changes.
A buffer is then a view with a leading sample axis (``FunctionSim.views``:
``(N, *shape)``, rows apart in memory); constants have none.

Each instruction runs in one of two ways, decided once when the batch is
prepared (``spread``):

* **at once**, on the whole batch, where its kernel treats a leading dimension
  as independent samples and every operand and result it writes has the
  leading dimension 1 of a sample: the N samples are then that dimension (the
  view ``(N, *shape[1:])``). Convs, pools, gemms of a constant weight, the
  elementwise ops, transposes that keep the leading axis, ...: one kernel call
  for N samples (one oneDNN / float GEMM call sums N images with the weight
  loaded once).
* **sample by sample** otherwise (a CPU island, a slice or gather along the
  leading axis, a buffer without a leading 1): the instruction as prepared for
  batch 1, once per sample on that sample's views.

Copies (DMA, reshape) move each sample's bytes as the program says, through
the stacked views. Either way each sample's numbers are those of the program
run on it alone (``tests/runtime/test_npu_batch.py`` checks it against
sample-by-sample runs, bit for bit).
"""

from __future__ import annotations

import dataclasses

from hbir.errors import HbirError
from hbir.runtime import npu_merge


class NpuBatchError(HbirError):
    """A program the simulator cannot run on a batch at once (it then runs
    sample by sample): a grouped conv tile whose input has no leading 1."""


# Kernels that treat a leading dimension as independent samples (given their
# operands' leading dimension is the batch's: see ``_at_once``).
_ELEMENTWISE = frozenset({"eltwise", "rescale", "cast", "lut", "lut_segmented"})
_SPATIAL = frozenset({"conv", "pool", "resize"})


def spread(sim, step, read: list[bool]) -> None:
    """Prepare ``step`` of a batch simulator (``sim.batch`` > 1) to run on the
    batch: at once (its views' sample axis merged into their leading 1) or
    sample by sample (``run_samples``). ``read``: which operands the prepared
    step reads (a conv with a fused epilogue does not read its weight)."""
    if _at_once(sim, step, read):
        merge = lambda v: v.reshape(v.shape[0], *v.shape[2:])  # noqa: E731
        step.ins = [
            merge(v) if id(v) in sim.stacked and used else v
            for v, used in zip(step.ins, read, strict=True)
        ]
        step.outs = [merge(v) for v in step.outs]
        shape, dtype = step.out
        step.out = ((sim.batch, *shape[1:]), dtype)
        return
    if step.run is npu_merge.run_tile:  # its group's sums are one sample's
        raise NpuBatchError(f"{step.name}: a grouped tile without a leading 1")
    from hbir.runtime.npu_sim import _bind

    subs = []
    for i in range(sim.batch):
        part = lambda v: v[i] if id(v) in sim.stacked else v  # noqa: E731, B023
        sub = dataclasses.replace(
            step, ins=[part(v) for v in step.ins], outs=[part(v) for v in step.outs]
        )
        _bind(sub)
        subs.append(sub)
    step.run, step.extra = run_samples, subs


def run_samples(step) -> None:
    """An instruction run once per sample (``spread``)."""
    for sub in step.extra:
        sub.run(sub)


def _at_once(sim, step, read: list[bool]) -> bool:
    """Whether ``step`` can run on the whole batch as one call: a kernel that
    keeps samples apart, and every stacked view it reads or writes (the
    batch's values) of a leading 1, its sample axis to merge into it."""
    views = [v for v, used in zip(step.ins, read, strict=True) if used]
    views += step.outs
    if not all(
        id(v) in sim.stacked and v.ndim >= 2 and v.shape[1] == 1 for v in step.outs
    ) or any(id(v) in sim.stacked and (v.ndim < 2 or v.shape[1] != 1) for v in views):
        return False
    name, f = step.name, step.fields
    rank = step.outs[0].ndim - 1  # a sample's
    if "_pair" in f or (name == "pool" and f["kind"] == "max"):
        return False  # a compiled pass per sample's contiguous bytes: faster
    if name in _ELEMENTWISE:  # (a stacked operand of lower rank: no broadcast)
        return all(v.ndim == rank + 1 for v in step.ins if id(v) in sim.stacked)
    if name in _SPATIAL:
        return True
    if name == "gemm":  # a batch's a times a constant b, or batched matmuls
        a, b = step.ins[0], step.ins[1]
        return id(a) in sim.stacked and (
            id(b) not in sim.stacked or (not f["transpose_b"] and b.ndim > 3)
        )
    if name == "transpose":
        return f["perm"][0] == 0
    if name == "reduce":
        return all(d % rank != 0 for d in f["dims"])
    if name == "concat":
        return f["dim"] % rank != 0
    return False
