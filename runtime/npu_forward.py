"""Copies forwarded: a reader of a DMA copy's destination reads its source instead,
where the two are provably the same bytes.

The program moves every value between DDR and SRAM with DMA copies: a
``dma_load`` (DDR or a constant -> SRAM) before an instruction reads it, a
``dma_store`` (SRAM -> DDR) after one computed it. On the host such a copy is a
pass over the value that changes nothing a reader sees while the source still
holds the same bytes. So a reader of the copy is given a view of the source
(through a chain: a load of what a store wrote reads the store's source, and so
do its readers), and a copy read by nobody any more is skipped by the
simulator's dead-copy analysis (``FunctionSim._unread_copies``) when nobody
observes the run (an observer sees every instruction run, the copies included:
their results are still those bytes).

"Same bytes" is proved from the static program, never assumed. A reader at
instruction ``j`` of the buffer a copy at ``i`` filled is forwarded when

* it reads that buffer exactly (same space, offset, shape and dtype; a reader
  of a part or of an overlapping buffer is left alone),
* no instruction in ``(i, j)`` writes the copied bytes or the source's, and
* its own results do not overlap the source (a kernel writing where it reads).

Readers after the first such write keep reading the copy, which then still
runs for them.
"""

from __future__ import annotations

from hbir.runtime.npu_merge import same_bytes

COPIES = ("dma_load", "dma_store")


def forward_copies(sim, reads: list[list[int | None]]) -> int:
    """Rewire the readers of every DMA copy that can read a source of the same
    bytes, in program order: ``reads[j]`` (the buffer ids instruction ``j``
    reads, in operand order, None for an operand it does not read) and the
    readers' ``ins`` views (``sim.steps``) are updated in place. Returns the
    number of operands forwarded.

    A reader gets the earliest source of a chain of copies that still holds
    the bytes at its turn: after a store A -> B and a load B -> C, a reader of
    C reads A while A is intact, else B, else C."""
    code, forwarded = sim.code, 0
    # (instruction, operand) -> the sources of the same bytes there, earliest
    # copy first (the operand's own buffer not included)
    sources_of: dict[tuple[int, int], list] = {}
    for i, ins in enumerate(code.instructions):
        if sim.steps[i].name not in COPIES:
            continue
        src, dst = ins.operands[0], ins.results[0]
        sources = sources_of.get((i, 0), []) + [(src, sim.views[src])]
        sources = [(k, v) for k, v in sources if sim.dense(v)]
        ends = [sim.writes.next_write(i, k) for k, _ in sources]
        for j in range(i + 1, min(sim.writes.next_write(i, dst), len(reads) - 1) + 1):
            for n, key in enumerate(code.instructions[j].operands):
                if reads[j][n] is None or not same_bytes(sim, key, dst):
                    continue
                # intact until j, and j does not write it either
                held = [s for s, end in zip(sources, ends, strict=True) if j < end]
                if held:
                    reads[j][n], sim.steps[j].ins[n] = held[0]
                    sources_of[j, n] = held
                    forwarded += 1
    return forwarded
