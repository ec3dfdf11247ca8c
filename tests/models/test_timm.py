"""The timm suite: 22 public architectures, unchanged, through every stage.

Per model, at the default consistency level and at levels 0, 1 and 2: prepare ->
calibration -> one QAT step -> VALIDATION -> pre_export -> export -> convert -> feed
-> compile must all run, convert must leave no op on the CPU, the compiled program
no CPU island but the quantize / dequantize at its edges, and ``qat.bc`` must
equal ``qat.export.pt``, ``quantized.bc`` (as the interpreter defines it) ``qat.bc``,
and the ``model.hbm`` loaded back from its file and quantized.bc's own fast feed
(its compiled program) ``quantized.bc``, bit for bit (the numeric contract;
``python tests/models/survey.py [--level N]`` tabulates it).

The cases share no work (every stage after the float model depends on the level),
so they run in a pool of worker processes, one per core (at most two): each test
waits for its own case and asserts its own figures.
"""

import multiprocessing
import os
import re
import warnings
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch
from timm_suite import COMPILE_REFUSED, MODELS, run_case

# not in the fast tier (docs/testing.md); one process runs every test of the
# model suites, which share its case pools (pyproject's --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("model-suites")]

torch.set_num_threads(1)


# The default level on 5 inputs (one batch); levels 0, 1 and 2 on one input each,
# to keep CI's budget (a 5-input case costs about 4x; benchmarks/contract.py
# --levels default,0,1,2 --inputs 20 runs the full sweep).
LEVELS = [(None, 5), (0, 1), (1, 1), (2, 1)]


@pytest.fixture(scope="module")
def cases(request, tmp_path_factory):
    """The futures of every selected case of ``test_model_goes_through_every_stage``
    by (name, level), submitted to the worker pool at its first test in test order
    (so a worker meets a model's levels one after another and builds its float
    model once)."""
    yield from case_pool(
        request, tmp_path_factory, "test_model_goes_through_every_stage", "timm_suite"
    )


def case_pool(request, tmp_path_factory, test_name: str, suite: str):
    """The selected cases of ``test_name`` (parameters name, level, inputs) run by
    ``run_case`` of ``suite`` in a pool of spawned workers; yields their futures."""
    selected = [
        item.callspec.params
        for item in request.session.items
        if getattr(item, "originalname", "") == test_name
        and item.module.__name__ == request.module.__name__
    ]
    context = multiprocessing.get_context("spawn")  # torch is not fork-safe
    futures = {}
    with ProcessPoolExecutor(min(2, os.cpu_count() or 1), mp_context=context) as pool:
        for p in selected:
            out_dir = tmp_path_factory.mktemp(f"{p['name']}-{p['level']}")
            futures[p["name"], p["level"]] = pool.submit(
                run_case, p["name"], p["level"], p["inputs"], out_dir, suite
            )
        yield futures
        for future in futures.values():
            future.cancel()  # after a failure with -x, no one waits for the rest


def check_contract(result, error, caught, refused=None) -> None:
    """Every contract row of one case (``run_case``'s result, error, warnings);
    ``refused``: the regex compile's declared refusal must match."""
    for message, category, filename, lineno in caught:
        warnings.warn_explicit(message, category, filename, lineno)
    if refused is not None:  # declared: the refusal must be the one named
        assert result.stage == "compile" and error is not None, "it compiles now"
        assert re.search(refused, error), error
    elif error is not None:
        raise AssertionError(f"{result.model} failed at {result.stage}: {error}")
    assert result.bc_vs_export_pt_diff == 0, "qat.bc differs from qat.export.pt"
    assert result.cpu_ops == []
    assert result.quantized_vs_bc_lsb == 0, "quantized.bc differs from qat.bc"
    if refused is not None:
        return
    assert result.stage == "ok"
    assert result.engine == "npu", f"quantized.bc's feed: {result.engine}"
    assert result.hbm_islands == [], f"CPU islands in model.hbm: {result.hbm_islands}"
    assert result.hbm_vs_quantized_diff == 0, "model.hbm differs from quantized.bc"
    assert result.fast_vs_quantized_diff == 0, "the compiled feed differs"


@pytest.mark.parametrize(
    ("level", "inputs"), LEVELS, ids=["default", "level0", "level1", "level2"]
)
@pytest.mark.parametrize("name", list(MODELS))
def test_model_goes_through_every_stage(name, level, inputs, cases):
    result, error, caught = cases[name, level].result()
    check_contract(result, error, caught, COMPILE_REFUSED.get((name, level)))


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
