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
        f"func.func @f() -> {ty} {{\n"
        f"  %c = hbir.constant {literal} : {ty}\n"
        f"  func.return %c : {ty}\n"
        "}"
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
