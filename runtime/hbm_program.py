"""A compiled model in memory: what a ``model.hbm`` file holds.

The emitter (``hbir/hbm/emit.py``) builds a :class:`Program` from a compiled
npu-dialect module; the writer / loader (``hbir/hbm/container.py``) turn it into
bytes and back, verifying every field once at load time; the simulator
(``runtime/npu_sim.py``) runs a verified :class:`Program`; the disassembler and
assembler (``hbir/hbm/text.py``) print and parse it; ``hbir/hbm/perf.py`` and
``hb_verifier`` read it. This file is the one description of those fields.

Opcodes live in one table, ``runtime/hbm_opcodes.py`` (the emitter, loader,
text form and simulator all read it); an :class:`Instruction` names its opcode
by number, and its ``fields`` are the opcode's fields with values of their kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DTYPES",
    "MEMORY_BUDGET",
    "SPACES",
    "Buffer",
    "DebugEntry",
    "FunctionCode",
    "Instruction",
    "Program",
    "TensorDesc",
]


# The element types a Buffer or a constant may have (numpy dtype names).
DTYPES = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "float16",
    "float32",
    "float64",
)
# Memory spaces: the DDR activation arena, the SRAM, the constant section, and
# "io": a buffer of its own at offset 0, outside the arenas (the emitter places
# inputs and outputs in DDR as npu-plan-memory does; hand-built programs may not).
SPACES = ("ddr", "sram", "const", "io")
# The arenas: the spaces where two distinct buffers may share bytes.
ARENAS = ("ddr", "sram")
# What one function's buffers may take in all (DDR and SRAM arenas, io buffers,
# constants): the loader refuses a program declaring more, before allocating any.
MEMORY_BUDGET = 1 << 33  # 8 GiB


@dataclass(frozen=True)
class TensorDesc:
    """An input or output of a function, as the caller sees it."""

    name: str  # "_input_0", or the name the model gave it
    shape: tuple[int, ...]
    dtype: str  # a numpy dtype name: "float32", "int8", "uint8", ...
    layout: str = ""  # "NCHW", "NHWC", "NV12_Y", "NV12_UV", "Y", "ROI", or ""
    scales: tuple[float, ...] = ()  # the quantization of an integer tensor
    zeros: tuple[int, ...] = ()


@dataclass(frozen=True)
class Buffer:
    """A value of the program, placed by ``npu-plan-memory``.

    The value occupies the first ``prod(shape) * itemsize`` bytes of
    ``[offset, offset + size)`` of its space, row-major and unpadded (``size`` is
    the channel-aligned reservation; the padding bytes are never read). Buffers
    whose live ranges do not overlap may share bytes (the plan's reuse), and an
    ``npu.reshape`` result is the same bytes as its input (another Buffer at the
    same offset). ``const`` Buffers are the constants (``FunctionCode.constants``);
    their offset places them in the constant section.
    """

    id: int
    space: str  # one of SPACES
    offset: int  # bytes into its space
    size: int  # bytes reserved (channel-aligned), at least the value's bytes
    shape: tuple[int, ...]
    dtype: str  # one of DTYPES


@dataclass(frozen=True)
class DebugEntry:
    """Where an instruction came from, for tools that name the op a user wrote."""

    op_ids: tuple[int, ...]  # %N of the quantized.bc ops it computes (fused: several)
    op: str  # the quantized.bc op name of the last of them, e.g. "qnt.requantize"
    # the torch "file:line:col" (then export's " (module|op#n)" when it named the
    # op), or ""
    loc: str
    # The quantized.bc op whose whole result this instruction's first result is
    # (None for a tile, a DMA or a partial value), and the permutation that puts
    # the result back in that op's layout (None: the same layout).
    value_of: int | None = None
    perm: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Instruction:
    opcode: int  # a number of the opcode table
    operands: tuple[int, ...]  # Buffer ids
    results: tuple[int, ...]  # Buffer ids
    fields: Mapping[str, object]  # the opcode's immediate fields, by name (all)
    # npu-schedule's queue: "tae" | "vae" | "aae" | "dte" | "dma" | "cpu", or
    # "view" (reshape / slice / concat: no time of their own)
    unit: str = ""
    start: int = 0  # cycle estimates of npu-schedule
    end: int = 0


@dataclass
class FunctionCode:
    """One function: its interface, buffers, constants and instruction stream.

    ``input_buffers[i]`` holds ``inputs[i]`` (same shape and dtype; the caller's
    array is written there before the first instruction), ``output_buffers[i]``
    holds ``outputs[i]`` after the last. Instructions run in order.
    """

    name: str
    inputs: tuple[TensorDesc, ...]
    outputs: tuple[TensorDesc, ...]
    buffers: dict[int, Buffer]
    input_buffers: tuple[int, ...]
    output_buffers: tuple[int, ...]
    instructions: list[Instruction]
    debug: list[DebugEntry]  # one per instruction
    # The value of every "const" Buffer (its shape and dtype), by Buffer id.
    constants: dict[int, np.ndarray] = field(default_factory=dict)
    # CPU islands (``cpu_call``'s ``island`` field indexes this list): each the
    # text of an HBIR module with one ``func.func @island`` whose arguments are
    # the call's operands and whose results are its results; the module carries
    # ``hbir.legacy_round`` when the model rounds half-up.
    islands: list[str] = field(default_factory=list)
    ddr_peak_bytes: int = 0  # the DDR arena: max(offset + size) of "ddr" Buffers
    sram_peak_bytes: int = 0  # the same for "sram"


@dataclass
class Program:
    march: str  # a march name ("nash-e", "nash-p", ...: passes/march.py)
    functions: list[FunctionCode]
    version: int = 1
