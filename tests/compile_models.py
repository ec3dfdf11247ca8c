"""Quantized models the compile tests share (tests/passes/test_compile.py,
tests/hbm/): the zoo, the digits model, a model with a CPU island, an NV12 model,
a level-2 model and a half-up (legacy rounding) model, each with input batches.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import torch
import torch.nn.functional as F
import zoo
from torch import nn
from zoo_stages import calibrated, validated

import hbir
from hbir.quantization import (
    DeQuantStub,
    QconfigSetter,
    QuantStub,
    export,
    get_qconfig,
    qint16,
    set_round_mode,
)

# zoo models, then the others; "resnet-level2": resnet prepared at consistency
# level 2; "mobilenet-half-up": mobilenet with legacy (half-up) rounding.
NAMES = (
    *zoo.NAMES,
    "digits",
    "island",
    "nv12",
    "resnet-level2",
    "mobilenet-half-up",
)


class IslandNet(nn.Module):
    """conv (int8) -> an int16 x int16 linear (the CPU: a float island) -> linear."""

    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc1 = nn.Linear(8 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 4)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = F.relu(self.conv(self.quant(x)))
        x = F.relu(self.fc1(x.flatten(1)))
        return self.dequant(self.fc2(x))


ISLAND_QCONFIG = QconfigSetter(
    module_name={
        "fc1": get_qconfig(in_dtype=qint16, weight_dtype=qint16, out_dtype=qint16),
        "conv": get_qconfig(out_dtype=qint16),
    }
)


def _digits_net():
    path = os.path.join(os.path.dirname(__file__), "quantization", "test_digits.py")
    spec = importlib.util.spec_from_file_location("_digits_for_compile", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _numpy(batches):
    return [tuple(t.numpy() for t in b) for b in batches]


def quantized(name: str, tmp_path, n: int = 3):
    """(quantized.bc, ``n`` input batches as numpy tuples) for a model of NAMES."""
    if name in zoo.NAMES:
        qat, example = calibrated(name, tmp_path)
        batches = zoo.batches(name, n, batch=len(example[0]), seed=100)
    elif name == "resnet-level2":
        qat, example = calibrated("resnet", tmp_path, level=2, qat_steps=2)
        batches = zoo.batches("resnet", n, batch=len(example[0]), seed=100)
    elif name == "mobilenet-half-up":
        set_round_mode("half_up")
        try:
            qat, example = calibrated("mobilenet", tmp_path, level=1, qat_steps=2)
            model = export(qat, example)
        finally:
            set_round_mode("half_even")
        batches = zoo.batches("mobilenet", n, batch=len(example[0]), seed=100)
        return hbir.convert(model, "nash-e"), _numpy(batches)
    elif name == "digits":
        digits = _digits_net()
        (x, _), (xt, _) = digits._data()
        torch.manual_seed(0)
        qat = validated(digits.DigitsNet(), list(x[:256].split(64)), tmp_path)
        example = (x[:4],)
        batches = [(xt[i * 4 : (i + 1) * 4],) for i in range(n)]
    elif name == "nv12":
        return _nv12(tmp_path, n)
    elif name == "island":
        torch.manual_seed(0)
        inputs = [torch.randn(2, 3, 4, 4) for _ in range(4)]
        qat = validated(IslandNet(), inputs, tmp_path, ISLAND_QCONFIG)
        example = (inputs[0],)
        batches = [(torch.randn(2, 3, 4, 4),) for _ in range(n)]
    else:
        raise ValueError(f"unknown model {name!r}; have {NAMES}")
    return hbir.convert(export(qat, example), "nash-e"), _numpy(batches)


def _nv12(tmp_path, n: int):
    """nv12_quantized.bc: a small conv model behind the canonical NV12 insertion
    (transpose, BT.601 full-range to RGB with mean / std 128, NV12 planes)."""
    from hbir.runtime import yuv

    torch.manual_seed(3)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, 5)
    )
    inputs = [torch.rand(2, 3, 8, 8) * 4 - 2 for _ in range(4)]
    model = export(validated(net, inputs, tmp_path), (inputs[0],))
    node = model.functions[0].inputs[0].insert_transpose(permutes=[0, 3, 1, 2])
    node = node.insert_image_preprocess("yuvbt601full2rgb", 1, [128.0] * 3, [128.0] * 3)
    node.insert_image_convert("nv12")
    rng = np.random.default_rng(3)
    batches = [
        yuv.rgb_to_nv12(rng.integers(0, 256, (2, 8, 8, 3)).astype(np.uint8))
        for _ in range(n)
    ]
    return hbir.convert(model, "nash-e"), [tuple(b) for b in batches]


N_INPUTS = 20  # the "20 random inputs each"
_COMPILED: dict = {}


def compiled(name: str, tmp_path_factory):
    """(quantized.bc, N_INPUTS input batches, the ``Hbm`` ``hbir.compile`` returned,
    its ``model.hbm`` file) of a model of NAMES, made once a session and shared by
    every test that needs it (callers must not modify them)."""
    if name not in _COMPILED:
        tmp = tmp_path_factory.mktemp(name)
        model, batches = quantized(name, tmp, N_INPUTS)
        path = tmp / "model.hbm"
        _COMPILED[name] = (model, batches, hbir.compile(model, path), path)
    return _COMPILED[name]


def halve_a_multiplier(program, loc: str = "", channel: int = 0):
    """Plant a fault in a compiled program (in place): one channel of the first
    per-channel requantization multiplier (of an instruction whose torch location
    contains ``loc``) halved. (index of the instruction, channel, old, new)."""
    code = program.functions[0]
    index = next(
        i
        for i, (ins, debug) in enumerate(
            zip(code.instructions, code.debug, strict=True)
        )
        if loc in debug.loc
        and ins.fields.get("multiplier", -1) >= 0
        and code.constants[ins.fields["multiplier"]].size > max(1, channel)
    )
    values = code.constants[code.instructions[index].fields["multiplier"]]
    old = int(values[channel])
    values[channel] = old // 2
    return index, channel, old, old // 2
