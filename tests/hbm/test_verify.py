"""hbm/verify.py's def-before-use rule: a verified program is a pure function of
its inputs.

Over every compiled test model, each instruction is removed, duplicated and
swapped with the next in turn; the verifier must refuse exactly the programs in
which some byte is read before anything wrote it, as an independent byte-by-byte
replay of the program (boolean arrays per memory) finds. Then each compiled model
is fed twice with its arenas filled with random bytes in between: the outputs
must not change.
"""

from __future__ import annotations

import dataclasses

import compile_models
import numpy as np
import pytest

from hbir.hbm import container
from hbir.hbm.errors import HbmFormatError
from hbir.hbm.verify import nbytes, verify_def_before_use
from hbir.runtime.hbm_program import FunctionCode


def _reads_before_writes(fn: FunctionCode) -> bool:
    """The replay: one boolean per byte of every memory, set when written."""
    sizes: dict[tuple, int] = {}
    for b in fn.buffers.values():
        where = ("io", b.id) if b.space == "io" else (b.space,)
        sizes[where] = max(sizes.get(where, 0), b.offset + b.size)
    done = {where: np.zeros(n, bool) for where, n in sizes.items()}

    def span(key):
        b = fn.buffers[key]
        where = ("io", b.id) if b.space == "io" else (b.space,)
        return done[where], slice(b.offset, b.offset + nbytes(b.shape, b.dtype))

    written = [*fn.input_buffers]
    written += [k for k, b in fn.buffers.items() if b.space == "const"]
    for key in written:
        memory, where = span(key)
        memory[where] = True
    for ins in fn.instructions:
        for key in ins.operands:
            memory, where = span(key)
            if not memory[where].all():
                return True
        for key in ins.results:
            memory, where = span(key)
            memory[where] = True
    return any(not span(key)[0][span(key)[1]].all() for key in fn.output_buffers)


def _refused(fn: FunctionCode) -> bool:
    def fail(place, what):
        raise ValueError(what)

    try:
        verify_def_before_use(fn, fail)
    except ValueError:
        return True
    return False


def _variants(fn: FunctionCode):
    code = fn.instructions
    for i in range(len(code)):
        yield "removed", i, code[:i] + code[i + 1 :]
        yield "duplicated", i, code[: i + 1] + code[i:]
        if i + 1 < len(code):
            yield "swapped", i, code[:i] + [code[i + 1], code[i]] + code[i + 2 :]


@pytest.mark.parametrize("name", compile_models.NAMES)
def test_a_read_before_its_write_is_refused_exactly(name, tmp_path_factory):
    _, _, hbm, _ = compile_models.compiled(name, tmp_path_factory)
    refused = 0
    for fn in hbm.program.functions:
        assert not _refused(fn) and not _reads_before_writes(fn)
        for how, i, code in _variants(fn):
            mutated = dataclasses.replace(fn, instructions=code)
            want = _reads_before_writes(mutated)
            assert _refused(mutated) == want, f"{name}: instruction {i} {how}"
            refused += want
    assert refused > 0


def test_the_loader_names_the_instruction_that_reads_unwritten_bytes(
    tmp_path_factory, unchecked_bytes
):
    _, _, hbm, _ = compile_models.compiled("digits", tmp_path_factory)
    fn = hbm.program.functions[0]
    removals = (
        dataclasses.replace(
            fn,
            instructions=fn.instructions[:i] + fn.instructions[i + 1 :],
            debug=fn.debug[:i] + fn.debug[i + 1 :],
        )
        for i in range(len(fn.instructions))
    )  # the first instruction whose removal leaves a read before its write
    mutated = next(m for m in removals if _reads_before_writes(m))
    program = dataclasses.replace(hbm.program, functions=[mutated])
    with pytest.raises(HbmFormatError, match="before anything wrote it"):
        container.from_bytes(unchecked_bytes(program))
    with pytest.raises(ValueError, match="before anything wrote it"):
        container.to_bytes(program)  # the writer refuses it too


@pytest.mark.parametrize("name", compile_models.NAMES)
def test_poisoned_arenas_change_no_output(name, tmp_path_factory):
    _, batches, hbm, _ = compile_models.compiled(name, tmp_path_factory)
    f = hbm["forward"]
    rng = np.random.default_rng(7)
    for inputs in batches[:3]:
        feed = dict(zip([d.name for d in f.inputs], inputs, strict=True))
        first = f.feed(feed)
        sim = f._sim
        for arena in (sim.ddr, sim.sram, *(v for v in sim.views.values())):
            if arena.flags.writeable:
                arena.view(np.uint8).reshape(-1)[:] = rng.integers(
                    0, 256, arena.nbytes, np.uint8
                )
        again = f.feed(feed)
        for key, y in first.items():
            assert again[key].tobytes() == y.tobytes(), f"{name}: {key} changed"


def test_a_buffer_beyond_the_memory_budget_is_refused_before_allocation(
    program, unchecked_bytes
):
    """A small file declaring a 1 TiB io buffer: a located error, no MemoryError."""
    fn = program.functions[1]
    fn.buffers[9] = dataclasses.replace(fn.buffers[9], size=1 << 40)
    with pytest.raises(HbmFormatError, match=r"%9, 1099511627776 bytes in io\), abo"):
        container.from_bytes(unchecked_bytes(program), "big.hbm")
