"""Located errors: parse and verify IR text, report ``file:line:col: error: ...``.

xDSL's own errors are a traceback for parse errors and a dump of the whole module
for verify errors. Here every failure becomes one ``HbirError`` whose message is
the MLIR-style first line plus the offending source line and a caret:

    model.mlir:12:5: error: 'hbir.conv2d' op weight has 3 dims, expected 4
      %y = hbir.conv2d %x, %w ...
      ^
"""

from __future__ import annotations

import dataclasses
import math

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    AnyFloat,
    ArrayAttr,
    BytesAttr,
    CallSiteLoc,
    ComplexType,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FileLineColLoc,
    FloatAttr,
    FusedLoc,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    NameLoc,
    NoneAttr,
    RankedStructure,
    StringAttr,
    TensorType,
    f64,
    i1,
    i64,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Operation, Region, SSAValue
from xdsl.irdl import AttrConstraint, IRDLOperation, base
from xdsl.parser import Parser
from xdsl.parser.generic_parser import ParserState
from xdsl.traits import IsolatedFromAbove
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

from hbir.errors import (
    HbirError,
    HbirFileError,
    HbirOpError,
    HbirParseError,
    HbirVerifyError,
)
from hbir.lexer import HbirLexer

__all__ = [
    "HbirError",
    "HbirFileError",
    "HbirOpError",
    "HbirParseError",
    "HbirVerifyError",
    "TrackingParser",
    "describe_location",
    "parse_module",
    "relocate",
    "verify",
]

# What xDSL 0.74 raises, besides ``ParseError``, on text that does not make a
# valid op: a property of the wrong kind (``VerifyException``), a value out of
# its type's range (``ValueError``: ``dense<128> : tensor<2xsi8>``;
# ``OverflowError``: ``array<f16: 70000.0>``).
_BUILD_ERRORS = (VerifyException, DiagnosticException, ValueError, OverflowError)

# The most elements a constant written as one value (``dense<0.0>``) may have: it
# is expanded in memory when parsed (2**24 f32 elements are 64 MiB).
MAX_SPLAT_ELEMENTS = 2**24
_LARGE_SPLAT = 4096  # above this, a splat is packed once and repeated

# The type a ``dense<...>`` literal must have, built once (see
# ``TrackingParser._parse_dense_literal_type``).
_DENSE_LITERAL_TYPE = base(
    RankedStructure[IntegerType | IndexType | AnyFloat | ComplexType]
)


# An error quotes at most this many characters of its source line, around the
# column (a weight line can be megabytes long), and of its message.
QUOTE_CHARS = 120
MESSAGE_CHARS = 400


def _caret(span: Span) -> str:
    """The source line of ``span`` and a caret under it, indented by two spaces."""
    start = span.input.get_start_of_line(span.start)
    end = span.input.get_end_of_line(span.start)
    col = span.start - start
    if end - start > QUOTE_CHARS:  # quote a window around the column
        first = max(start, min(span.start - QUOTE_CHARS // 2, end - QUOTE_CHARS))
        last = min(end, first + QUOTE_CHARS)
        head = "..." if first > start else ""
        tail = "..." if last < end else ""
        col = len(head) + span.start - first
        start, end = first, last
    else:
        head = tail = ""
    line = span.input.content[start:end]
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    return f"  {head}{line.rstrip()}{tail}\n  {' ' * col}^"


def _short(message: str) -> str:
    """``message`` cut to ``MESSAGE_CHARS`` (xDSL quotes whole attributes)."""
    if len(message) <= MESSAGE_CHARS:
        return message
    return message[:MESSAGE_CHARS] + f"... ({len(message)} characters)"


class _UnknownOpError(ParseError):
    """An unregistered op, already pointed at the operation's first token."""


# The name of a placeholder for a location alias used before its definition
# (``loc(#loc3)``, with ``#loc3 = loc(...)`` at the end): no real name holds NUL.
_ALIAS_USE = "\0"


def _array_from_list(value: ArrayAttr, constraint: AttrConstraint) -> Attribute | None:
    """``[1, 2]`` / ``[-1.28e+01]`` as the i64 / f64 array a property holds."""
    items = value.data
    if not all(isinstance(a, IntegerAttr | FloatAttr) for a in items):
        return None
    numbers = [a.value.data for a in items]
    candidates = [DenseArrayBase.from_list(f64, [float(n) for n in numbers])]
    if all(isinstance(a, IntegerAttr) for a in items):
        candidates.insert(0, DenseArrayBase.from_list(i64, numbers))
    return next((c for c in candidates if constraint.verifies(c)), None)


class TrackingParser(Parser):
    """A parser that remembers where each operation starts in the source.

    It reads what MLIR's own printers write and xDSL 0.74 does not:

    * location aliases used before their definition, ``loc(#loc3)`` with
      ``#loc3 = loc(...)`` at the end of the file (``mlir-opt
      --mlir-print-debuginfo``);
    * an i64 or f64 array property written as a list, ``min = [-1.28e+01]``, the
      way the reference toolchain prints them (``hbir/asm.py``).

    It also works around an xDSL 0.74 slowdown (an upstream candidate): xDSL's
    ``AttrParser._parse_dense_literal_type`` rebuilds one type constraint
    (``base(RankedStructure[...])``) for every ``dense<...>`` literal, which costs
    more than parsing the literal itself. The constraint is immutable, so this
    parser builds it once; weight-heavy models parse about 20 % faster. Only this
    parser changes: xDSL's own stays as it is.
    """

    def __init__(self, ctx, input: str | bytes, name: str = "<unknown>"):
        # xDSL's constructor lexes the first token with its own lexer: give it
        # nothing, then lex with ours (``hbir/lexer.py``). Like xDSL's, the first
        # token is lexed here: create the parser where its errors are caught.
        super().__init__(ctx, "", name)
        text = input.decode("utf-8") if isinstance(input, bytes) else input
        self._parser_state = ParserState(HbirLexer(Input(text, name)))
        self._dense_start = 0
        self.op_spans: dict[Operation, Span] = {}
        self._loc_aliases: dict[str, Attribute] = {}
        self._loc_alias_uses: dict[str, Span] = {}

    def parse_operation(self) -> Operation:
        span = self._current_token.span
        try:
            op = super().parse_operation()
        except ParseError as e:
            # xDSL points an unknown op name at the token after it, often on the
            # next line; point at the operation instead.
            if isinstance(e, _UnknownOpError) or "is not registered" not in e.msg:
                raise
            raise _UnknownOpError(span, e.msg) from None
        except _BUILD_ERRORS as e:
            # Raised while the op is built from what was parsed (a property of
            # the wrong kind, a value out of its type's range): point at the op.
            raise ParseError(span, _message(e)) from None
        if isinstance(op, IRDLOperation):
            _arrays_from_lists(op)
        self.op_spans[op] = span
        return op

    # ---- location aliases
    def _parse_location(self):
        token = self._current_token
        if (
            token.kind == MLIRTokenKind.HASH_IDENT
            and token.text not in self.attribute_aliases
        ):
            self._consume_token()
            self._loc_alias_uses.setdefault(token.text, token.span)
            return NameLoc(StringAttr(_ALIAS_USE + token.text), NoneAttr())
        return super()._parse_location()

    def _parse_alias_def(self):
        # xDSL 0.74's body, plus `#name = loc(...)`.
        token = self._parse_optional_token_in(
            [MLIRTokenKind.EXCLAMATION_IDENT, MLIRTokenKind.HASH_IDENT]
        )
        if token is None:
            self.raise_error("expected attribute name")
        name = token.text
        if name in self.attribute_aliases or name in self._loc_aliases:
            self.raise_error(f"re-declaration of alias '{name}'", token.span)
        self.parse_punctuation("=", "after attribute alias name")
        location = self.parse_optional_location()
        if location is not None:
            self._loc_aliases[name] = location
        else:
            self.attribute_aliases[name] = self.parse_attribute()

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        module = super().parse_module(allow_implicit_module)
        if self._loc_alias_uses:
            for op in module.walk():
                op.location = self._resolve(op.location)
                for region in op.regions:
                    for block in region.blocks:
                        for arg in block.args:
                            arg.location = self._resolve(arg.location)
        return module

    def _resolve(self, loc: Attribute, seen: tuple[str, ...] = ()) -> Attribute:
        """``loc`` with every alias placeholder replaced by its definition."""
        if isinstance(loc, NameLoc) and loc.desc.data.startswith(_ALIAS_USE):
            alias = loc.desc.data[1:]
            if alias not in self._loc_aliases:
                raise ParseError(
                    self._loc_alias_uses[alias], f"undefined location alias '{alias}'"
                )
            if alias in seen:
                raise ParseError(
                    self._loc_alias_uses[alias], f"location alias '{alias}' is cyclic"
                )
            return self._resolve(self._loc_aliases[alias], (*seen, alias))
        if isinstance(loc, NameLoc):
            return NameLoc(loc.desc, self._resolve(loc.location, seen))
        if isinstance(loc, CallSiteLoc):
            return CallSiteLoc(
                self._resolve(loc.callee, seen), self._resolve(loc.caller, seen)
            )
        if isinstance(loc, FusedLoc):
            inner = [self._resolve(a, seen) for a in loc.locations.data]
            return FusedLoc(tuple(inner), loc.metadata)
        return loc

    def parse_dense_int_or_fp_elements_attr(self, type):
        start = self._dense_start = self._current_token.span.start
        try:
            attr = self._parse_large_splat(type)
            if attr is None:
                attr = super().parse_dense_int_or_fp_elements_attr(type)
        except ParseError as e:
            # xDSL reports a literal that does not fit its type at the token
            # after it, often the next line: point at the literal.
            if e.span.start < self._current_token.span.start:
                raise
            raise ParseError(Span(start, start + 5, self.lexer.input), e.msg) from None
        # xDSL 0.74 accepts a hex blob whose length is not a whole number of
        # elements of the type (9 bytes for tensor<2xf32>); refuse it here.
        t = attr.get_type()
        size = math.prod(t.get_shape()) * t.element_type.compile_time_size
        if len(attr.data.data) != size:
            raise ParseError(
                Span(start, self.pos, self.lexer.input),
                f"dense data holds {len(attr.data.data)} bytes, "
                f"its type {t} needs {size}",
            )
        return attr

    def _parse_large_splat(self, type):
        """``dense<v> : T`` for a large ``T`` as bytes, or None (nothing consumed).

        xDSL expands a splat into a Python list of every element before packing
        it (400 MB for 2**24 f32 elements); here the one packed value is repeated.
        """
        start = self._current_token.span.start
        if self.parse_optional_punctuation("<") is None:
            return None
        token = self._current_token
        value = None
        if not token.text.startswith(("0x", "0X")):
            value = self.parse_optional_number()
        if value is None or self.parse_optional_punctuation(">") is None:
            self._resume_from(start)
            return None
        if type is None:
            self.parse_punctuation(":", " in dense attribute")
            type = self._parse_dense_literal_type()
        count = math.prod(type.get_shape())
        element = type.element_type
        fits = isinstance(element, AnyFloat) or (
            isinstance(element, IntegerType | IndexType) and isinstance(value, int)
        )
        if count <= _LARGE_SPLAT or not fits:
            self._resume_from(start)  # small or unusual: xDSL's own way
            return None
        one = DenseIntOrFPElementsAttr.from_list(TensorType(element, [1]), [value])
        return DenseIntOrFPElementsAttr(type, BytesAttr(one.data.data * count))

    def _parse_dense_literal_type(self):
        # xDSL 0.74's body, with the constraint built once instead of per literal.
        type = self.expect(self.parse_optional_type, "Dense attribute must be typed!")
        if not _DENSE_LITERAL_TYPE.verifies(type):
            self.raise_error(
                "Expected memref, vector or tensor type of "
                "integer, index, float, or complex type"
            )
        if any(dim == DYNAMIC_INDEX for dim in list(type.get_shape())):
            self.raise_error("Dense literal attribute should have a static shape.")
        # A splat (one value for the whole type) is expanded in memory: bound it.
        # Written-out data (decimals, hex) takes more characters than elements.
        count = math.prod(type.get_shape())
        if count > MAX_SPLAT_ELEMENTS and count > self.pos - self._dense_start:
            self.raise_error(
                f"a splat constant of {count} elements: at most "
                f"{MAX_SPLAT_ELEMENTS} elements can be given as one value"
            )
        return type


def _arrays_from_lists(op: IRDLOperation) -> None:
    """Turn list-valued properties into the i64 / f64 arrays the op defines."""
    lists = [n for n, v in op.properties.items() if isinstance(v, ArrayAttr)]
    if not lists:
        return
    defs = type(op).get_irdl_definition().properties
    for name in lists:
        if name in defs:
            array = _array_from_list(op.properties[name], defs[name].constr)
            if array is not None:
                op.properties[name] = array


def _message(e: BaseException, first_line: bool = True) -> str:
    """An exception's message, shortened (xDSL appends whole-module dumps)."""
    if isinstance(e, RecursionError):
        return "nesting too deep (brackets, types or regions)"
    text = str(e.args[0]) if e.args else ""
    if first_line and text:
        text = text.splitlines()[0]
    return _short(text or type(e).__name__)


def _located(span: Span, message: str, line_offset: int) -> HbirParseError:
    if line_offset:
        span = dataclasses.replace(span, line_offset=line_offset)
    return HbirParseError(
        f"{span.get_location()}: error: {_short(message)}\n{_caret(span)}"
    )


def parse_module(
    ctx,
    text: str | bytes,
    filename: str = "<string>",
    line_offset: int = 0,
    spans: dict[Operation, Span] | None = None,
) -> ModuleOp:
    """Parse and verify IR text; any error becomes a located ``HbirError``.

    Time is linear in the text (``hbir/lexer.py``); nesting is bounded by
    Python's recursion limit and refused beyond it. ``spans`` (a dict) receives
    each parsed op's place in the text, to locate later errors at it
    (``relocate``).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise HbirParseError(
                f"{filename}: error: not UTF-8 text at byte {e.start}"
            ) from None
    parser = None
    try:
        parser = TrackingParser(ctx, text, filename)
        module = parser.parse_module()
    except ParseError as e:
        raise _located(e.span, e.msg, line_offset) from None
    except (*_BUILD_ERRORS, RecursionError, MemoryError) as e:
        # Raised outside any op (or too deep to locate there): point at the
        # token the parser stopped on. (MemoryError: a size xDSL computes with,
        # such as the range of an integer type of 2**64 bits.)
        if parser is None:
            span = Span(0, 0, Input(text, filename))
        else:
            span = parser._current_token.span
        message = (
            "a value too large to hold (an integer type or size of that many bits)"
            if isinstance(e, MemoryError)
            else _message(e)
        )
        raise _located(span, message, line_offset) from None
    verify(module, parser.op_spans, filename, line_offset)
    if spans is not None:
        spans.update(parser.op_spans)
    return module


def relocate(
    error: HbirError, spans: dict[Operation, Span], line_offset: int = 0
) -> HbirError:
    """A pass's refusal at an op (``HbirOpError``) located at the op's place in the
    parsed text, with the source line and a caret; other errors unchanged."""
    if not isinstance(error, HbirOpError) or error.op not in spans:
        return error
    where, context = describe_location(error.op, spans, line_offset=line_offset)
    return HbirOpError(error.op, where, error.what + context)


def describe_location(
    op: Operation,
    spans: dict[Operation, Span] | None = None,
    filename: str = "<module>",
    line_offset: int = 0,
) -> tuple[str, str]:
    """(``file:line:col`` or a fallback, source context) for an op."""
    if spans and op in spans:
        span = spans[op]
        if line_offset:
            span = dataclasses.replace(span, line_offset=line_offset)
        return str(span.get_location()), "\n" + _caret(span)
    loc = op.location
    origin = ""
    if isinstance(loc, NameLoc):  # export's "<module path>|<torch op>#<n>"(file:line)
        origin, loc = f" ({loc.desc.data})", loc.location
    if isinstance(loc, FileLineColLoc):
        where = f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
        return where + origin, ""
    return f"{filename}: '{op.name}'{origin}", ""


def verify(
    module: ModuleOp,
    spans: dict[Operation, Span] | None = None,
    filename: str = "<module>",
    line_offset: int = 0,
    rules_checked: bool = False,
) -> None:
    """Verify every op; the first failure raises a located ``HbirVerifyError``.

    Beyond the ops' own rules and xDSL's structural checks, it refuses what would
    make ``feed`` fail later: a value used before its definition, a function
    without a body, tensor types the interpreter cannot hold (dynamic or zero-size
    dimensions, element types without a numpy dtype), two inputs or two outputs
    with one name. ``rules_checked``: xDSL's verifier has just passed on this
    very module (a pass pipeline that verified after its last pass), so only
    the checks beyond it run.
    """

    def each_op(check) -> None:
        for op in module.walk():
            try:
                check(op)
            except (VerifyException, DiagnosticException) as e:
                where, context = describe_location(op, spans, filename, line_offset)
                message = _message(e, first_line=False)
                raise HbirVerifyError(
                    f"{where}: error: '{op.name}' op {message}{context}"
                ) from None

    try:
        # xDSL's verifier runs every op's own rules once; only when it fails
        # are they run op by op, so that the first failing op is located.
        try:
            if not rules_checked:
                module.verify()
        except (VerifyException, DiagnosticException) as e:
            each_op(_check_op)
            # Structural problems (terminators, regions): keep only the message
            # line, not the whole-module dump xDSL attaches.
            raise HbirVerifyError(f"{filename}: error: {_message(e)}") from None
        each_op(_check_types)
        each_op(_check_marks)  # after every op's own rules: they read neighbours
        _check_order(module.body, set(), spans, filename, line_offset)
    except RecursionError:
        raise HbirVerifyError(
            f"{filename}: error: {_message(RecursionError())}"
        ) from None


def _check_op(op: Operation) -> None:
    op.verify_()
    _check_types(op)


def _check_marks(op: Operation) -> None:
    """The ``qnt.exact`` / ``qnt.inexact`` marks of ``op`` (the qnt dialect is
    imported only for a module that has marks: it needs numpy)."""
    if op.attributes and any(name.startswith("qnt.") for name in op.attributes):
        from hbir.dialects import qnt

        qnt.check_marks(op)


def _check_types(op: Operation) -> None:
    """A function's signature and an op's results: types ``feed`` can run."""
    # imported here: the dialect's definitions take half a second to load, and
    # the tools import this module before they parse their arguments
    from hbir.dialects.hbir import numpy_dtype

    if isinstance(op, FuncOp):
        if not op.body.blocks:
            raise VerifyException(
                f"@{op.sym_name.data} is a declaration without a body; hbir "
                "models define every function they hold"
            )
        types = (*op.function_type.inputs.data, *op.function_type.outputs.data)
        for kind, attrs, count in (
            ("input", op.arg_attrs, len(op.function_type.inputs)),
            ("output", op.res_attrs, len(op.function_type.outputs)),
        ):
            _check_names(kind, attrs, count)
    elif op.name == "hbir.constant":  # data of any type; its users are checked
        return
    else:
        types = op.result_types
    for t in types:
        if not isinstance(t, TensorType):
            continue
        shape = t.get_shape()
        if any(d == DYNAMIC_INDEX for d in shape):
            raise VerifyException(f"{t} has a dynamic dimension: shapes are static")
        if 0 in shape:
            raise VerifyException(f"{t} has a zero-size dimension")
        element = t.element_type
        try:
            numpy_dtype(element)
            if isinstance(element, IndexType) or (
                element == i1 and not _makes_or_moves_masks(op)
            ):
                raise ValueError("no hbir kernel computes on it")
        except ValueError:
            raise VerifyException(
                f"{t}: element type {t.element_type} is not supported (use "
                "si8/si16/si32/si64, ui8, i8-i64, f16, bf16, f32 or f64)"
            ) from None


def _makes_or_moves_masks(op: Operation) -> bool:
    """i1 masks: made by ``hbir.compare``, moved by the data-movement ops, cast
    (to values), a function's inputs or outputs."""
    from hbir.runtime import op_table

    if isinstance(op, FuncOp) or op.name in ("hbir.compare", "hbir.cast"):
        return True
    if op.name.startswith("npu."):  # the opcode's spec says which take masks
        return True
    return op_table.LOWERING.get(op.name) == op_table.MOVE


def _check_names(kind: str, attrs: ArrayAttr | None, count: int) -> None:
    """Every input (output) of a function has its own ``hbir.name``."""
    seen: set[str] = set()
    for i in range(count):
        name = f"_{kind}_{i}"
        if attrs is not None and i < len(attrs.data):
            given = attrs.data[i].data.get("hbir.name")
            if isinstance(given, StringAttr):
                name = given.data
        if name in seen:
            raise VerifyException(
                f"two {kind}s are named '{name}': give each {kind} its own hbir.name"
            )
        seen.add(name)


def _check_order(
    region: Region,
    visible: set[SSAValue],
    spans: dict[Operation, Span] | None,
    filename: str,
    line_offset: int,
) -> None:
    """Every operand is defined before its use (block arguments, earlier ops,
    enclosing blocks). Regions of several blocks are left to their ops."""
    if len(region.blocks) != 1:
        return
    block = region.block
    defined = visible | set(block.args)
    for op in block.ops:
        for i, value in enumerate(op.operands):
            if value not in defined:
                where, context = describe_location(op, spans, filename, line_offset)
                name = f" (%{value.name_hint})" if value.name_hint else ""
                raise HbirVerifyError(
                    f"{where}: error: '{op.name}' op operand {i}{name} is used "
                    f"before it is defined{context}"
                )
        for inner in op.regions:
            isolated = op.has_trait(IsolatedFromAbove)
            _check_order(
                inner, set() if isolated else defined, spans, filename, line_offset
            )
        defined.update(op.results)
