"""The .hbm container: exact round trips, and a located error for every rule."""

import dataclasses
import re
import struct

import compile_models
import numpy as np
import pytest

from hbir import HbirError
from hbir.hbm import container
from hbir.hbm.errors import HbmFormatError
from hbir.runtime.hbm_opcodes import BY_NAME
from hbir.runtime.hbm_program import Buffer, DebugEntry, TensorDesc


def assert_same(a, b):
    """Two programs hold the same values (constants compared as arrays)."""
    assert (a.march, a.version, len(a.functions)) == (
        b.march,
        b.version,
        len(b.functions),
    )
    for fa, fb in zip(a.functions, b.functions, strict=True):
        for field in dataclasses.fields(fa):
            if field.name != "constants":
                assert getattr(fa, field.name) == getattr(fb, field.name), field.name
        assert fa.constants.keys() == fb.constants.keys()
        for key, value in fa.constants.items():
            assert value.dtype == fb.constants[key].dtype
            assert np.array_equal(value, fb.constants[key])


def load_error(data: bytes) -> HbmFormatError:
    with pytest.raises(HbmFormatError) as info:
        container.from_bytes(data, "model.hbm")
    return info.value


def section_start(data: bytes, function: int, kind: str) -> int:
    entry = 64 + 40 * (6 * function + container.SECTIONS.index(kind))
    return struct.unpack_from("<Q", data, entry + 8)[0]


# ------------------------------------------------------------------ round trips


def test_round_trip_keeps_every_value_and_every_byte(program):
    data = container.to_bytes(program)
    loaded = container.from_bytes(data)
    assert_same(loaded, program)
    assert container.to_bytes(loaded) == data


@pytest.mark.parametrize("name", compile_models.NAMES)
def test_compiled_models_round_trip_exactly(compiled_program, name):
    program = compiled_program(name)
    data = container.to_bytes(program)
    loaded = container.from_bytes(data, f"{name}.hbm")
    assert_same(loaded, program)
    assert container.to_bytes(loaded) == data


def test_write_and_read_a_file(program, tmp_path):
    path = tmp_path / "model.hbm"
    container.write(program, path)
    assert path.read_bytes()[:8] == b"HBIRHBM\0"
    assert_same(container.read(path), program)


def test_loaded_constants_are_writable_views_of_their_bytes(program):
    loaded = container.from_bytes(container.to_bytes(program))
    table = loaded.functions[0].constants[1]
    assert table.flags.writeable and table.dtype == np.int8
    assert table.tolist() == list(range(-4, 4))


def _with_weights(program, values: np.ndarray):
    """``program`` with one more constant, ``values``, after the others."""
    fn = program.functions[0]
    fn.buffers[20] = Buffer(20, "const", 192, values.size, values.shape, "int8")
    fn.constants[20] = values
    return program


def test_compressible_constants_are_stored_compressed(program):
    bits = np.random.default_rng(0).integers(0, 2, 1 << 16, dtype=np.int8)
    data = container.to_bytes(_with_weights(program, bits))
    entry = 64 + 40 * 3
    stored, size, flags = struct.unpack_from("<QQI", data, entry + 16)
    assert (flags, size) == (1, 192 + (1 << 16)) and stored < size / 4
    assert np.array_equal(container.from_bytes(data).functions[0].constants[20], bits)


def test_constants_beyond_the_ratio_bound_are_stored_raw(program):
    zeros = np.zeros(1 << 16, np.int8)  # zstd would shrink them about 4000x
    data = container.to_bytes(_with_weights(program, zeros))
    assert struct.unpack_from("<I", data, 64 + 40 * 3 + 32)[0] == 0
    assert not container.from_bytes(data).functions[0].constants[20].any()


def test_random_constants_are_stored_raw_and_exact(program):
    values = np.random.default_rng(0).integers(-128, 128, 1 << 16, dtype=np.int8)
    data = container.to_bytes(_with_weights(program, values))
    entry = 64 + 40 * 3
    assert struct.unpack_from("<I", data, entry + 32)[0] == 0  # no zstd flag
    loaded = container.from_bytes(data)
    assert np.array_equal(loaded.functions[0].constants[20], values)


def test_the_error_is_an_hbir_file_error_naming_file_section_and_byte(program):
    data = container.to_bytes(program)
    error = load_error(data[:-1])
    assert isinstance(error, HbirError)
    assert (error.file, error.section, error.offset) == ("model.hbm", "header", 16)
    assert str(error).startswith("model.hbm: header at byte 16: ")


def test_read_a_missing_file_is_a_located_error(tmp_path):
    with pytest.raises(HbmFormatError, match="cannot read: No such file"):
        container.read(tmp_path / "missing.hbm")


# ------------------------------------------------------------------ framing


def _put(data: bytes, at: int, fmt: str, *values) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, *values)
    return bytes(out)


FRAMING = {
    "short file": (lambda d: d[:10], "header", 10, "truncated: 10 bytes"),
    "bad magic": (lambda d: b"PK\3\4" + d[4:], "header", 0, "not an .hbm file"),
    "newer version": (
        lambda d: _put(d, 8, "<I", 2),
        "header",
        8,
        "format version 2 is newer than the version 1",
    ),
    "truncated": (lambda d: d[:-5], "header", 16, "the header says the file has"),
    "corrupt table": (
        lambda d: _put(d, 64 + 40 * 2 + 16, "<Q", 3),
        "header",
        12,
        "header checksum mismatch",
    ),
    "corrupt section": (
        lambda d: d[:-1] + bytes([d[-1] ^ 1]),
        "section table entry 11",
        64 + 40 * 11,
        "checksum mismatch: section 'debug' is corrupt",
    ),
}
FRAMING["table past the file"] = (
    lambda d: _put(_put(d, 24, "<I", 6 * 10**6), 28, "<I", 10**6),
    "header",
    24,
    "does not fit the file",
)
RESEALED = {
    "functions vs sections": (
        lambda d: _put(d, 28, "<I", 3),
        "header",
        24,
        "12 sections for 3 functions",
    ),
    "section kinds swapped": (
        lambda d: _put(d, 64 + 40, "<I", 2),
        "section table entry 1",
        104,
        "holds section kind 2 of function 0: expected 'buffers'",
    ),
    "gap before a section": (
        lambda d: _put(d, 64 + 40 + 8, "<Q", 1000),
        "section table entry 1",
        104,
        "section starts at byte 1000, expected",
    ),
    "section past the end": (
        lambda d: _put(d, 64 + 40 * 11 + 16, "<Q", 2**63),
        "section table entry 11",
        64 + 40 * 11,
        "runs past the end of the file",
    ),
    "code marked compressed": (
        lambda d: _put(d, 64 + 40 * 2 + 32, "<I", 1),
        "section table entry 2",
        144,
        "only the constants may be compressed",
    ),
    "unknown flag": (
        lambda d: _put(d, 64 + 40 * 3 + 32, "<I", 4),
        "section table entry 3",
        184,
        "flags 0x4",
    ),
    "raw size differs": (
        lambda d: _put(d, 64 + 40 * 2 + 24, "<Q", 7),
        "section table entry 2",
        144,
        "announces 7",
    ),
    "zip bomb": (
        lambda d: _put(d, 64 + 40 * 3 + 24, "<Q", 2**40),
        "section table entry 3",
        184,
        "above 1024x",
    ),
    "wrong inflated size": (
        lambda d: _put(d, 64 + 40 * 3 + 24, "<Q", 100),
        "section table entry 3",
        184,
        "inflates to more than 100 bytes, the table says 100",
    ),
    "unknown march": (
        lambda d: _put(d, 32, "32s", b"nash-x"),
        "header",
        32,
        "unknown march 'nash-x'",
    ),
    "march not UTF-8": (
        lambda d: _put(d, 32, "32s", b"nash\xff"),
        "header",
        36,
        "march is not UTF-8",
    ),
    "NUL inside the march": (
        lambda d: _put(d, 32, "32s", b"nash\0e"),
        "header",
        36,
        "NUL byte",
    ),
}


@pytest.mark.parametrize("case", FRAMING, ids=list(FRAMING))
def test_framing_errors(program, case):
    mutate, section, offset, what = FRAMING[case]
    error = load_error(mutate(container.to_bytes(program)))
    assert (error.section, error.offset) == (section, offset)
    assert what in error.what


@pytest.mark.parametrize("case", RESEALED, ids=list(RESEALED))
def test_framing_errors_behind_the_checksums(program, reseal, case):
    mutate, section, offset, what = RESEALED[case]
    error = load_error(reseal(mutate(container.to_bytes(program))))
    assert (error.section, error.offset) == (section, offset)
    assert what in error.what


def test_corrupt_compressed_constants(program, reseal):
    data = container.to_bytes(program)
    at = section_start(data, 0, "constants")
    error = load_error(reseal(_put(data, at, "<I", 0)))  # the zstd magic
    assert error.section == "section table entry 3"
    assert "corrupt zstd data" in error.what


def test_bytes_after_the_last_section(program, reseal):
    data = container.to_bytes(program) + b"xyz"
    error = load_error(reseal(_put(data, 16, "<Q", len(data))))
    assert (error.section, error.offset) == ("section table", len(data) - 3)
    assert error.what == "3 bytes after the last section"


# ------------------------------------------------------------------ section contents


def _edit(parts, program, function, kind, at, fmt, *values) -> bytes:
    p = parts.split(container.to_bytes(program))
    struct.pack_into(fmt, p.body(function, kind), at, *values)
    return p.join()


def _located(error, data, function, kind, at):
    assert error.offset == section_start(data, function, kind) + at
    assert error.section.startswith(f"section '{kind}' of ")


def test_a_hostile_count_is_refused_before_anything_is_allocated(program, parts):
    data = _edit(parts, program, 0, "buffers", 0, "<I", 2**32 - 1)
    error = load_error(data)
    _located(error, data, 0, "buffers", 0)
    assert error.section == "section 'buffers' of @forward"
    assert "count 4294967295 needs at least 137438953440 bytes" in error.what


def test_a_hostile_dimension_is_refused(program, parts):
    p = parts.split(container.to_bytes(program))
    shape_at = 4 + 4 + (4 + 3) + (4 + 4) + 16 + 4  # buffer 0's first dimension
    struct.pack_into("<q", p.body(0, "buffers"), shape_at, 2**60)
    error = load_error(p.join())
    assert f"dimension {2**60} of shape" in error.what


def test_a_name_that_is_not_utf8(program, parts):
    data = _edit(parts, program, 0, "io", 4, "B", 0xFF)
    error = load_error(data)
    _located(error, data, 0, "io", 4)
    assert error.what == "function name is not UTF-8"


def test_a_flag_that_is_not_a_bool(program, parts):
    data = _edit(parts, program, 0, "debug", 16, "B", 2)  # entry 0's value_of flag
    error = load_error(data)
    _located(error, data, 0, "debug", 16)
    assert error.what == "value_of flag is 2, expected 0 or 1"


def test_an_unknown_opcode(program, parts):
    data = _edit(parts, program, 0, "code", 4, "<I", 999)
    error = load_error(data)
    _located(error, data, 0, "code", 4)
    assert error.what == "opcode 999 is not in the opcode table"


def test_more_instructions_announced_than_held(program, parts):
    data = _edit(parts, program, 0, "code", 0, "<I", 5)
    assert "truncated" in load_error(data).what


def test_bytes_after_a_sections_last_entry(program, parts):
    p = parts.split(container.to_bytes(program))
    p.body(1, "islands").extend(b"\0\0")
    error = load_error(p.join())
    assert error.section == "section 'islands' of @identity"
    assert error.what == "2 bytes after the section's last entry"


def test_a_buffer_id_given_twice(program, parts):
    p = parts.split(container.to_bytes(program))
    body = p.body(0, "buffers")
    second = 4 + 4 + (4 + 3) + (4 + 4) + 16 + (4 + 16)  # after buffer 0's record
    assert struct.unpack_from("<I", body, second)[0] == 1
    struct.pack_into("<I", body, second, 0)
    error = load_error(p.join())
    assert error.what == "buffer id 0 is given twice"


def test_constants_hold_nothing_but_constants(program, parts):
    p = parts.split(container.to_bytes(program))
    p.body(0, "constants")[8] = 1  # after buffer 1's 8 bytes, inside its 64
    error = load_error(p.join())
    assert error.section == "section 'constants' of @forward"
    assert error.what == "byte 8 lies outside every constant and is not zero"


def test_constants_section_shorter_than_its_buffers(program, parts):
    p = parts.split(container.to_bytes(program))
    del p.body(0, "constants")[-1]
    error = load_error(p.join())
    assert error.what == "135 bytes, but the const buffers end at byte 136"


# ------------------------------------------------------------------ rules


def _buffer(fn, key, **changes):
    fn.buffers[key] = dataclasses.replace(fn.buffers[key], **changes)


def _instruction(fn, i, **changes):
    fn.instructions[i] = dataclasses.replace(fn.instructions[i], **changes)


def _field(fn, i, name, value):
    _instruction(fn, i, fields={**fn.instructions[i].fields, name: value})


RELU = """func.func @relu(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %y = hbir.relu %x : tensor<1x8xf32>
  func.return %y : tensor<1x8xf32>
}
"""

# name: (mutation of the program, the place in the file, the message)
RULES = {
    "unknown space": (
        lambda p: _buffer(p.functions[0], 2, space="l2m"),
        ("buffers", 2),
        "unknown space 'l2m': expected one of ('ddr', 'sram', 'const', 'io')",
    ),
    "unknown dtype": (
        lambda p: _buffer(p.functions[0], 2, dtype="int4"),
        ("buffers", 2),
        "unknown dtype 'int4'",
    ),
    "negative dimension": (
        lambda p: _buffer(p.functions[0], 2, shape=(1, -8)),
        ("buffers", 2),
        "dimension -8 of shape [1, -8] is not in 0..4294967295",
    ),
    "rank above 32": (
        lambda p: _buffer(p.functions[0], 2, shape=(1,) * 33),
        ("buffers", 2),
        "rank 33 is above 32",
    ),
    "shape larger than reserved": (
        lambda p: _buffer(p.functions[0], 2, shape=(1, 80)),
        ("buffers", 2),
        "shape [1, 80] x int8 needs 80 bytes, 64 reserved",
    ),
    "outside the SRAM arena": (
        lambda p: _buffer(p.functions[0], 3, offset=100),
        ("buffers", 3),
        "bytes 100..164 are outside the sram arena of 128 bytes",
    ),
    "outside the DDR arena": (
        lambda p: setattr(p.functions[0], "ddr_peak_bytes", 100),
        ("buffers", 4),
        "bytes 64..128 are outside the ddr arena of 100 bytes",
    ),
    "peak beyond the buffers": (
        lambda p: setattr(p.functions[0], "ddr_peak_bytes", 256),
        ("io", None),
        "ddr peak 256, but its buffers end at 192",
    ),
    "SRAM above the march's": (
        lambda p: (
            _buffer(p.functions[0], 3, offset=1 << 20)
            or setattr(p.functions[0], "sram_peak_bytes", (1 << 20) + 64)
        ),
        ("io", None),
        "SRAM peak 1048640 is above the 1048576 bytes of nash-e's SRAM",
    ),
    "io buffer not at 0": (
        lambda p: _buffer(p.functions[1], 9, offset=8),
        ("buffers", 9),
        "an io buffer is its own allocation: offset 8 != 0",
    ),
    "repeated function name": (
        lambda p: setattr(p.functions[1], "name", "forward"),
        ("io", None),
        "function name 'forward' is empty or repeated",
    ),
    "input bound to no buffer": (
        lambda p: setattr(p.functions[0], "input_buffers", (42,)),
        ("io", "input"),
        "input '_input_0' is bound to no buffer",
    ),
    "input of another shape": (
        lambda p: setattr(
            p.functions[0],
            "inputs",
            (TensorDesc("_input_0", (8,), "int8", "", (0.0625,), (0,)),),
        ),
        ("io", "input"),
        "input '_input_0' is int8[8] but its buffer %0 is int8[1, 8]",
    ),
    "output of another dtype": (
        lambda p: setattr(
            p.functions[0], "outputs", (TensorDesc("_output_0", (1, 8), "int8"),)
        ),
        ("io", "output"),
        "output '_output_0' is int8[1, 8] but its buffer %7 is float32[1, 8]",
    ),
    "repeated output name": (
        lambda p: (
            setattr(
                p.functions[1],
                "outputs",
                (TensorDesc("y", (2,), "float32"), TensorDesc("y", (2,), "float32")),
            )
            or setattr(p.functions[1], "output_buffers", (9, 9))
        ),
        ("io", "output"),
        "output name 'y' is empty or repeated",
    ),
    "zero scale": (
        lambda p: setattr(
            p.functions[0],
            "inputs",
            (TensorDesc("_input_0", (1, 8), "int8", "", (0.0,), (0,)),),
        ),
        ("io", "input"),
        "scales [0.0] are not all finite and positive",
    ),
    "zero points without scales": (
        lambda p: setattr(
            p.functions[0],
            "inputs",
            (TensorDesc("_input_0", (1, 8), "int8", "", (0.5,), (0, 0)),),
        ),
        ("io", "input"),
        "2 zero points for 1 scales",
    ),
    "operand count": (
        lambda p: _instruction(p.functions[0], 0, operands=(0, 1)),
        ("code", 0),
        "'dma_load' takes 1 operands, got 2",
    ),
    "unknown buffer": (
        lambda p: _instruction(p.functions[0], 2, results=(77,)),
        ("code", 2),
        "'dma_store' result %77 is not a buffer of the function",
    ),
    "buffer field not const": (
        lambda p: _field(p.functions[0], 1, "multiplier", 2),
        ("code", 1),
        "'eltwise' field 'multiplier': buffer %2 is in sram, not const",
    ),
    "unknown unit": (
        lambda p: _instruction(p.functions[0], 0, unit="gpu"),
        ("code", 0),
        "unknown unit 'gpu'",
    ),
    "cycles backwards": (
        lambda p: _instruction(p.functions[0], 0, start=9, end=3),
        ("code", 0),
        "cycles 9..3 are not 0 <= start <= end < 2**63",
    ),
    "shape rule": (
        lambda p: _field(p.functions[0], 1, "clip", (-300, 127)),
        ("code", 1),
        "eltwise: clip [-300, 127] must be [lo, hi] within [-128, 127]",
    ),
    "island out of range": (
        lambda p: _field(p.functions[0], 3, "island", 1),
        ("code", 3),
        "cpu_call: island 1 of 1",
    ),
    "debug entries missing": (
        lambda p: p.functions[0].debug.pop(),
        ("io", None),
        "3 debug entries for 4 instructions",
    ),
    "negative op id": (
        lambda p: p.functions[0].debug.__setitem__(0, DebugEntry((-1,), "", "")),
        ("debug", 0),
        "op ids [-1] are not all in 0..2**63-1",
    ),
    "perm not a permutation": (
        lambda p: p.functions[0].debug.__setitem__(
            1, DebugEntry((3,), "x", "", 3, (0, 0))
        ),
        ("debug", 1),
        "perm [0, 0] is not a permutation",
    ),
    "island of another signature": (
        lambda p: p.functions[0].islands.__setitem__(0, RELU),
        ("code", 3),
        "island 0 takes arguments (float32[1, 8]), this cpu_call's buffers are "
        "(int8[1, 8])",
    ),
    "island of two functions": (
        lambda p: p.functions[0].islands.__setitem__(
            0, RELU + RELU.replace("@relu", "@relu2")
        ),
        ("islands", 0),
        "island 0 holds 2 functions",
    ),
    "island not HBIR": (
        lambda p: p.functions[0].islands.__setitem__(0, "func.func @f( {"),
        ("islands", 0),
        "island 0 is not valid HBIR: island 0:1:",
    ),
}


def _entry_start(data: bytes, kind: str, where) -> int:
    """Where the loader must point: a record's first byte, found independently
    (a buffer record starts with its id, an instruction with its opcode)."""
    start = section_start(data, 0 if kind != "buffers" or where != 9 else 1, kind)
    if kind == "buffers":
        body = data[start:]
        at = 4
        while struct.unpack_from("<I", body, at)[0] != where:
            at += 4
            for _ in range(2):  # space, dtype
                at += 4 + struct.unpack_from("<I", body, at)[0]
            at += 16
            at += 4 + 8 * struct.unpack_from("<I", body, at)[0]
        return start + at
    return start


@pytest.mark.parametrize("case", RULES, ids=list(RULES))
def test_every_rule_has_a_located_error(program, unchecked_bytes, case):
    mutate, (kind, where), what = RULES[case]
    mutate(program)
    data = unchecked_bytes(program)
    error = load_error(data)
    assert what in error.what, error.what
    assert re.match(rf"section '{kind}' of @\w+$", error.section), error.section
    if kind == "buffers":
        assert error.offset == _entry_start(data, kind, where)
    if kind == "code":
        number = struct.unpack_from("<I", data, error.offset)[0]
        assert number == program.functions[0].instructions[where].opcode
    if not case.startswith("island"):  # the writer leaves islands to the loader
        with pytest.raises(ValueError, match=re.escape(what)):
            container.to_bytes(program)  # the writer refuses the same program


def test_the_writer_refuses_values_of_the_wrong_kind(program):
    _field(program.functions[0], 1, "axis", np.int64(1))
    with pytest.raises(
        ValueError, match=r"field 'axis': np.int64\(1\) is not of kind i64"
    ):
        container.to_bytes(program)


@pytest.mark.parametrize(
    "change",
    [
        lambda fn: _buffer(fn, 2, offset=0.0),  # a float is no offset (no hang)
        lambda fn: _instruction(fn, 0, end=4.0),
        lambda fn: _instruction(fn, 0, operands=(0.0,)),
        lambda fn: fn.debug.__setitem__(0, DebugEntry((), "", "\ud800")),
        lambda fn: fn.islands.__setitem__(0, b"bytes"),
        lambda fn: setattr(fn, "input_buffers", ("0",)),
    ],
)
def test_the_writer_refuses_values_of_the_wrong_python_type(program, change):
    change(program.functions[0])
    with pytest.raises(ValueError, match="cannot write this program"):
        container.to_bytes(program)


def test_the_writer_refuses_a_const_buffer_without_its_constant(program):
    del program.functions[0].constants[5]
    with pytest.raises(ValueError, match="const buffer %5 has no constant"):
        container.to_bytes(program)


def test_the_writer_refuses_a_constant_of_another_dtype(program):
    program.functions[0].constants[5] = np.array([1 << 30], np.int64)
    with pytest.raises(ValueError, match=r"constant is int64\[1\], the buffer"):
        container.to_bytes(program)


def test_the_writer_refuses_an_unknown_opcode(program):
    _instruction(program.functions[0], 0, opcode=999)
    with pytest.raises(ValueError, match="opcode 999 is not in the opcode table"):
        container.to_bytes(program)


def test_every_opcode_field_kind_round_trips(program):
    """One instruction per field kind the table uses, with extreme values."""
    kinds = {kind for op in BY_NAME.values() for _, kind in op.fields}
    assert kinds == {"i64", "i64[]", "f64", "f64[]", "str", "bool", "buffer"}
    fn = program.functions[0]
    fn.buffers[10] = Buffer(10, "const", 192, 64, (1, 4, 4, 2), "int8")
    fn.constants[10] = np.zeros((1, 4, 4, 2), np.int8)  # (read: written before)
    fn.buffers[11] = Buffer(11, "sram", 64, 64, (1, 4, 4, 2), "int8")
    fields = dict(size=(4, 4), mode="bilinear", align_corners=True)
    fields.update(scale=(1.0000000000000002, -0.0), weight_bits=-1)
    fn.instructions.append(
        container.Instruction(BY_NAME["resize"].number, (10,), (11,), fields, "aae")
    )
    fn.debug.append(DebugEntry((2**63 - 1,), "hbir.resize2d", "", None, None))
    loaded = container.from_bytes(container.to_bytes(program))
    got = loaded.functions[0].instructions[-1].fields
    assert got == fields and str(got["scale"][1]) == "-0.0"
