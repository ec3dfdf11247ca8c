"""Property-based fuzzing (hypothesis) of every input hbir reads (issue 16 item 4).

Each property: whatever the input, the outcome is success or an ``HbirError``
(never another exception), within ``SECONDS`` per case; the process's peak
memory grows by less than ``MEGABYTES`` over a whole property. The runs are
derandomized (the same cases in every CI run) and bounded by ``max_examples``;
all four take under a minute. ``HBIR_FUZZ_REPORT=1`` prints, per property,
the number of cases and the slowest one.

* the asm parser: the round-trip test file's ops (pretty and generic forms),
  mutated by inserting, deleting and replacing MLIR tokens, lines and nesting;
* the ``.bc`` decoder: a real ``.bc`` with bytes flipped, cut or inserted and
  header fields set to hostile values;
* bc_editor configs: arbitrary JSON and arbitrary text;
* ``feed``: arbitrary Python, numpy and torch values for a function's inputs.
"""

from __future__ import annotations

import json
import os
import re
import resource
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hbir
from hbir import files
from hbir.bc_editor import ConfigError, read_config

pytestmark = pytest.mark.slow  # not in the fast tier (docs/testing.md)

SECONDS = 5.0  # CPU seconds a case may take: a hang guard, not a speed target
MEGABYTES = 300

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,  # the time bound is asserted below, not by hypothesis
    suppress_health_check=list(HealthCheck),
)

ROUNDTRIP = Path(__file__).parent / "filecheck" / "dialects" / "roundtrip.mlir"


def _chunks() -> list[str]:
    """The round-trip test's functions, comments dropped, one seed per function."""
    text = "\n".join(
        line for line in ROUNDTRIP.read_text().splitlines() if not line.startswith("//")
    )
    return [c.strip() + "\n" for c in re.split(r"\n(?=func\.func)", text) if c.strip()]


SEEDS = _chunks()
SEEDS += [files.print_module(hbir.Module.parse(seed).module.op) for seed in SEEDS[:3]]

TOKENS = [
    '"',
    "\\",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    "<",
    ">",
    "%",
    "^",
    "#",
    "@",
    ":",
    ",",
    "=",
    "->",
    "x",
    "?x",
    "0x",
    "0xFFFFFFFFFFFFFFFFFFFF",
    "-",
    "1e400",
    "nan",
    "99999999999999999999",
    "0",
    "dense<",
    'dense<"0x0102">',
    "tensor<",
    "xi1>",
    "xsi4>",
    "xf8E4M3FN>",
    "xcomplex<f32>>",
    "array<i64: ",
    "array<f16: 70000.0>",
    "loc(",
    'loc("é.py":1:2)',
    "#loc1",
    "图像",
    "\n",
    " ",
    "\x00",
    "\t",
    "func.return",
    "hbir.relu",
    '"hbir.nope"()',
    "^bb0:",
    "// -----",
]


class Bounds:
    """The time and memory bound of one property, and its figures."""

    def __init__(self, name: str):
        self.name = name
        self.cases = 0
        self.slowest = 0.0
        self.start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def __enter__(self) -> Bounds:
        self._t = time.process_time()  # CPU time: other jobs' load is not ours
        return self

    def __exit__(self, *exc) -> None:
        elapsed = time.process_time() - self._t
        self.cases += 1
        self.slowest = max(self.slowest, elapsed)
        assert elapsed < SECONDS, f"{self.name}: one case took {elapsed:.1f} s CPU"

    def check(self) -> None:
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - self.start_rss
        assert grown // 1024 < MEGABYTES, f"{self.name}: peak grew {grown // 1024} MB"
        if os.environ.get("HBIR_FUZZ_REPORT"):
            print(
                f"\n{self.name}: {self.cases} cases, slowest {self.slowest:.3f} s, "
                f"peak memory +{grown // 1024} MB"
            )


# Small edits that keep the text parseable and reach the verifiers and ``feed``.
NUMBERS = ["0", "1", "-1", "2", "3", "7", "31", "-31", "255", "65536", "2147483648"]
ELEMENT_TYPES = ["f32", "f16", "bf16", "f64", "si8", "si16", "si32", "i1", "ui8"]
_NUMBER = re.compile(r"(?<![\w.#%])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_ELEMENT = re.compile(r"\b(?:f16|bf16|f32|f64|si8|si16|si32|si64|i1|i8|i32|i64)\b")


@st.composite
def mutated_ir(draw) -> str:
    text = draw(st.sampled_from(SEEDS))
    kinds = ["insert", "delete", "replace", "line", "nest", "number", "type"]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(kinds))
        at = draw(st.integers(0, len(text)))
        if kind in ("number", "type"):
            pattern, choices = {
                "number": (_NUMBER, NUMBERS),
                "type": (_ELEMENT, ELEMENT_TYPES),
            }[kind]
            found = list(pattern.finditer(text))
            if found:
                m = found[draw(st.integers(0, len(found) - 1))]
                text = (
                    text[: m.start()] + draw(st.sampled_from(choices)) + text[m.end() :]
                )
        elif kind == "insert":
            text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 40)) :]
        elif kind == "replace":
            piece = draw(st.text(min_size=1, max_size=8))
            text = text[:at] + piece + text[at + len(piece) :]
        elif kind == "line":
            lines = text.splitlines(keepends=True)
            i, j = (draw(st.integers(0, len(lines) - 1)) for _ in range(2))
            lines.insert(j, lines[i]) if draw(st.booleans()) else lines.pop(i)
            text = "".join(lines)
        else:
            depth = draw(st.integers(100, 3000))
            opener = draw(st.sampled_from(["[", "(", "{", "<", "tensor<", '"x"() ({']))
            text = text[:at] + opener * depth + text[at:]
    return text


def test_asm_parser_gives_success_or_a_located_error():
    bounds = Bounds("asm parser")

    @settings(FUZZ, max_examples=1000)
    @given(mutated_ir())
    def parse(text: str) -> None:
        with bounds:
            try:
                model = hbir.Module.parse(text, "fuzz.mlir")
            except hbir.HbirError as e:
                assert str(e).startswith("fuzz.mlir"), str(e)[:200]
                assert len(str(e)) < 2000
                return
            for f in model.functions:  # what verifies must run, or say why not
                zeros = {a.name: np.zeros(a.shape, a.dtype) for a in f.inputs}
                try:
                    f.feed(zeros)
                except hbir.HbirError:
                    pass

    parse()
    bounds.check()


@pytest.fixture(scope="module")
def bc_bytes() -> bytes:
    model = hbir.Module.parse(SEEDS[0])
    return files.encode_bc(files.print_module(model.module.op))


HEADER = struct.Struct("<8sHHIQQ")


@st.composite
def mutated_bc(draw, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "header", "rechecksum"]))
        if kind == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            data = data[: draw(st.integers(0, len(data)))]
        elif kind == "insert":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        elif kind == "header" and len(data) >= HEADER.size:
            fields = list(HEADER.unpack_from(data))
            i = draw(st.integers(1, 5))
            limit = 2**16 - 1 if i < 3 else 2**32 - 1 if i == 3 else 2**64 - 1
            fields[i] = draw(st.integers(0, limit) | st.sampled_from([0, 1, limit]))
            data[: HEADER.size] = HEADER.pack(*fields)
        elif kind == "rechecksum" and len(data) >= HEADER.size:
            # a valid checksum over a damaged payload reaches the decompressor
            fields = list(HEADER.unpack_from(data))
            payload = bytes(data[HEADER.size :])
            fields[3], fields[4] = zlib.crc32(payload), len(payload)
            data[: HEADER.size] = HEADER.pack(*fields)
    return bytes(data)


def test_bc_decoder_gives_success_or_a_file_error(bc_bytes, tmp_path_factory):
    bounds = Bounds(".bc decoder")
    path = tmp_path_factory.mktemp("fuzz") / "model.bc"

    @settings(FUZZ, max_examples=600)
    @given(mutated_bc(bc_bytes))
    def load(data: bytes) -> None:
        path.write_bytes(data)
        with bounds:
            try:
                hbir.load(path)
            except hbir.HbirError as e:
                assert str(e).startswith(str(path)), str(e)[:200]

    load()
    bounds.check()


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(
            st.sampled_from(["remove_fake_quant", "function", "remove_fake_quants"])
            | st.text(max_size=5),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


def test_bc_editor_config_gives_ranges_or_a_config_error(tmp_path_factory):
    bounds = Bounds("bc_editor config")
    path = tmp_path_factory.mktemp("fuzz") / "config.json"

    @settings(FUZZ, max_examples=600)
    @given(
        JSON.map(lambda v: json.dumps(v, allow_nan=True))
        | st.text(max_size=200)
        | st.integers(1, 5000).map(lambda n: "[" * n)
    )
    def read(text: str) -> None:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        with bounds:
            try:
                read_config(path)
            except ConfigError as e:
                assert str(e).startswith(str(path))

    read()
    bounds.check()


FEED_MODEL = """
func.func @f(%x: tensor<2x3xf32>, %s: tensor<si8>) -> (tensor<2x3xf32>, tensor<si8>) {
  %y = hbir.relu %x : tensor<2x3xf32>
  func.return %y, %s : tensor<2x3xf32>, tensor<si8>
}
"""

DTYPES = ["float32", "float64", "float16", "int8", "int32", "uint8", "bool"]
TORCH_DTYPES = [torch.float32, torch.bfloat16, torch.int8, torch.float64]


@st.composite
def feed_value(draw):
    shape = draw(st.sampled_from([(2, 3), (), (3, 2), (2, 3, 1), (0,), (6,)]))
    kind = draw(st.sampled_from(["numpy", "torch", "python", "strided", "meta"]))
    if kind == "numpy":
        return np.zeros(shape, draw(st.sampled_from(DTYPES)))
    if kind == "torch":
        return torch.zeros(shape, dtype=draw(st.sampled_from(TORCH_DTYPES)))
    if kind == "strided":
        return np.zeros((3, 2), np.float32).T
    if kind == "meta":
        return torch.zeros(shape, device="meta")
    return draw(
        st.none()
        | st.integers()
        | st.floats()
        | st.text(max_size=3)
        | st.lists(st.integers(-3, 3) | st.lists(st.floats(), max_size=3), max_size=3)
    )


def test_feed_gives_outputs_or_a_feed_error():
    f = hbir.Module.parse(FEED_MODEL)["f"]
    bounds = Bounds("feed")

    @settings(FUZZ, max_examples=500)
    @given(
        st.dictionaries(
            st.sampled_from(["_input_0", "_input_1", "x"]) | st.integers(),
            feed_value(),
            max_size=3,
        )
        | feed_value()
    )
    def feed(inputs) -> None:
        with bounds:
            try:
                out = f.feed(inputs)
            except hbir.HbirError:
                return
        x = np.asarray(inputs["_input_0"])
        assert np.array_equal(out["_output_0"], np.maximum(x, 0))
        assert not np.shares_memory(out["_output_1"], np.asarray(inputs["_input_1"]))

    feed()
    bounds.check()
