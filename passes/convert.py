"""convert: fake-quant HBIR (qat.bc) to true fixed point (quantized.bc).

Runs, in order (each is its own pass, runnable alone through hbir-opt)::

    expand-fake-quant     const_fake_quant -> quantize + dequantize; constants folded
    check-march           ops the march cannot run are marked for the CPU
    sink-dequantize       dequantize moves past data movement / max / concat /
                          selection; comparisons and selects onto codes
    convert-gemm          conv, conv_transpose, linear, matmul -> int + requantize
    convert-elementwise   add / sub (common grid), mul (product) -> int + requantize
    convert-pool          avg pool, global avg pool, mean, sum, bilinear resize,
                          grid sample -> int + requantize
    convert-lut           table-configured nonlinear ops -> hbir.lut
    sink-dequantize       again, behind the freshly lowered ops
    fold-requantize       quantize(dequantize) -> requantize; dead ops removed
    convert-image-preprocess  camera-input normalisation + quantize -> code table
    fold-constants        integer ops on constants only (a learned initial state
                          through a reshape and a linear) -> the codes they compute

and records ``hbir.march`` on the module. A model that is already converted is
refused (converting again would only relabel its march); one with no fake
quantization at all gets a warning, since every op of it stays float. What no
pass lowers stays float between ``qnt.dequantize`` and ``qnt.quantize``: a CPU
island. The model's float inputs keep their ``qnt.quantize`` and its float
outputs their ``qnt.dequantize``.

Before::

    %1 = qnt.const_fake_quant %0 {min = array<f64: -1.0>, max = array<f64:
        0.9921875>, bits = 8 : i64} : tensor<4xf32>
    %2 = hbir.relu %1 : tensor<4xf32>
    %3 = qnt.const_fake_quant %2 {min = array<f64: -2.0>, max = array<f64:
        1.984375>, bits = 8 : i64} : tensor<4xf32>

After::

    %1 = qnt.quantize %0 {scales = array<f32: 0.0078125>, ...} : ... -> tensor<4xsi8>
    %2 = qnt.requantize %1 {multiplier = array<i64: 1073741824>, shift =
        array<i64: 31>, clip = array<i64: 0, 127>} : ... -> tensor<4xsi8>
    %3 = qnt.dequantize %2 {scales = array<f32: 0.015625>, ...} : ... ->
        tensor<4xf32>

(``1073741824 / 2**31 = 0.5``: the input scale 1/128 over the output scale 1/64.)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from hbir.errors import HbirError
from hbir.passes.check_march import CheckMarchPass
from hbir.passes.convert_elementwise import ConvertElementwisePass
from hbir.passes.convert_fp16 import ConvertFp16Pass
from hbir.passes.convert_gemm import ConvertGemmPass
from hbir.passes.convert_image_preprocess import ConvertImagePreprocessPass
from hbir.passes.convert_lut import ConvertLutPass
from hbir.passes.convert_pool import ConvertPoolPass
from hbir.passes.expand_fake_quant import ExpandFakeQuantPass
from hbir.passes.fold_constants import FoldConstantsPass
from hbir.passes.fold_requantize import FoldRequantizePass
from hbir.passes.march import get_march
from hbir.passes.sink_dequantize import SinkDequantizePass


def sub_passes(march: str) -> list[ModulePass]:
    return [
        ExpandFakeQuantPass(),
        CheckMarchPass(march),
        SinkDequantizePass(),
        ConvertGemmPass(),
        ConvertElementwisePass(),
        ConvertPoolPass(),
        ConvertLutPass(),
        SinkDequantizePass(),
        FoldRequantizePass(),
        ConvertFp16Pass(),
        ConvertImagePreprocessPass(),
        FoldConstantsPass(),
    ]


# What convert records, and what only convert produces.
ATTR_MARCH = "hbir.march"
_FIXED_POINT = frozenset({"qnt.requantize", "hbir.lut"})


class ConvertError(HbirError):
    """A model convert must not take: one already in fixed point."""


def check_convertible(module: ModuleOp, march: str) -> None:
    """Refuse a converted model; warn about one with no fake quantization."""
    names = {op.name for op in module.walk()}
    done = module.attributes.get(ATTR_MARCH)
    if isinstance(done, StringAttr) or (
        "qnt.const_fake_quant" not in names and names & _FIXED_POINT
    ):
        was = f" for {done.data}" if isinstance(done, StringAttr) else ""
        raise ConvertError(
            f"convert: the model is already converted{was} (quantized.bc); "
            f"converting it again would only relabel it. Convert the qat.bc it was "
            f"made from instead: hbir.convert(hbir.load('qat.bc'), '{march}')"
        )
    if not names & {"qnt.const_fake_quant", "qnt.quantize", "qnt.dequantize"}:
        warnings.warn(
            "convert: the model has no qnt.const_fake_quant, quantize or "
            "dequantize (a float model): every op stays float, on the CPU. To "
            "quantize it, export the QAT model: "
            "prepare, calibrate, set_fake_quantize(qat, FakeQuantState.VALIDATION), "
            "then hbir.quantization.export(qat, example_inputs)",
            UserWarning,
            stacklevel=4,  # the caller of hbir.convert
        )


@dataclass(frozen=True)
class ConvertPass(ModulePass):
    """Convert fake-quant HBIR to fixed point for a march (the convert phase)."""

    name = "convert"

    march: str = "nash-e"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        march = get_march(self.march).name  # a plain string, also for hbir.March
        check_convertible(op, march)
        for sub in sub_passes(march):
            sub.apply(ctx, op)
        check_converted(op)
        op.attributes[ATTR_MARCH] = StringAttr(march)


# What is legal after convert: no fake quantization left (expand-fake-quant turns
# every one into quantize + dequantize).
_ILLEGAL_AFTER = ("qnt.const_fake_quant",)


def check_converted(module: ModuleOp) -> None:
    """Convert's conversion target; an op it left is a compiler bug."""
    for inner in module.walk():
        if inner.name in _ILLEGAL_AFTER:
            raise ConvertError(
                f"convert left '{inner.name}' at {inner.location} (a compiler bug: "
                "every one must be lowered)"
            )
