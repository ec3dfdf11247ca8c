"""The rules every compiled program obeys, checked once before anything runs.

The loader (``container.from_bytes``), the assembler (``text.assemble``) and the
writer (``container.to_bytes``) all call :func:`verify_program`; after it the
simulator trusts the program: every buffer id exists, every buffer lies inside
its memory space and holds its shape, every instruction has its opcode's operand
and result counts and fields, and every CPU island parses as HBIR and fits the
buffers of the calls that run it.

Values are checked for their Python types too (an ``int``, not a float or a
numpy integer; a ``str`` that UTF-8 can encode), so a program that passes
encodes without surprises.

A rule that fails calls ``fail(place, what)``, which must raise. ``place`` says
what is wrong, as the caller's own reader can locate it: ``("program",)`` (the
march), ``("function", f)``,
``("buffer", f, id)``, ``("input", f, i)``, ``("output", f, i)``,
``("instruction", f, i)``, ``("debug", f, i)``, ``("island", f, i)`` (``f``:
the function's index). The binary loader turns a place into a section and a
byte offset, the assembler into a line and a column.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from typing import NoReturn

import numpy as np

from hbir.errors import HbirError
from hbir.runtime import hbm_opcodes
from hbir.runtime.hbm_opcodes import BY_NUMBER, NONE, OPCODES
from hbir.runtime.hbm_program import (
    DTYPES,
    MEMORY_BUDGET,
    SPACES,
    Buffer,
    FunctionCode,
    Instruction,
    Program,
    TensorDesc,
)

Place = tuple
Fail = Callable[[Place, str], NoReturn]

MAX_RANK = 32  # numpy's own limit on every version hbir supports
MAX_DIM = 2**32 - 1
MAX_ID = 2**32 - 1  # buffer ids are u32 in the file
I64 = (-(2**63), 2**63 - 1)
U64 = (0, 2**64 - 1)
# The units an instruction may name: its opcode table's, or "" (unscheduled).
UNITS = frozenset({"", *(op.unit for op in OPCODES)})


def is_int(value, bounds: tuple[int, int]) -> bool:
    """``value`` is a Python ``int`` within ``bounds`` (inclusive)."""
    return type(value) is int and bounds[0] <= value <= bounds[1]


def is_text(value) -> bool:
    """``value`` is a ``str`` that UTF-8 can encode (no lone surrogates)."""
    if type(value) is not str:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def nbytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of a dense ``shape`` x ``dtype`` tensor (Python ints: never overflows)."""
    return math.prod(shape) * np.dtype(dtype).itemsize


def shape_problem(shape: tuple[int, ...]) -> str | None:
    if len(shape) > MAX_RANK:
        return f"rank {len(shape)} is above {MAX_RANK}"
    for dim in shape:
        if not is_int(dim, (0, MAX_DIM)):
            return f"dimension {dim} of shape {list(shape)} is not in 0..{MAX_DIM}"
    return None


def verify_program(program: Program, fail: Fail, islands: bool = True) -> None:
    """Every rule, function by function (``islands=False``: skip parsing the
    CPU islands, the one slow rule)."""
    from hbir.passes.march import MARCHES, get_npu

    if program.march not in MARCHES:
        fail(("program",), f"unknown march '{program.march}': known {list(MARCHES)}")
    sram = get_npu(program.march).sram_bytes
    names = [fn.name for fn in program.functions]
    for f, fn in enumerate(program.functions):
        if not fn.name or not is_text(fn.name) or names.index(fn.name) != f:
            fail(("function", f), f"function name {fn.name!r} is empty or repeated")
        if not all(is_text(text) for text in fn.islands):
            fail(("function", f), "an island is not UTF-8 text")
        if fn.sram_peak_bytes > sram:
            fail(
                ("function", f),
                f"SRAM peak {fn.sram_peak_bytes} is above the {sram} bytes of "
                f"{program.march}'s SRAM",
            )
        verify_buffers(fn, _in_function(fail, f))
    for f, fn in enumerate(program.functions):
        verify_function(fn, _in_function(fail, f), islands)


def _in_function(fail: Fail, f: int) -> Fail:
    """``fail`` for the rules of function ``f``: its index goes into the place."""
    return lambda place, what: fail((place[0], f, *place[1:]), what)


def verify_buffers(fn: FunctionCode, fail: Fail) -> None:
    """Each buffer: known space and dtype, a sane shape that fits its reserved
    size, inside its memory space (the function's DDR / SRAM peak; an ``io``
    buffer is its own allocation, at offset 0). Each peak is where its space's
    last buffer ends (the arena the simulator allocates is no larger than the
    program uses). ``place``: ``("buffer", id)``."""
    arena = {"ddr": fn.ddr_peak_bytes, "sram": fn.sram_peak_bytes}
    if not all(is_int(v, (0, I64[1])) for v in arena.values()):
        fail(("function",), f"peak sizes {arena} are not all in 0..2**63-1")
    for key, buf in fn.buffers.items():
        place = ("buffer", key)
        if key != buf.id or not is_int(buf.id, (0, MAX_ID)):
            fail(place, f"buffer id {buf.id} (key {key}) is not a u32 equal to its key")
        if buf.space not in SPACES:
            fail(place, f"unknown space '{buf.space}': expected one of {SPACES}")
        if buf.dtype not in DTYPES:
            fail(place, f"unknown dtype '{buf.dtype}': expected one of {DTYPES}")
        problem = shape_problem(buf.shape)
        if problem:
            fail(place, problem)
        if not is_int(buf.offset, U64) or not is_int(buf.size, U64):
            fail(place, f"offset {buf.offset} or size {buf.size} is not a u64")
        need = nbytes(buf.shape, buf.dtype)
        if need > buf.size:
            fail(
                place,
                f"shape {list(buf.shape)} x {buf.dtype} needs {need} bytes, "
                f"{buf.size} reserved",
            )
        if buf.space == "io" and buf.offset != 0:
            fail(place, f"an io buffer is its own allocation: offset {buf.offset} != 0")
        if buf.space in arena and buf.offset + buf.size > arena[buf.space]:
            fail(
                place,
                f"bytes {buf.offset}..{buf.offset + buf.size} are outside the "
                f"{buf.space} arena of {arena[buf.space]} bytes",
            )
    # the constants section spans up to the end of its last buffer
    const_extent = max(
        (b.offset + b.size for b in fn.buffers.values() if b.space == "const"),
        default=0,
    )
    total = (
        arena["ddr"]
        + arena["sram"]
        + sum(b.size for b in fn.buffers.values() if b.space == "io")
        + const_extent
    )
    if total > MEMORY_BUDGET:
        # what a buffer adds: its size; a constant, up to its end in the section
        def weight(b):
            return b.offset + b.size if b.space == "const" else b.size

        big = max(fn.buffers.values(), key=weight, default=None)
        fail(
            ("function",) if big is None else ("buffer", big.id),
            f"the function's buffers take {total} bytes (the largest: %"
            f"{getattr(big, 'id', '?')}, {weight(big) if big else 0} bytes in "
            f"{getattr(big, 'space', '?')}), above the {MEMORY_BUDGET}-byte budget",
        )
    for space, peak in arena.items():
        end = max(
            (b.offset + b.size for b in fn.buffers.values() if b.space == space),
            default=0,
        )
        if end != peak:
            fail(("function",), f"{space} peak {peak}, but its buffers end at {end}")


def verify_function(fn: FunctionCode, fail: Fail, islands: bool = True) -> None:
    """The rules after :func:`verify_buffers` (which must have passed)."""
    verify_constants(fn, fail)
    verify_io(fn, fail)
    for i, instruction in enumerate(fn.instructions):
        verify_instruction(fn, instruction, lambda what, i=i: fail(_at(i), what))
    verify_def_before_use(fn, fail)
    verify_debug(fn, fail)
    if islands:
        verify_islands(fn, fail)


def _at(i: int) -> Place:
    return ("instruction", i)


def verify_constants(fn: FunctionCode, fail: Fail) -> None:
    """Every ``const`` buffer has its constant, of its shape and dtype."""
    for key, buf in fn.buffers.items():
        if buf.space != "const":
            continue
        value = fn.constants.get(key)
        if value is None:
            fail(("buffer", key), f"const buffer %{key} has no constant")
        if value.shape != buf.shape or value.dtype.name != buf.dtype:
            fail(
                ("buffer", key),
                f"constant is {value.dtype.name}{list(value.shape)}, the buffer "
                f"{buf.dtype}{list(buf.shape)}",
            )
    for key in fn.constants:
        if key not in fn.buffers or fn.buffers[key].space != "const":
            fail(("function",), f"constant %{key} has no const buffer")
    _verify_constant_overlaps(fn, fail)


def _verify_constant_overlaps(fn: FunctionCode, fail: Fail) -> None:
    """Constants share bytes of the constants section only where they agree (the
    file holds each byte once: different bytes would not read back)."""
    placed = sorted(
        (b.offset, b.offset + fn.constants[b.id].nbytes, b.id)
        for b in fn.buffers.values()
        if b.space == "const"
    )
    active: list[tuple[int, int, int]] = []  # placed earlier, not ended yet
    for start, end, key in placed:
        active = [a for a in active if a[1] > start]
        for a_start, a_end, other in active:
            lo, hi = start, min(end, a_end)
            mine = _raw(fn.constants[key])[: hi - lo]
            theirs = _raw(fn.constants[other])[lo - a_start : hi - a_start]
            if not np.array_equal(mine, theirs):
                fail(
                    ("buffer", key),
                    f"const buffer %{key} overlaps const buffer %{other} (bytes "
                    f"{lo}..{hi}) with different bytes",
                )
        active.append((start, end, key))


def _raw(value: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(value).view(np.uint8).reshape(-1)


def _verify_desc(desc: TensorDesc, buffer: Buffer | None, fail: Callable) -> None:
    if buffer is None:
        fail("is bound to no buffer")
    if desc.dtype not in DTYPES:
        fail(f"unknown dtype '{desc.dtype}'")
    problem = shape_problem(desc.shape)
    if problem:
        fail(problem)
    if desc.shape != buffer.shape or desc.dtype != buffer.dtype:
        fail(
            f"is {desc.dtype}{list(desc.shape)} but its buffer %{buffer.id} is "
            f"{buffer.dtype}{list(buffer.shape)}"
        )
    if not is_text(desc.layout):
        fail(f"layout {desc.layout!r} is not text")
    if not all(type(s) is float and math.isfinite(s) and s > 0 for s in desc.scales):
        fail(f"scales {list(desc.scales)} are not all finite and positive")
    if not all(is_int(z, I64) for z in desc.zeros):
        fail(f"zero points {list(desc.zeros)} are not all i64")
    if desc.zeros and len(desc.zeros) != len(desc.scales):
        fail(f"{len(desc.zeros)} zero points for {len(desc.scales)} scales")


def verify_io(fn: FunctionCode, fail: Fail) -> None:
    """Inputs and outputs: unique names, bound to buffers of their shape and dtype."""
    for kind, descs, ids in (
        ("input", fn.inputs, fn.input_buffers),
        ("output", fn.outputs, fn.output_buffers),
    ):
        if len(descs) != len(ids):
            fail(("function",), f"{len(descs)} {kind}s but {len(ids)} {kind} buffers")
        names = [d.name for d in descs]
        for i, (desc, key) in enumerate(zip(descs, ids, strict=True)):
            place = (kind, i)
            if not is_text(desc.name) or not desc.name or names.index(desc.name) != i:
                fail(place, f"{kind} name {desc.name!r} is empty or repeated")
            _verify_desc(
                desc,
                fn.buffers.get(key) if type(key) is int else None,
                lambda what, place=place, kind=kind, desc=desc: fail(
                    place, f"{kind} '{desc.name}' {what}"
                ),
            )


def _field_problem(kind: str, value, fn: FunctionCode) -> str | None:
    """Why ``value`` is not a value of field kind ``kind`` (None: it is)."""
    if kind == "i64":
        ok = is_int(value, I64)
    elif kind == "i64[]":
        ok = type(value) is tuple and all(is_int(v, I64) for v in value)
    elif kind == "f64":
        ok = type(value) is float
    elif kind == "f64[]":
        ok = type(value) is tuple and all(type(v) is float for v in value)
    elif kind == "str":
        ok = is_text(value)
    elif kind == "bool":
        ok = type(value) is bool
    elif kind == "buffer":
        if value == NONE and type(value) is int:
            return None
        if type(value) is not int or value not in fn.buffers:
            return f"{value!r} is neither a buffer id of the function nor {NONE}"
        if fn.buffers[value].space != "const":
            return f"buffer %{value} is in {fn.buffers[value].space}, not const"
        return None
    else:
        return f"unknown field kind '{kind}'"
    return None if ok else f"{value!r} is not of kind {kind}"


def verify_instruction(fn: FunctionCode, ins: Instruction, fail: Callable) -> None:
    """Opcode known; operand and result counts, buffer ids, fields and unit as
    the opcode table says; then the opcode's own shape rule, if it has one."""
    op = BY_NUMBER.get(ins.opcode)
    if op is None:
        fail(f"opcode {ins.opcode} is not in the opcode table")
    for what, ids, want in (
        ("operands", ins.operands, op.operands),
        ("results", ins.results, op.results),
    ):
        if want is not None and len(ids) != want:
            fail(f"'{op.name}' takes {want} {what}, got {len(ids)}")
        for key in ids:
            if type(key) is not int or key not in fn.buffers:
                fail(f"'{op.name}' {what[:-1]} %{key} is not a buffer of the function")
    names = [name for name, _ in op.fields]
    if list(ins.fields) != names:
        fail(f"'{op.name}' has fields {names}, got {list(ins.fields)}")
    for name, kind in op.fields:
        problem = _field_problem(kind, ins.fields[name], fn)
        if problem:
            fail(f"'{op.name}' field '{name}': {problem}")
    if ins.unit not in UNITS:
        fail(f"unknown unit {ins.unit!r}: expected one of {sorted(UNITS)}")
    if not (
        is_int(ins.start, I64) and is_int(ins.end, I64) and 0 <= ins.start <= ins.end
    ):
        fail(f"cycles {ins.start}..{ins.end} are not 0 <= start <= end < 2**63")
    problem = hbm_opcodes.check(ins, fn)
    if problem:
        fail(problem)


class _Written:
    """The byte ranges of one memory written so far: sorted, disjoint, merged."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def covers(self, lo: int, hi: int) -> bool:
        i = bisect.bisect_right(self.starts, lo) - 1
        return lo >= hi or (i >= 0 and self.ends[i] >= hi)

    def add(self, lo: int, hi: int) -> None:
        if lo >= hi:
            return
        i = bisect.bisect_left(self.ends, lo)  # the first range that may touch
        j = bisect.bisect_right(self.starts, hi)  # past the last one that does
        if i < j:
            lo, hi = min(lo, self.starts[i]), max(hi, self.ends[j - 1])
        self.starts[i:j], self.ends[i:j] = [lo], [hi]


def _memory(buf: Buffer) -> tuple[tuple, int, int]:
    """(the memory, first byte, end) of a buffer's value: an ``io`` buffer is an
    allocation of its own; the others share their space's arena."""
    where = ("io", buf.id) if buf.space == "io" else (buf.space,)
    return where, buf.offset, buf.offset + nbytes(buf.shape, buf.dtype)


def verify_def_before_use(fn: FunctionCode, fail: Fail) -> None:
    """Every byte an instruction reads (and every output) was written before:
    by the inputs, the constants or an earlier instruction. So a verified
    program is a pure function of its inputs: what an earlier run left in the
    arenas can never reach a result."""
    written: dict[tuple, _Written] = {}

    def write(key: int) -> None:
        where, lo, hi = _memory(fn.buffers[key])
        written.setdefault(where, _Written()).add(lo, hi)

    def unwritten(key: int) -> bool:
        where, lo, hi = _memory(fn.buffers[key])
        return not written.get(where, _Written()).covers(lo, hi)

    for key in fn.input_buffers:
        write(key)
    for key, buf in fn.buffers.items():
        if buf.space == "const":
            write(key)
    for i, ins in enumerate(fn.instructions):
        for key in ins.operands:
            if unwritten(key):
                name = BY_NUMBER[ins.opcode].name
                fail(_at(i), f"'{name}' reads %{key} before anything wrote it")
        for key in ins.results:
            write(key)
    for i, key in enumerate(fn.output_buffers):
        if unwritten(key):
            fail(("output", i), f"output %{key} is never written")


def verify_debug(fn: FunctionCode, fail: Fail) -> None:
    """One debug entry per instruction; op ids are ``%N`` numbers (>= 0); a
    permutation permutes ``0..n-1``."""
    if len(fn.debug) != len(fn.instructions):
        fail(
            ("function",),
            f"{len(fn.debug)} debug entries for {len(fn.instructions)} instructions",
        )
    for i, entry in enumerate(fn.debug):
        ids = (*entry.op_ids, *(() if entry.value_of is None else (entry.value_of,)))
        if not all(is_int(v, (0, I64[1])) for v in ids):
            fail(("debug", i), f"op ids {list(ids)} are not all in 0..2**63-1")
        perm = entry.perm
        if perm is not None and (
            not all(is_int(v, I64) for v in perm)
            or sorted(perm) != list(range(len(perm)))
        ):
            fail(("debug", i), f"perm {list(entry.perm)} is not a permutation")
        if not (is_text(entry.op) and is_text(entry.loc)):
            fail(("debug", i), f"op {entry.op!r} or loc {entry.loc!r} is not text")


def verify_islands(fn: FunctionCode, fail: Fail) -> None:
    """Each CPU island parses and verifies as HBIR and holds one function, whose
    arguments and results have the shapes and dtypes of the buffers of every
    ``cpu_call`` that runs it."""
    from hbir.module import Module

    signatures = []
    for i, text in enumerate(fn.islands):
        try:
            module = Module.parse(text, f"island {i}")
        except HbirError as e:
            fail(("island", i), f"island {i} is not valid HBIR: {e}")
        if len(module.functions) != 1:
            fail(("island", i), f"island {i} holds {len(module.functions)} functions")
        signatures.append(_signature(module.functions[0].op.function_type))
    cpu_call = hbm_opcodes.BY_NAME["cpu_call"].number
    for at, ins in enumerate(fn.instructions):
        if ins.opcode != cpu_call:
            continue
        island = ins.fields["island"]
        for what, ids, types in zip(
            ("argument", "result"),
            (ins.operands, ins.results),
            signatures[island],
            strict=True,
        ):
            buffers = [(fn.buffers[k].dtype, fn.buffers[k].shape) for k in ids]
            if buffers != types:
                fail(
                    _at(at),
                    f"island {island} takes {what}s {_types(types)}, this "
                    f"cpu_call's buffers are {_types(buffers)}",
                )


def _signature(function_type) -> tuple[list, list]:
    """(argument types, result types) of a function as (dtype, shape) pairs; a
    type that is no tensor is ``(name, None)``, equal to no buffer."""
    from xdsl.dialects.builtin import TensorType

    from hbir.dialects.hbir import numpy_dtype

    def pair(t):
        if not isinstance(t, TensorType):
            return (str(t), None)
        return (np.dtype(numpy_dtype(t.element_type)).name, tuple(t.get_shape()))

    types = function_type
    return [pair(t) for t in types.inputs.data], [pair(t) for t in types.outputs.data]


def _types(pairs) -> str:
    return "(" + ", ".join(f"{d}{list(s or ())}" for d, s in pairs) + ")"
