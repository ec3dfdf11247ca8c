"""Model files: ``.mlir`` (text) and ``.bc`` (hbir's own versioned container).

``.bc`` layout (little endian)::

    offset  size  field
    0       8     magic  b"HBIRBC\\x00\\x01"
    8       2     format major version  (a newer major cannot be read)
    10      2     format minor version  (newer minors stay readable)
    12      4     CRC-32 of the payload
    16      8     payload size in bytes
    24      8     text size in bytes (after decompression)
    32      ...   payload: zstd-compressed MLIR text in generic form with locations

Large constants are hex blobs inside the text (xDSL prints any constant of more
than 100 elements that way), which zstd brings back to about their raw size. No
pickle: a ``.bc`` file is data only.

Reading is bounded before anything is inflated: the text may hold at most
``MAX_TEXT_SIZE`` bytes (4 GiB) and at most ``MAX_COMPRESSION_RATIO`` (256) times
the payload. hbir's own text compresses about 2x (weights) to 66x (100,000
identical ops, the most repetitive text measured); a file beyond either bound is
refused as corrupt or hostile (a 32 KB payload inflating to 1 GiB). The payload
is inflated in a stream that stops at the announced size.
"""

from __future__ import annotations

import io
import math
import os
import struct
import zlib

from xdsl.dialects.builtin import Float32Type, Float64Type, ModuleOp
from xdsl.printer import Printer

from hbir.errors import HbirFileError

MAGIC = b"HBIRBC\x00\x01"
FORMAT_MAJOR = 1
FORMAT_MINOR = 0
_HEADER = struct.Struct("<8sHHIQQ")
SUFFIXES = (".bc", ".mlir")
MAX_TEXT_SIZE = 2**32
MAX_COMPRESSION_RATIO = 256
_CHUNK = 2**20


class HbirPrinter(Printer):
    """xDSL's printer with finite floats always in decimal: what hbir prints with.

    It works around an xDSL 0.74 round-trip bug (an upstream candidate):
    ``Printer.print_float`` prints a finite float whose shortest exact form has no
    '.' (``-1048576.0`` at 17 digits) as a hex bit pattern, which xDSL's own parser
    rejects inside ``array<f64: ...>``. Such values print as ``%.16e`` (``%.8e``
    for f32) here instead: exact, and valid MLIR everywhere. xDSL's own printer
    stays as it is.
    """

    def print_float(self, value: float, type) -> None:
        if math.isfinite(value) and isinstance(type, Float32Type | Float64Type):
            short = f"{value:.5e}"
            at = short.find("e")
            short = short[:at] + "0" + short[at:]
            if type.unpack(type.pack([float(short)]), 1)[0] != value:
                digits = 17 if isinstance(type, Float64Type) else 9
                if "." not in f"{value:.{digits}g}":
                    self.print_string(f"{value:.{digits - 1}e}")
                    return
        super().print_float(value, type)


def print_module(module: ModuleOp, generic: bool = True, debuginfo: bool = True) -> str:
    """The module as MLIR text (generic form with locations: lossless)."""
    stream = io.StringIO()
    HbirPrinter(
        stream=stream, print_generic_format=generic, print_debuginfo=debuginfo
    ).print_op(module)
    stream.write("\n")
    return stream.getvalue()


def encode_bc(text: str) -> bytes:
    """Pack IR text into the ``.bc`` container."""
    import zstandard

    raw = text.encode("utf-8")
    payload = zstandard.ZstdCompressor(level=3).compress(raw)
    header = _HEADER.pack(
        MAGIC, FORMAT_MAJOR, FORMAT_MINOR, zlib.crc32(payload), len(payload), len(raw)
    )
    return header + payload


def decode_bc(data: bytes, path: str = "<bytes>") -> str:
    """Unpack a ``.bc`` container to IR text, checking every field."""
    import zstandard

    if len(data) < _HEADER.size:
        raise HbirFileError(
            f"{path}: truncated: {len(data)} bytes, shorter than the "
            f"{_HEADER.size}-byte .bc header"
        )
    magic, major, minor, crc, size, text_size = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise HbirFileError(f"{path}: not an hbir .bc file (bad magic {magic!r})")
    if major > FORMAT_MAJOR:
        raise HbirFileError(
            f"{path}: format version {major}.{minor} is newer than this hbir reads "
            f"({FORMAT_MAJOR}.x); upgrade hbir to load it"
        )
    payload = data[_HEADER.size :]
    if len(payload) != size:
        raise HbirFileError(
            f"{path}: truncated: header announces {size} payload bytes, "
            f"file holds {len(payload)}"
        )
    if zlib.crc32(payload) != crc:
        raise HbirFileError(f"{path}: checksum mismatch: the file is corrupt")
    limit = min(MAX_TEXT_SIZE, MAX_COMPRESSION_RATIO * max(size, 1))
    if text_size > limit:
        raise HbirFileError(
            f"{path}: header announces {text_size} bytes of text from a "
            f"{size}-byte payload; at most {limit} are read (at most "
            f"{MAX_COMPRESSION_RATIO}x the payload and {MAX_TEXT_SIZE} bytes): "
            "the file is corrupt or hostile"
        )
    raw = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(
            payload, read_across_frames=True
        ) as reader:
            while len(raw) <= text_size:
                chunk = reader.read(min(_CHUNK, text_size + 1 - len(raw)))
                if not chunk:
                    break
                raw += chunk
    except zstandard.ZstdError as e:
        raise HbirFileError(f"{path}: corrupt payload: {e}") from None
    if len(raw) != text_size:
        more = "more than " if len(raw) > text_size else ""
        raise HbirFileError(
            f"{path}: payload holds {more}{len(raw)} bytes, expected {text_size}"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HbirFileError(
            f"{path}: the payload is not UTF-8 text (byte {e.start})"
        ) from None


def _suffix(path: str) -> str:
    suffix = os.path.splitext(path)[1]
    if suffix not in SUFFIXES:
        raise HbirFileError(
            f"{path}: unsupported file type '{suffix}': expected one of {SUFFIXES}"
        )
    return suffix


def save_module(module: ModuleOp, path: str | os.PathLike) -> None:
    """Write ``.bc`` (container) or ``.mlir`` (plain generic text)."""
    path = os.fspath(path)
    suffix = _suffix(path)
    if os.path.isdir(path):
        raise HbirFileError(f"{path}: is a directory: give a file name")
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        raise HbirFileError(f"{path}: folder '{folder}' does not exist: create it")
    text = print_module(module)
    data = encode_bc(text) if suffix == ".bc" else text.encode("utf-8")
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as e:
        raise HbirFileError(f"{path}: cannot write: {e.strerror}") from None


def read_text(path: str | os.PathLike) -> str:
    """The IR text inside a ``.bc`` or ``.mlir`` file."""
    path = os.fspath(path)
    suffix = _suffix(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise HbirFileError(f"{path}: cannot read: {e.strerror}") from None
    if suffix == ".bc":
        return decode_bc(data, path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HbirFileError(f"{path}: not UTF-8 text at byte {e.start}") from None
