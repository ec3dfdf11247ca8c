"""Function arguments, and the edits that adapt a model's inputs for deployment.

``func.inputs[i]`` / ``func.inputs["name"]`` is an ``Argument``. As in the
reference toolchain, an input of ``qat.bc`` can be edited before convert, each
call returning the new node so that calls chain::

    func = qat_bc.functions[0]                      # or qat_bc["forward"]
    for input in func.inputs[::-1]:
        node = input.insert_transpose(permutes=[0, 3, 1, 2])   # NCHW model, NHWC feed
        node = node.insert_image_preprocess(
            mode="yuvbt601full2rgb", divisor=1, mean=[128] * 3, std=[128] * 3
        )
        node.insert_image_convert("nv12")           # inputs <name>_y, <name>_uv
    nv12_quantized = hbir.convert(qat_bc, "nash-e")

and after convert ``func.remove_io_op(op_types=["Quantize", "Dequantize"])`` leaves
integer inputs and outputs whose ``quant_info`` says how to make and read them.
Each edit is a pass (``insert-transpose``, ``insert-image-preprocess``,
``insert-image-convert``, ``insert-roi-resize``, ``remove-io-op``) that these
methods run on the module in place; ``docs/image-input.md`` has the formats and
the numerics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
)

from hbir.dialects.hbir import numpy_dtype

# The argument attributes remove-io-op leaves on an input or output whose quantize
# or dequantize it removed (passes/remove_io_op.py).
ATTR_SCALES = "hbir.scales"
ATTR_ZEROS = "hbir.zeros"
ATTR_AXIS = "hbir.axis"
ATTR_ROUNDING = "hbir.rounding"


@dataclass(frozen=True)
class QuantInfo:
    """The grid of an integer input or output: ``real = (q - zero) * scale``."""

    scales: tuple[float, ...]
    zeros: tuple[int, ...]
    axis: int | None = None
    rounding: str = "half_even"

    def _along(self, values, ndim: int, dtype) -> np.ndarray:
        v = np.asarray(values, dtype)
        if self.axis is None:
            return v.reshape(())
        shape = [1] * ndim
        shape[self.axis] = -1
        return v.reshape(shape)

    def quantize(self, x: np.ndarray, dtype=np.int8) -> np.ndarray:
        """Float -> codes as convert's ``qnt.quantize`` computes them."""
        from hbir.runtime import numerics

        info = np.iinfo(dtype)
        codes = numerics.quantize(
            x,
            self.scales,
            self.zeros,
            int(info.min),
            int(info.max),
            self.axis,
            self.rounding,
        )
        return codes.astype(dtype)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """Codes -> float32 as convert's ``qnt.dequantize`` computes them."""
        from hbir.runtime import numerics

        return numerics.dequantize(q, self.scales, self.zeros, self.axis)


def quant_info(attrs: DictionaryAttr | None) -> QuantInfo | None:
    if attrs is None or ATTR_SCALES not in attrs.data:
        return None
    scales, zeros = attrs.data[ATTR_SCALES], attrs.data.get(ATTR_ZEROS)
    axis, rounding = attrs.data.get(ATTR_AXIS), attrs.data.get(ATTR_ROUNDING)
    assert isinstance(scales, DenseArrayBase) and isinstance(zeros, DenseArrayBase)
    return QuantInfo(
        tuple(scales.get_values()),
        tuple(int(z) for z in zeros.get_values()),
        axis.value.data if isinstance(axis, IntegerAttr) else None,
        rounding.data if isinstance(rounding, StringAttr) else "half_even",
    )


class ArgumentType:
    """``Argument.type`` as the reference's ``TensorType``: ``shape`` (a tuple),
    ``dims`` (a list), ``rank``, ``dtype`` (the element type's name: "si8",
    "f32"), ``np_dtype``, ``torch_dtype`` and ``quant_info``. Anything else is
    the xDSL ``TensorType``'s (``element_type``, ``get_shape()``), which
    ``.tensor_type`` is; it compares and prints as that type."""

    __slots__ = ("quant_info", "tensor_type")

    def __init__(self, tensor_type: TensorType, quant_info: QuantInfo | None = None):
        self.tensor_type = tensor_type
        self.quant_info = quant_info

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.tensor_type.get_shape())

    @property
    def dims(self) -> list[int]:
        return list(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> str:
        return str(self.tensor_type.element_type)

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype a feed takes (bf16: float32, numpy has no bf16)."""
        return numpy_dtype(self.tensor_type.element_type)

    @property
    def torch_dtype(self):
        import torch

        if self.dtype == "bf16":
            return torch.bfloat16
        return torch.from_numpy(np.empty(0, self.np_dtype)).dtype

    def __getattr__(self, name: str):
        if name.startswith("__") or name in self.__slots__:  # copy, pickle
            raise AttributeError(name)
        return getattr(self.tensor_type, name)

    def __eq__(self, other) -> bool:
        other = other.tensor_type if isinstance(other, ArgumentType) else other
        return self.tensor_type == other

    def __hash__(self) -> int:
        return hash(self.tensor_type)

    def __str__(self) -> str:
        return str(self.tensor_type)

    __repr__ = __str__


@dataclass(frozen=True)
class Argument:
    """One function input or output: name, shape, numpy dtype, and for an integer
    one left by ``remove_io_op`` its ``quant_info``. Inputs can be edited (below)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    type: ArgumentType
    quant_info: QuantInfo | None = None
    function: Any = field(default=None, compare=False, repr=False)
    is_input: bool = field(default=True, compare=False, repr=False)

    def __repr__(self) -> str:
        return f"Argument({self.name!r}, shape={self.shape}, dtype={self.dtype})"

    @classmethod
    def of(
        cls, name: str, t: TensorType, attrs, function=None, is_input=True
    ) -> Argument:
        info = quant_info(attrs)
        return cls(
            name,
            tuple(t.get_shape()),
            numpy_dtype(t.element_type),
            ArgumentType(t, info),
            info,
            function,
            is_input,
        )

    # ---- input edits (each runs its pass on the module, in place)
    def _run(self, what: str, make_pass) -> Any:
        """Run the pass ``make_pass(function name)`` on the module, in place."""
        from hbir.dialects import make_context
        from hbir.passes.function_io import InputEditError

        if self.function is None or not self.is_input:
            kind = "an output" if not self.is_input else "a detached argument"
            raise InputEditError(f"{what}: '{self.name}' is {kind}, not an input")
        edit = make_pass(self.function.name)
        self.function._run_pass(edit.name, lambda m: edit.apply(make_context(), m))
        return self.function.inputs

    def insert_transpose(self, permutes: Sequence[int]) -> Argument:
        """Feed this input transposed: its dimension ``i`` moves to position
        ``permutes[i]`` (the reference's convention, the inverse of numpy's: an
        NCHW input is fed NHWC with ``permutes=[0, 3, 1, 2]``)."""
        from hbir.passes.insert_transpose import InsertTransposePass

        inputs = self._run(
            "insert_transpose",
            lambda f: InsertTransposePass(self.name, tuple(permutes), f),
        )
        return inputs[self.name]

    def insert_split(self, dim: int) -> list[Argument]:
        """Feed this input as one input per slice along ``dim``: ``<name>_0``
        .. ``<name>_{k-1}``, each of size 1 along ``dim`` (returned in order),
        concatenated back inside the model (exact)."""
        from hbir.passes.insert_split import InsertSplitPass

        inputs = self._run(
            "insert_split", lambda f: InsertSplitPass(self.name, int(dim), f)
        )
        count = self.shape[int(dim)]
        return [inputs[f"{self.name}_{i}"] for i in range(count)]

    def insert_image_preprocess(
        self,
        mode: str | None,
        divisor: int,
        mean: Sequence[float],
        std: Sequence[float],
        is_signed: bool = True,
    ) -> Argument:
        """Feed this NHWC float input as 8-bit image codes: colour conversion
        ``mode`` (None/"skip", "yuvbt601full2rgb", "yuvbt601full2bgr",
        "yuvbt601video2rgb", "yuvbt601video2bgr", "bgr2rgb", "rgb2bgr"), then
        ``(v / divisor - mean[c]) / std[c]``. ``is_signed``: codes centred as si8
        (what ``insert_image_convert`` needs), else ui8."""
        from hbir.passes.insert_image_preprocess import InsertImagePreprocessPass

        inputs = self._run(
            "insert_image_preprocess",
            lambda f: InsertImagePreprocessPass(
                self.name,
                tuple(mean),
                tuple(std),
                "skip" if mode is None else mode,
                divisor,
                is_signed,
                f,
            ),
        )
        return inputs[self.name]

    def insert_image_convert(
        self, mode: str = "nv12"
    ) -> Argument | tuple[Argument, Argument]:
        """Feed this centred si8 NHWC input as camera planes: "nv12" gives the
        inputs ``<name>_y`` and ``<name>_uv`` (returned as a pair), "gray"
        ``<name>_y``."""
        from hbir.passes.insert_image_convert import InsertImageConvertPass

        inputs = self._run(
            "insert_image_convert",
            lambda f: InsertImageConvertPass(self.name, mode, f),
        )
        if mode == "gray":
            return inputs[f"{self.name}_y"]
        return inputs[f"{self.name}_y"], inputs[f"{self.name}_uv"]

    def insert_roi_resize(
        self,
        mode: str,
        interp_mode: str = "bilinear",
        pad_mode: str = "constant",
        pad_value: Sequence[int] = (0, -128),
        frame: Sequence[int] = (8192, 8192),
    ) -> tuple[Argument, ...]:
        """Feed this centred si8 NHWC input from the resizer: a camera frame of
        ``frame`` (height, width) pixels and a run-time roi (left, top, right,
        bottom, inclusive) resized to the input's size. "nv12" gives the inputs
        ``<name>_y``, ``<name>_uv``, ``<name>_roi``, "gray" ``<name>_y``,
        ``<name>_roi`` (returned in that order). ``interp_mode`` "bilinear" or
        "nearest"; ``pad_mode`` "constant" (``pad_value``: the Y and UV bytes
        where the roi leaves the frame) or "border"."""
        from hbir.passes.insert_roi_resize import InsertRoiResizePass

        inputs = self._run(
            "insert_roi_resize",
            lambda f: InsertRoiResizePass(
                self.name,
                mode,
                interp_mode,
                pad_mode,
                tuple(pad_value),
                tuple(frame),
                f,
            ),
        )
        planes = ("y", "roi") if mode == "gray" else ("y", "uv", "roi")
        return tuple(inputs[f"{self.name}_{p}"] for p in planes)
