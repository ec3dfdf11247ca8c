"""insert-transpose: a model input takes a transposed layout (NHWC for NCHW).

The reference toolchain's ``Argument.insert_transpose(permutes)``: the input gets
a new shape in which its dimension ``i`` sits at position ``permutes[i]``, and a
``hbir.transpose`` with ``perm = permutes`` turns it back into what the model
reads. This is the inverse of numpy's convention: an NCHW input becomes NHWC with
``permutes = [0, 3, 1, 2]`` (numpy would write ``x.transpose(0, 2, 3, 1)``). The
camera-input nodes (``insert-image-preprocess``, ``insert-image-convert``) need
NHWC, so this comes first. Only before convert.

Before (``insert-transpose{input=img permutes=0,3,1,2}``)::

    func.func @forward(%img: tensor<1x3x4x6xf32> {hbir.name = "img"}) -> ... {
      %0 = hbir.relu %img : tensor<1x3x4x6xf32>

After::

    func.func @forward(%img: tensor<1x4x6x3xf32> {hbir.name = "img"}) -> ... {
      %0 = hbir.transpose %img {perm = array<i64: 0, 3, 1, 2>} :
          tensor<1x4x6x3xf32> -> tensor<1x3x4x6xf32>
      %1 = hbir.relu %0 : tensor<1x3x4x6xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass

from hbir.dialects import hbir
from hbir.passes import function_io as io


def insert_transpose(
    module: ModuleOp, function: str, name: str, permutes: list[int]
) -> None:
    what = "insert_transpose"
    func, index, where = io.input_to_edit(module, function, name, what)
    arg = func.args[index]
    shape = list(arg.type.get_shape())
    if sorted(permutes) != list(range(len(shape))):
        raise io.InputEditError(
            f"{where}: permutes {permutes} is not a permutation of the input's "
            f"{len(shape)} dimensions (shape {shape})"
        )
    new_shape = [0] * len(shape)
    for i, p in enumerate(permutes):
        new_shape[p] = shape[i]
    new_type = TensorType(arg.type.element_type, new_shape)
    io.swap_input(
        func,
        index,
        [new_type],
        [name],
        lambda new: [hbir.TransposeOp(new[0], permutes)],
    )


@dataclass(frozen=True)
class InsertTransposePass(ModulePass):
    """Give a model input a transposed layout (reference insert_transpose)."""

    name = "insert-transpose"

    input: str
    permutes: tuple[int, ...]
    function: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        insert_transpose(op, self.function, self.input, list(self.permutes))
