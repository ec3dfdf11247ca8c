"""The stages of the deployment road, how each one runs, and the contract between two.

A stage is a model and a way to record every torch call's output on an input
batch (``origin.Record``). The road, in order::

    qat.pt -> qat.export.pt -> qat.bc -> quantized.bc -> nv12_quantized.bc -> model.hbm

``CONTRACTS`` holds what the numeric contract (``docs/contract.md``) allows between
neighbours: only the lookup-table approximation (each table op within
``LUT_BOUND_LSB`` of its float function on the same input), or nothing at all. A
stage the user does not have is skipped and the pair closes over the gap with the
stricter contract.

``nv12_quantized.bc`` is ``profiler/nv12.py``'s ``Nv12Stage``, run on NV12
planes; its "nv12" contract is checked there. ``model.hbm`` is
``profiler/compile_stage.py``'s ``HbmStage``, recorded through its debug table.
Adding a stage is one ``Stage`` subclass with a ``record`` method and a
``CONTRACTS`` row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hbir.errors import HbirError
from hbir.profiler import origin as og

ORDER = (
    "qat.pt",
    "qat.export.pt",
    "qat.bc",
    "quantized.bc",
    "nv12_quantized.bc",
    "model.hbm",
)
# Contract between neighbours: "lut" (table approximation, bounded per op),
# "exact" (bit-identical), "nv12" (colour conversion and chroma subsampling).
CONTRACTS = {
    ("qat.pt", "qat.export.pt"): "lut",
    ("qat.export.pt", "qat.bc"): "exact",
    ("qat.bc", "quantized.bc"): "exact",
    ("quantized.bc", "nv12_quantized.bc"): "nv12",
    ("nv12_quantized.bc", "model.hbm"): "exact",
    ("quantized.bc", "model.hbm"): "exact",
}
# A table op is within contract when its output is within this many LSB of its
# float function on the same input codes: the targets ``num_tables`` defaults are
# tuned for (``runtime/numerics.py``: int8 outputs 1 LSB, int16 outputs 2 LSB).
LUT_BOUND_LSB = {8: 1.0, 16: 2.0}


class StageError(HbirError):
    """A stage that cannot be run (an unknown model type, a stage not built yet)."""


@dataclass
class Stage:
    name: str
    model: Any
    grids: Mapping | None = field(default=None, repr=False)
    # codes of no known grid kept as they are (the compile stage compares codes)
    keep_codes: bool = field(default=False, kw_only=True)

    @property
    def kind(self) -> str:
        import torch

        if isinstance(self.model, torch.nn.Module):
            return "torch"
        from hbir.module import Module

        if isinstance(self.model, Module):
            return "hbir"
        from hbir.hbm import Hbm

        if isinstance(self.model, Hbm):
            return "hbm"
        return type(self.model).__name__

    def record(self, inputs: tuple) -> og.Record:
        """Every torch call's output on ``inputs`` (a tuple of tensors)."""
        if self.kind == "torch":
            from torch import fx

            if not isinstance(self.model, fx.GraphModule):
                raise StageError(
                    f"{self.name}: a torch model is analysed through its fx graph: "
                    "pass the model hbir.quantization.prepare returned"
                )
            return og.record_torch(self.model, inputs)
        if self.kind == "hbir":
            function = self.function
            feed = self.feed(inputs)
            record = og.record_hbir(
                function,
                feed,
                self.grids,
                taps=self.taps(function),
                keep_codes=self.keep_codes,
            )
            return self.in_float(record)
        raise StageError(
            f"{self.name}: cannot run a {self.kind} (a model.hbm is the compile "
            "stage's HbmStage, profiler/compile_stage.py)"
        )

    @property
    def function(self):
        """The HBIR function analysed: ``forward``, else the first."""
        return self.model["forward"] if _has(self.model) else self.model[0]

    def feed(self, inputs: tuple) -> dict[str, np.ndarray]:
        """``inputs`` (tensors or arrays, in the order of the HBIR function's
        inputs) by input name."""
        function = self.function
        if len(inputs) != len(function.inputs):
            names = [a.name for a in function.inputs]
            raise StageError(
                f"{self.name}: a batch has {len(inputs)} input(s), the model takes "
                f"{len(names)}: {names}"
            )
        return {
            arg.name: _in_format(
                arg, np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)
            )
            for arg, t in zip(self.io_function.inputs, inputs, strict=True)
        }

    @property
    def io_function(self):
        """The HBIR function whose arguments say each input's and output's
        format (a model.hbm's: the quantized.bc it was compiled from)."""
        return self.function

    def in_float(self, record: og.Record) -> og.Record:
        """``record`` with the codes of outputs whose Dequantize ``remove_io_op``
        removed dequantized as it did (unless the stage compares codes)."""
        if self.keep_codes:
            return record
        outs = self.io_function.outputs
        if len(outs) == len(record.outputs):
            record.outputs = [
                _dequantized(arg, y)
                for arg, y in zip(outs, record.outputs, strict=True)
            ]
        return record

    def taps(self, function) -> dict:
        """Ops whose results ``record`` keeps by name (``Record.taps``): none here;
        the NV12 check's stages (``profiler/nv12.py``) keep the entering codes."""
        return {}


def _takes_codes(arg) -> bool:
    quant = getattr(arg, "quant_info", None)
    return quant is not None and np.dtype(arg.dtype).kind in "iu"


def _in_format(arg, x: np.ndarray) -> np.ndarray:
    """A float batch for an input that takes codes (its Quantize removed by
    ``remove_io_op``), quantized as that op did: the same content in the
    input's own format."""
    if np.issubdtype(x.dtype, np.floating) and _takes_codes(arg):
        return arg.quant_info.quantize(x, arg.dtype)
    return x


def _dequantized(arg, y: np.ndarray) -> np.ndarray:
    if _takes_codes(arg):  # codes, perhaps held as float32
        codes = np.asarray(y).astype(np.dtype(arg.dtype))
        return np.asarray(arg.quant_info.dequantize(codes), np.float32)
    return y


def _has(module) -> bool:
    return any(f.name == "forward" for f in module.functions)


def contract(baseline: str, analysis: str) -> str:
    """The contract between two stages of the road (the strictest on the way)."""
    if (baseline, analysis) in CONTRACTS:
        return CONTRACTS[(baseline, analysis)]
    i, j = ORDER.index(baseline), ORDER.index(analysis)
    kinds = {CONTRACTS.get((ORDER[k], ORDER[k + 1]), "exact") for k in range(i, j)}
    for kind in ("lut", "nv12"):
        if kind in kinds:
            return kind
    return "exact"
