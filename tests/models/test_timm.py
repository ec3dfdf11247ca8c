"""The timm suite (issue 9): 20 public architectures, unchanged, through every stage.

Per model: prepare -> calibration -> one QAT step -> VALIDATION -> pre_export ->
export -> convert -> feed must all run, ``qat.bc`` must equal ``qat.export.pt`` bit
for bit, and convert must leave no op on the CPU but the ones listed below with
their reason. How far ``quantized.bc`` is from ``qat.bc`` is the contract issue's
(printed by ``python tests/models/survey.py``).
"""

import numpy as np
import pytest
import torch
from timm_suite import MODELS, Result, run_stages

torch.set_num_threads(1)

# model -> ops convert leaves float on the CPU (none so far).
EXPECTED_CPU_OPS: dict[str, int] = {}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_goes_through_every_stage(name, tmp_path):
    result = Result(name)
    try:
        run_stages(name, tmp_path, result)
    except Exception as error:
        raise AssertionError(f"{name} failed at {result.stage}: {error}") from error
    assert result.stage == "ok"
    assert result.bc_vs_export_pt_diff == 0, "qat.bc differs from qat.export.pt"
    assert len(result.cpu_ops) == EXPECTED_CPU_OPS.get(name, 0), result.cpu_ops
    assert np.isfinite(result.quantized_vs_bc_lsb)
