"""Independent references for lookup tables, shared by tests/runtime/test_lut.py
and tests/quantization/test_pre_export.py.

* ``torch_reference``: the correctly rounded function from torch float64 kernels,
  without numerics (what direct, int8-input tables must equal exactly);
* ``exact_apply``: a segmented table's output read from its stored arrays with
  Python integers and Fractions, by the formulas of the LutTable / build_lut
  docstrings, without ``numerics.apply_lut``.
"""

import math
from fractions import Fraction

import numpy as np
import torch
import torch.nn.functional as F

from hbir.runtime import numerics
from hbir.runtime.numerics import HALF_EVEN


def exact_round(value: Fraction, mode: str) -> int:
    return round(value) if mode == HALF_EVEN else math.floor(value + Fraction(1, 2))


def exact_value(arrays: dict, q: int) -> Fraction:
    """The unrounded output of a segmented table, read from ``to_arrays`` with
    Python integers: the formulas of the LutTable/build_lut docstrings."""
    op = numerics.LUT_OPS[arrays["op"]]
    kind = numerics.LUT_KINDS[arrays["kind"]]
    n, frac = arrays["num_tables"], arrays["frac_bits"]
    starts, offsets, slopes = (
        arrays[k].tolist() for k in ("starts", "offsets", "slopes")
    )
    if kind == "segments":
        t, seg = q, (q + 32768) * n // 65536
        shift = frac
    elif kind == "periodic":
        s, pb = arrays["phase_shift"], arrays["phase_bits"]
        t = ((q * arrays["phase_mult"] + 2 ** (s - 1)) // 2**s) % 2**pb
        seg, shift = t * n // 2**pb, frac
    else:
        if op == "sqrt" and q <= 0:
            return Fraction(0)
        v = max(abs(q), 1) if op == "reciprocal" else max(q, 1)
        octaves = 2 if op in ("rsqrt", "sqrt") else 1
        k = v.bit_length() - 1
        e = k - k % octaves
        t = v * 2 ** (15 - e)  # Q15 mantissa in [1, 2**octaves)
        base = 2 ** (15 + k - e)
        seg = (k - e) * (n // octaves) + (t - base) * (n // octaves) // base
        shift = (
            frac + {"rsqrt": e // 2, "sqrt": -(e // 2), "reciprocal": e, "log": 0}[op]
        )
    acc = offsets[seg] + slopes[seg] * (t - starts[seg])
    if kind == "exponent":
        acc += k * arrays["octave_step"]
        acc = -acc if op == "reciprocal" and q < 0 else acc
    return Fraction(acc) / Fraction(2) ** shift


def exact_apply(table: numerics.LutTable, codes) -> np.ndarray:
    arrays = table.to_arrays()
    lo, hi = numerics.qrange(table.out_bits)
    if table.kind == "direct":  # the table is the correctly rounded function
        return torch_reference(
            table.op,
            codes,
            table.in_scale,
            table.out_scale,
            table.out_bits,
            table.rounding,
        )
    out = [exact_round(exact_value(arrays, int(q)), table.rounding) for q in codes]
    return np.clip(out, lo, hi)


TORCH_FUNCTIONS = {
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": lambda x: torch.sqrt(torch.clamp(x, min=0.0)),
    "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal,
    "sin": torch.sin,
    "cos": torch.cos,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "leaky_relu": F.leaky_relu,
    "elu": F.elu,
    "celu": F.celu,
    "softplus": lambda x: F.softplus(x, threshold=1e9),
    "selu": F.selu,
    "mish": F.mish,
    "erf": torch.erf,
    "logsigmoid": F.logsigmoid,
    "softsign": F.softsign,
    "tanhshrink": F.tanhshrink,
}


def torch_reference(op, q, s_in, s_out, out_bits, rounding=HALF_EVEN):
    """The correctly rounded table, computed without numerics: torch float64 of
    ``fl32(q * s_in)`` (torch float32 product), divided by ``fl32(s_out)``, rounded
    by ``rounding`` and clamped; the domain conventions of docs/lut-numerics.md
    (log, rsqrt at ``q <= 0`` and reciprocal at 0 read ``q = 1``)."""
    q = torch.as_tensor(np.asarray(q), dtype=torch.int64)
    if op in ("log", "rsqrt"):
        q = torch.clamp(q, min=1)
    elif op == "reciprocal":
        q = torch.where(q == 0, 1, q)
    x = (q.to(torch.float32) * torch.tensor(s_in, dtype=torch.float32)).double()
    y = TORCH_FUNCTIONS[op](x) / torch.tensor(s_out, dtype=torch.float32).double()
    y = torch.round(y) if rounding == HALF_EVEN else torch.floor(y + 0.5)
    hi = 2 ** (out_bits - 1) - 1
    return torch.clamp(y, -hi - 1, hi).to(torch.int64).numpy()
