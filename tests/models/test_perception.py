"""The perception suite (``perception_suite.py``: torchvision's detection and
segmentation heads, YOLO / CSP / pix2pix / LSS / Hugging Face / temporal blocks),
through every stage to a model.hbm, at the default consistency level and level 2.

Per model and level, the numeric contract as in the timm suite: ``qat.bc`` equals
``qat.export.pt``, ``quantized.bc`` ``qat.bc``, the ``model.hbm`` loaded back and
quantized.bc's compiled feed ``quantized.bc``, bit for bit; convert leaves no op on
the CPU and the compiled program has no CPU island but the quantize / dequantize
at its edges.
"""

import pytest
import torch
from perception_suite import MODELS
from test_timm import case_pool, check_contract

# not in the fast tier (docs/testing.md); one process runs every test of the
# model suites, which share its case pools (pyproject's --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("model-suites")]

torch.set_num_threads(1)

LEVELS = [(None, 3), (2, 1)]


@pytest.fixture(scope="module")
def cases(request, tmp_path_factory):
    yield from case_pool(
        request,
        tmp_path_factory,
        "test_model_reaches_a_bit_identical_model_hbm",
        "perception_suite",
    )


@pytest.mark.parametrize(("level", "inputs"), LEVELS, ids=["default", "level2"])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_reaches_a_bit_identical_model_hbm(name, level, inputs, cases):
    check_contract(*cases[name, level].result())
