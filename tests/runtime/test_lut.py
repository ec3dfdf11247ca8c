"""Lookup tables (runtime/numerics.py) against the correctly rounded function.

The correctly rounded function is computed here with torch float64 kernels
(``torch_reference``), independently of numerics' own ``lut_reference_codes``,
which is checked against it for every op.

Bounds come from the targets in docs/lut-numerics.md: int8 outputs within 1 LSB,
int16 outputs of smooth ops within 2 LSB at the default num_tables, kinked ops within
the error a line can have across a kink. The integer evaluation is checked against
an exact Python-integer reading of the documented table formulas.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lut_reference import exact_apply, exact_round, exact_value, torch_reference

from hbir.runtime import numerics
from hbir.runtime.numerics import HALF_EVEN, HALF_UP

OPS = list(numerics.LUT_FUNCTIONS)
KINKED = {"hardsigmoid": (1 / 6, 0.0), "hardswish": (1 / 2, 1 / 3)}  # slope jump, f''
TYPICAL = numerics.LUT_TYPICAL_RANGES
CODES = {bits: np.arange(-(1 << (bits - 1)), 1 << (bits - 1)) for bits in (8, 16)}


def observer_scales(op, interval, in_bits, out_bits):
    """float32 scales as a symmetric observer calibrated on ``interval`` sets them."""
    lo, hi = interval
    s_in = numerics.scale_from_absmax(np.float32(max(-lo, hi)), in_bits)
    x = numerics.dequantize(CODES[in_bits], s_in, 0).astype(np.float64)
    x = x[(x > lo if lo == 0 else x >= lo) & (x <= hi)]
    absmax = np.max(np.abs(numerics.LUT_FUNCTIONS[op](x)))
    return float(s_in), float(numerics.scale_from_absmax(np.float32(absmax), out_bits))


def error(table, op, s_in, s_out, out_bits):
    q = CODES[table.in_bits]
    ref = torch_reference(op, q, s_in, s_out, out_bits, table.rounding)
    return np.abs(numerics.apply_lut(table, q) - ref)


# ------------------------------------------------------------------ functions


def test_lut_functions_match_torch_float64():
    x = torch.linspace(-12, 12, 4001, dtype=torch.float64)
    positive = torch.linspace(1e-3, 1e3, 4001, dtype=torch.float64)
    expect = {
        "sigmoid": torch.sigmoid(x),
        "tanh": torch.tanh(x),
        "exp": torch.exp(x),
        "log": torch.log(positive),
        "sqrt": torch.sqrt(positive),
        "rsqrt": torch.rsqrt(positive),
        "reciprocal": torch.reciprocal(positive),
        "sin": torch.sin(x),
        "cos": torch.cos(x),
        "gelu": F.gelu(x),
        "gelu_tanh": F.gelu(x, approximate="tanh"),
        "silu": F.silu(x),
        "hardsigmoid": F.hardsigmoid(x),
        "hardswish": F.hardswish(x),
        "leaky_relu": F.leaky_relu(x),
        "elu": F.elu(x),
        "celu": F.celu(x),
        "softplus": F.softplus(x, threshold=1e9),
        "selu": F.selu(x),
        "mish": F.mish(x),
        "erf": torch.erf(x),
        "logsigmoid": F.logsigmoid(x),
        "softsign": F.softsign(x),
        "tanhshrink": F.tanhshrink(x),
    }
    assert set(expect) == set(OPS)
    for op, want in expect.items():
        arg = positive if op in ("log", "sqrt", "rsqrt", "reciprocal") else x
        got = numerics.LUT_FUNCTIONS[op](arg.numpy())
        np.testing.assert_allclose(
            got, want.numpy(), rtol=1e-13, atol=1e-15, err_msg=op
        )
    assert numerics.LUT_FUNCTIONS["sqrt"](np.array([-4.0]))[0] == 0.0


@pytest.mark.parametrize(
    "name, want",
    [
        ("leaky_relu:0.2", lambda x: F.leaky_relu(x, 0.2)),
        ("elu:0.5", lambda x: F.elu(x, 0.5)),
        ("celu:2.0", lambda x: F.celu(x, 2.0)),
        ("softplus:3.0", lambda x: F.softplus(x, 3.0, threshold=1e9)),
    ],
)
def test_a_table_name_carries_its_parameter(name, want):
    x = torch.linspace(-12, 12, 4001, dtype=torch.float64)
    op, value = numerics.split_table_key(name)
    assert numerics.table_key(op, value) == name
    assert numerics.table_key(op, numerics.LUT_PARAMETERS[op][1]) == op
    got = numerics.lut_function(name)(x.numpy())
    np.testing.assert_allclose(got, want(x).numpy(), rtol=1e-13, atol=1e-15)
    table = numerics.build_lut(name, 0.05, 8, 0.05, 8)
    assert table.op == op  # the table's entries carry the parameter
    assert not np.array_equal(
        table.entries, numerics.build_lut(op, 0.05, 8, 0.05, 8).entries
    )


@pytest.mark.parametrize(
    "name", ["sigmoid:0.5", "leaky_relu:x", "elu:-1.0", "softplus:0.0", "nope:1.0"]
)
def test_a_bad_table_name_is_refused(name):
    with pytest.raises(ValueError):
        numerics.split_table_key(name)


def test_reference_domain_conventions():
    q = np.arange(-5, 6)
    s_in, s_out = 0.25, 0.01

    def ref(op):
        return numerics.lut_reference_codes(op, q, s_in, s_out, 16)

    at_one = {op: ref(op)[q == 1][0] for op in ("log", "rsqrt", "reciprocal")}
    assert np.all(ref("log")[q <= 0] == at_one["log"])
    assert np.all(ref("rsqrt")[q <= 0] == at_one["rsqrt"])
    assert ref("reciprocal")[q == 0][0] == at_one["reciprocal"]
    np.testing.assert_array_equal(
        ref("reciprocal")[q < 0], -ref("reciprocal")[q > 0][::-1]
    )
    assert np.all(ref("sqrt")[q <= 0] == 0)
    # the reference is round(f(fl32(q * s_in)) / s_out), saturated
    x = (q.astype(np.float32) * np.float32(s_in)).astype(np.float64)
    np.testing.assert_array_equal(
        ref("exp"), np.clip(np.rint(np.exp(x) / s_out), -32768, 32767)
    )


# ------------------------------------------------------------------ num_tables


def test_check_num_tables():
    for good in (6, 12, 126, np.int64(48)):
        assert numerics.check_num_tables(good) == good
    with pytest.raises(
        ValueError,
        match=r"^num_tables must be a positive multiple of 6 up to 65536 \(a table "
        r"per 16-bit input code\), got 7$",
    ):
        numerics.check_num_tables(7)
    assert numerics.check_num_tables(65532) == 65532
    for bad in (0, -6, 8, True, 6.0, "6", 65538, 2139095040):
        with pytest.raises(ValueError, match="positive multiple of 6"):
            numerics.check_num_tables(bad)
    with pytest.raises(ValueError, match="got 7"):
        numerics.build_lut("sigmoid", 1e-3, 16, 1e-3, 16, num_tables=7)
    assert set(numerics.DEFAULT_NUM_TABLES) == set(OPS)
    for n in numerics.DEFAULT_NUM_TABLES.values():
        numerics.check_num_tables(n)


def test_num_tables_is_the_segment_count():
    for n, kind_op in ((30, "sigmoid"), (30, "sin"), (30, "reciprocal"), (30, "rsqrt")):
        table = numerics.build_lut(kind_op, 1e-3, 16, 1e-3, 16, num_tables=n)
        assert table.starts.shape == table.offsets.shape == table.slopes.shape == (n,)
    segments = numerics.build_lut("sigmoid", 1e-3, 16, 1e-3, 16, num_tables=30)
    np.testing.assert_array_equal(
        segments.starts, [-32768 + -(-i * 65536 // 30) for i in range(30)]
    )
    # rsqrt/sqrt split the segments evenly between the mantissa octaves [1,2), [2,4)
    rsqrt = numerics.build_lut("rsqrt", 1e-3, 16, 1e-3, 16, num_tables=30)
    assert np.sum(rsqrt.starts < 2 << 15) == 15
    # the error of a smooth op falls with num_tables (as N**-2 until it reaches 1 LSB)
    s_in, s_out = observer_scales("sigmoid", (-8, 8), 16, 16)
    worst = [
        error(
            numerics.build_lut("sigmoid", s_in, 16, s_out, 16, n),
            "sigmoid",
            s_in,
            s_out,
            16,
        ).max()
        for n in (12, 48, 192)
    ]
    assert worst[0] > 8 * worst[1] > 0 and worst[1] > 4 * worst[2]


# ------------------------------------------------------------------ accuracy


@pytest.mark.parametrize("op", OPS)
def test_int8_input_tables_are_exactly_the_reference(op):
    for interval in TYPICAL[op]:
        for out_bits in (8, 16):
            s_in, s_out = observer_scales(op, interval, 8, out_bits)
            table = numerics.build_lut(op, s_in, 8, s_out, out_bits)
            assert table.kind == "direct"
            ref = torch_reference(op, CODES[8], s_in, s_out, out_bits)
            np.testing.assert_array_equal(numerics.apply_lut(table, CODES[8]), ref)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("rounding", [HALF_EVEN, HALF_UP])
def test_lut_reference_codes_equals_torch_reference(op, rounding):
    """numerics' reference (what direct tables are built from and int16 errors
    are measured against) checked independently, for every op."""
    for interval in TYPICAL[op]:
        for in_bits, out_bits in ((8, 8), (16, 8), (16, 16)):
            s_in, s_out = observer_scales(op, interval, in_bits, out_bits)
            q = CODES[in_bits]
            got = numerics.lut_reference_codes(op, q, s_in, s_out, out_bits, rounding)
            want = torch_reference(op, q, s_in, s_out, out_bits, rounding)
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {interval}")


def kink_bound(op, num_tables, s_in, s_out):
    """1 LSB of output rounding plus the minimax error of one line over a segment of
    width w holding a kink (slope jump d: d*w/8) and curvature c (c*w**2/16)."""
    jump, curvature = KINKED[op]
    w = 65536 / num_tables * s_in
    return math.floor((jump * w / 8 + curvature * w * w / 16) / s_out + 1)


@pytest.mark.parametrize("op", OPS)
def test_int16_input_tables_within_targets_at_default(op):
    n = numerics.DEFAULT_NUM_TABLES[op]
    for interval in TYPICAL[op]:
        for out_bits in (8, 16):
            s_in, s_out = observer_scales(op, interval, 16, out_bits)
            table = numerics.build_lut(op, s_in, 16, s_out, out_bits)
            assert table.num_tables == n and table.kind != "direct"
            if out_bits == 8:
                bound = 1
            elif op in KINKED:
                bound = kink_bound(op, n, s_in, s_out)
            else:
                bound = 2
            worst = error(table, op, s_in, s_out, out_bits).max()
            assert worst <= bound, (op, interval, out_bits, worst)


def test_kinked_ops_meet_the_int8_target_for_any_input_range():
    for op in KINKED:
        for r in (3, 4, 5, 6, 7, 9, 12, 16):
            s_in, s_out = observer_scales(op, (-r, r), 16, 8)
            table = numerics.build_lut(op, s_in, 16, s_out, 8)
            assert error(table, op, s_in, s_out, 8).max() <= 1, (op, r)


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_periodic_tables_hold_over_the_full_int16_range_at_large_scales(op):
    """The phase is reduced exactly: compare with f of the exact angle q * s_in
    (exact in float64, range-reduced by libm) for angles up to ~3 million rad."""
    f = numerics.LUT_FUNCTIONS[op]
    for s_in in (np.float32(0.37), np.float32(97.3)):
        angle = CODES[16].astype(np.float64) * float(s_in)
        for out_bits, bound in ((8, 1), (16, 2)):
            s_out = float(numerics.scale_from_absmax(np.float32(1.0), out_bits))
            table = numerics.build_lut(op, s_in, 16, s_out, out_bits)
            lo, hi = numerics.qrange(out_bits)
            want = np.clip(np.rint(f(angle) / s_out), lo, hi)
            got = numerics.apply_lut(table, CODES[16])
            assert np.abs(got - want).max() <= bound
    # one turn of codes later the phase (and so the output) repeats, up to the
    # rounding of the turns-per-code constant: s_in = 1/64 turn
    s_in = np.float32(2 * math.pi / 64)
    table = numerics.build_lut(op, s_in, 16, 1 / 32767.5, 16)
    y = numerics.apply_lut(table, CODES[16])
    assert np.abs(y[64:] - y[:-64]).max() <= 1


@pytest.mark.parametrize("op", ["rsqrt", "reciprocal", "sqrt", "log"])
def test_exponent_tables_at_tiny_and_huge_inputs(op):
    for in_absmax in (2e-5, 1e6):
        for out_bits, bound in ((8, 1), (16, 2)):
            s_in, s_out = observer_scales(op, (0, in_absmax), 16, out_bits)
            table = numerics.build_lut(op, s_in, 16, s_out, out_bits)
            assert error(table, op, s_in, s_out, out_bits).max() <= bound, (
                in_absmax,
                out_bits,
            )
    # an output range calibrated on large inputs: small inputs saturate, exactly
    s_in = 1e-3
    s_out = float(numerics.LUT_FUNCTIONS[op](np.float64(20.0)) / 127)
    table = numerics.build_lut(op, s_in, 16, s_out, 8)
    assert error(table, op, s_in, s_out, 8).max() <= 1


# ------------------------------------------------------------------ integers


def tables_of_every_kind():
    yield numerics.build_lut("tanh", 0.05, 8, 1 / 127.5, 8)
    yield numerics.build_lut("silu", 8 / 32767.5, 16, 8 / 32767.5, 16)
    yield numerics.build_lut("cos", 0.01, 16, 1 / 127.5, 8)
    for op in ("rsqrt", "sqrt", "reciprocal", "log"):
        yield numerics.build_lut(op, 16 / 32767.5, 16, 0.002, 16)


def test_apply_lut_equals_exact_integer_evaluation():
    for table in tables_of_every_kind():
        qmin, qmax = numerics.qrange(table.in_bits)
        q = np.unique(
            np.concatenate([np.arange(qmin, qmax + 1, 37), [qmin, -1, 0, 1, qmax]])
        )
        np.testing.assert_array_equal(
            numerics.apply_lut(table, q), exact_apply(table, q), err_msg=table.op
        )


def test_apply_lut_takes_integers_and_saturates():
    table = numerics.build_lut("exp", 8 / 32767.5, 16, 1 / 127.5, 8)  # exp(x > 0) > 1
    y = numerics.apply_lut(table, CODES[16].astype(np.int16))
    assert y.dtype == np.int64 and y.min() >= 0 and y.max() == 127
    x = numerics.dequantize(CODES[16], table.in_scale, 0)
    assert np.all(y[x > 0.01] == 127)
    assert numerics.apply_lut(table, np.int64(0)) == 127  # exp(0) * 127.5 saturates
    assert numerics.apply_lut(table, np.zeros((2, 3), np.int32)).shape == (2, 3)
    for bad in (np.array([0.5]), np.array([1.0], np.float32)):
        with pytest.raises(TypeError, match="integer codes"):
            numerics.apply_lut(table, bad)
    with pytest.raises(ValueError, match=r"\[-32768, 32767\]"):
        numerics.apply_lut(table, np.array([40000]))
    direct = numerics.build_lut("exp", 0.05, 8, 1 / 32767.5, 16)
    with pytest.raises(ValueError, match=r"\[-128, 127\]"):
        numerics.apply_lut(direct, np.array([-129]))
    # every kind saturates: outputs stay in range, and equal the limit wherever
    # f(x) / s_out is beyond it by more than the table's approximation error
    for op, interval in (
        ("sigmoid", (-8, 8)),
        ("sin", (-4, 4)),
        ("reciprocal", (0, 16)),
    ):
        s_in, s_out = observer_scales(op, interval, 16, 16)
        s_out /= 4  # the output range covers a quarter of f's range
        table = numerics.build_lut(op, s_in, 16, s_out, 16)
        y = numerics.apply_lut(table, CODES[16])
        x = numerics.dequantize(np.where(CODES[16] == 0, 1, CODES[16]), s_in, 0)
        v = numerics.LUT_FUNCTIONS[op](x.astype(np.float64)) / s_out
        assert np.all(y[v > 32767 + 8] == 32767) and np.all(y[v < -32768 - 8] == -32768)
        assert (v > 32767 + 8).sum() > 0


def test_to_arrays_round_trip():
    for table in tables_of_every_kind():
        arrays = table.to_arrays()
        for key, value in arrays.items():
            assert type(value) is int or value.dtype == np.int64, key
        back = numerics.LutTable.from_arrays(arrays)
        assert back == table and back.op == table.op and back.in_scale == table.in_scale
        q = CODES[table.in_bits]
        np.testing.assert_array_equal(
            numerics.apply_lut(back, q), numerics.apply_lut(table, q)
        )
    arrays = numerics.build_lut(
        "sigmoid", 1e-3, 16, 1e-3, 16, num_tables=12
    ).to_arrays()
    with pytest.raises(ValueError, match="12 values"):
        numerics.LutTable.from_arrays({**arrays, "slopes": arrays["slopes"][:-1]})
    with pytest.raises(ValueError, match="starts do not match"):
        numerics.LutTable.from_arrays({**arrays, "starts": arrays["starts"] + 1})
    with pytest.raises(ValueError, match="overflow"):
        numerics.LutTable.from_arrays(
            {**arrays, "slopes": arrays["slopes"] + (1 << 60)}
        )
    with pytest.raises(ValueError, match="is a .segments. table"):
        numerics.LutTable.from_arrays(
            {**arrays, "kind": numerics.LUT_KINDS.index("direct")}
        )


def test_build_lut_is_a_pure_function_and_validates():
    args = ("gelu", 8 / 32767.5, 16, 8 / 32767.5, 16, 24)
    first = numerics.build_lut(*args)
    numerics._build_lut.cache_clear()
    assert numerics.build_lut(*args) == first
    assert (
        numerics.build_lut("gelu", np.float32(8 / 32767.5), 16, 8 / 32767.5, 16, 24)
        == first
    )
    assert not first.slopes.flags.writeable
    with pytest.raises(ValueError, match="unknown LUT op"):
        numerics.build_lut("softmax", 0.1, 8, 0.1, 8)
    with pytest.raises(ValueError, match="bits"):
        numerics.build_lut("exp", 0.1, 4, 0.1, 8)
    with pytest.raises(ValueError, match="positive and finite"):
        numerics.build_lut("exp", 0.0, 8, 0.1, 8)
    with pytest.raises(ValueError, match="rounding"):
        numerics.build_lut("exp", 0.1, 8, 0.1, 8, rounding="nearest")


# ------------------------------------------------------------------ rounding mode


def test_half_up_changes_only_ties_in_direct_tables():
    # exact outputs: hardswish(x) = x for x >= 3, so with s_in = 1/16 and s_out = 1/8
    # odd codes from 48 on are ties; sqrt(q / 4) / 1 = k + 1/2 at q = (2k + 1)**2
    hardswish = {
        int(q): Fraction(int(q), 16) * min(max(Fraction(int(q), 16) + 3, 0), 6) / 6 * 8
        for q in CODES[8]
    }
    ties = {
        ("hardswish", 1 / 16, 1 / 8): {
            q: v for q, v in hardswish.items() if v.denominator == 2
        },
        ("sqrt", 1 / 4, 1.0): {
            (2 * k + 1) ** 2: Fraction(2 * k + 1, 2) for k in range(6)
        },
    }
    for (op, s_in, s_out), tie_values in ties.items():
        even = numerics.apply_lut(numerics.build_lut(op, s_in, 8, s_out, 8), CODES[8])
        up = numerics.apply_lut(
            numerics.build_lut(op, s_in, 8, s_out, 8, rounding=HALF_UP), CODES[8]
        )
        is_tie = np.isin(CODES[8], list(tie_values))
        assert is_tie.sum() >= 6
        np.testing.assert_array_equal(up[~is_tie], even[~is_tie])
        for q, value in tie_values.items():
            assert even[q + 128] == exact_round(value, HALF_EVEN)
            assert up[q + 128] == exact_round(value, HALF_UP)


def test_half_up_changes_only_ties_in_segmented_tables():
    # hardswish is exactly x/s_out = q/2 for x >= 3 with s_in = 2**-12, s_out = 2**-11:
    # the fitted line is exact there, so odd codes give exact ties
    even = numerics.build_lut("hardswish", 2**-12, 16, 2**-11, 16, num_tables=48)
    up = numerics.build_lut(
        "hardswish", 2**-12, 16, 2**-11, 16, num_tables=48, rounding=HALF_UP
    )
    arrays_even, arrays_up = even.to_arrays(), up.to_arrays()
    assert arrays_up.pop("rounding") != arrays_even.pop("rounding")
    assert all(np.array_equal(arrays_even[k], arrays_up[k]) for k in arrays_even)
    q = CODES[16][::3]
    changed = numerics.apply_lut(up, q) - numerics.apply_lut(even, q)
    # at v = k + 1/2 half-even gives the even neighbour: it differs when k is even
    values = [exact_value(arrays_even, int(code)) for code in q]
    expect = [v.denominator == 2 and math.floor(v) % 2 == 0 for v in values]
    np.testing.assert_array_equal(changed, expect)
    assert sum(expect) > 1000
