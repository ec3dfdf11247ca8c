"""The error classes every layer raises: plain exceptions, no imports.

They sit in a leaf module so that the dialects (``OpIdError``), the passes and the
torch side can raise them without importing xDSL or the face. ``hbir`` and
``hbir.diagnostics`` re-export them.
"""


class HbirError(Exception):
    """Any error caused by user input: bad IR, a bad file, a bad feed, a bad option."""


class HbirParseError(HbirError):
    """IR text that does not parse."""


class HbirVerifyError(HbirError):
    """IR that parses but breaks an op's rules."""


class HbirFileError(HbirError):
    """A model file that cannot be read: wrong suffix, truncated, corrupt, too new."""


class HbirOpError(HbirError):
    """IR that verifies but that a pass must refuse, at one op.

    ``where`` is the op's location as the pass knows it (``file:line:col`` of its
    torch origin, or its name); a tool that kept the op's place in the text it
    parsed (``hbir-opt``) re-locates the message there with ``at``.
    """

    def __init__(self, op, where: str, what: str):
        self.op, self.what = op, what
        super().__init__(f"{where}: error: '{op.name}' op {what}")

    def at(self, where: str) -> str:
        return f"{where}: error: '{self.op.name}' op {self.what}"


class HbirValueError(HbirError, ValueError):
    """A wrong option or argument value (an unknown rounding mode, a consistency
    level out of range, a table count no table can have); also a ValueError."""


class HbirOutputError(HbirError, OSError):
    """A file the tools were asked to write cannot be written (a missing folder,
    a file where a folder should be, a name too long, no permission)."""

    def __init__(self, path, what: str, e: OSError):
        self.path = str(path)
        super().__init__(f"{self.path}: cannot write {what}: {e.strerror or e}")
