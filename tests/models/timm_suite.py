"""The timm suite: 22 public architectures no one here wrote, through every stage.

Each model has random weights (``num_classes=10``), BatchNorm statistics re-estimated
on random data (so activations are not degenerate) and a small input, and is wrapped
only with a ``QuantStub`` at the input and a ``DeQuantStub`` at the output.
``run_stages`` takes it through

    float -> prepare -> calibration -> one QAT step -> VALIDATION -> pre_export
          -> export -> convert -> feed

and returns the stage contract figures that ``test_timm.py`` asserts and
``survey.py`` tabulates, over ``INPUTS`` inputs (the example and random ones).
"""

from __future__ import annotations

import copy
import functools
import importlib
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timm_import import import_timm  # noqa: E402

import hbir  # noqa: E402
from hbir import fast_feed  # noqa: E402
from hbir.conversion import cpu_advice  # noqa: E402
from hbir.quantization import (  # noqa: E402
    ConsistencyStrategy,
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    export,
    pre_export,
    prepare,
    qat_modules,  # noqa: E402
    set_fake_quantize,
)

# name -> (create_model kwargs beyond num_classes, input height = width, note)
MODELS: dict[str, tuple[dict, int, str]] = {
    "resnet18": ({}, 64, ""),
    "mobilenetv3_small_100": ({}, 64, ""),
    "mobilenetv4_conv_small": ({}, 64, ""),
    "efficientnet_b0": ({}, 64, ""),
    "convnext_atto": ({}, 64, ""),
    "vit_tiny_patch16_224": ({"img_size": 64}, 64, "img_size=64: 4x4 patches"),
    "deit_tiny_patch16_224": ({"img_size": 64}, 64, "img_size=64: 4x4 patches"),
    "swin_tiny_patch4_window7_224": (
        {"img_size": 64, "window_size": 4},
        64,
        "img_size=64, window_size=4",
    ),
    "mobilevit_xxs": ({}, 64, ""),
    "efficientformer_l1": ({}, 224, "224 only: its attention bias is fixed at 7x7"),
    "repvit_m0_9": ({}, 64, ""),
    "regnetx_002": ({}, 64, ""),
    "ghostnet_100": ({}, 64, ""),
    "levit_128s": ({"img_size": 64}, 64, "img_size=64"),
    "poolformer_s12": ({}, 64, ""),
    "fastvit_t8": ({}, 64, ""),
    "mobileone_s0": ({}, 64, ""),
    "lcnet_050": ({}, 64, ""),
    "densenet121": ({}, 64, ""),
    "edgenext_xx_small": ({}, 64, ""),
    # convolutional position encodings shared by its blocks (one module called
    # at several places): 28 LSB at qat.bc -> quantized.bc before every call got
    # its own QAT module
    "coat_lite_tiny": ({"img_size": 64}, 64, "img_size=64"),
    # linear attention whose values are padded with ones (F.pad(value=1)): 40 LSB
    # qat.bc -> quantized.bc after a QAT step before the pad's input was rescaled
    # onto its output grid as convert does
    "efficientvit_b0": ({}, 64, ""),
}


class Boundary(nn.Module):
    """The timm model with a QuantStub at the input and a DeQuantStub at the output."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.quant = QuantStub()
        self.model = inner
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.model(self.quant(x)))


# (model, level) cases compile refuses, each with what its refusal must say (a
# regex): the contract rows up to quantized.bc still hold; a fix shows as a
# failing test, which is when the entry goes.
COMPILE_REFUSED: dict[tuple[str, int | None], str] = {}


def reestimate_batch_norms(model: nn.Module, batches) -> None:
    """BatchNorm running statistics from random data, so outputs are not degenerate."""
    norms = [
        m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
    ]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the batches
    model.train()
    with torch.no_grad():
        for x in batches:
            model(x)
    model.eval()


INPUTS = 5  # inputs fed to every stage: the example input and 4 random ones


@dataclass
class Result:
    """What each stage gave; ``stage`` is the last one entered."""

    model: str
    stage: str = "create"
    cpu_ops: list[str] = field(default_factory=list)
    bc_vs_export_pt_diff: int = -1  # elements of qat.bc (fed) != qat.export.pt
    quantized_vs_bc_lsb: float = -1.0  # max |quantized.bc - qat.bc| in output LSBs
    float_vs_qat_max_abs: float = -1.0
    engine: str = ""  # quantized.bc's fast feed (hbir.fast_feed.engine)
    # elements of model.hbm (loaded back) / quantized.bc's fast feed != quantized.bc
    hbm_vs_quantized_diff: int = -1
    fast_vs_quantized_diff: int = -1
    # the CPU islands of model.hbm's program but those at its edges (quantize /
    # dequantize), each as "op names: reason"
    hbm_islands: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=1)
def float_model(name: str) -> nn.Module:
    """``name`` with random weights and BatchNorm statistics re-estimated on random
    data, in its boundary stubs (cached: the suite takes it through four levels)."""
    timm = import_timm()
    kwargs, size, _ = MODELS[name]
    torch.manual_seed(0)
    inner = timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(4, 3, size, size, generator=g) for _ in range(2)]
    reestimate_batch_norms(inner, batches)
    return Boundary(inner).eval()


def input_shape(name: str, n: int) -> tuple[int, ...]:
    """A batch of ``n`` inputs of ``name``."""
    size = MODELS[name][1]
    return (n, 3, size, size)


def run_stages(
    name: str,
    out_dir,
    result: Result,
    qat_steps: int = 1,
    level: int | None = None,
    inputs: int = INPUTS,
    artifacts: dict | None = None,
    compare_float: bool = True,
    suite=None,
) -> Result:
    """Take ``name`` through every stage at consistency ``level`` (None: the
    default), updating ``result`` as it goes (so a caller that catches an exception
    knows the stage that raised). The example is one batch of ``inputs`` random
    inputs. ``artifacts`` (a dict) receives the stages and that batch: ``qat``,
    ``qat_export``, ``qat_bc``, ``quantized``, ``inputs`` and the output's
    ``lsb``. ``compare_float=False`` leaves out the float and VALIDATION forwards
    whose only use is ``float_vs_qat_max_abs`` (a survey figure no test asserts;
    export runs the VALIDATION forward on the example all the same). ``suite``
    (a module with ``float_model(name)`` and ``input_shape(name, n)``; None: this
    one) is where the model comes from."""
    suite = suite or sys.modules[__name__]
    model = copy.deepcopy(suite.float_model(name))
    g = torch.Generator().manual_seed(2)

    def batch(n=inputs):
        return torch.randn(suite.input_shape(name, n), generator=g)

    # One batch of ``inputs`` random inputs is the example, and every stage is fed
    # it: the interpreter's per-op cost is paid once, not once per input.
    example = batch()

    result.stage = "float"
    if compare_float:
        with torch.no_grad():
            float_out = model(example)

    result.stage = "prepare"
    ConsistencyStrategy.set_consistency_level(level)
    try:
        qat = prepare(model, (example,), out_dir=out_dir)
    finally:
        ConsistencyStrategy.set_consistency_level(None)

    result.stage = "calibration"
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for _ in range(2):
            qat(batch())

    result.stage = "qat_step"
    if qat_steps:
        qat.train()
        set_fake_quantize(qat, FakeQuantState.QAT)
        opt = torch.optim.SGD(qat.parameters(), lr=1e-4)
        for _ in range(qat_steps):
            loss = qat(batch()).float().pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    result.stage = "validation"
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    if compare_float:
        with torch.no_grad():
            qat_out = qat(example)
        result.float_vs_qat_max_abs = float((float_out - qat_out).abs().max())

    result.stage = "pre_export"
    qat_export = pre_export(qat)

    result.stage = "export"
    qat_bc = export(qat, (example,))

    result.stage = "convert"
    quantized = hbir.convert(qat_bc, "nash-e")
    result.cpu_ops = cpu_advice(quantized)

    result.stage = "feed"
    lsb = float(_output_fake_quant(qat).scale.flatten()[0])
    result.bc_vs_export_pt_diff = result.quantized_vs_bc_lsb = 0
    if artifacts is not None:
        artifacts.update(
            qat=qat, qat_export=qat_export, qat_bc=qat_bc, quantized=quantized
        )
        artifacts.update(inputs=example, lsb=lsb)
    for x in [example]:
        with torch.no_grad():
            export_out = qat_export(x).numpy()
        bc_out = np.asarray(qat_bc["forward"](x.numpy()))
        feed = {"_input_0": x.numpy()}  # quantized.bc as the interpreter defines it
        q_out = quantized["forward"].feed(feed, reference=True)["_output_0"]
        result.bc_vs_export_pt_diff += int((bc_out != export_out).sum())
        diff = float(np.abs(q_out - bc_out).max() / lsb)
        result.quantized_vs_bc_lsb = max(result.quantized_vs_bc_lsb, diff)

    result.stage = "compile"  # model.hbm, loaded back; quantized.bc's own feed
    path = Path(out_dir) / "model.hbm"
    compiled = hbir.compile(quantized, path, "nash-e")  # also quantized.bc's feed
    hbm = hbir.load(path)
    feed = {"_input_0": example.numpy()}
    want = q_out  # quantized.bc as the interpreter defines it, on this input
    fast = quantized["forward"].feed(feed)["_output_0"]
    result.engine = fast_feed.engine(quantized)
    result.hbm_vs_quantized_diff = int(
        (hbm["forward"].feed(feed)["_output_0"] != want).sum()
    )
    result.fast_vs_quantized_diff = int((fast != want).sum())
    result.hbm_islands = inner_islands(compiled)
    result.stage = "ok"
    return result


_EDGES = {"qnt.quantize", "qnt.dequantize"}


def inner_islands(hbm) -> list[str]:
    """The CPU instructions of the compiled model ``hbm`` (each its op and torch
    location) but the quantize / dequantize at the model's edges."""
    return [
        f"{debug.op} at {debug.loc}"
        for code in hbm.program.functions
        for instruction, debug in zip(code.instructions, code.debug, strict=True)
        if instruction.unit == "cpu" and debug.op not in _EDGES
    ]


def run_case(
    name: str, level: int | None, inputs: int, out_dir, suite: str = __name__
) -> tuple[Result, str | None, list[tuple]]:
    """``run_stages`` for a suite (the module named ``suite``), in a worker
    process: the result, the traceback of the exception that stopped it (None if
    none did) and the warnings raised (message, category, file, line), all of which
    pickle back to the test."""
    torch.set_num_threads(1)
    result, error = Result(name), None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # each warning once per place, as pytest
        try:
            run_stages(
                name,
                out_dir,
                result,
                level=level,
                inputs=inputs,
                compare_float=False,
                suite=importlib.import_module(suite),
            )
        except Exception:
            error = traceback.format_exc()
    found = [(str(w.message), w.category, w.filename, w.lineno) for w in caught]
    return result, error, found


def _output_fake_quant(qat):
    """The fake quant of the module feeding the DeQuantStub (the output's LSB)."""
    modules = dict(qat.named_modules())
    for node in qat.graph.nodes:
        if node.op == "call_module" and isinstance(
            modules[node.target], qat_modules.DeQuantStub
        ):
            src = node.args[0]
            while src.op != "call_module":  # pass-through ops keep the scale
                src = src.args[0]
            return modules[src.target].activation_post_process
    raise AssertionError("no DeQuantStub")
