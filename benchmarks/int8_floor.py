"""The CPU's int8 floor: its peak int8 multiply-accumulate rate, measured.

Run: ``python benchmarks/int8_floor.py``

A small C kernel (compiled here with the system's ``cc -O2 -march=native``, run
through ctypes) runs the inner block of an int8 GEMM: 2 broadcast activations
times 4 weight vectors read from L1, into 8 independent accumulators, with the
widest int8 dot-product instruction the CPU has: ``vpdpbusd`` on zmm (AVX-512
VNNI) or ymm (AVX-VNNI), else AVX2's ``vpmaddubsw`` + ``vpmaddwd`` + ``vpaddd``
(32 u8 x s8 products per ymm step). The weights change at every step, so the
compiler can neither hoist a product out of the loop nor merge two (a kernel of
constant operands measures an add, not a multiply-accumulate). The figure is
the best of many short bursts (about 0.1 ms: long enough to hide the call,
short enough not to be preempted on a shared machine). A model's floor is its
conv / linear / matmul MACs (``torch.utils.flop_counter``) at that rate: no int8
runtime on this CPU can be faster (``benchmarks/peers.py`` divides every runtime by it).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
import time

KERNEL = r"""
#include <immintrin.h>
#include <stdint.h>

#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#define KIND "avx512-vnni vpdpbusd zmm"
#define MACS 64
typedef __m512i V;
static inline V set1(int x) { return _mm512_set1_epi32(x); }
static inline V step(V acc, V a, V b) { return _mm512_dpbusd_epi32(acc, a, b); }
static inline int32_t lane(V v) { return _mm512_cvtsi512_si32(v); }
#elif defined(__AVXVNNI__)
#define KIND "avx-vnni vpdpbusd ymm"
#define MACS 32
typedef __m256i V;
static inline V set1(int x) { return _mm256_set1_epi32(x); }
static inline V step(V acc, V a, V b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
static inline int32_t lane(V v) { return _mm256_cvtsi256_si32(v); }
#elif defined(__AVX2__)
#define KIND "avx2 vpmaddubsw+vpmaddwd+vpaddd ymm"
#define MACS 32
typedef __m256i V;
static inline V set1(int x) { return _mm256_set1_epi32(x); }
static inline V step(V acc, V a, V b) {
    V pairs = _mm256_maddubs_epi16(a, b);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
static inline int32_t lane(V v) { return _mm256_cvtsi256_si32(v); }
#else
#error "no int8 SIMD dot product on this CPU"
#endif

const char *kind(void) { return KIND; }
int macs_per_step(void) { return MACS; }

#define RING 64 /* weight vectors, in L1 */

/* A 2 x 4 register block, as the int8 GEMM kernels of oneDNN / MLAS run it: 2
   broadcast activations times 4 weight vectors loaded from L1, into 8
   independent accumulators (all in registers, with AVX2's 16), `iterations`
   passes over the weight ring. Returns a lane so that nothing is optimised
   away. */
int32_t run(int64_t iterations, int seed) {
    static V w[RING];
    for (int i = 0; i < RING; i++) w[i] = set1(0x01020304 * (i + seed));
    V a0 = set1(0x01010101 * (seed & 7)), a1 = set1(0x03030303);
    V c0 = set1(seed + 0), c1 = set1(seed + 1), c2 = set1(seed + 2),
      c3 = set1(seed + 3), c4 = set1(seed + 4), c5 = set1(seed + 5),
      c6 = set1(seed + 6), c7 = set1(seed + 7);
    for (int64_t i = 0; i < iterations; i++) {
        for (int j = 0; j < RING; j += 4) {
            c0 = step(c0, a0, w[j]); c1 = step(c1, a0, w[j + 1]);
            c2 = step(c2, a0, w[j + 2]); c3 = step(c3, a0, w[j + 3]);
            c4 = step(c4, a1, w[j]); c5 = step(c5, a1, w[j + 1]);
            c6 = step(c6, a1, w[j + 2]); c7 = step(c7, a1, w[j + 3]);
        }
    }
    return lane(c0) + lane(c1) + lane(c2) + lane(c3) + lane(c4) + lane(c5)
         + lane(c6) + lane(c7);
}
"""

STEPS_PER_ITERATION = 8 * 64 // 4  # the kernel's 2 x 4 block over its ring


def _library() -> ctypes.CDLL | None:
    """The compiled kernel, or None (no C compiler, or no int8 SIMD)."""
    folder = tempfile.mkdtemp(prefix="int8_floor")
    source, lib = os.path.join(folder, "k.c"), os.path.join(folder, "k.so")
    with open(source, "w") as f:
        f.write(KERNEL)
    cc = os.environ.get("CC", "cc")
    try:
        subprocess.run(
            [cc, "-O2", "-march=native", "-shared", "-fPIC", source, "-o", lib],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    found = ctypes.CDLL(lib)
    found.run.restype = ctypes.c_int32
    found.run.argtypes = [ctypes.c_int64, ctypes.c_int]
    found.kind.restype = ctypes.c_char_p
    return found


def peak(bursts: int = 300, iterations: int = 1000) -> tuple[float, str] | None:
    """(int8 MACs per second, the instruction measured), best of ``bursts``
    short bursts; None where the kernel cannot be built."""
    lib = _library()
    if lib is None:
        return None
    per_burst = iterations * STEPS_PER_ITERATION * lib.macs_per_step()
    lib.run(iterations, 1)  # warm up
    best = float("inf")
    for i in range(bursts):
        started = time.perf_counter()
        lib.run(iterations, i)
        best = min(best, time.perf_counter() - started)
    return per_burst / best, lib.kind().decode()


def model_macs(model, example) -> int:
    """The MACs of ``model``'s convs, linears and matmuls on ``example`` (one
    input tensor), counted by torch's FLOP counter (2 FLOPs per MAC)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(example)
    return counter.get_total_flops() // 2


def main() -> None:
    found = peak()
    if found is None:
        print("no C compiler or no int8 SIMD instruction: no floor measured")
        return
    rate, kind = found
    print(f"int8 peak: {rate / 1e9:.1f} GMAC/s on one thread ({kind})")


if __name__ == "__main__":
    main()
