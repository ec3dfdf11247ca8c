"""insert-roi-resize: a centred image input is fed as a camera frame and a roi.

The reference toolchain's ``Argument.insert_roi_resize(mode, interp_mode,
pad_mode, pad_value)``: the model's image comes from the resizer, which takes a
region of interest of a larger camera frame at run time and resizes it to the
model's input size. The input must be the si8 NHWC image
``insert-image-preprocess`` (``is_signed``) leaves, as for ``insert-image-convert``.
With ``mode=nv12`` it becomes three inputs: ``<name>_y`` (``N x FH x FW x 1`` ui8),
``<name>_uv`` (``N x FH/2 x FW/2 x 2``) and ``<name>_roi`` (``N x 4`` si32: left,
top, right, bottom, inclusive); with ``mode=gray`` two, ``<name>_y`` and
``<name>_roi``. ``hbir.roi_resize`` computes the image (``numerics.roi_resize``).

The frame size: the reference declares an 8192 x 8192 frame with dynamic
dimensions, so any frame up to that size is fed as it is. hbir's IR has static
shapes, so the frame is ``frame`` (height, width: default the reference's
8192 x 8192) and every feed has that size; the roi, the part that changes per
call, is the run-time input. A smaller camera frame is best declared as it is
(``frame=(1080, 1920)``). Only before convert.

Before (``insert-roi-resize{input=img mode=nv12 frame=8,10}``)::

    func.func @forward(%img: tensor<1x4x6x3xsi8> {hbir.name = "img"}) -> ... {
      %0 = hbir.image_preprocess %img {...} : tensor<1x4x6x3xsi8> -> ...

After::

    func.func @forward(%img_y: tensor<1x8x10x1xui8> {hbir.name = "img_y"},
                       %img_uv: tensor<1x4x5x2xui8> {hbir.name = "img_uv"},
                       %img_roi: tensor<1x4xsi32> {hbir.name = "img_roi"}) -> ... {
      %0 = hbir.roi_resize %img_y, %img_uv roi(%img_roi : tensor<1x4xsi32>)
          {size = array<i64: 4, 6>, mode = "nv12", interpolate_mode = "bilinear",
           expansion_mode = "constant", pad_value = array<i64: 0, -128>} :
          tensor<1x8x10x1xui8>, tensor<1x4x5x2xui8> -> tensor<1x4x6x3xsi8>
      %1 = hbir.image_preprocess %0 {...} : tensor<1x4x6x3xsi8> -> ...
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass

from hbir.dialects import hbir
from hbir.passes import function_io as io
from hbir.passes.insert_image_convert import camera_image, check_free, plane_types

REFERENCE_FRAME = (8192, 8192)  # the reference's largest frame


def insert_roi_resize(
    module: ModuleOp,
    function: str,
    name: str,
    mode: str,
    interp_mode: str = "bilinear",
    pad_mode: str = "constant",
    pad_value: tuple[int, ...] = (0, -128),
    frame: tuple[int, ...] = REFERENCE_FRAME,
) -> list[str]:
    """Feed input ``name`` through the resizer; the new inputs' names."""
    from hbir.runtime import numerics

    what = "insert_roi_resize"
    func, index, where = io.input_to_edit(module, function, name, what)
    n, h, w = camera_image(func, index, where, mode)
    if interp_mode not in numerics.ROI_INTERPOLATIONS:
        raise io.InputEditError(
            f"{where}: unknown interp_mode {interp_mode!r}; one of "
            f"{numerics.ROI_INTERPOLATIONS}"
        )
    if pad_mode not in numerics.ROI_EXPANSIONS:
        raise io.InputEditError(
            f"{where}: unknown pad_mode {pad_mode!r}; one of {numerics.ROI_EXPANSIONS}"
        )
    pad = tuple(int(v) for v in pad_value)[: 1 if mode == "gray" else 2]
    if len(pad) != (1 if mode == "gray" else 2) or not all(
        -128 <= v <= 255 for v in pad
    ):
        raise io.InputEditError(
            f"{where}: pad_value {tuple(pad_value)} must be (Y, UV) bytes in "
            f"[-128, 255] (Y alone is used for gray)"
        )
    frame = tuple(int(v) for v in frame)
    limit = numerics.ROI_LIMIT
    if len(frame) != 2 or not all(1 <= v <= limit for v in frame):
        raise io.InputEditError(
            f"{where}: frame {frame} must be (height, width), each in [1, {limit}]"
        )
    planes = plane_types(where, mode, n, *frame)
    roi = TensorType(hbir.si(32), [n, 4])
    names = [f"{name}_y", f"{name}_uv"][: len(planes)] + [f"{name}_roi"]
    check_free(func, where, name, names)

    def build(new):
        *frame_planes, roi_arg = new
        uv = frame_planes[1] if len(frame_planes) == 2 else None
        op = hbir.RoiResizeOp(
            frame_planes[0], uv, roi_arg, (h, w), interp_mode, pad_mode, pad
        )
        return [op]

    io.swap_input(func, index, [*planes, roi], names, build)
    return names


@dataclass(frozen=True)
class InsertRoiResizePass(ModulePass):
    """Feed a centred image input as a camera frame and a run-time roi
    (insert_roi_resize)."""

    name = "insert-roi-resize"

    input: str
    mode: str = "nv12"
    interp_mode: str = "bilinear"
    pad_mode: str = "constant"
    pad_value: tuple[int, ...] = (0, -128)
    frame: tuple[int, ...] = REFERENCE_FRAME
    function: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        insert_roi_resize(
            op,
            self.function,
            self.input,
            self.mode,
            self.interp_mode,
            self.pad_mode,
            self.pad_value,
            self.frame,
        )
