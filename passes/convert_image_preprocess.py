"""convert-image-preprocess: normalisation + the input's quantization -> one table.

After the other convert passes, a camera input reads ``hbir.image_preprocess``
(float result) -> layout moves (transpose, reshape) -> ``qnt.quantize`` (per
tensor): a float CPU island at the model's input. The image codes ``v`` take only
256 values per channel, so the normalisation followed by the quantization is a
``C x 256`` code table, ``table[c, v] = quantize((v / divisor - mean[c]) /
std[c])`` (``runtime/yuv.py``'s ``preprocess_table``; the quantize's own scale,
zero point, range and rounding): exact by construction. The preprocess becomes
integer with that table, the moves run on its codes, the quantize goes.

Before::

    %0 = hbir.image_preprocess %img {csc = "yuv_bt601_full_to_rgb", mean = ...,
        std = ...} : tensor<1x4x6x3xsi8> -> tensor<1x4x6x3xf32>
    %1 = hbir.transpose %0 {perm = array<i64: 0, 3, 1, 2>} : ... -> tensor<1x3x4x6xf32>
    %2 = qnt.quantize %1 {scales = array<f32: 0.0078125>, zeros = array<i64: 0>}
        : tensor<1x3x4x6xf32> -> tensor<1x3x4x6xsi8>

After::

    %0 = hbir.image_preprocess %img {csc = "yuv_bt601_full_to_rgb", mean = ...,
        std = ..., table = dense<...> : tensor<3x256xsi8>} : tensor<1x4x6x3xsi8>
        -> tensor<1x4x6x3xsi8>
    %1 = hbir.transpose %0 {perm = array<i64: 0, 3, 1, 2>} : ... -> tensor<1x3x4x6xsi8>

A preprocess whose result is not quantized per tensor to si8 or si16 (a float
model, a per-channel quantization) is left as it is: a float CPU island.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import numpy_dtype, shape_of
from hbir.errors import HbirOpError
from hbir.passes import fixed_point as fp

_MOVES = {
    hbir.TransposeOp: lambda op, q: hbir.TransposeOp(q, op.perm.get_values()),
    hbir.ReshapeOp: lambda op, q: hbir.ReshapeOp(q, shape_of(op.output)),
}


def _chain(op: hbir.ImagePreprocessOp) -> tuple[list[Operation], qnt.QuantizeOp] | None:
    """The moves from ``op`` to a per-tensor quantize, each the only user."""
    moves: list[Operation] = []
    value = op.output
    while True:
        if not value.has_one_use():
            return None
        user = value.get_user_of_unique_use()
        if isinstance(user, qnt.QuantizeOp):
            element = hbir.tensor_type(user.output).element_type
            if user.axis is not None or element not in (hbir.si(8), hbir.si(16)):
                return None  # a table holds si8 / si16 codes of one grid
            return moves, user
        if type(user) not in _MOVES:
            return None
        moves.append(user)
        value = user.results[0]


class ImagePreprocessError(HbirOpError):
    """A normalisation that verifies (an f64 ``std`` that is not 0) but is 0 or
    infinite in the float32 arithmetic the preprocessing runs in: no table."""


def _check_float32(op: hbir.ImagePreprocessOp) -> None:
    import numpy as np

    with np.errstate(over="ignore"):
        std = np.asarray(op.std.get_values(), np.float32)
        mean = np.asarray(op.mean.get_values(), np.float32)
    bad = ~np.isfinite(std) | (std == 0) | ~np.isfinite(mean)
    if np.any(bad):
        c = int(np.argmax(bad))
        raise ImagePreprocessError(
            op,
            fp.where(op),
            f"has no integer table: channel {c}'s mean {op.mean.get_values()[c]!r} "
            f"/ std {op.std.get_values()[c]!r} is {float(mean[c])!r} / "
            f"{float(std[c])!r} in the float32 arithmetic the preprocessing runs "
            f"in (a std must be a finite nonzero float32)",
        )


def _table(op: hbir.ImagePreprocessOp, q: qnt.QuantizeOp) -> DenseIntOrFPElementsAttr:
    import numpy as np

    from hbir.runtime import yuv

    _check_float32(op)

    element = hbir.tensor_type(q.output).element_type
    info = np.iinfo(numpy_dtype(element))
    qmin = int(info.min) + int(bool(q.narrowRange.value.data))
    codes = yuv.preprocess_table(
        op.divisor.value.data,
        op.mean.get_values(),
        op.std.get_values(),
        q.scales.get_values()[0],
        q.zeros.get_values()[0],
        qmin,
        int(info.max),
        q.rounding.data,
    )
    t = TensorType(element, list(codes.shape))
    data = codes.astype(numpy_dtype(element)).tobytes()
    return DenseIntOrFPElementsAttr(t, BytesAttr(data))


def lower(op: hbir.ImagePreprocessOp) -> bool:
    found = _chain(op)
    if found is None:
        return False
    moves, quantize = found
    element = hbir.tensor_type(quantize.output).element_type
    new = hbir.ImagePreprocessOp(
        op.input,
        op.mean.get_values(),
        op.std.get_values(),
        op.csc.data,
        op.divisor.value.data,
        element,
        _table(op, quantize),
    )
    new.location = op.location
    built: list[Operation] = [new]
    for move in moves:
        rebuilt = _MOVES[type(move)](move, built[-1].results[0])
        rebuilt.location = move.location
        built.append(rebuilt)
    block = op.parent_block()
    for b in built:
        block.insert_op_before(b, op)
    quantize.output.replace_all_uses_with(built[-1].results[0])
    for dead in [quantize, *reversed(moves), op]:
        dead.detach()
        dead.erase()
    return True


@dataclass(frozen=True)
class ConvertImagePreprocessPass(ModulePass):
    """Fold image normalisation and the input quantization into an integer table."""

    name = "convert-image-preprocess"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for pre in [o for o in op.walk() if isinstance(o, hbir.ImagePreprocessOp)]:
            if hbir.is_float(pre.output.type):
                lower(pre)
