"""Loads forwarded: a reader of a loaded SRAM buffer reads the load's source instead,
where the two are provably the same bytes.

The program moves every value it computes on into the SRAM with a ``dma_load``
(DDR or a constant -> SRAM) before an instruction reads it there; on the host
that copy is a pass over the value that changes nothing a reader sees while the
source still holds the same bytes. So a reader of the loaded buffer is given a
view of the source, and the load, read by nobody any more, is skipped by the
simulator's dead-load analysis (``FunctionSim._unread_loads``) when nobody
observes the run (an observer sees every instruction run, the load included:
its results are still those bytes).

"Same bytes" is proved from the static program, never assumed. A reader at
instruction ``j`` of the buffer a ``dma_load`` at ``i`` filled is forwarded when

* it reads that buffer exactly (same space, offset, shape and dtype; a reader
  of a part or of an overlapping buffer is left alone),
* no instruction in ``(i, j)`` writes the loaded bytes or the source's, and
* its own results do not overlap the source (a kernel writing where it reads).

Readers after the first such write keep reading the SRAM, and the load then
still runs for them.
"""

from __future__ import annotations

from hbir.runtime.npu_merge import same_bytes


def forward_loads(sim, reads: list[list[int]]) -> int:
    """Rewire the readers of every ``dma_load`` that can read its source:
    ``reads[j]`` (the buffer ids instruction ``j`` reads, in operand order,
    None for an operand it does not read) and the readers' ``ins`` views are
    updated in place. Returns the number of operands forwarded."""
    code, forwarded = sim.code, 0
    for i, ins in enumerate(code.instructions):
        if sim.steps[i].name != "dma_load":
            continue
        src, dst = ins.operands[0], ins.results[0]
        view = sim.views[src]
        if not view.flags.c_contiguous:
            continue
        for j in range(i + 1, len(code.instructions)):
            later = code.instructions[j]
            for n, key in enumerate(reads[j]):
                if key is None or not sim._overlap(key, dst):
                    continue
                if same_bytes(sim, key, dst) and not any(
                    sim._overlap(r, src) for r in later.results
                ):
                    reads[j][n] = src
                    sim.steps[j].ins[n] = view
                    forwarded += 1
            if any(sim._overlap(r, k) for r in later.results for k in (src, dst)):
                break
    return forwarded
