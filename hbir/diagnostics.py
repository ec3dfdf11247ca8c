"""Located errors: parse and verify IR text, report ``file:line:col: error: ...``.

xDSL's own errors are a traceback for parse errors and a dump of the whole module
for verify errors. Here every failure becomes one ``HbirError`` whose message is
the MLIR-style first line plus the offending source line and a caret:

    model.mlir:12:5: error: 'hbir.conv2d' op weight has 3 dims, expected 4
      %y = hbir.conv2d %x, %w ...
      ^
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    AnyFloat,
    ComplexType,
    FileLineColLoc,
    IndexType,
    IntegerType,
    ModuleOp,
    NameLoc,
    RankedStructure,
)
from xdsl.ir import Operation
from xdsl.irdl import base
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Span

from hbir.errors import HbirError, HbirFileError, HbirParseError, HbirVerifyError

__all__ = [
    "HbirError",
    "HbirFileError",
    "HbirParseError",
    "HbirVerifyError",
    "TrackingParser",
    "describe_location",
    "parse_module",
    "verify",
]

# The type a ``dense<...>`` literal must have, built once (see
# ``TrackingParser._parse_dense_literal_type``).
_DENSE_LITERAL_TYPE = base(
    RankedStructure[IntegerType | IndexType | AnyFloat | ComplexType]
)


def _caret(span: Span) -> str:
    """The source line of ``span`` and a caret under it, indented by two spaces."""
    start = span.input.get_start_of_line(span.start)
    end = span.input.get_end_of_line(span.start)
    line = span.input.content[start:end]
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    col = span.start - start
    return f"  {line.rstrip()}\n  {' ' * col}^"


class _UnknownOpError(ParseError):
    """An unregistered op, already pointed at the operation's first token."""


class TrackingParser(Parser):
    """A parser that remembers where each operation starts in the source.

    It also works around an xDSL 0.74 slowdown (an upstream candidate): xDSL's
    ``AttrParser._parse_dense_literal_type`` rebuilds one type constraint
    (``base(RankedStructure[...])``) for every ``dense<...>`` literal, which costs
    more than parsing the literal itself. The constraint is immutable, so this
    parser builds it once; weight-heavy models parse about 20 % faster. Only this
    parser changes: xDSL's own stays as it is.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.op_spans: dict[Operation, Span] = {}

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
        self.op_spans[op] = span
        return op

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
        return type


def parse_module(
    ctx, text: str | bytes, filename: str = "<string>", line_offset: int = 0
) -> ModuleOp:
    """Parse and verify IR text; any error becomes a located ``HbirError``."""
    parser = TrackingParser(ctx, text, filename)
    try:
        module = parser.parse_module()
    except ParseError as e:
        span = e.span
        if line_offset:
            import dataclasses

            span = dataclasses.replace(span, line_offset=line_offset)
        raise HbirParseError(
            f"{span.get_location()}: error: {e.msg}\n{_caret(span)}"
        ) from None
    verify(module, parser.op_spans, filename, line_offset)
    return module


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
            import dataclasses

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
) -> None:
    """Verify every op; the first failure raises a located ``HbirVerifyError``."""
    for op in module.walk():
        try:
            op.verify_()
        except (VerifyException, DiagnosticException) as e:
            where, context = describe_location(op, spans, filename, line_offset)
            message = str(e.args[0]) if e.args else type(e).__name__
            raise HbirVerifyError(
                f"{where}: error: '{op.name}' op {message}{context}"
            ) from None
    try:
        module.verify()
    except (VerifyException, DiagnosticException) as e:
        # Structural problems (dominance, terminators): keep only the message line,
        # not the whole-module dump xDSL attaches.
        message = str(e.args[0]).splitlines()[0] if e.args else type(e).__name__
        raise HbirVerifyError(f"{filename}: error: {message}") from None
