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
