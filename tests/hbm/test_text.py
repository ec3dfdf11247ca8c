"""The text form: exact round trips and a line:column error for every mistake."""

import dataclasses
import math
import struct

import compile_models
import numpy as np
import pytest

from hbir.hbm import container
from hbir.hbm.errors import HbmTextError
from hbir.hbm.text import assemble, disassemble
from hbir.runtime.hbm_opcodes import BY_NAME
from hbir.runtime.hbm_program import Buffer, DebugEntry, Instruction


@pytest.fixture
def text(program) -> str:
    return disassemble(program)


def test_text_program_text_is_identical(program, text):
    again = assemble(text)
    assert disassemble(again) == text
    assert container.to_bytes(again) == container.to_bytes(program)


def test_text_hbm_text_is_identical(text):
    data = container.to_bytes(assemble(text, "tiny.hbms"))
    assert disassemble(container.from_bytes(data)) == text


@pytest.mark.parametrize("name", compile_models.NAMES)
def test_compiled_models_text_round_trip(compiled_program, name):
    program = compiled_program(name)
    listing = disassemble(program)
    again = assemble(listing, f"{name}.hbms")
    assert disassemble(again) == listing
    assert container.to_bytes(again) == container.to_bytes(program)


def test_the_text_reads_like_the_program(text):
    assert text.startswith('hbm version 1 march "nash-e"\n\nfunc "forward" ')
    assert "  buffer %5 const offset 64 size 64 int32[1] = [1073741824]\n" in text
    assert '  %2 = dma_load(%0) unit "dma" cycles 0 4\n' in text
    assert (
        '  %7 = cpu_call(%4) {island = 0} unit "cpu" cycles 12 16 debug ops [5] '
        'op "npu.cpu_call" loc "net.py:13:9 \u00e9" value_of 5\n'
    ) in text


FLOATS = (0.1, 1 / 3, 5e-324, -0.0, 1e300, math.inf, -math.inf, 2.0**-1074 * 3)


def test_floats_and_big_constants_are_exact(program):
    fn = program.functions[0]
    fn.buffers[10] = Buffer(10, "const", 512, 64, (1, 4, 4, 2), "int8")
    fn.constants[10] = np.zeros((1, 4, 4, 2), np.int8)  # (read: written before)
    fn.buffers[11] = Buffer(11, "sram", 64, 64, (1, 4, 4, 2), "int8")
    for pair in zip(FLOATS[::2], FLOATS[1::2], strict=True):  # scale: 2 values
        fields = dict(size=(4, 4), mode="bilinear", align_corners=False)
        fields.update(scale=pair, weight_bits=-1)
        resize = BY_NAME["resize"].number
        fn.instructions.append(Instruction(resize, (10,), (11,), fields, "aae"))
        fn.debug.append(DebugEntry((), "", ""))
    weights = np.random.default_rng(1).integers(-128, 128, (8, 3, 3, 3), np.int8)
    floats = np.array([1.5, -0.0, np.inf, 0.0], np.float32)
    floats.view(np.uint8)[12:] = [1, 0, 0xC0, 0x7F]  # a NaN with a payload
    fn.buffers[20] = Buffer(20, "const", 192, 256, weights.shape, "int8")
    fn.buffers[21] = Buffer(21, "const", 448, 16, (4,), "float32")
    fn.constants.update({20: weights, 21: floats})
    text = disassemble(program)
    assert "int8[8, 3, 3, 3] = 0x" in text  # 216 values: hex, not a list
    assert "float32[4] = 0x0000c03f00000080" in text
    back = assemble(text)
    code = back.functions[0].instructions[-4:]
    got = [v for ins in code for v in ins.fields["scale"]]
    assert [struct.pack("<d", v) for v in got] == [struct.pack("<d", v) for v in FLOATS]
    assert back.functions[0].constants[20].tobytes() == weights.tobytes()
    assert back.functions[0].constants[21].tobytes() == floats.tobytes()
    assert disassemble(back) == text


# (text to replace, its replacement, where the error points (a piece of the new
# text, the error's column is where it starts), the message)
ERRORS = {
    "syntax": ("dma_store(%3)", "dma_store(%3 %2)", "%2)", "unexpected '%2'"),
    "unknown character": ("dma_load(%0)", "dma_load(%0?)", "?)", "character '?'"),
    "unknown opcode": ("dma_load(", "dma_lod(", "dma_lod", "unknown opcode 'dma_lod'"),
    "missing field": (
        "{island = 0}",
        "{}",
        "cpu_call",
        "'cpu_call' needs fields ['island']",
    ),
    "unknown field": (
        "{island = 0}",
        "{island = 0, x = 1}",
        "x = 1",
        "'cpu_call' has no field 'x'",
    ),
    "field twice": (
        "{island = 0}",
        "{island = 0, island = 0}",
        "island = 0}",
        "field 'island' is given twice",
    ),
    "float for an i64": (
        "{island = 0}",
        "{island = 0.0}",
        "island = 0.0",
        "field 'island' takes kind i64",
    ),
    "integer out of range": (
        "{island = 0}",
        "{island = 9223372036854775808}",
        "9223",
        "9223372036854775808 is not in",
    ),
    "int for an f64 list": (
        "scales [0.0625]",
        "scales [1]",
        "1]",
        "expected a float (like 1.0), got 1",
    ),
    "int for a buffer": (
        "multiplier = %5",
        "multiplier = 5",
        "multiplier = 5",
        "field 'multiplier' takes kind buffer",
    ),
    "string for a list": (
        "clip = [-128, 127]",
        'clip = "x"',
        'clip = "x"',
        "field 'clip' takes a list (kind i64[])",
    ),
    "lone surrogate": ('loc "net.py:12:5"', 'loc "\\ud800"', '"\\ud800', "surrogate"),
    "bad escape": ('loc "net.py:12:5"', 'loc "net\\qpy"', '"net', "bad string"),
    "hex size": ("= [31]", "= 0x1f", "0x1f", "1 bytes for 4"),
    "dense count": ("= [31]", "= [31, 1]", "[31, 1]", "2 integers for int32[1]"),
    "dense range": (
        "= [-4, -3,",
        "= [-400, -3,",
        "[-400",
        "a value is outside int8's range",
    ),
    "const without value": (
        "size 8 int32[1] = [31]",
        "size 8 int32[1]",
        "buffer %6",
        "a const buffer, and only one, has a value",
    ),
    "buffer twice": ("buffer %2 sram", "buffer %1 sram", "%1 sram", "buffer %1 is "),
    "huge buffer id": ("buffer %2 sram", "buffer %99999999999 sram", "%9999", "above"),
    "island order": ("island 0", "island 3", "3 ", "island 3 out of order"),
    "version": ("version 1", "version 2", "2 ", "version 2: this hbir reads"),
    "rule: arena": (
        "buffer %3 sram offset 64",
        "buffer %3 sram offset 100",
        "buffer %3",
        "bytes 100..164 are outside the sram arena of 128 bytes",
    ),
    "rule: operand count": (
        "dma_load(%0)",
        "dma_load(%0, %1)",
        "%2 = dma_load",
        "'dma_load' takes 1 operands, got 2",
    ),
    "rule: unknown march": ('"nash-e"', '"nash-x"', "1 march", "unknown march"),
    "rule: island": ("qnt.dequantize", "qnt.nope", "island 0", "island 0 is not valid"),
}


@pytest.mark.parametrize("case", ERRORS, ids=list(ERRORS))
def test_errors_are_located(text, case):
    old, new, marker, what = ERRORS[case]
    assert old in text
    bad = text.replace(old, new, 1)
    at = bad.rindex(marker, 0, bad.index(new) + len(new) + len(marker))
    line = bad.count("\n", 0, at) + 1
    column = at - bad.rfind("\n", 0, at)
    with pytest.raises(HbmTextError) as info:
        assemble(bad, "tiny.hbms")
    assert what in info.value.what, str(info.value)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert str(info.value).startswith(f"tiny.hbms:{line}:{column}: error: ")


def test_unexpected_end_is_located_at_the_end(text):
    cut = text[: text.index("buffer %3")]
    with pytest.raises(HbmTextError, match="unexpected end of text") as info:
        assemble(cut)
    assert info.value.line == cut.count("\n") + 1


EXTREMES = ("0", "1", "7", "100", "4096", "2147483648", "4294967295")
EXTREMES += ("9223372036854775807", "9223372036854775808", "18446744073709551615")


def _mutants(text: str, rng, count: int):
    """Random character edits, and numbers replaced by extreme values (offsets,
    sizes, ids, peaks: the structure the writer and the loader check)."""
    import re

    numbers = [m.span() for m in re.finditer(r"\b\d+\b", text)]
    pieces = ["%3", "[", "]", "{", "}", ",", "=", '"', "-1", "0.5", "none", "\n"]
    for _ in range(count):
        bad = text
        if rng.random() < 0.5:
            start, end = numbers[int(rng.integers(0, len(numbers)))]
            yield bad[:start] + str(rng.choice(EXTREMES)) + bad[end:]
            continue
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(bad)))
            edit = rng.integers(0, 3)
            if edit == 0:
                bad = bad[:at] + bad[at + int(rng.integers(1, 5)) :]
            elif edit == 1:
                bad = bad[:at] + str(rng.choice(pieces)) + bad[at:]
            else:
                bad = bad[:at] + chr(int(rng.integers(32, 127))) + bad[at + 1 :]
        yield bad


@pytest.mark.parametrize(
    "source", ["program", pytest.param("compiled", marks=pytest.mark.slow)]
)
def test_what_the_assembler_accepts_the_writer_writes_and_the_loader_reads(
    text, compiled_program, source
):
    """The assembler and the writer agree: a mutated text is a located
    ``HbmTextError``, or a program that the writer writes and the loader reads
    back to the same text; nothing else (no ValueError, no MemoryError)."""
    rng = np.random.default_rng(7)
    source_text = (
        text if source == "program" else disassemble(compiled_program("resnet"))
    )
    refused = accepted = 0
    for bad in _mutants(source_text, rng, 150):
        try:
            program = assemble(bad)
        except HbmTextError:
            refused += 1
            continue
        accepted += 1
        listing = disassemble(program)
        again = container.from_bytes(container.to_bytes(program), "mutant.hbm")
        assert disassemble(again) == listing
        assert disassemble(assemble(listing)) == listing
    assert refused > 50 and accepted > 3


def test_a_function_without_code_and_a_program_without_functions():
    program = assemble(
        'hbm version 1 march "nash-m"\n\nfunc "f" ddr_peak 0 sram_peak 0 {\n}\n'
    )
    assert program.march == "nash-m" and program.functions[0].instructions == []
    empty = dataclasses.replace(program, functions=[])
    assert disassemble(empty) == 'hbm version 1 march "nash-m"\n'
