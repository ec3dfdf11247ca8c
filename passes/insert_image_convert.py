"""insert-image-convert: a centred image input is fed as NV12 or gray planes.

The reference toolchain's ``Argument.insert_image_convert(mode)``. The input must be
the si8 NHWC image ``insert-image-preprocess`` (``is_signed``) leaves. With
``mode=nv12`` it becomes two ui8 inputs, ``<name>_y`` (``N x H x W x 1``) and
``<name>_uv`` (``N x H/2 x W/2 x 2``, interleaved U V), H and W even; with
``mode=gray`` one, ``<name>_y``, for a 1-channel image. ``hbir.image_convert``
rebuilds the centred image from them (``runtime/yuv.py``). Only before convert.

Before (``insert-image-convert{input=img mode=nv12}``)::

    func.func @forward(%img: tensor<1x4x6x3xsi8> {hbir.name = "img"}) -> ... {
      %0 = hbir.image_preprocess %img {...} : tensor<1x4x6x3xsi8> -> ...

After::

    func.func @forward(%img_y: tensor<1x4x6x1xui8> {hbir.name = "img_y"},
                       %img_uv: tensor<1x2x3x2xui8> {hbir.name = "img_uv"}) -> ... {
      %0 = hbir.image_convert %img_y, %img_uv {mode = "nv12"} :
          (tensor<1x4x6x1xui8>, tensor<1x2x3x2xui8>) -> tensor<1x4x6x3xsi8>
      %1 = hbir.image_preprocess %0 {...} : tensor<1x4x6x3xsi8> -> ...
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerType, ModuleOp, Signedness, TensorType
from xdsl.passes import ModulePass

from hbir.dialects import hbir
from hbir.passes import function_io as io

MODES = ("nv12", "gray")


def camera_image(func, index: int, where: str, mode: str) -> tuple[int, int, int]:
    """(N, H, W) of input ``index``: the centred si8 NHWC image that camera
    planes of ``mode`` replace (``insert_image_convert``, ``insert_roi_resize``)."""
    if mode not in MODES:
        raise io.InputEditError(f"{where}: unknown mode {mode!r}; one of {MODES}")
    t = func.args[index].type
    shape = list(t.get_shape())
    if t.element_type != hbir.si(8):
        raise io.InputEditError(
            f"{where}: the input is {t}; the camera input gives centred si8 codes, "
            f"so call insert_image_preprocess(..., is_signed=True) on it first"
        )
    channels = 3 if mode == "nv12" else 1
    if len(shape) != 4 or shape[3] != channels:
        raise io.InputEditError(
            f"{where}: mode {mode!r} needs an NHWC image with {channels} "
            f"channel(s) (N x H x W x {channels}), the input has shape {shape}"
        )
    return shape[0], shape[1], shape[2]


def plane_types(where: str, mode: str, n: int, h: int, w: int) -> list[TensorType]:
    """The ui8 Y (and for nv12 UV) planes of an ``h x w`` frame."""
    u8 = IntegerType(8, Signedness.UNSIGNED)
    if mode == "gray":
        return [TensorType(u8, [n, h, w, 1])]
    if h % 2 or w % 2:
        raise io.InputEditError(
            f"{where}: nv12 needs an even height and width (one chroma pair "
            f"per 2 x 2 pixels), the frame is {h} x {w}"
        )
    return [TensorType(u8, [n, h, w, 1]), TensorType(u8, [n, h // 2, w // 2, 2])]


def check_free(func, where: str, name: str, names: list[str]) -> None:
    """Refuse new input ``names`` that another input of ``func`` has."""
    taken = set(io.input_names(func)) - {name}
    if taken & set(names):
        raise io.InputEditError(
            f"{where}: the function already has an input named "
            f"{sorted(taken & set(names))}"
        )


def insert_image_convert(module: ModuleOp, function: str, name: str, mode: str) -> None:
    what = "insert_image_convert"
    func, index, where = io.input_to_edit(module, function, name, what)
    n, h, w = camera_image(func, index, where, mode)
    types = plane_types(where, mode, n, h, w)
    names = [f"{name}_y", f"{name}_uv"][: len(types)]
    check_free(func, where, name, names)
    io.swap_input(func, index, types, names, lambda new: [hbir.ImageConvertOp(*new)])


@dataclass(frozen=True)
class InsertImageConvertPass(ModulePass):
    """Feed a centred image input as NV12 or gray planes (insert_image_convert)."""

    name = "insert-image-convert"

    input: str
    mode: str = "nv12"
    function: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        insert_image_convert(op, self.function, self.input, self.mode)
