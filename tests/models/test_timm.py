"""The timm suite: 20 public architectures, unchanged, through every stage.

Per model, at the default consistency level and at levels 0, 1 and 2: prepare ->
calibration -> one QAT step -> VALIDATION -> pre_export -> export -> convert -> feed
must all run, convert must leave no op on the CPU, and ``qat.bc`` must equal
``qat.export.pt`` and ``quantized.bc`` must equal ``qat.bc``, bit for bit (the
numeric contract; ``python tests/models/survey.py [--level N]`` tabulates it).
"""

import pytest
import torch
from timm_suite import MODELS, Result, run_stages

torch.set_num_threads(1)


# The default level on 5 inputs (one batch); levels 0, 1 and 2 on one input each,
# to keep CI's budget (a 5-input case costs about 4x; benchmarks/contract.py
# --levels default,0,1,2 --inputs 20 runs the full sweep).
LEVELS = [(None, 5), (0, 1), (1, 1), (2, 1)]


@pytest.mark.parametrize(
    ("level", "inputs"), LEVELS, ids=["default", "level0", "level1", "level2"]
)
@pytest.mark.parametrize("name", list(MODELS))
def test_model_goes_through_every_stage(name, level, inputs, tmp_path):
    result = Result(name)
    try:
        run_stages(name, tmp_path, result, level=level, inputs=inputs)
    except Exception as error:
        raise AssertionError(f"{name} failed at {result.stage}: {error}") from error
    assert result.stage == "ok"
    assert result.bc_vs_export_pt_diff == 0, "qat.bc differs from qat.export.pt"
    assert result.cpu_ops == []
    assert result.quantized_vs_bc_lsb == 0, "quantized.bc differs from qat.bc"


def test_stochastic_depth_and_drop_path_are_identities_in_eval(tmp_path):
    """torchvision's fx-wrapped ``stochastic_depth`` and timm's ``DropPath`` trace
    into their eval branch (the identity) and leave no op behind."""
    from timm_import import import_timm

    from hbir.quantization import DeQuantStub, QuantStub, prepare

    timm = import_timm()
    import torchvision

    class Residual(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)
            self.drop_path = timm.layers.DropPath(0.2)

        def forward(self, x):
            x = self.quant(x)
            y = torchvision.ops.stochastic_depth(self.conv(x), 0.2, "row", False)
            return self.dequant(x + self.drop_path(y))

    qat = prepare(Residual().eval(), (torch.randn(1, 3, 8, 8),), out_dir=tmp_path)
    names = {str(n.target) for n in qat.graph.nodes}
    assert not any("stochastic_depth" in n or "drop_path" in n for n in names)
