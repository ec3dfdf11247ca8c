"""The text form of a compiled program: :func:`disassemble` and :func:`assemble`.

Text -> :class:`Program` -> text gives back the same text, and a program ->
text -> program the same values, constants included (small integer constants as
dense lists, the rest as hex bytes), so a backend test can be a text test. The
grammar is ``hbm.lark``; ``docs/hbm-format.md`` has an example. The assembler
checks the rules of ``verify.py`` and reports every error at a line and column.
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources
from typing import NoReturn

import numpy as np

from hbir.hbm import verify
from hbir.hbm.errors import HbmTextError
from hbir.runtime.hbm_opcodes import BY_NAME, BY_NUMBER, NONE
from hbir.runtime.hbm_program import (
    Buffer,
    DebugEntry,
    FunctionCode,
    Instruction,
    Program,
    TensorDesc,
)

DENSE_LIMIT = 64  # integer constants up to this many elements print as lists

# ------------------------------------------------------------------ printing


def _str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _num(v: int | float) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


def _list(values) -> str:
    return "[" + ", ".join(_num(v) for v in values) + "]"


def _type(shape, dtype: str) -> str:
    return f"{dtype}[{', '.join(map(str, shape))}]"


def _constant(value: np.ndarray) -> str:
    if value.dtype.kind in "iu" and value.size <= DENSE_LIMIT:
        return _list(int(v) for v in value.reshape(-1))
    return "0x" + np.ascontiguousarray(value).tobytes().hex()


def _io(kind: str, desc: TensorDesc, key: int) -> str:
    text = f"  {kind} {_str(desc.name)} %{key} {_type(desc.shape, desc.dtype)}"
    if desc.layout:
        text += f" layout {_str(desc.layout)}"
    if desc.scales:
        text += f" scales {_list(desc.scales)}"
    if desc.zeros:
        text += f" zeros {_list(desc.zeros)}"
    return text


def _field(kind: str, value) -> str:
    if kind == "buffer":
        return "none" if value == NONE else f"%{value}"
    if kind == "bool":
        return "true" if value else "false"
    if kind == "str":
        return _str(value)
    if kind in ("i64[]", "f64[]"):
        return _list(value)
    return _num(value)


def _debug(d: DebugEntry) -> str:
    parts = []
    if d.op_ids:
        parts.append(f"ops {_list(d.op_ids)}")
    if d.op:
        parts.append(f"op {_str(d.op)}")
    if d.loc:
        parts.append(f"loc {_str(d.loc)}")
    if d.value_of is not None:
        parts.append(f"value_of {d.value_of}")
    if d.perm is not None:
        parts.append(f"perm {_list(d.perm)}")
    return " debug " + " ".join(parts) if parts else ""


def _instruction(ins: Instruction, d: DebugEntry) -> str:
    op = BY_NUMBER[ins.opcode]
    results = ", ".join(f"%{r}" for r in ins.results)
    text = "  " + (f"{results} = " if results else "")
    text += f"{op.name}({', '.join(f'%{o}' for o in ins.operands)})"
    if op.fields:
        fields = (f"{n} = {_field(k, ins.fields[n])}" for n, k in op.fields)
        text += " {" + ", ".join(fields) + "}"
    if ins.unit:
        text += f" unit {_str(ins.unit)}"
    if ins.start or ins.end:
        text += f" cycles {ins.start} {ins.end}"
    return text + _debug(d)


def _function(fn: FunctionCode) -> list[str]:
    lines = [
        f"func {_str(fn.name)} ddr_peak {fn.ddr_peak_bytes} "
        f"sram_peak {fn.sram_peak_bytes} {{"
    ]
    lines += [
        _io("input", d, k) for d, k in zip(fn.inputs, fn.input_buffers, strict=True)
    ]
    lines += [
        _io("output", d, k) for d, k in zip(fn.outputs, fn.output_buffers, strict=True)
    ]
    for b in fn.buffers.values():
        line = (
            f"  buffer %{b.id} {b.space} offset {b.offset} size {b.size} "
            f"{_type(b.shape, b.dtype)}"
        )
        if b.space == "const":
            line += f" = {_constant(fn.constants[b.id])}"
        lines.append(line)
    lines += [f"  island {i} {_str(text)}" for i, text in enumerate(fn.islands)]
    lines += [
        _instruction(i, d) for i, d in zip(fn.instructions, fn.debug, strict=True)
    ]
    return [*lines, "}"]


def disassemble(program: Program) -> str:
    """The text form of ``program`` (which must be verified: a loaded or
    assembled one)."""
    lines = [f"hbm version {program.version} march {_str(program.march)}"]
    for fn in program.functions:
        lines += ["", *_function(fn)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ parsing


@functools.cache
def _parser():
    from lark import Lark

    grammar = resources.files("hbir.hbm").joinpath("hbm.lark").read_text()
    return Lark(grammar, parser="lalr", propagate_positions=True)


class _Assembler:
    """Builds a Program from the parse tree, remembering each item's line and
    column so that a failed rule is reported there."""

    def __init__(self, name: str):
        self.name = name
        self.places: dict[tuple, tuple[int, int]] = {}

    def fail(self, at, what: str) -> NoReturn:
        """``at``: a token or tree (its position) or a (line, column)."""
        if not isinstance(at, tuple):
            meta = getattr(at, "meta", at)
            at = (meta.line, meta.column)
        raise HbmTextError(self.name, *at, what)

    def int(self, token, lo: int = -(2**63), hi: int = 2**64 - 1) -> int:
        value = int(token)
        if not lo <= value <= hi:
            self.fail(token, f"{value} is not in {lo}..{hi}")
        return value

    def string(self, token) -> str:
        try:
            value = json.loads(token)
        except json.JSONDecodeError as e:
            self.fail(token, f"bad string: {e.msg}")
        if not verify.is_text(value):
            self.fail(token, "bad string: a lone surrogate is not UTF-8")
        return value

    def ref(self, token) -> int:
        value = int(token[1:])
        if value > verify.MAX_ID:
            self.fail(token, f"buffer id {value} is above {verify.MAX_ID}")
        return value

    def number(self, token, kind: str):
        """An INT or FLOAT token as a value of field kind ``kind`` (i64 or f64)."""
        if kind == "f64":
            if token.type != "FLOAT":
                self.fail(token, f"expected a float (like 1.0), got {token}")
            return float(token)
        if token.type != "INT":
            self.fail(token, f"expected an integer, got {token}")
        return self.int(token, -(2**63), 2**63 - 1)

    def numbers(self, tree, kind: str) -> tuple:
        return tuple(self.number(t, kind) for t in tree.children if t is not None)

    def type(self, tree) -> tuple[str, tuple[int, ...]]:
        dtype, *dims = tree.children
        shape = tuple(self.int(d, 0, verify.MAX_DIM) for d in dims if d is not None)
        if len(shape) > verify.MAX_RANK:
            self.fail(tree, f"rank {len(shape)} is above {verify.MAX_RANK}")
        return str(dtype), shape

    # ---- items

    def io(self, tree, f: int, i: int) -> tuple[TensorDesc, int]:
        name, ref, type_, options = tree.children
        self.places[(tree.data, f, i)] = (tree.meta.line, tree.meta.column)
        dtype, shape = self.type(type_)
        layout, scales, zeros = options.children
        desc = TensorDesc(
            self.string(name),
            shape,
            dtype,
            "" if layout is None else self.string(layout),
            () if scales is None else self.numbers(scales, "f64"),
            () if zeros is None else self.numbers(zeros, "i64"),
        )
        return desc, self.ref(ref)

    def constant(self, tree, dtype: str, shape) -> np.ndarray:
        (value,) = tree.children
        need = verify.nbytes(shape, dtype)
        if getattr(value, "type", None) == "HEX":
            if len(value) - 2 != 2 * need:
                self.fail(value, f"{(len(value) - 2) // 2} bytes for {need}")
            raw = bytes.fromhex(value[2:])
            return np.frombuffer(bytearray(raw), dtype).reshape(shape)
        values = self.numbers(value, "i64")
        if len(values) != math.prod(shape) or np.dtype(dtype).kind not in "iu":
            self.fail(tree, f"{len(values)} integers for {dtype}{list(shape)}")
        info = np.iinfo(dtype)
        if not all(info.min <= v <= info.max for v in values):
            self.fail(tree, f"a value is outside {dtype}'s range")
        return np.array(values, dtype).reshape(shape)

    def buffer(self, tree, f: int, fn: FunctionCode) -> None:
        ref, space, offset, size, type_, constant = tree.children
        key = self.ref(ref)
        if key in fn.buffers:
            self.fail(ref, f"buffer %{key} is given twice")
        self.places[("buffer", f, key)] = (tree.meta.line, tree.meta.column)
        dtype, shape = self.type(type_)
        if dtype not in verify.DTYPES:
            self.fail(type_, f"unknown dtype '{dtype}'")
        fn.buffers[key] = Buffer(
            key, str(space), self.int(offset), self.int(size), shape, dtype
        )
        if (constant is None) != (space != "const"):
            self.fail(tree, "a const buffer, and only one, has a value (`= ...`)")
        if constant is not None:
            fn.constants[key] = self.constant(constant, dtype, shape)

    def field(self, tree, kind: str):
        """The value of a ``name = value`` tree, as a value of ``kind``."""
        name, value = tree.children
        if kind in ("i64[]", "f64[]"):
            if getattr(value, "data", None) != "list":
                self.fail(tree, f"field '{name}' takes a list (kind {kind})")
            return self.numbers(value, kind[:-2])
        want = {
            "i64": ("INT",),
            "f64": ("FLOAT",),
            "str": ("STRING",),
            "bool": ("TRUE", "FALSE"),
            "buffer": ("REF", "NONE"),
        }[kind]
        if getattr(value, "type", None) not in want:
            self.fail(tree, f"field '{name}' takes kind {kind}")
        if kind in ("i64", "f64"):
            return self.number(value, kind)
        if kind == "str":
            return self.string(value)
        if kind == "bool":
            return value.type == "TRUE"
        return NONE if value.type == "NONE" else self.ref(value)

    def fields(self, tree, op, at) -> dict:
        given = {}
        for field in [] if tree is None else tree.children:
            if field is None:
                continue
            name = str(field.children[0])
            if name in given:
                self.fail(field, f"field '{name}' is given twice")
            given[name] = field
        kinds = dict(op.fields)
        for name, field in given.items():
            if name not in kinds:
                self.fail(field, f"'{op.name}' has no field '{name}'")
        missing = [n for n in kinds if n not in given]
        if missing:
            self.fail(at, f"'{op.name}' needs fields {missing}")
        return {name: self.field(given[name], kind) for name, kind in op.fields}

    def debug(self, tree) -> DebugEntry:
        if tree is None:
            return DebugEntry((), "", "")
        ops, op, loc, value_of, perm = tree.children
        return DebugEntry(
            () if ops is None else self.numbers(ops, "i64"),
            "" if op is None else self.string(op),
            "" if loc is None else self.string(loc),
            None if value_of is None else self.int(value_of),
            None if perm is None else self.numbers(perm, "i64"),
        )

    def instruction(self, tree, f: int, i: int) -> tuple[Instruction, DebugEntry]:
        results, name, operands, fields, unit, start, end, debug = tree.children
        self.places[("instruction", f, i)] = (tree.meta.line, tree.meta.column)
        self.places[("debug", f, i)] = (tree.meta.line, tree.meta.column)
        op = BY_NAME.get(str(name))
        if op is None:
            self.fail(name, f"unknown opcode '{name}'")
        ins = Instruction(
            op.number,
            self.refs(operands),
            self.refs(results),
            self.fields(fields, op, name),
            "" if unit is None else self.string(unit),
            0 if start is None else self.int(start),
            0 if end is None else self.int(end),
        )
        return ins, self.debug(debug)

    def refs(self, tree) -> tuple[int, ...]:
        return () if tree is None else tuple(self.ref(t) for t in tree.children)

    def function(self, tree, f: int) -> FunctionCode:
        name, ddr, sram, *items = tree.children
        self.places[("function", f)] = (tree.meta.line, tree.meta.column)
        fn = FunctionCode(
            self.string(name),
            (),
            (),
            {},
            (),
            (),
            [],
            [],
            ddr_peak_bytes=self.int(ddr),
            sram_peak_bytes=self.int(sram),
        )
        by_kind: dict[str, list] = {}
        for item in items:
            by_kind.setdefault(item.data, []).append(item)
        pairs = [self.io(t, f, i) for i, t in enumerate(by_kind.get("input", []))]
        fn.inputs, fn.input_buffers = _unzip(pairs)
        pairs = [self.io(t, f, i) for i, t in enumerate(by_kind.get("output", []))]
        fn.outputs, fn.output_buffers = _unzip(pairs)
        for t in by_kind.get("buffer", []):
            self.buffer(t, f, fn)
        for i, t in enumerate(by_kind.get("island", [])):
            index, text = t.children
            if self.int(index) != i:
                self.fail(index, f"island {index} out of order: expected island {i}")
            self.places[("island", f, i)] = (t.meta.line, t.meta.column)
            fn.islands.append(self.string(text))
        for i, t in enumerate(by_kind.get("instruction", [])):
            ins, debug = self.instruction(t, f, i)
            fn.instructions.append(ins)
            fn.debug.append(debug)
        return fn

    def program(self, tree) -> Program:
        version, march, *functions = tree.children
        if self.int(version) != 1:
            self.fail(version, f"version {version}: this hbir reads version 1")
        self.places[("program",)] = (version.line, version.column)
        return Program(
            self.string(march),
            [self.function(t, f) for f, t in enumerate(functions)],
            1,
        )


def _unzip(pairs) -> tuple[tuple, tuple]:
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def _spelling(terminal: str) -> str:
    """How a terminal is written: ``','`` for COMMA, ``'unit'`` for a keyword,
    the name for a pattern (``REF``, ``INT``, ``STRING``)."""
    from lark.lexer import PatternStr

    pattern = _parser().get_terminal(terminal).pattern
    return repr(pattern.value) if isinstance(pattern, PatternStr) else terminal


def _syntax_error(e, text: str, name: str) -> HbmTextError:
    """A lark error as one located line: what was found, what was expected."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedToken

    line, column = e.line, e.column
    if isinstance(e, UnexpectedCharacters):
        what = f"unexpected character {text[e.pos_in_stream]!r}"
    elif isinstance(e, UnexpectedToken) and e.token.type != "$END":
        what = f"unexpected {e.token.value!r}"
    else:
        lines = text.splitlines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
        what = "unexpected end of text"
    names = getattr(e, "expected", None) or getattr(e, "allowed", ())
    expected = sorted({_spelling(n) for n in names} - {"$END"})
    if expected:
        what += f", expected one of {' '.join(expected)}"
    return HbmTextError(name, line, column, what)


def assemble(text: str, name: str = "<text>") -> Program:
    """Parse the text form into a verified :class:`Program`; any error is an
    :class:`HbmTextError` at its line and column."""
    from lark.exceptions import UnexpectedInput

    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, text, name) from None
    a = _Assembler(name)
    program = a.program(tree)

    def fail(place: tuple, what: str) -> NoReturn:
        at = a.places.get(place) or a.places[("function", place[1])]
        a.fail(at, what)

    verify.verify_program(program, fail)
    return program
