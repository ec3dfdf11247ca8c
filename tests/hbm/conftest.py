"""A small hand-built program that uses every section of the ``.hbm`` format."""

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import pytest
import zstandard

from hbir.hbm import container
from hbir.runtime.hbm_opcodes import BY_NAME, NONE
from hbir.runtime.hbm_program import (
    Buffer,
    DebugEntry,
    FunctionCode,
    Instruction,
    Program,
    TensorDesc,
)

ISLAND = """func.func @island(%x: tensor<1x8xsi8>) -> tensor<1x8xf32> {
  %y = "qnt.dequantize"(%x) <{scales = array<f32: 0.125>, zeros = array<i64: 0>}> \
: (tensor<1x8xsi8>) -> tensor<1x8xf32>
  func.return %y : tensor<1x8xf32>
}
"""


def _ins(name: str, operands, results, unit: str, start: int, **fields):
    return Instruction(
        BY_NAME[name].number, operands, results, fields, unit, start, start + 4
    )


def hand_program() -> Program:
    """int8 input -> DMA into SRAM -> add a constant (requantized) -> DMA out ->
    a CPU island -> float32 output; a second function with no code."""
    buffers = {
        0: Buffer(0, "ddr", 0, 64, (1, 8), "int8"),
        1: Buffer(1, "const", 0, 64, (8,), "int8"),
        2: Buffer(2, "sram", 0, 64, (1, 8), "int8"),
        3: Buffer(3, "sram", 64, 64, (1, 8), "int8"),
        4: Buffer(4, "ddr", 64, 64, (1, 8), "int8"),
        5: Buffer(5, "const", 64, 64, (1,), "int32"),
        6: Buffer(6, "const", 128, 8, (1,), "int32"),
        7: Buffer(7, "ddr", 128, 64, (1, 8), "float32"),
    }
    constants = {
        1: np.arange(-4, 4, dtype=np.int8),
        5: np.array([1 << 30], np.int32),
        6: np.array([31], np.int32),
    }
    post = dict(
        acc_bits=32,
        pre_shift=NONE,
        multiplier=5,
        shift=6,
        rounding="half_even",
        clip=(-128, 127),
        axis=1,
    )
    code = [
        _ins("dma_load", (0,), (2,), "dma", 0),
        _ins(
            "eltwise",
            (2, 1),
            (3,),
            "vae",
            4,
            kind="add",
            in_multiplier=(),
            in_shift=(),
            **post,
        ),
        _ins("dma_store", (3,), (4,), "dma", 8),
        _ins("cpu_call", (4,), (7,), "cpu", 12, island=0),
    ]
    debug = [
        DebugEntry((), "", ""),
        DebugEntry((3, 4), "qnt.requantize", "net.py:12:5", value_of=4, perm=(0, 1)),
        DebugEntry((), "", ""),
        DebugEntry((5,), "npu.cpu_call", "net.py:13:9 \u00e9", value_of=5),
    ]
    forward = FunctionCode(
        name="forward",
        inputs=(TensorDesc("_input_0", (1, 8), "int8", "", (0.0625,), (0,)),),
        outputs=(TensorDesc("_output_0", (1, 8), "float32", "NCHW"),),
        buffers=buffers,
        input_buffers=(0,),
        output_buffers=(7,),
        instructions=code,
        debug=debug,
        constants=constants,
        islands=[ISLAND],
        ddr_peak_bytes=192,
        sram_peak_bytes=128,
    )
    empty = FunctionCode(
        name="identity",
        inputs=(TensorDesc("x", (2,), "float32"),),
        outputs=(TensorDesc("y", (2,), "float32"),),
        buffers={9: Buffer(9, "io", 0, 8, (2,), "float32")},
        input_buffers=(9,),
        output_buffers=(9,),
        instructions=[],
        debug=[],
    )
    return Program("nash-e", [forward, empty])


@pytest.fixture
def program() -> Program:
    return hand_program()


def _reseal(data: bytes) -> bytes:
    """``data`` with every checksum recomputed (as docs/hbm-format.md says), so
    that a mutation reaches the checks behind the checksums."""
    out = bytearray(data)
    n = struct.unpack_from("<I", out, 24)[0]
    for i in range(n):
        at = 64 + 40 * i
        offset, stored = struct.unpack_from("<QQ", out, at + 8)
        body = bytes(out[offset : offset + stored])
        struct.pack_into("<I", out, at + 36, zlib.crc32(body))
    table_end = 64 + 40 * n
    struct.pack_into("<I", out, 12, 0)
    struct.pack_into("<I", out, 12, zlib.crc32(bytes(out[:table_end])))
    return bytes(out)


def _unchecked_bytes(program: Program) -> bytes:
    """The bytes the writer makes of ``program`` without its rules: how a
    broken or hostile file looks."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(container.verify, "verify_program", lambda *args, **kw: None)
        return container.to_bytes(program)


@dataclass
class FileParts:
    """A ``.hbm`` file taken apart by the layout docs/hbm-format.md gives (not by
    the loader's code): header fields and each section's bytes (inflated), to
    edit and put back together uncompressed with fresh checksums."""

    march: bytes
    n_functions: int
    bodies: list[bytearray]

    KINDS = ("io", "buffers", "code", "constants", "islands", "debug")

    @classmethod
    def split(cls, data: bytes) -> "FileParts":
        n, n_functions, march = struct.unpack_from("<II32s", data, 24)
        bodies = []
        for i in range(n):
            offset, stored, size, flags = struct.unpack_from("<QQQI", data, 72 + 40 * i)
            body = data[offset : offset + stored]
            if flags & 1:
                body = zstandard.ZstdDecompressor().decompress(body, size)
            bodies.append(bytearray(body))
        return cls(march, n_functions, bodies)

    def body(self, function: int, kind: str) -> bytearray:
        return self.bodies[6 * function + self.KINDS.index(kind)]

    def join(self) -> bytes:
        offset = 64 + 40 * len(self.bodies)
        table = bytearray()
        for i, body in enumerate(self.bodies):
            crc = zlib.crc32(body)
            table += struct.pack(
                "<IIQQQII", i % 6, i // 6, offset, len(body), len(body), 0, crc
            )
            offset += len(body)
        header = struct.pack(
            "<8sIIQII32s",
            b"HBIRHBM\0",
            1,
            0,
            offset,
            len(self.bodies),
            self.n_functions,
            self.march,
        )
        return _reseal(header + table + b"".join(self.bodies))


@pytest.fixture
def parts():
    return FileParts


@pytest.fixture
def reseal():
    return _reseal


@pytest.fixture
def unchecked_bytes():
    return _unchecked_bytes


@pytest.fixture(scope="session")
def compiled_program(tmp_path_factory):
    """``compiled_program(name)``: a fresh copy (read back from its file) of the
    Program ``hbir.compile`` made of a model of tests/compile_models.py, compiled
    once a session."""
    import compile_models

    from hbir.hbm import container

    def get(name: str) -> Program:
        return container.read(compile_models.compiled(name, tmp_path_factory)[3])

    return get
