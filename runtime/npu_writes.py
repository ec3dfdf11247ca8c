"""Which instruction writes a buffer's bytes next, or last: the static program's
writes indexed once.

The simulator's analyses (copies forwarded, tiles grouped) ask, for a buffer
and an instruction, where its bytes are next or were last written. Scanning the
instructions for each question made preparing a program quadratic in its length
(4.5 of 16 s of compiling timm's MobileOne); here every result of every
instruction is one row of a few arrays, and a question is one vectorised pass.

Two buffers share bytes as ``FunctionSim._overlap`` says: they are the same
buffer, or both lie in the same arena (``hbm_program.ARENAS``) with
overlapping byte ranges.
"""

from __future__ import annotations

import numpy as np

from hbir.runtime.hbm_program import ARENAS

_ARENA_NUMBER = {space: n for n, space in enumerate(ARENAS, 1)}  # (0: none)


class Writes:
    """The writes of ``code`` (a ``FunctionCode``), in program order."""

    def __init__(self, code):
        rows = [(j, k) for j, ins in enumerate(code.instructions) for k in ins.results]
        buffers = [code.buffers[k] for _, k in rows]
        self.buffers, self.count = code.buffers, len(code.instructions)
        self.at = np.array([j for j, _ in rows], np.int64)  # ascending
        self.key = np.array([k for _, k in rows], np.int64)
        self.arena = np.array([_ARENA_NUMBER.get(b.space, 0) for b in buffers], np.int8)
        self.lo = np.array([b.offset for b in buffers], np.int64)
        self.hi = self.lo + np.array([b.size for b in buffers], np.int64)

    def next_write(self, i: int, key: int) -> int:
        """The first instruction after ``i`` writing bytes of buffer ``key``
        (the number of instructions: none)."""
        start = int(np.searchsorted(self.at, i, side="right"))
        hits = np.flatnonzero(self._writes_to(key, start, self.at.size))
        return int(self.at[start + hits[0]]) if hits.size else self.count

    def last_write(self, before: int, key: int) -> int:
        """The last instruction before ``before`` writing bytes of buffer
        ``key`` (-1: none, e.g. a constant or a function input)."""
        stop = int(np.searchsorted(self.at, before, side="left"))
        hits = np.flatnonzero(self._writes_to(key, 0, stop))
        return int(self.at[hits[-1]]) if hits.size else -1

    def _writes_to(self, key: int, start: int, stop: int) -> np.ndarray:
        """Which of the rows ``start:stop`` write bytes of buffer ``key``."""
        rows = slice(start, stop)
        hit = self.key[rows] == key
        b = self.buffers[key]
        arena = _ARENA_NUMBER.get(b.space, 0)
        if arena:
            hit |= (
                (self.arena[rows] == arena)
                & (self.lo[rows] < b.offset + b.size)
                & (self.hi[rows] > b.offset)
            )
        return hit
