"""dialects/hbir.py helpers: ``dense_array`` reads every element type a constant can
have, compared against the bytes numpy and torch wrote."""

import numpy as np
import pytest
import torch

import hbir
from hbir.dialects.hbir import dense_array


def constant(literal: str, ty: str):
    """The ``value`` attribute of a parsed ``hbir.constant``."""
    m = hbir.Module.parse(
        f"func.func @f() {{\n  %c = hbir.constant {literal} : {ty}\n  func.return\n}}"
    )
    (op,) = [op for op in m.module.op.walk() if op.name == "hbir.constant"]
    return op.value


def hex_literal(data: bytes) -> str:
    return f'dense<"0x{data.hex().upper()}">'


@pytest.mark.parametrize(
    "dtype, element",
    [
        (np.int8, "si8"),
        (np.int16, "si16"),
        (np.int32, "si32"),
        (np.int64, "si64"),
        (np.int32, "i32"),
        (np.uint8, "ui8"),
        (np.float16, "f16"),
        (np.float32, "f32"),
        (np.float64, "f64"),
    ],
)
def test_dense_array_reads_the_stored_values(dtype, element):
    values = ((np.arange(6) - 3) * 37).astype(dtype).reshape(2, 3)
    got = dense_array(constant(hex_literal(values.tobytes()), f"tensor<2x3x{element}>"))
    assert got.dtype == dtype and np.array_equal(got, values)
    got[0, 0] = 1  # writable: the interpreter's kernels may update it in place


def test_dense_array_widens_bf16_exactly_to_float32():
    values = torch.randn(7, generator=torch.Generator().manual_seed(0)).bfloat16()
    bits = values.view(torch.int16).numpy().tobytes()
    got = dense_array(constant(hex_literal(bits), "tensor<7xbf16>"))
    assert got.dtype == np.float32
    assert np.array_equal(got, values.float().numpy())


def test_dense_array_reads_i1_and_index():
    got = dense_array(constant("dense<[true, false, true]>", "tensor<3xi1>"))
    assert got.dtype == bool and got.tolist() == [True, False, True]
    got = dense_array(constant("dense<[7, -2]>", "tensor<2xindex>"))
    assert got.dtype == np.int64 and got.tolist() == [7, -2]


def test_dense_array_expands_a_splat():
    got = dense_array(constant("dense<-1.5>", "tensor<2x3xbf16>"))
    assert got.shape == (2, 3) and np.all(got == np.float32(-1.5))


# ---- issue 16: verifier gaps that let feed (or hbir-opt) fail later


def segmented_lut(**change) -> str:
    """A valid segmented sigmoid ``hbir.lut`` (from numerics) with ``change``."""
    from hbir.runtime import numerics

    table = numerics.build_lut("sigmoid", 2**-12, 16, 1 / 127, 8, num_tables=6)
    arrays = table.to_arrays()
    fields = {
        "function": '"sigmoid"',
        "kind": f'"{table.kind}"',
        "rounding": '"half_even"',
        "in_scale": f"{table.in_scale!r} : f32",
        "out_scale": f"{table.out_scale!r} : f32",
    }
    for name in ("in_bits", "out_bits", "num_tables", "frac_bits", "phase_mult"):
        fields[name] = f"{int(arrays[name])} : i64"
    for name in ("phase_shift", "phase_bits", "octave_step"):
        fields[name] = f"{int(arrays[name])} : i64"
    for name in ("starts", "offsets", "slopes"):
        values = ", ".join(str(int(v)) for v in arrays[name])
        fields[name] = f"array<i64: {values}>"
    fields.update(change)
    props = ", ".join(f"{k} = {v}" for k, v in fields.items())
    return (
        "func.func @f(%x: tensor<4xsi16>) -> tensor<4xsi8> {\n"
        f"  %y = hbir.lut %x {{{props}}} : tensor<4xsi16> -> tensor<4xsi8>\n"
        "  func.return %y : tensor<4xsi8>\n}"
    )


def test_segmented_lut_fixture_is_valid_and_runs():
    m = hbir.Module.parse(segmented_lut())
    x = np.array([-32768, -1, 0, 32767], np.int16)
    y = m["f"].feed({"_input_0": x})["_output_0"]
    # sigmoid saturates at both ends of the int16 range: 0 and 1 = 127 / 127
    assert y[0] == 0 and y[-1] == 127 and list(y) == sorted(y)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"starts": "array<i64: 0>"}, "starts, offsets and slopes need 6 values each"),
        ({"num_tables": "7 : i64"}, "num_tables must be a positive multiple of 6"),
        ({"num_tables": "0 : i64"}, "num_tables must be a positive multiple of 6"),
        ({"num_tables": "32772 : i64"}, "num_tables must be at most 32766"),
        ({"function": '"nope"'}, "function must be one of"),
        ({"kind": '"nope"'}, "kind must be one of"),
        ({"rounding": '"nope"'}, "rounding must be one of"),
    ],
)
def test_segmented_lut_fields_are_verified(change, message):
    with pytest.raises(hbir.HbirVerifyError, match=message) as info:
        hbir.Module.parse(segmented_lut(**change), "m.mlir")
    assert str(info.value).startswith("m.mlir:2:3: error: 'hbir.lut' op")


def test_resize2d_with_one_scale_is_a_verify_error():
    text = (
        "func.func @f(%x: tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32> {\n"
        "  %y = hbir.resize2d %x {size = array<i64: 4, 4>, scale = array<f64: 2.0>}"
        " : tensor<1x1x2x2xf32> -> tensor<1x1x4x4xf32>\n"
        "  func.return %y : tensor<1x1x4x4xf32>\n}"
    )
    with pytest.raises(
        hbir.HbirVerifyError, match=r"scale needs 2 values \(H, W\), got 1"
    ):
        hbir.Module.parse(text)  # was IndexError


def test_ints_packs_what_xdsl_from_list_packs():
    from xdsl.dialects.builtin import DenseArrayBase, i64

    from hbir.dialects.hbir import ints

    cases = [[], [0], [1, -1, 2**63 - 1, -(2**63)], list(np.arange(-5, 5)), [2**63]]
    cases.append(list(np.random.default_rng(0).integers(-(2**40), 2**40, 500)))
    for values in cases:
        want = DenseArrayBase.from_list(i64, list(values))
        got = ints(values)
        assert got == want and got.data.data == want.data.data
