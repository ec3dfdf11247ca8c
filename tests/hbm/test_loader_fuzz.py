"""Fuzz the .hbm loader: every mutant is refused with an HbmFormatError or loads
as a program the writer accepts and that computes the same outputs when fed twice
with its memories poisoned in between; never another exception, never a hang.

Mutations: random byte flips, truncations and header edits of the file as
written; and, behind freshly computed checksums, field overwrites with extreme
values, byte flips, insertions and deletions inside each section (constants
inflated), so the checks behind the checksums are reached. Fixed seed.
"""

import signal
import struct
import time

import numpy as np
import pytest

from hbir.hbm import container
from hbir.hbm.errors import HbmFormatError

SEED = 20261201
CASES_PER_STRATEGY = 170  # 8 mutants a round: 1,360 mutants
ROUNDS_COMPILED = 12
SECONDS_PER_CASE = 10.0  # a hang detector: the slowest case takes ~0.2 s idle
EXTREMES = (0, 1, 2, 7, 255, 2**31, 2**32 - 1, 2**60, 2**63 - 1, 2**64 - 1)


def _flip(data: bytes, rng) -> bytes:
    out = bytearray(data)
    for at in rng.integers(0, len(out), rng.integers(1, 9)):
        out[at] ^= 1 << int(rng.integers(0, 8))
    return bytes(out)


def _overwrite(body: bytearray, rng) -> None:
    """An extreme value written over 1, 4 or 8 bytes at a random place."""
    size = int(rng.choice([1, 4, 8]))
    if len(body) < size:
        return
    at = int(rng.integers(0, len(body) - size + 1))
    value = int(rng.choice(EXTREMES)) % (1 << (8 * size))
    body[at : at + size] = value.to_bytes(size, "little")


def _splice(body: bytearray, rng) -> None:
    """Delete or insert a few random bytes."""
    at = int(rng.integers(0, len(body) + 1))
    n = int(rng.integers(1, 6))
    if rng.random() < 0.5:
        del body[at : at + n]
    else:
        body[at:at] = rng.bytes(n)


def plain_mutants(data: bytes, rng, rounds: int = CASES_PER_STRATEGY):
    """Flips, truncations and header edits: checksums left as they are."""
    for _ in range(rounds):
        yield _flip(data, rng)
        yield data[: int(rng.integers(0, len(data)))]
        out = bytearray(data)
        at = int(rng.integers(0, 64))
        out[at : at + 4] = rng.bytes(4)
        yield bytes(out[: len(data)])


def sealed_mutants(data: bytes, rng, parts, reseal, rounds=CASES_PER_STRATEGY):
    """Mutations behind recomputed checksums."""
    for _ in range(rounds):
        header = bytearray(data)
        field = int(rng.choice([8, 16, 24, 28]))
        struct.pack_into("<I", header, field, int(rng.choice(EXTREMES)) % 2**32)
        yield reseal(bytes(header)) if field != 24 else bytes(header)
        for mutate in (_overwrite, _splice, _overwrite):
            p = parts.split(data)
            mutate(p.bodies[int(rng.integers(0, len(p.bodies)))], rng)
            yield p.join()
        p = parts.split(data)
        body = p.bodies[int(rng.integers(0, len(p.bodies)))]
        body[:] = _flip(bytes(body), rng) if body else body
        yield p.join()


class _Hang(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Hang


def _load(mutant: bytes) -> str:
    """Where the mutant was refused ('framing': the header or the section table;
    'section': a value, a count or a rule inside a section), or 'loaded' after
    checking that the writer takes the program back."""
    try:
        program = container.from_bytes(mutant, "mutant.hbm")
    except HbmFormatError as e:
        return "section" if e.section.startswith("section '") else "framing"
    again = container.from_bytes(container.to_bytes(program))
    assert container.to_bytes(again) == container.to_bytes(program)
    _deterministic(program)
    return "loaded"


def _deterministic(program) -> None:
    """A loaded program is a pure function of its inputs: fed twice, with its
    memories poisoned in between, the outputs are the same bytes."""
    from hbir.hbm import Hbm
    from hbir.module import FeedError

    rng = np.random.default_rng(3)
    for f in Hbm(program).functions:
        feed = {d.name: rng.integers(-3, 4, d.shape).astype(d.dtype) for d in f.inputs}
        try:
            first = f.feed(feed)
        except FeedError:
            continue
        sim = f._sim
        for arena in (sim.ddr, sim.sram, *sim.views.values()):
            if arena.flags.writeable:
                arena.view(np.uint8).reshape(-1)[:] = rng.integers(
                    0, 256, arena.nbytes, np.uint8
                )
        second = f.feed(feed)
        for a, b in zip(first.values(), second.values(), strict=True):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


@pytest.fixture
def alarm():
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def _fuzz(mutants: list[bytes]) -> dict[str, int]:
    """Load every mutant, each within ``SECONDS_PER_CASE``; count the outcomes."""
    outcomes = {"framing": 0, "section": 0, "loaded": 0}
    slowest = 0.0
    for i, mutant in enumerate(mutants):
        started = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, SECONDS_PER_CASE)
        try:
            outcomes[_load(mutant)] += 1
        except _Hang:
            pytest.fail(f"mutant {i} took more than {SECONDS_PER_CASE} s")
        except Exception as e:
            raise AssertionError(f"mutant {i}: {type(e).__name__}: {e}") from e
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.perf_counter() - started)
    # A mutant that loads changed a value the format cannot check (a weight, a
    # cycle estimate, a loc string): it was re-written and re-loaded above.
    print(f"{len(mutants)} mutants: {outcomes}, slowest {slowest * 1000:.1f} ms")
    return outcomes


def test_loader_fuzz(program, parts, reseal, alarm):
    rng = np.random.default_rng(SEED)
    data = container.to_bytes(program)
    plain = list(plain_mutants(data, rng))
    sealed = list(sealed_mutants(data, rng, parts, reseal))
    assert len(plain) + len(sealed) >= 1000
    _fuzz(plain)
    # Behind the checksums, the checks inside the sections are reached.
    assert _fuzz(sealed)["section"] > len(sealed) / 4


def test_loader_fuzz_on_a_compiled_model(compiled_program, parts, reseal, alarm):
    """A real program: many opcodes, CPU islands, compressed constants."""
    rng = np.random.default_rng(SEED + 1)
    data = container.to_bytes(compiled_program("multi_io"))
    mutants = [
        *plain_mutants(data, rng, ROUNDS_COMPILED),
        *sealed_mutants(data, rng, parts, reseal, ROUNDS_COMPILED),
    ]
    _fuzz(mutants)
