"""The errors of ``.hbm`` files and their text form, each located.

A binary file's error names the file, the section and the byte offset where
the bad value starts; a text form's error names the line and column.
"""

from __future__ import annotations

from hbir.errors import HbirError, HbirFileError, HbirParseError


class HbmFormatError(HbirFileError):
    """A ``.hbm`` file that breaks the format: truncated, corrupt, too new or
    hostile. Raised by the loader before anything runs."""

    def __init__(self, file: str, section: str, offset: int, what: str):
        self.file, self.section, self.offset, self.what = file, section, offset, what
        super().__init__(f"{file}: {section} at byte {offset}: {what}")


class HbmTextError(HbirParseError):
    """A text-form program (``.hbms``) that does not parse or breaks a rule."""

    def __init__(self, name: str, line: int, column: int, what: str):
        self.line, self.column, self.what = line, column, what
        super().__init__(f"{name}:{line}:{column}: error: {what}")


class HbmWriteError(HbirError, ValueError):
    """A program the writer refuses (it breaks a rule of ``verify.py``): named
    by the instruction, buffer or function. Programs from the compiler or the
    assembler never raise it: both verify with the same rules first."""
