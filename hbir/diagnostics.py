"""Located errors: parse and verify IR text, report ``file:line:col: error: ...``.

xDSL's own errors are a traceback for parse errors and a dump of the whole module
for verify errors. Here every failure becomes one ``HbirError`` whose message is
the MLIR-style first line plus the offending source line and a caret:

    model.mlir:12:5: error: 'hbir.conv2d' op weight has 3 dims, expected 4
      %y = hbir.conv2d %x, %w ...
      ^
"""

from __future__ import annotations

from xdsl.dialects.builtin import FileLineColLoc, ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Span


def _cache_dense_type_constraint() -> None:
    """Work around an xDSL 0.74 slowdown: its parser rebuilds one type constraint
    (``base(RankedStructure[...])``) for every ``dense<...>`` literal, which costs
    more than parsing the literal itself. The constraint is immutable, so caching
    ``base`` is safe; it makes weight-heavy models parse about 20 % faster."""
    import functools

    import xdsl.parser.attribute_parser as attribute_parser

    if not hasattr(attribute_parser.base, "cache_info"):
        attribute_parser.base = functools.cache(attribute_parser.base)


def _print_finite_floats_in_decimal() -> None:
    """Work around an xDSL 0.74 round-trip bug: a finite float whose shortest exact
    form has no '.' (``-1048576.0`` at 17 digits) prints as a hex bit pattern, which
    xDSL's own parser rejects inside ``array<f64: ...>``. Print such values as
    ``%.17e`` (``%.9e`` for f32) instead: exact, and valid MLIR everywhere."""
    import math

    from xdsl.dialects.builtin import Float32Type, Float64Type
    from xdsl.printer import Printer

    original = Printer.print_float
    if getattr(original, "_hbir_decimal", False):
        return

    def print_float(self, value, type):
        if math.isfinite(value) and isinstance(type, Float32Type | Float64Type):
            short = f"{value:.5e}"
            at = short.find("e")
            short = short[:at] + "0" + short[at:]
            if type.unpack(type.pack([float(short)]), 1)[0] != value:
                digits = 17 if isinstance(type, Float64Type) else 9
                text = f"{value:.{digits}g}"
                if "." not in text:
                    self.print_string(f"{value:.{digits - 1}e}")
                    return
        original(self, value, type)

    print_float._hbir_decimal = True
    Printer.print_float = print_float


_cache_dense_type_constraint()
_print_finite_floats_in_decimal()


class HbirError(Exception):
    """Any error caused by user input: bad IR, a bad file, a bad feed, a bad option."""


class HbirParseError(HbirError):
    """IR text that does not parse."""


class HbirVerifyError(HbirError):
    """IR that parses but breaks an op's rules."""


class HbirFileError(HbirError):
    """A model file that cannot be read: wrong suffix, truncated, corrupt, too new."""


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
    """A parser that remembers where each operation starts in the source."""

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
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}", ""
    return f"{filename}: '{op.name}'", ""


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
