"""hbir.save / hbir.load and the .bc container: round trips and every bad input."""

import struct

import numpy as np
import pytest

import hbir
from hbir import files

MODEL = """
func.func @forward(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %c = hbir.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %y = hbir.add %x, %c : (tensor<1x4xf32>, tensor<4xf32>) -> tensor<1x4xf32> loc("net.py":7:3)
  func.return %y : tensor<1x4xf32>
}
"""


@pytest.fixture
def model():
    return hbir.Module.parse(MODEL, "model.mlir")


@pytest.fixture
def saved(model, tmp_path):
    path = tmp_path / "model.bc"
    hbir.save(model, path)
    return path


def test_bc_round_trip_keeps_asm_and_locations(model, saved):
    loaded = hbir.load(saved)
    assert loaded.module.get_asm() == model.module.get_asm()
    debug = loaded.module.get_asm(enable_debug_info=True)
    assert 'loc("net.py":7:3)' in debug
    assert "loc(" not in loaded.module.get_asm()


def test_mlir_round_trip(model, tmp_path):
    path = tmp_path / "model.mlir"
    hbir.save(model, path)
    assert hbir.load(path).module.get_asm() == model.module.get_asm()


def test_large_constant_is_stored_compactly_and_exactly(tmp_path):
    values = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
    text = (
        "func.func @forward() -> tensor<1000000xf32> {\n"
        f'  %c = hbir.constant dense<"0x{values.tobytes().hex().upper()}"> '
        ": tensor<1000000xf32>\n"
        "  func.return %c : tensor<1000000xf32>\n}\n"
    )
    m = hbir.Module.parse(text)
    path = tmp_path / "big.bc"
    hbir.save(m, path)
    # zstd brings the hex text back to about the raw 4 MB.
    assert path.stat().st_size < 1.1 * values.nbytes
    loaded = hbir.load(path)
    (const,) = [op for op in loaded["forward"].op.walk() if op.name == "hbir.constant"]
    np.testing.assert_array_equal(
        np.frombuffer(const.value.data.data, np.float32), values
    )


def test_wrong_suffix(model, tmp_path):
    with pytest.raises(hbir.HbirFileError, match=r"model\.onnx: unsupported file type"):
        hbir.save(model, tmp_path / "model.onnx")
    (tmp_path / "model.txt").write_text(MODEL)
    with pytest.raises(hbir.HbirFileError, match="unsupported file type '.txt'"):
        hbir.load(tmp_path / "model.txt")


def test_missing_file(tmp_path):
    with pytest.raises(hbir.HbirFileError, match="cannot read: No such file"):
        hbir.load(tmp_path / "absent.bc")


def test_truncated_file(saved):
    data = saved.read_bytes()
    saved.write_bytes(data[:-10])
    with pytest.raises(hbir.HbirFileError, match="truncated: header announces"):
        hbir.load(saved)
    saved.write_bytes(data[:20])
    with pytest.raises(hbir.HbirFileError, match="shorter than the 32-byte .bc header"):
        hbir.load(saved)


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_flipped_payload_byte(saved, where):
    data = bytearray(saved.read_bytes())
    i = {"first": 32, "middle": (32 + len(data)) // 2, "last": len(data) - 1}[where]
    data[i] ^= 0x40
    saved.write_bytes(bytes(data))
    with pytest.raises(hbir.HbirFileError, match="checksum mismatch"):
        hbir.load(saved)


def test_bad_magic(saved):
    data = bytearray(saved.read_bytes())
    data[0:4] = b"MLIR"
    saved.write_bytes(bytes(data))
    with pytest.raises(hbir.HbirFileError, match="not an hbir .bc file"):
        hbir.load(saved)


def test_newer_format_version(saved):
    data = bytearray(saved.read_bytes())
    struct.pack_into("<H", data, 8, files.FORMAT_MAJOR + 1)
    saved.write_bytes(bytes(data))
    with pytest.raises(hbir.HbirFileError, match="format version 2.0 is newer"):
        hbir.load(saved)


def test_newer_minor_version_still_loads(saved, model):
    data = bytearray(saved.read_bytes())
    struct.pack_into("<H", data, 10, files.FORMAT_MINOR + 5)
    saved.write_bytes(bytes(data))
    assert hbir.load(saved).module.get_asm() == model.module.get_asm()


def test_malformed_text_inside_bc_is_located(tmp_path):
    path = tmp_path / "bad.bc"
    path.write_bytes(files.encode_bc("func.func @f() {\n  %x = hbir.nope\n}\n"))
    with pytest.raises(
        hbir.HbirParseError, match=r"bad\.bc:2:\d+: error: .*hbir\.nope"
    ):
        hbir.load(path)


def test_malformed_mlir_file(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text(MODEL.replace("tensor<4xf32>)", "tensor<4xf32)"))
    with pytest.raises(hbir.HbirParseError) as info:
        hbir.load(path)
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"{path}:4:")
    assert "Traceback" not in str(info.value)


FLOATS_WITHOUT_POINT = """
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = qnt.const_fake_quant %x {min = array<f64: -1048576.0>, max = array<f64: 1048544.0>, bits = 16 : i64} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""


def test_floats_whose_shortest_form_has_no_point_round_trip(tmp_path):
    """Regression (xDSL 0.74, see ``files.HbirPrinter``): -1048576.0 printed as a
    hex bit pattern, which xDSL's parser rejects inside ``array<f64: ...>``."""
    model = hbir.Module.parse(FLOATS_WITHOUT_POINT)
    asm = model.module.get_asm()
    assert "0x" not in asm
    (op,) = [
        op
        for op in hbir.Module.parse(asm).module.op.walk()
        if op.name == "qnt.const_fake_quant"
    ]
    assert op.min.get_values() == (-1048576.0,)
    assert op.max.get_values() == (1048544.0,)
    for suffix in (".bc", ".mlir"):
        hbir.save(model, tmp_path / f"m{suffix}")
        assert hbir.load(tmp_path / f"m{suffix}").module.get_asm() == asm


def test_xdsl_printer_still_needs_the_decimal_workaround():
    """When this fails, xDSL prints these floats re-parsably itself: drop
    ``HbirPrinter.print_float``."""
    import io

    from xdsl.printer import Printer

    stream = io.StringIO()
    Printer(stream=stream).print_op(hbir.Module.parse(FLOATS_WITHOUT_POINT).module.op)
    assert "array<f64: 0xC130000000000000>" in stream.getvalue()


# ---- issue 16: hostile .bc files are refused in bounded time and memory

HEADER = struct.Struct("<8sHHIQQ")


def container(payload: bytes, text_size: int) -> bytes:
    """A .bc file around ``payload`` whose header announces ``text_size``."""
    import zlib

    return (
        HEADER.pack(files.MAGIC, 1, 0, zlib.crc32(payload), len(payload), text_size)
        + payload
    )


def zstd_zeros(size: int) -> bytes:
    """``size`` zero bytes compressed, without ever holding them in memory."""
    import zstandard

    stream = zstandard.ZstdCompressor(level=1).compressobj()
    chunk = bytes(2**20)
    parts = [stream.compress(chunk) for _ in range(size // len(chunk))]
    return b"".join(parts) + stream.flush()


@pytest.mark.parametrize("text_size", [2**30, 2**40, 2**63, 2**64 - 1])
def test_announced_text_beyond_the_bounds_is_refused(tmp_path, text_size):
    path = tmp_path / "hostile.bc"
    path.write_bytes(container(b"\x28\xb5\x2f\xfd" + bytes(28), text_size))
    with pytest.raises(hbir.HbirFileError, match="the file is corrupt or hostile"):
        hbir.load(path)  # was MemoryError / OverflowError


def test_payload_inflating_beyond_its_announced_size_stops_there(tmp_path):
    bomb = zstd_zeros(2**30)  # 32 KB inflating to 1 GiB
    path = tmp_path / "bomb.bc"
    path.write_bytes(container(bomb, 1000))
    with pytest.raises(hbir.HbirFileError, match="holds more than 1001 bytes"):
        hbir.load(path)


def test_non_utf8_payload_is_a_file_error(tmp_path):
    import zstandard

    path = tmp_path / "bytes.bc"
    path.write_bytes(container(zstandard.ZstdCompressor().compress(b"\xff\xfe"), 2))
    with pytest.raises(hbir.HbirFileError, match="not UTF-8 text"):
        hbir.load(path)  # was UnicodeDecodeError


MEMORY_PROBE = """
import resource, sys
import hbir
from hbir import files  # everything loading needs, imported before measuring
from hbir.dialects import make_context
make_context().get_optional_op("hbir.relu")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    hbir.load(sys.argv[1])
except hbir.HbirError as e:
    print("refused:", str(e).splitlines()[0][-60:])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) // 1024)
"""


@pytest.mark.parametrize("announced", ["honest", "maximum allowed"])
def test_160kb_hostile_bc_is_refused_in_under_100mb(tmp_path, announced):
    """A 160 KB file: a zstd bomb (1 GiB of zeros) and 128 KB of other data."""
    import subprocess
    import sys

    payload = zstd_zeros(2**30) + bytes(128 * 1024)
    text_size = 2**30 if announced == "honest" else 256 * len(payload)
    path = tmp_path / "hostile.bc"
    path.write_bytes(container(payload, text_size))
    assert 150_000 < path.stat().st_size < 170_000
    res = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    message, used_mb = res.stdout.splitlines()
    assert message.startswith("refused:"), res.stdout
    assert int(used_mb) < 100, f"{used_mb} MB"


def test_save_to_a_directory_or_missing_folder(model, tmp_path):
    folder = tmp_path / "dir.bc"
    folder.mkdir()
    with pytest.raises(hbir.HbirFileError, match="is a directory: give a file name"):
        hbir.save(model, folder)  # was IsADirectoryError
    missing = tmp_path / "no" / "such" / "model.bc"
    with pytest.raises(hbir.HbirFileError, match="does not exist: create it"):
        hbir.save(model, missing)  # was FileNotFoundError
