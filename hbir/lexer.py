"""The MLIR lexer hbir parses with: xDSL 0.74's, with two string-literal fixes.

Both are upstream candidates; only hbir's parser uses this lexer, xDSL's own
stays as it is.

* **Linear time.** xDSL matches a string literal with
  ``"(?:[^"\\\\\\n\\v\\f]+|\\\\...)*"``: a ``+`` inside a ``*``, which backtracks
  exponentially when the closing quote is missing (one stray ``"`` in an op line
  took 0.3 s at 20 characters after it and 87 s at 30). Here both quantifiers are
  possessive (``++``, ``*+``), so a literal is matched or refused in one pass.
* **UTF-8 text stays text.** MLIR's printers (xDSL's and MLIR's own) escape every
  non-ASCII byte: ``"jos\\C3\\A9"``. xDSL lexes such a literal as bytes, so
  ``loc("/home/jos\\C3\\A9/model.py":3:1)`` failed to parse ("Unexpected location
  syntax") and an input named ``"图像"`` came back as bytes. Here a literal whose
  bytes are valid UTF-8 is a string, as its own docstring says it should be;
  other bytes stay a bytes literal.
"""

from __future__ import annotations

import re

from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Position, Span, Token
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRToken, MLIRTokenKind, StringLiteral

_STRING_LITERAL = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')


class HbirLexer(MLIRLexer):
    """xDSL's MLIR lexer with linear-time, UTF-8-aware string literals."""

    def _lex_string_literal(self, start_pos: Position) -> MLIRToken:
        m = _STRING_LITERAL.match(self.input.content, start_pos)
        if m is None:
            raise ParseError(
                Span(start_pos, start_pos + 1, self.input),
                "string literal not closed on this line (or a bad escape: only "
                '\\n, \\t, \\\\, \\" and two hex digits are allowed)',
            )
        self.pos = m.end()
        literal = StringLiteral(start_pos, self.pos, self.input)
        if "\\" not in literal.text:
            return Token(MLIRTokenKind.STRING_LIT, literal)
        try:
            literal.bytes_contents.decode("utf-8")
        except UnicodeDecodeError:
            return Token(MLIRTokenKind.BYTES_LIT, literal)
        return Token(MLIRTokenKind.STRING_LIT, literal)
