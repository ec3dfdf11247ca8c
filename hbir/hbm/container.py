"""The ``.hbm`` container: a compiled ``Program`` (``runtime/hbm_program.py``) as bytes.

Little endian throughout, no pickle; ``docs/hbm-format.md`` describes every
byte. A file is a 64-byte header, a section table, then the sections, back to
back in table order::

    header   magic b"HBIRHBM\\x00", version u32, CRC-32 u32 (of the header and
             the section table, this field as 0), file size u64, section count
             u32, function count u32, march (32 bytes UTF-8, NUL-padded)
    table    one 40-byte entry a section: kind u32, function u32, offset u64,
             stored size u64, size u64 (after decompression), flags u32 (bit 0:
             zstd), CRC-32 u32 (of the stored bytes)
    sections for each function, in this order: io, buffers, code, constants,
             islands, debug

Values inside a section: ``u32`` counts and ids, ``i64`` / ``f64`` numbers, a
string is a u32 byte length and UTF-8 bytes, an array a u32 count and its items.
An instruction's fields follow its opcode's table entry (``runtime/hbm_opcodes``)
in order, each encoded by its kind.

:func:`from_bytes` checks the framing (every offset, length, count and checksum,
before anything is allocated from it), decodes, then runs every rule of
``hbir/hbm/verify.py``; any failure is an :class:`HbmFormatError` naming the
file, the section and the byte offset. :func:`to_bytes` writes only programs
that pass the same rules, so a written file always loads, and loading then
writing gives the same bytes.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import NoReturn

import numpy as np

from hbir.errors import HbirOutputError
from hbir.hbm import verify
from hbir.hbm.errors import HbmFormatError, HbmWriteError
from hbir.runtime.hbm_opcodes import BY_NUMBER
from hbir.runtime.hbm_program import (
    Buffer,
    DebugEntry,
    FunctionCode,
    Instruction,
    Program,
    TensorDesc,
)

MAGIC = b"HBIRHBM\x00"
VERSION = 1
HEADER = struct.Struct("<8sIIQII32s")
ENTRY = struct.Struct("<IIQQQII")
SECTIONS = ("io", "buffers", "code", "constants", "islands", "debug")
ZSTD = 1  # flag bit: the section is zstandard-compressed
# A compressed section inflates at most this much (zstd reaches ~30,000x on
# zeros: a tiny hostile file must not claim gigabytes); the writer stores a
# section that would compress more than this uncompressed.
MAX_RATIO = 1024
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_I64, _F64 = struct.Struct("<q"), struct.Struct("<d")


# ------------------------------------------------------------------ writing


class _Writer:
    """Section bytes, value by value, in the container's encodings."""

    def __init__(self):
        self.out = bytearray()

    def u32(self, v: int) -> None:
        self.out += _U32.pack(v)

    def u64(self, v: int) -> None:
        self.out += _U64.pack(v)

    def i64(self, v: int) -> None:
        self.out += _I64.pack(v)

    def f64(self, v: float) -> None:
        self.out += _F64.pack(v)

    def string(self, s: str) -> None:
        raw = s.encode("utf-8")
        self.u32(len(raw))
        self.out += raw

    def ids(self, values) -> None:
        self.u32(len(values))
        self.out += struct.pack(f"<{len(values)}I", *values)

    def i64s(self, values) -> None:
        self.u32(len(values))
        self.out += struct.pack(f"<{len(values)}q", *values)

    def f64s(self, values) -> None:
        self.u32(len(values))
        self.out += struct.pack(f"<{len(values)}d", *values)

    def field(self, kind: str, value) -> None:
        if kind in ("i64", "buffer"):
            self.i64(value)
        elif kind == "i64[]":
            self.i64s(value)
        elif kind == "f64":
            self.f64(value)
        elif kind == "f64[]":
            self.f64s(value)
        elif kind == "str":
            self.string(value)
        else:  # bool
            self.out.append(int(value))


def _desc(w: _Writer, desc: TensorDesc, buffer_id: int) -> None:
    w.string(desc.name)
    w.string(desc.dtype)
    w.string(desc.layout)
    w.i64s(desc.shape)
    w.f64s(desc.scales)
    w.i64s(desc.zeros)
    w.u32(buffer_id)


def _io(fn: FunctionCode) -> bytes:
    w = _Writer()
    w.string(fn.name)
    w.i64(fn.ddr_peak_bytes)
    w.i64(fn.sram_peak_bytes)
    for descs, ids in ((fn.inputs, fn.input_buffers), (fn.outputs, fn.output_buffers)):
        w.u32(len(descs))
        for desc, key in zip(descs, ids, strict=True):
            _desc(w, desc, key)
    return bytes(w.out)


def _buffers(fn: FunctionCode) -> bytes:
    w = _Writer()
    w.u32(len(fn.buffers))
    for b in fn.buffers.values():
        w.u32(b.id)
        w.string(b.space)
        w.string(b.dtype)
        w.u64(b.offset)
        w.u64(b.size)
        w.i64s(b.shape)
    return bytes(w.out)


def _code(fn: FunctionCode) -> bytes:
    w = _Writer()
    w.u32(len(fn.instructions))
    for ins in fn.instructions:
        w.u32(ins.opcode)
        w.string(ins.unit)
        w.i64(ins.start)
        w.i64(ins.end)
        w.ids(ins.operands)
        w.ids(ins.results)
        for name, kind in BY_NUMBER[ins.opcode].fields:
            w.field(kind, ins.fields[name])
    return bytes(w.out)


def constant_bytes(fn: FunctionCode) -> bytes:
    """The constants section (uncompressed): each constant at its buffer's
    offset, zeros elsewhere, up to the end of the last const buffer."""
    const = [b for b in fn.buffers.values() if b.space == "const"]
    blob = np.zeros(max((b.offset + b.size for b in const), default=0), np.uint8)
    raws = {
        b.id: np.ascontiguousarray(fn.constants[b.id]).view(np.uint8).reshape(-1)
        for b in const
    }
    for b in const:  # (overlaps agree: verify.verify_constants)
        blob[b.offset : b.offset + raws[b.id].size] = raws[b.id]
    return blob.tobytes()


def _islands(fn: FunctionCode) -> bytes:
    w = _Writer()
    w.u32(len(fn.islands))
    for text in fn.islands:
        w.string(text)
    return bytes(w.out)


def _debug(fn: FunctionCode) -> bytes:
    w = _Writer()
    w.u32(len(fn.debug))
    for d in fn.debug:
        w.i64s(d.op_ids)
        w.string(d.op)
        w.string(d.loc)
        w.out.append(d.value_of is not None)
        if d.value_of is not None:
            w.i64(d.value_of)
        w.out.append(d.perm is not None)
        if d.perm is not None:
            w.i64s(d.perm)
    return bytes(w.out)


_ENCODERS = {
    "io": _io,
    "buffers": _buffers,
    "code": _code,
    "constants": constant_bytes,
    "islands": _islands,
    "debug": _debug,
}


def _compress(raw: bytes) -> tuple[bytes, int]:
    """(stored bytes, flags): zstd when it saves space within ``MAX_RATIO``."""
    import zstandard

    if not raw:
        return raw, 0
    packed = zstandard.ZstdCompressor(level=3).compress(raw)
    if len(packed) < len(raw) and len(raw) <= MAX_RATIO * len(packed):
        return packed, ZSTD
    return raw, 0


def _refuse(place: verify.Place, what: str) -> NoReturn:
    kind, *where = place  # ("instruction", function, index), ("function", f), ...
    if len(where) == 2:
        kind = f"{kind} {where[1]} of function {where[0]}"
    elif where:
        kind = f"function {where[0]}"
    raise HbmWriteError(f"cannot write this program: {kind}: {what}")


def to_bytes(program: Program) -> bytes:
    """The ``.hbm`` bytes of ``program`` (an ``HbmWriteError`` if it breaks a rule
    of ``verify.py``: CPU islands are not re-parsed here, the loader parses them)."""
    if program.version != VERSION:
        _refuse(("program",), f"version {program.version}: this hbir writes {VERSION}")
    march = program.march.encode("utf-8")
    if len(march) > 32:
        _refuse(("program",), f"march '{program.march}' is longer than 32 bytes")
    verify.verify_program(program, _refuse, islands=False)
    sections = []  # (kind, function, stored, size, flags)
    for f, fn in enumerate(program.functions):
        for k, kind in enumerate(SECTIONS):
            raw = _ENCODERS[kind](fn)
            stored, flags = _compress(raw) if kind == "constants" else (raw, 0)
            sections.append((k, f, stored, len(raw), flags))
    offset = HEADER.size + ENTRY.size * len(sections)
    table = bytearray()
    for k, f, stored, size, flags in sections:
        crc = zlib.crc32(stored)
        table += ENTRY.pack(k, f, offset, len(stored), size, flags, crc)
        offset += len(stored)
    fields = (len(sections), len(program.functions), march)
    unsealed = HEADER.pack(MAGIC, VERSION, 0, offset, *fields) + table
    header = HEADER.pack(MAGIC, VERSION, zlib.crc32(unsealed), offset, *fields)
    return b"".join([header, table, *(s[2] for s in sections)])


def write(program: Program, path: str | os.PathLike) -> None:
    """Write ``program`` as a ``.hbm`` file."""
    data = to_bytes(program)
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as e:
        raise HbirOutputError(path, "the model.hbm file", e) from None


# ------------------------------------------------------------------ reading


class _Reader:
    """One section's bytes, every read bounds-checked. ``base`` is the section's
    offset in the file, so errors name absolute byte offsets."""

    def __init__(self, data: bytes, file: str, section: str, base: int):
        self.data, self.file, self.section, self.base = data, file, section, base
        self.pos = 0

    def fail(self, what: str, at: int | None = None) -> NoReturn:
        where = self.base + (self.pos if at is None else at)
        raise HbmFormatError(self.file, self.section, where, what)

    def left(self) -> int:
        return len(self.data) - self.pos

    def _unpack(self, st: struct.Struct) -> tuple:
        if st.size > self.left():
            self.fail(f"truncated: {st.size} bytes needed, {self.left()} left")
        values = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return values

    def u8(self) -> int:
        if self.left() < 1:
            self.fail("truncated: 1 byte needed, 0 left")
        self.pos += 1
        return self.data[self.pos - 1]

    def flag(self, what: str) -> bool:
        value = self.u8()
        if value > 1:
            self.fail(f"{what} is {value}, expected 0 or 1", self.pos - 1)
        return bool(value)

    def u32(self) -> int:
        return self._unpack(_U32)[0]

    def u64(self) -> int:
        return self._unpack(_U64)[0]

    def i64(self) -> int:
        return self._unpack(_I64)[0]

    def f64(self) -> float:
        return self._unpack(_F64)[0]

    def count(self, item_bytes: int, what: str) -> int:
        """A u32 count, refused unless ``count * item_bytes`` bytes are left
        (nothing is ever allocated from an unchecked length)."""
        n = self.u32()
        if n * item_bytes > self.left():
            self.fail(
                f"{what}: count {n} needs at least {n * item_bytes} bytes, "
                f"{self.left()} left",
                self.pos - 4,
            )
        return n

    def string(self, what: str) -> str:
        n = self.count(1, what)
        raw = self.data[self.pos : self.pos + n]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"{what} is not UTF-8", self.pos + e.start)
        self.pos += n
        return text

    def _array(self, code: str, size: int, what: str) -> tuple:
        n = self.count(size, what)
        values = struct.unpack_from(f"<{n}{code}", self.data, self.pos)
        self.pos += n * size
        return values

    def ids(self, what: str) -> tuple[int, ...]:
        return self._array("I", 4, what)

    def i64s(self, what: str) -> tuple[int, ...]:
        return self._array("q", 8, what)

    def f64s(self, what: str) -> tuple[float, ...]:
        return self._array("d", 8, what)

    def field(self, kind: str, what: str):
        if kind in ("i64", "buffer"):
            return self.i64()
        if kind == "i64[]":
            return self.i64s(what)
        if kind == "f64":
            return self.f64()
        if kind == "f64[]":
            return self.f64s(what)
        if kind == "str":
            return self.string(what)
        return self.flag(what)  # bool

    def end(self) -> None:
        if self.left():
            self.fail(f"{self.left()} bytes after the section's last entry")


def _read_header(data: bytes, file: str) -> tuple[int, int, str]:
    """(section count, function count, march), the header and table checked."""

    def fail(offset: int, what: str) -> NoReturn:
        raise HbmFormatError(file, "header", offset, what)

    if len(data) < HEADER.size:
        fail(len(data), f"truncated: {len(data)} bytes, the header has {HEADER.size}")
    magic, version, crc, size, n_sections, n_functions, march = HEADER.unpack_from(data)
    if magic != MAGIC:
        fail(0, f"not an .hbm file (magic {magic!r}, expected {MAGIC!r})")
    if version != VERSION:
        newer = "newer than" if version > VERSION else "not"
        fail(8, f"format version {version} is {newer} the version {VERSION} read here")
    if size != len(data):
        fail(16, f"the header says the file has {size} bytes, it has {len(data)}")
    if n_sections != len(SECTIONS) * n_functions:
        fail(
            24,
            f"{n_sections} sections for {n_functions} functions: expected "
            f"{len(SECTIONS)} a function",
        )
    if HEADER.size + ENTRY.size * n_sections > len(data):
        fail(24, f"a table of {n_sections} sections does not fit the file")
    table_end = HEADER.size + ENTRY.size * n_sections
    unsealed = data[:12] + b"\0\0\0\0" + data[16:table_end]
    if zlib.crc32(unsealed) != crc:
        fail(12, "header checksum mismatch: the header or section table is corrupt")
    name = march.rstrip(b"\0")
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError as e:
        fail(32 + e.start, "march is not UTF-8")
    if b"\0" in name:
        fail(32 + name.index(b"\0"), "march holds a NUL byte before its padding")
    return n_sections, n_functions, text


def _inflate(stored: bytes, size: int, fail) -> bytes:
    """Decompress a zstd section of announced ``size``, never past it."""
    import zstandard

    if size > MAX_RATIO * len(stored):
        fail(f"{size} bytes announced from {len(stored)}: above {MAX_RATIO}x")
    try:
        with zstandard.ZstdDecompressor().stream_reader(
            stored, read_across_frames=True
        ) as reader:
            raw = reader.read(size + 1)
    except zstandard.ZstdError as e:
        fail(f"corrupt zstd data: {e}")
    if len(raw) != size:
        more = "more than " if len(raw) > size else ""
        fail(f"inflates to {more}{min(len(raw), size)} bytes, the table says {size}")
    return raw


def _sections(data: bytes, file: str, n_sections: int) -> list[tuple[int, bytes]]:
    """(file offset, bytes after decompression) of each section, in table order."""
    found = []
    expected = HEADER.size + ENTRY.size * n_sections
    for i in range(n_sections):
        at = HEADER.size + ENTRY.size * i

        def fail(what: str, at=at, i=i) -> NoReturn:
            raise HbmFormatError(file, f"section table entry {i}", at, what)

        kind, function, offset, stored, size, flags, crc = ENTRY.unpack_from(data, at)
        if (kind, function) != (i % len(SECTIONS), i // len(SECTIONS)):
            fail(
                f"holds section kind {kind} of function {function}: expected "
                f"'{SECTIONS[i % len(SECTIONS)]}' of function {i // len(SECTIONS)}"
            )
        if offset != expected:
            fail(f"section starts at byte {offset}, expected {expected}")
        if stored > len(data) - offset:
            fail(f"section of {stored} bytes runs past the end of the file")
        expected = offset + stored
        body = data[offset:expected]
        if zlib.crc32(body) != crc:
            fail(f"checksum mismatch: section '{SECTIONS[kind]}' is corrupt")
        if flags & ~ZSTD or (flags and SECTIONS[kind] != "constants"):
            fail(f"flags {flags:#x}: only the constants may be compressed (bit 0)")
        if flags & ZSTD:
            body = _inflate(body, size, fail)
        elif size != stored:
            fail(f"uncompressed section of {stored} bytes announces {size}")
        found.append((offset, body))
    if expected != len(data):
        raise HbmFormatError(
            file,
            "section table",
            expected,
            f"{len(data) - expected} bytes after the last section",
        )
    return found


class _Decoder:
    """Decodes one function's sections, remembering where each entry starts so
    that the rules of ``verify.py`` can be reported at a byte offset."""

    def __init__(self, file: str, index: int, sections: list[tuple[int, bytes]]):
        self.file, self.index = file, index
        self.sections = dict(zip(SECTIONS, sections, strict=True))
        self.places: dict[tuple, tuple[str, int]] = {}
        self.name = f"function {index}"

    def reader(self, kind: str) -> _Reader:
        offset, body = self.sections[kind]
        return _Reader(body, self.file, f"section '{kind}' of {self.name}", offset)

    def mark(self, place: tuple, r: _Reader) -> None:
        self.places[(place[0], self.index, *place[1:])] = (r.section, r.base + r.pos)

    def _desc(self, r: _Reader, kind: str, i: int) -> tuple[TensorDesc, int]:
        self.mark((kind, i), r)
        name = r.string(f"{kind} name")
        dtype, layout = r.string("dtype"), r.string("layout")
        shape = r.i64s("shape")
        scales, zeros = r.f64s("scales"), r.i64s("zeros")
        desc = TensorDesc(name, shape, dtype, layout, scales, zeros)
        return desc, r.u32()

    def io(self) -> dict:
        r = self.reader("io")
        name = r.string("function name")
        self.name = f"@{name}"
        r.section = f"section 'io' of {self.name}"
        self.places[("function", self.index)] = (r.section, r.base)
        ddr, sram = r.i64(), r.i64()
        found = {"name": name, "ddr_peak_bytes": ddr, "sram_peak_bytes": sram}
        for kind in ("input", "output"):
            n = r.count(28, f"{kind} count")
            pairs = [self._desc(r, kind, i) for i in range(n)]
            found[f"{kind}s"] = tuple(d for d, _ in pairs)
            found[f"{kind}_buffers"] = tuple(b for _, b in pairs)
        r.end()
        return found

    def buffers(self) -> dict[int, Buffer]:
        r = self.reader("buffers")
        found = {}
        for _ in range(r.count(32, "buffer count")):
            at = r.pos
            key = r.u32()
            space, dtype = r.string("space"), r.string("dtype")
            offset, size = r.u64(), r.u64()
            shape = r.i64s("shape")
            if key in found:
                r.fail(f"buffer id {key} is given twice", at)
            self.places[("buffer", self.index, key)] = (r.section, r.base + at)
            found[key] = Buffer(key, space, offset, size, shape, dtype)
        r.end()
        return found

    def code(self) -> list[Instruction]:
        r = self.reader("code")
        found = []
        for i in range(r.count(32, "instruction count")):
            self.mark(("instruction", i), r)
            number = r.u32()
            op = BY_NUMBER.get(number)
            if op is None:
                r.fail(f"opcode {number} is not in the opcode table", r.pos - 4)
            unit = r.string("unit")
            start, end = r.i64(), r.i64()
            operands, results = r.ids("operands"), r.ids("results")
            fields = {name: r.field(kind, name) for name, kind in op.fields}
            ins = Instruction(number, operands, results, fields, unit, start, end)
            found.append(ins)
        r.end()
        return found

    def islands(self) -> list[str]:
        r = self.reader("islands")
        found = []
        for i in range(r.count(4, "island count")):
            self.mark(("island", i), r)
            found.append(r.string(f"island {i}"))
        r.end()
        return found

    def debug(self) -> list[DebugEntry]:
        r = self.reader("debug")
        found = []
        for i in range(r.count(14, "debug entry count")):
            self.mark(("debug", i), r)
            op_ids = r.i64s("op ids")
            op, loc = r.string("op"), r.string("loc")
            value_of = r.i64() if r.flag("value_of flag") else None
            perm = r.i64s("perm") if r.flag("perm flag") else None
            found.append(DebugEntry(op_ids, op, loc, value_of, perm))
        r.end()
        return found

    def constants(self, fn: FunctionCode) -> None:
        """Set ``fn.constants``: each const buffer's array, a view of one
        writable copy of the section (``fn``'s buffers are verified: every slice
        is in bounds). The section holds nothing else: it must be exactly what
        the writer makes of these constants (zeros between them)."""
        offset, body = self.sections["constants"]
        const = [b for b in fn.buffers.values() if b.space == "const"]
        extent = max((b.offset + b.size for b in const), default=0)
        r = self.reader("constants")
        if len(body) != extent:
            r.fail(f"{len(body)} bytes, but the const buffers end at byte {extent}")
        blob = np.frombuffer(bytearray(body), np.uint8)
        fn.constants = {
            b.id: blob[b.offset : b.offset + verify.nbytes(b.shape, b.dtype)]
            .view(b.dtype)
            .reshape(b.shape)
            for b in const
        }
        written = np.frombuffer(constant_bytes(fn), np.uint8)
        differs = np.flatnonzero(written != blob)
        if differs.size:
            r.fail(f"byte {differs[0]} lies outside every constant and is not zero")

    def fail(self, place: tuple, what: str) -> NoReturn:
        """Raise ``what`` at the byte where ``place`` (a place of ``verify.py``
        in this function) starts."""
        key = (place[0], self.index, *place[1:])
        section, offset = self.places.get(key) or self.places[("function", self.index)]
        raise HbmFormatError(self.file, section, offset, what)


def from_bytes(data: bytes, name: str = "<bytes>") -> Program:
    """Decode and verify a ``.hbm`` file's bytes (``name`` names it in errors)."""
    data = bytes(data)
    n_sections, n_functions, march = _read_header(data, name)
    sections = _sections(data, name, n_sections)
    decoders = [
        _Decoder(name, f, sections[f * len(SECTIONS) : (f + 1) * len(SECTIONS)])
        for f in range(n_functions)
    ]
    functions = []
    for d in decoders:
        io = d.io()
        fn = FunctionCode(
            buffers=d.buffers(),
            instructions=d.code(),
            debug=d.debug(),
            islands=d.islands(),
            **io,
        )
        verify.verify_buffers(fn, d.fail)
        d.constants(fn)
        functions.append(fn)
    program = Program(march, functions, VERSION)
    places = {k: v for d in decoders for k, v in d.places.items()}

    def fail(place: tuple, what: str) -> NoReturn:
        if place == ("program",):  # the march
            raise HbmFormatError(name, "header", 32, what)
        section, offset = places.get(place) or places[("function", place[1])]
        raise HbmFormatError(name, section, offset, what)

    verify.verify_program(program, fail)
    return program


def read(path: str | os.PathLike) -> Program:
    """Load and verify a ``.hbm`` file."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise HbmFormatError(path, "file", 0, f"cannot read: {e.strerror}") from None
    return from_bytes(data, path)
