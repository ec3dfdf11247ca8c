"""The simulated NPU: runs a verified ``model.hbm`` program instruction by instruction.

Memory is bytes, as the program planned it: one ``uint8`` array for the DDR
activation arena (``ddr_peak_bytes``) and one for the SRAM (``sram_peak_bytes``)
per function; every DDR / SRAM Buffer is a numpy view of its bytes
(``np.ndarray(shape, dtype, buffer=arena, offset=offset)``), made once. Byte
arenas rather than one array per Buffer because the memory plan is part of what
is tested: buffers the plan lets share bytes really share them here, so a value
overwritten while still live (a wrong liveness or placement) changes the outputs
instead of going unnoticed. ``const`` Buffers are the program's constants,
read-only; an ``io`` Buffer is an allocation of its own.

Each instruction runs through its opcode's handler (``HANDLERS``: opcode name ->
handler): DMA copies bytes between DDR (or the constants) and SRAM, one value —
one tile — at a time, as the program orders it; compute opcodes call the shared
integer kernels (``runtime/npu_kernels.py``: the same code the interpreter runs
for npu ops, built on ``runtime/numerics.py`` / ``runtime/integer_ops.py`` and
``runtime/kernels.py``'s exact fast GEMMs); ``cpu_call`` runs its island (HBIR)
as the interpreter's prepared plan (``runtime/plan.py``). Each tile is its own
instruction and runs as such, with one exception that changes no number:
output-channel tiles of a conv whose inputs are provably the same bytes share
one call of the sums kernel (``runtime/npu_merge.py``), each requantizing its
own channels. A reader of a DMA copy reads the copy's source where that
provably holds the same bytes, and without an observer (``on_instruction``)
copies nothing reads are skipped (``runtime/npu_forward.py``).

The program must have been verified (``hbir.hbm.verify``: the loader and the
assembler do it); preparing a function (:class:`FunctionSim`) resolves every
field once — constants looked up, requantizers and lookup tables built
(``npu_kernels.prepare``), weights loaded from constants packed for the exact
fast GEMMs, islands parsed, matched to their buffers and prepared as plans —
and running it checks nothing again.
A simulator is not thread-safe (its arenas are its state).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hbir.errors import HbirError
from hbir.runtime import (
    npu_batch,
    npu_forward,
    npu_kernels,
    npu_merge,
    npu_writes,
    plan,
)
from hbir.runtime.hbm_opcodes import BY_NUMBER, NONE
from hbir.runtime.hbm_program import (
    ARENAS,
    MEMORY_BUDGET,
    Buffer,
    DebugEntry,
    FunctionCode,
    Instruction,
)

OnInstruction = Callable[[int, Instruction, DebugEntry, tuple[np.ndarray, ...]], None]


class NpuSimError(HbirError):
    """A program the simulator cannot prepare (an island that does not match its
    buffers), or an instruction that failed while running (named)."""


@dataclass
class _Step:
    """One prepared instruction: ``run(step)`` reads ``ins`` and writes ``outs``."""

    run: Callable[[_Step], None]
    name: str
    fields: dict
    ins: list[np.ndarray]
    outs: list[np.ndarray]
    out: tuple[tuple[int, ...], np.dtype]  # the first result's (shape, dtype)
    # a handler's prepared state: a cpu_call's island as a prepared plan
    extra: object = None


# ------------------------------------------------------------------ handlers


def _compute(step: _Step) -> None:
    """A compute opcode: the shared kernel, its result written to its buffer."""
    y = npu_kernels.COMPUTE[step.name](step.fields, step.out, *step.ins)
    step.outs[0][...] = y


def _compute_into(step: _Step) -> None:
    """A compute opcode whose kernel writes its result's buffer itself where it
    can (``npu_kernels.WRITES_INTO``)."""
    dst = step.outs[0]
    y = npu_kernels.COMPUTE[step.name](step.fields, step.out, *step.ins, into=dst)
    if y is not dst:  # not written in place
        dst[...] = y


def _run_bound(step: _Step) -> None:
    """A compute opcode bound to its buffers (``npu_kernels.bind``)."""
    step.extra()


def _copy(step: _Step) -> None:
    """DMA (DDR / constants <-> SRAM) and reshape: the value's bytes, copied."""
    src, dst = step.ins[0], step.outs[0]
    if not np.may_share_memory(src, dst):
        dst[...] = src.reshape(_copied_shape(src, dst))
    elif src.__array_interface__["data"][0] != dst.__array_interface__["data"][0]:
        raise NpuSimError(f"{step.name}: source and destination overlap")
    # else: a reshape on the same bytes (npu-plan-memory's alias): nothing to move


def _bound_copy(src: np.ndarray, dst: np.ndarray):
    """``_copy`` of these very arrays as ``run()``, decided once; None where
    ``_copy`` itself must run (overlapping buffers: its error)."""
    if np.may_share_memory(src, dst):
        same = src.__array_interface__["data"][0] == dst.__array_interface__["data"][0]
        return (lambda: None) if same else None
    view = src.reshape(_copied_shape(src, dst))
    if not np.may_share_memory(view, src):  # (a copy: not the live bytes)
        return None
    return functools.partial(np.copyto, dst, view)


def _copied_shape(src: np.ndarray, dst: np.ndarray) -> tuple[int, ...]:
    """The shape a copy's source is read in: its destination's, or one
    sample's where a constant fills a batch's buffer (``runtime/npu_batch.py``:
    every sample gets the constant)."""
    return dst.shape if src.size == dst.size else dst.shape[1:]


def _bind(step: _Step) -> None:
    """``step`` bound to its buffers where that pays (``npu_kernels.bind``, a
    copy decided once): it then runs ``_run_bound``."""
    bound = None
    if step.run is _compute_into:
        bound = npu_kernels.bind(
            step.name, step.fields, step.out, step.ins, step.outs[0]
        )
    elif step.run is _copy:
        bound = _bound_copy(step.ins[0], step.outs[0])
    if bound is not None:
        step.run, step.extra = _run_bound, bound


def _cpu_call(step: _Step) -> None:
    """The island's prepared plan (``runtime/plan.py``) on the operands' bytes
    (its kernels never write their operands; a result that is a view of one
    is copied out as numpy copies overlapping arrays)."""
    results = step.extra.run(step.ins)
    for dst, y in zip(step.outs, results, strict=True):
        dst[...] = y


HANDLERS: dict[str, Callable[[_Step], None]] = {
    name: _compute_into if name in npu_kernels.WRITES_INTO else _compute
    for name in npu_kernels.COMPUTE
} | {
    "dma_load": _copy,
    "dma_store": _copy,
    "reshape": _copy,
    "cpu_call": _cpu_call,
}


# ------------------------------------------------------------------ preparation


def _island(code: FunctionCode, ins: Instruction, island, where: str):
    """A ``cpu_call``'s island ``(func.func, rounding)``, its signature checked
    against the instruction's buffers."""
    from xdsl.dialects.builtin import TensorType

    from hbir.dialects.hbir import numpy_dtype

    f, rounding = island
    ft = f.function_type
    for what, types, ids in (
        ("argument", ft.inputs.data, ins.operands),
        ("result", ft.outputs.data, ins.results),
    ):
        if len(types) != len(ids):
            raise NpuSimError(
                f"{where}: the island has {len(types)} {what}s, the call {len(ids)}"
            )
        for i, (t, key) in enumerate(zip(types, ids, strict=True)):
            b = code.buffers[key]
            if not isinstance(t, TensorType):
                raise NpuSimError(f"{where}: island {what} {i} is not a tensor")
            got = (tuple(t.get_shape()), np.dtype(numpy_dtype(t.element_type)).name)
            if got != (b.shape, b.dtype):
                raise NpuSimError(
                    f"{where}: island {what} {i} is {got[1]}{list(got[0])}, its "
                    f"buffer %{key} {b.dtype}{list(b.shape)}"
                )
    return f, rounding


def _meets(spans: list[tuple[int, int]], r: tuple[int, int]) -> bool:
    """Whether the byte range ``r`` meets one of ``spans``."""
    return any(a < r[1] and r[0] < b for a, b in spans)


def _minus(spans: list[tuple[int, int]], r: tuple[int, int]) -> list:
    """``spans`` without the bytes of ``r``."""
    out = []
    for a, b in spans:
        out += [(a, min(b, r[0]))] if a < r[0] else []
        out += [(max(a, r[1]), b)] if b > r[1] else []
    return out


class FunctionSim:
    """One function of a verified program, prepared to run on the simulated NPU."""

    def __init__(
        self,
        code: FunctionCode,
        islands: Sequence[tuple[object, str]],
        batch: int = 1,
    ):
        """``islands``: each of ``code.islands`` as its parsed ``func.func`` and
        the model's rounding mode (parsing HBIR text is the model API's).
        ``batch`` > 1: the program run on that many samples at once (see
        :meth:`batched`); raises ``NpuBatchError`` where it cannot be."""
        self.code = code
        self.islands = islands
        self.batch = batch
        self._batched: dict[int, FunctionSim | None] = {}
        # One run at a time: the memories below are the function's only ones.
        self.lock = threading.Lock()
        # The memories are allocated up front; the loader refused a program past
        # the budget, and a hand-built one is refused here, not on the host.
        for space, size in (
            ("ddr", code.ddr_peak_bytes),
            ("sram", code.sram_peak_bytes),
        ):
            if size > MEMORY_BUDGET:
                raise NpuSimError(
                    f"@{code.name}: a {size}-byte {space} arena is beyond the "
                    f"simulator's {MEMORY_BUDGET} bytes"
                )
        if any(code.buffers[k].space == "const" for k in code.input_buffers):
            raise NpuSimError(f"@{code.name}: an input is bound to a const buffer")
        rows = () if batch == 1 else (batch,)  # a batch: one arena row per sample
        self.ddr = np.zeros((*rows, code.ddr_peak_bytes), np.uint8)
        self.sram = np.zeros((*rows, code.sram_peak_bytes), np.uint8)
        self.views = {key: self._view(b) for key, b in code.buffers.items()}
        # a batch: the views with a leading sample axis (the others: constants)
        self.stacked = {id(v) for v in self.views.values() if batch > 1}
        self.stacked -= {
            id(self.views[k]) for k, b in code.buffers.items() if b.space == "const"
        }
        # Buffers a dma_load filled from a constant and that no later
        # instruction (so far, in program order) has written over: buffer id ->
        # the constant. Only these are prepared from their values (a weight
        # packed, a bias folded): the memory plan is static, so a plan that
        # clobbers a weight before its use is seen here, once, and that conv
        # then computes from the bytes that are really there.
        self.loaded: dict[int, np.ndarray] = {}
        self.writes = npu_writes.Writes(code)
        self.steps = [self._prepare(i, ins) for i, ins in enumerate(code.instructions)]
        npu_merge.group_channel_tiles(self)
        # the buffers each instruction reads, after forwarding: its sources
        self.reads = reads = self._buffers_read()
        npu_forward.forward_copies(self, reads)
        for step, read in zip(self.steps, reads, strict=True):  # buffers final
            if batch > 1 and step.run is not _copy:
                npu_batch.spread(self, step, [k is not None for k in read])
            _bind(step)  # bound to them
        # Without an observer, the copies whose bytes nothing reads (a weight
        # only a prepared conv uses, from its packed copy; the input of a tile
        # whose group summed it at its first tile; a value its readers read
        # where it was copied from) are skipped.
        dead = self._unread_copies(reads)
        self.live = [(i, s) for i, s in enumerate(self.steps) if i not in dead]

    def batched(self, batch: int) -> FunctionSim | None:
        """This function prepared for ``batch`` samples at once (made on first
        use, the last two sizes kept), or None where the program cannot run
        so (``runtime/npu_batch.py``): then it runs sample by sample."""
        if batch not in self._batched:
            try:
                sim = FunctionSim(self.code, self.islands, batch)
            except npu_batch.NpuBatchError:
                sim = None
            while len(self._batched) >= 2:
                del self._batched[next(iter(self._batched))]
            self._batched[batch] = sim
        return self._batched[batch]

    def _view(self, b: Buffer) -> np.ndarray:
        if b.space == "const":
            v = self.code.constants[b.id].view()
            v.flags.writeable = False
            return v
        rows = self.ddr.shape[:-1]  # () or (batch,)
        if b.space == "io":  # a buffer of its own, outside the arenas
            arena, offset = np.zeros((*rows, b.size), np.uint8), 0
        else:
            arena = self.ddr if b.space == "ddr" else self.sram
            offset = b.offset
        dtype = np.dtype(b.dtype)
        if not rows:
            return np.ndarray(b.shape, dtype, buffer=arena, offset=offset)
        # sample i's buffer in arena row i: the plan's bytes, once per sample
        inner = np.empty(b.shape, dtype).strides
        return np.ndarray(
            (*rows, *b.shape), dtype, buffer=arena.reshape(-1), offset=offset,
            strides=(arena.shape[1], *inner),
        )  # fmt: skip

    def _prepare(self, index: int, ins: Instruction) -> _Step:
        op = BY_NUMBER[ins.opcode]
        fields = dict(ins.fields)
        for name, kind in op.fields:
            if kind == "buffer":  # a constant's values, as the kernels take them
                key = fields[name]
                fields[name] = (
                    None if key == NONE else self.code.constants[key].astype(np.int64)
                )
        first = self.code.buffers[ins.results[0]] if ins.results else None
        out = (
            ((), np.dtype("int8"))
            if first is None
            else (first.shape, np.dtype(first.dtype))
        )
        step = _Step(
            HANDLERS[op.name],
            op.name,
            fields,
            [self.views[k] for k in ins.operands],
            [self.views[k] for k in ins.results],
            out,
        )
        if op.name in npu_kernels.WRITES_INTO and any(
            self._overlap(r, k) for r in ins.results for k in ins.operands
        ):  # an instruction reads its operands, then writes: no writing into
            step.run = _compute
        where = f"@{self.code.name}: instruction {index} ({op.name})"
        if op.name == "cpu_call":
            island = self.islands[ins.fields["island"]]
            try:
                step.extra = plan.prepared(*_island(self.code, ins, island, where))
            except NpuSimError:
                raise
            except HbirError as e:  # an island the interpreter cannot run
                raise NpuSimError(f"{where}: {e}") from e
        elif op.name in npu_kernels.COMPUTE:
            operands = [
                (b.shape, np.dtype(b.dtype), self.loaded.get(b.id))
                for b in (self.code.buffers[k] for k in ins.operands)
            ]
            step.fields = npu_kernels.prepare(op.name, fields, out, operands)
        self._forget_overwritten(ins.results)
        if op.name == "dma_load" and ins.operands[0] in self.code.constants:
            self.loaded[ins.results[0]] = self.code.constants[ins.operands[0]]
        return step

    def _forget_overwritten(self, written: Sequence[int]) -> None:
        """Drop the loaded constants whose bytes these results overlap."""
        for key in written:
            for held in list(self.loaded):
                if self._overlap(held, key):
                    del self.loaded[held]

    def _overlap(self, a: int, b: int) -> bool:
        """Whether buffers ``a`` and ``b`` share bytes."""
        if a == b:
            return True
        x, y = self.code.buffers[a], self.code.buffers[b]
        return (
            x.space == y.space
            and x.space in ARENAS
            and x.offset < y.offset + y.size
            and y.offset < x.offset + x.size
        )

    def _span(self, key: int) -> tuple[str, int, int] | None:
        """A buffer's (space, first byte, end) in an arena, or None."""
        b = self.code.buffers[key]
        if b.space not in ARENAS:
            return None
        return b.space, b.offset, b.offset + b.size

    def _unread_copies(self, reads: list[list[int | None]]) -> set[int]:
        """The DMA copies whose bytes no later instruction reads before they
        are overwritten (nor are an output). Only the prepared reads count
        (``reads``): a conv with a fused epilogue does not read its weight."""
        code, dead = self.code, set()
        for i, ins in enumerate(code.instructions):
            if self.steps[i].name not in npu_forward.COPIES:
                continue
            span = self._span(ins.results[0])
            if span is None or any(
                self._overlap(ins.results[0], k) for k in code.output_buffers
            ):
                continue
            space, left = span[0], [span[1:]]  # the loaded bytes still there
            after = zip(reads[i + 1 :], code.instructions[i + 1 :], strict=True)
            for later, written in after:
                spans = [self._span(k) for k in later if k is not None]
                if any(s and s[0] == space and _meets(left, s[1:]) for s in spans):
                    break  # read
                for s in map(self._span, written.results):
                    if s and s[0] == space:
                        left = _minus(left, s[1:])
                if not left:
                    dead.add(i)
                    break
            else:
                dead.add(i)
        return dead

    def _buffers_read(self) -> list[list[int | None]]:
        """The buffers each instruction reads, by operand (None: an operand
        it does not read, as prepared)."""
        return [
            [
                k if used else None
                for k, used in zip(ins.operands, self._reads(step), strict=True)
            ]
            for ins, step in zip(self.code.instructions, self.steps, strict=True)
        ]

    @staticmethod
    def _reads(step: _Step) -> tuple[bool, ...]:
        tile = npu_merge.operands_read(step)
        if tile is not None:
            return tile
        if step.name in npu_kernels.COMPUTE:
            return npu_kernels.operands_read(step.name, step.fields, len(step.ins))
        return (True,) * len(step.ins)

    def run(
        self, inputs: Sequence[np.ndarray], on_instruction: OnInstruction | None = None
    ) -> list[np.ndarray]:
        """The outputs for ``inputs`` (arrays of the inputs' shapes and dtypes, in
        order); ``on_instruction(index, instruction, debug, results)`` after each
        instruction, with copies of its results."""
        code = self.code
        for key, x in zip(code.input_buffers, inputs, strict=True):
            self._io(key)[...] = x
        steps = enumerate(self.steps) if on_instruction is not None else self.live
        for i, step in steps:
            try:
                step.run(step)
            except NpuSimError:
                raise
            except (HbirError, ValueError, ArithmeticError) as e:
                raise NpuSimError(
                    f"@{code.name}: instruction {i} ({step.name}, "
                    f"{code.debug[i].loc or 'no location'}) failed: {e}"
                ) from e
            if on_instruction is not None:
                results = tuple(v.copy() for v in step.outs)
                on_instruction(i, code.instructions[i], code.debug[i], results)
        return [self._io(key).copy() for key in code.output_buffers]

    def dense(self, v: np.ndarray) -> bool:
        """Whether a buffer's view is C-contiguous (a batch's: each sample's)."""
        return (v[0] if id(v) in self.stacked else v).flags.c_contiguous

    def _io(self, key: int) -> np.ndarray:
        """An input's or output's buffer as the caller's array: a batch's
        samples stacked along its leading dimension of 1."""
        v = self.views[key]
        return v if self.batch == 1 else v.reshape(v.shape[0], *v.shape[2:])
