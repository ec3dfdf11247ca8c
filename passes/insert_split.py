"""insert-split: a batched model input is fed as one input per slice.

The reference toolchain's ``Argument.insert_split(dim)``: the input ``x`` of
size ``k`` along ``dim`` becomes ``k`` inputs ``x_0 .. x_{k-1}``, each of size 1
along ``dim`` (e.g. the images of a batch from separate camera buffers), and an
``hbir.concat`` along ``dim`` rebuilds what the model reads: moved values, exact
in every dtype. Only before convert, as the reference's other input insertions.

Before (``insert-split{input=img dim=0}``)::

    func.func @forward(%img: tensor<2x3xf32> {hbir.name = "img"}) -> ... {
      %0 = hbir.relu %img : tensor<2x3xf32>

After::

    func.func @forward(%img: tensor<1x3xf32> {hbir.name = "img_0"},
                       %img_1: tensor<1x3xf32> {hbir.name = "img_1"}) -> ... {
      %img_2 = hbir.concat %img, %img_1 {dim = 0 : i64} : ... -> tensor<2x3xf32>
      %1 = hbir.relu %0 : tensor<2x3xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass

from hbir.dialects import hbir
from hbir.passes import function_io as io


def insert_split(module: ModuleOp, function: str, name: str, dim: int) -> list[str]:
    """Split input ``name`` along ``dim``; the new inputs' names."""
    what = "insert_split"
    func, index, where = io.input_to_edit(module, function, name, what)
    arg = func.args[index]
    shape = list(arg.type.get_shape())
    if not -len(shape) <= dim < len(shape):
        raise io.InputEditError(
            f"{where}: dim {dim} is not a dimension of the input (shape {shape})"
        )
    dim %= len(shape)
    count = shape[dim]
    if count < 2:
        raise io.InputEditError(
            f"{where}: dimension {dim} has size {count}: nothing to split"
        )
    part = TensorType(arg.type.element_type, [*shape[:dim], 1, *shape[dim + 1 :]])
    names = [f"{name}_{i}" for i in range(count)]
    io.swap_input(
        func, index, [part] * count, names, lambda new: [hbir.ConcatOp(new, dim)]
    )
    return names


@dataclass(frozen=True)
class InsertSplitPass(ModulePass):
    """Feed a model input as one input per slice along ``dim`` (reference
    insert_split)."""

    name = "insert-split"

    input: str
    dim: int
    function: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        insert_split(op, self.function, self.input, self.dim)
