"""bisect_float_fallback finds the planted op of faults (a) and (c), and prints
the bc_editor config that reproduces the float region."""

import json

import numpy as np
import profiler_faults as faults
import pytest

import hbir
from hbir.bc_editor import remove_fake_quant
from hbir.profiler.bisect import BisectError, bisect_float_fallback, hbir_outputs


def _float_origins(result):
    return {origin.split("|")[0] for _, _, origin in result.float_ops}


def test_bisection_finds_the_table_with_too_few_segments(tmp_path):
    qat, qat_bc = faults.few_tables(tmp_path)
    data = faults.data("transformer", 1)
    reference = [[qat(*b).detach().numpy()] for b in data]
    result = bisect_float_fallback(
        qat_bc, data, reference, 1e-3, "Atol", evaluate=hbir_outputs
    )
    assert result.baseline_value > 1e-2 and result.value <= 1e-3
    assert len(result.ids) == 1
    assert "norm2.rsqrt" in _float_origins(result)
    # The printed config reproduces it through bc_editor.
    config = json.loads(result.text().splitlines()[-1].split(": ", 1)[1])
    edited = remove_fake_quant(qat_bc, config["remove_fake_quant"])
    for b, ref in zip(data, reference, strict=True):
        np.testing.assert_array_equal(hbir_outputs(edited, b)[0], ref[0])


def test_bisection_finds_the_corrupted_requantization(tmp_path):
    qat, qat_bc, _ = faults.corrupted_quantized(tmp_path)
    data = faults.data("resnet")
    reference = [hbir_outputs(qat_bc, b) for b in data]

    def buggy_convert(model, inputs):  # the tool that corrupts the constant
        quantized = hbir.convert(model, "nash-e")
        try:
            faults.corrupt_requantize(quantized)
        except IndexError:  # the conv is float: nothing to corrupt
            pass
        return hbir_outputs(quantized, inputs)

    result = bisect_float_fallback(
        qat_bc, data, reference, 0.01, "Atol", evaluate=buggy_convert
    )
    assert result.baseline_value > 0.03 and result.value <= 0.01
    assert faults.PLANTED_CONV in _float_origins(result)
    assert len(result.ids) <= 2


def test_nothing_to_restore_is_said(tmp_path):
    qat, qat_bc, _ = faults.corrupted_quantized(tmp_path)
    data = faults.data("resnet", 1)
    reference = [hbir_outputs(qat_bc, b) for b in data]
    with pytest.raises(BisectError, match="nothing to restore"):
        bisect_float_fallback(qat_bc, data, reference, 0.0, evaluate=hbir_outputs)
