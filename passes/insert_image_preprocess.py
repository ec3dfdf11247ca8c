"""insert-image-preprocess: a float image input takes camera codes instead.

The reference toolchain's ``Argument.insert_image_preprocess(mode, divisor, mean,
std, is_signed=True)``. The NHWC float input becomes an si8 input (centred,
``is_signed``) or ui8 input of the same shape, and ``hbir.image_preprocess``
computes from it what the model was trained on: the colour conversion ``mode``
(``None``/"skip", "yuvbt601full2rgb", "yuvbt601full2bgr", "yuvbt601video2rgb",
"yuvbt601video2bgr", "bgr2rgb", "rgb2bgr"), then ``(v / divisor - mean[c]) /
std[c]`` (``runtime/yuv.py``). Colour modes need 3 channels; "skip" takes 1 or 3.
Only before convert; ``convert`` then folds the normalisation and the input's
quantization into one integer table (``convert-image-preprocess``).

Before (``insert-image-preprocess{input=img mode=yuvbt601full2rgb divisor=1
mean=128,128,128 std=128,128,128}``)::

    func.func @forward(%img: tensor<1x4x6x3xf32> {hbir.name = "img"}) -> ... {
      %0 = hbir.transpose %img {perm = array<i64: 0, 3, 1, 2>} : ...

After::

    func.func @forward(%img: tensor<1x4x6x3xsi8> {hbir.name = "img"}) -> ... {
      %0 = hbir.image_preprocess %img {csc = "yuv_bt601_full_to_rgb", mean =
          array<f64: 128.0, 128.0, 128.0>, std = array<f64: 128.0, 128.0, 128.0>}
          : tensor<1x4x6x3xsi8> -> tensor<1x4x6x3xf32>
      %1 = hbir.transpose %0 {perm = array<i64: 0, 3, 1, 2>} : ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerType, ModuleOp, Signedness, TensorType
from xdsl.passes import ModulePass

from hbir.dialects import hbir
from hbir.passes import function_io as io

# insert_image_preprocess's modes -> hbir.image_preprocess's csc (runtime/yuv.py's
# USER_MODES; a test checks they agree). "skip" is also None in the Python API.
MODES = {
    "skip": "none",
    "yuvbt601full2rgb": "yuv_bt601_full_to_rgb",
    "yuvbt601full2bgr": "yuv_bt601_full_to_bgr",
    "yuvbt601video2rgb": "yuv_bt601_video_to_rgb",
    "yuvbt601video2bgr": "yuv_bt601_video_to_bgr",
    "bgr2rgb": "bgr_to_rgb",
    "rgb2bgr": "rgb_to_bgr",
}


def insert_image_preprocess(
    module: ModuleOp,
    function: str,
    name: str,
    mode: str | None,
    divisor: int,
    mean: Sequence[float],
    std: Sequence[float],
    is_signed: bool = True,
) -> None:
    what = "insert_image_preprocess"
    func = io.find_function(module, function, what)
    where = f"{what}: function @{func.sym_name.data}, input '{name}'"
    index = io.find_input(func, name, what)
    mode = "skip" if mode is None else mode
    if mode not in MODES:
        raise io.InputEditError(
            f"{where}: unknown mode {mode!r}; one of {[None, *MODES]}"
        )
    if io.converted(module):
        raise io.InputEditError(
            f"{where}: the model is already converted; insert input nodes into "
            f"qat.bc, then convert"
        )
    t = func.args[index].type
    shape = list(t.get_shape())
    if not hbir.is_float(t):
        raise io.InputEditError(
            f"{where}: the input is {t}, not a float image (is a preprocess "
            f"already inserted?)"
        )
    colour = MODES[mode] != "none"
    channels = (3,) if colour else (1, 3)
    if len(shape) != 4 or shape[3] not in channels:
        nhwc = "N x H x W x 3" if colour else "N x H x W x 1 or 3"
        hint = (
            "; call insert_transpose(permutes=[0, 3, 1, 2]) first"
            if len(shape) == 4 and shape[1] in channels
            else ""
        )
        raise io.InputEditError(
            f"{where}: mode {mode!r} needs an NHWC image ({nhwc}), the input has "
            f"shape {shape}{hint}"
        )
    for key, values in (("mean", mean), ("std", std)):
        if len(values) != shape[3]:
            raise io.InputEditError(
                f"{where}: {key} has {len(values)} values, the image has "
                f"{shape[3]} channels"
            )
    if any(s == 0 for s in std):
        raise io.InputEditError(f"{where}: std values must be nonzero, got {std}")
    if divisor <= 0:
        raise io.InputEditError(f"{where}: divisor must be positive, got {divisor}")
    sign = Signedness.SIGNED if is_signed else Signedness.UNSIGNED
    new_type = TensorType(IntegerType(8, sign), shape)

    def build(new):
        op = hbir.ImagePreprocessOp(
            new[0], mean, std, MODES[mode], divisor, t.element_type
        )
        return [op]

    io.swap_input(func, index, [new_type], [name], build)


@dataclass(frozen=True)
class InsertImagePreprocessPass(ModulePass):
    """Feed a float image input from camera codes (insert_image_preprocess)."""

    name = "insert-image-preprocess"

    input: str
    mean: tuple[float | int, ...]
    std: tuple[float | int, ...]
    mode: str = "skip"
    divisor: int = 1
    is_signed: bool = True
    function: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        insert_image_preprocess(
            op,
            self.function,
            self.input,
            self.mode,
            self.divisor,
            list(self.mean),
            list(self.std),
            self.is_signed,
        )
