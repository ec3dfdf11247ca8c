"""passes/fixed_point.py: the convert passes' shared helpers."""

import numpy as np
import torch

import hbir
from hbir.passes import fixed_point as fp


def test_float_constant_reads_bf16():
    """Regression: a bf16 constant was read as float32 bytes (garbage, half the
    values); the reference is torch's own bf16 -> float32 widening."""
    values = torch.randn(2, 3, generator=torch.Generator().manual_seed(1)).bfloat16()
    blob = values.view(torch.int16).numpy().tobytes().hex().upper()
    m = hbir.Module.parse(
        "func.func @f() -> tensor<2x3xbf16> {\n"
        f'  %c = hbir.constant dense<"0x{blob}"> : tensor<2x3xbf16>\n'
        "  func.return %c : tensor<2x3xbf16>\n"
        "}"
    )
    (op,) = [op for op in m.module.op.walk() if op.name == "hbir.constant"]
    got = fp.float_constant(op.output)
    assert got.dtype == np.float64 and got.shape == (2, 3)
    assert np.array_equal(got, values.double().numpy())
