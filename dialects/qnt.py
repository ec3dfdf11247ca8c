"""The ``qnt`` dialect: quantization and requantization.

``qnt.const_fake_quant`` is the form users know from the reference toolchain's
``get_asm``: a float-to-float op carrying the quantization range. Convert turns it
into true fixed point with ``qnt.quantize``, ``qnt.dequantize`` and
``qnt.requantize``, whose exact integer semantics live in ``runtime/numerics.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    I64,
    AnyTensorTypeConstr,
    BoolAttr,
    DenseArrayBase,
    DictionaryAttr,
    Float32Type,
    Float64Type,
    IntegerAttr,
    IntegerType,
    StringAttr,
    f32,
    f64,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from hbir.dialects.hbir import (
    Value,
    dense_array,
    i64_attr,
    ints,
    is_float,
    shape_of,
    tensor_type,
)
from hbir.runtime import numerics, op_table


def _check_axis(op: IRDLOperation, axis: IntegerAttr | None, count: int) -> int | None:
    """Per-tensor params need one value and no axis; per-channel match dim ``axis``."""
    shape = shape_of(op.operands[0])
    if axis is None:
        if count != 1:
            raise VerifyException(f"per-tensor parameters need 1 value, got {count}")
        return None
    a = axis.value.data
    if not -len(shape) <= a < len(shape):
        raise VerifyException(f"axis {a} is out of range for rank {len(shape)}")
    if count != shape[a]:
        raise VerifyException(
            f"per-channel parameters have {count} values, dim {a} has {shape[a]}"
        )
    return a


def _check_rounding(mode: StringAttr) -> None:
    if mode.data not in numerics.ROUNDING_MODES:
        raise VerifyException(
            f"rounding must be one of {numerics.ROUNDING_MODES}, got {mode.data!r}"
        )


def _int_width(value: SSAValue, what: str) -> int:
    t = tensor_type(value).element_type
    if not isinstance(t, IntegerType):
        raise VerifyException(f"{what} must be an integer tensor, got {t}")
    return t.width.data


@irdl_op_definition
class ConstFakeQuantOp(IRDLOperation):
    """Fake quantization over a fixed range: quantize to ``bits``, then dequantize.

    ``scale = (max - min) / (qmax - qmin)``, ``zp = qmin - round(min / scale)``,
    ``y = (clamp(round(x * fl32(1 / scale)) + zp, qmin, qmax) - zp) * scale`` with
    half-to-even rounding (half-up when the module has ``hbir.legacy_round``).
    ``narrowRange`` drops the lowest code. Per-channel with ``axis``.

    ``%y = qnt.const_fake_quant %x {min = array<f64: -12.8>, max = array<f64:
    12.7>, bits = 8 : i64, narrowRange = false} : tensor<1x3x8x8xf32>``
    """

    name = "qnt.const_fake_quant"

    T: ClassVar = VarConstraint("T", AnyTensorTypeConstr)
    input = operand_def(T)
    output = result_def(T)
    min = prop_def(DenseArrayBase[Float64Type])
    max = prop_def(DenseArrayBase[Float64Type])
    bits = prop_def(IntegerAttr[I64])
    narrowRange = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    axis = opt_prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($output)"

    def __init__(
        self,
        input: Value,
        min: Sequence[float],
        max: Sequence[float],
        bits: int = 8,
        narrow_range: bool = False,
        axis: int | None = None,
    ):
        super().__init__(
            operands=[input],
            result_types=[SSAValue.get(input).type],
            properties={
                "min": DenseArrayBase.from_list(f64, [float(v) for v in min]),
                "max": DenseArrayBase.from_list(f64, [float(v) for v in max]),
                "bits": i64_attr(bits),
                "narrowRange": BoolAttr.from_bool(narrow_range),
                "axis": None if axis is None else i64_attr(axis),
            },
        )

    def verify_(self) -> None:
        if not is_float(self.input.type):
            raise VerifyException("input must be float")
        bits = self.bits.value.data
        if not 2 <= bits <= 32:
            raise VerifyException(f"bits must be in [2, 32], got {bits}")
        lo, hi = self.min.get_values(), self.max.get_values()
        if len(lo) != len(hi):
            raise VerifyException(f"min has {len(lo)} values, max has {len(hi)}")
        _check_axis(self, self.axis, len(lo))
        a, b = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        bad = np.flatnonzero(~((a <= 0.0) & (0.0 <= b)) | (a == b))
        if bad.size:
            i = int(bad[0])
            raise VerifyException(
                f"range [{lo[i]}, {hi[i]}] (channel {i}) must contain 0 and be "
                "non-empty"
            )


class AffineOp(IRDLOperation):
    """Shared parameters of quantize / dequantize: scales, zero points, axis."""

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    scales = prop_def(DenseArrayBase[Float32Type])
    zeros = prop_def(DenseArrayBase[I64])
    axis = opt_prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($output)"

    def _check_params(self) -> None:
        scales = self.scales.get_values()
        if len(scales) != len(self.zeros):
            raise VerifyException(
                f"{len(scales)} scales but {len(self.zeros)} zero points"
            )
        if any(not s > 0 for s in scales):
            raise VerifyException("scales must be positive")
        _check_axis(self, self.axis, len(scales))
        if shape_of(self.input) != shape_of(self.output):
            raise VerifyException("result must have the input shape")


def _affine_props(
    scales: Sequence[float], zeros: Sequence[int] | None, axis: int | None
) -> dict[str, Attribute | None]:
    return {
        "scales": DenseArrayBase.from_list(f32, [float(s) for s in scales]),
        "zeros": ints([0] * len(scales) if zeros is None else zeros),
        "axis": None if axis is None else i64_attr(axis),
    }


@irdl_op_definition
class QuantizeOp(AffineOp):
    """Float to integer codes: ``clamp(round(x * fl32(1 / s)) + zp, qmin, qmax)``.

    The range is the result type's (``narrowRange`` drops the lowest code).

    ``%q = qnt.quantize %x {scales = array<f32: 0.1>, zeros = array<i64: 0>} :
    tensor<4xf32> -> tensor<4xsi8>``
    """

    name = "qnt.quantize"

    narrowRange = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    rounding = prop_def(StringAttr, default_value=StringAttr(numerics.HALF_EVEN))

    def __init__(
        self,
        input: Value,
        element_type: Attribute,
        scales: Sequence[float],
        zeros: Sequence[int] | None = None,
        axis: int | None = None,
        narrow_range: bool = False,
        rounding: str = numerics.HALF_EVEN,
    ):
        props = _affine_props(scales, zeros, axis)
        props["narrowRange"] = BoolAttr.from_bool(narrow_range)
        props["rounding"] = StringAttr(rounding)
        t = tensor_type(input)
        from xdsl.dialects.builtin import TensorType

        super().__init__(
            operands=[input],
            result_types=[TensorType(element_type, t.get_shape())],
            properties=props,
        )

    def verify_(self) -> None:
        if not is_float(self.input.type):
            raise VerifyException("input must be float")
        _int_width(self.output, "result")
        _check_rounding(self.rounding)
        self._check_params()


@irdl_op_definition
class DequantizeOp(AffineOp):
    """Integer codes to float: ``fl32((q - zp) * s)``.

    ``%x = qnt.dequantize %q {scales = array<f32: 0.1>, zeros = array<i64: 0>} :
    tensor<4xsi8> -> tensor<4xf32>``
    """

    name = "qnt.dequantize"

    def __init__(
        self,
        input: Value,
        scales: Sequence[float],
        zeros: Sequence[int] | None = None,
        axis: int | None = None,
        element_type: Attribute = f32,
    ):
        from xdsl.dialects.builtin import TensorType

        t = tensor_type(input)
        super().__init__(
            operands=[input],
            result_types=[TensorType(element_type, t.get_shape())],
            properties=_affine_props(scales, zeros, axis),
        )

    def verify_(self) -> None:
        _int_width(self.input, "input")
        if not is_float(self.output.type):
            raise VerifyException("result must be float")
        self._check_params()


@irdl_op_definition
class RequantizeOp(IRDLOperation):
    """Integer rescale: ``clamp(round(x * multiplier / 2**shift) + zero, lo, hi)``.

    One int64 product and one rounding shift (``rounding`` = half_even | half_up).
    ``[lo, hi]`` is the result type's range, narrowed by the optional ``clip`` (a
    folded relu or clip). Per-channel multipliers and shifts with ``axis``.

    ``%y = qnt.requantize %acc {multiplier = array<i64: 1616928864>, shift =
    array<i64: 38>, zero = 0 : i64} : tensor<1x4xsi32> -> tensor<1x4xsi8>``
    """

    name = "qnt.requantize"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    multiplier = prop_def(DenseArrayBase[I64])
    shift = prop_def(DenseArrayBase[I64])
    zero = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    axis = opt_prop_def(IntegerAttr[I64])
    clip = opt_prop_def(DenseArrayBase[I64])
    rounding = prop_def(StringAttr, default_value=StringAttr(numerics.HALF_EVEN))

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($output)"

    def __init__(
        self,
        input: Value,
        element_type: Attribute,
        multiplier: Sequence[int],
        shift: Sequence[int],
        zero: int = 0,
        axis: int | None = None,
        clip: tuple[int, int] | None = None,
        rounding: str = numerics.HALF_EVEN,
    ):
        from xdsl.dialects.builtin import TensorType

        super().__init__(
            operands=[input],
            result_types=[TensorType(element_type, tensor_type(input).get_shape())],
            properties={
                "multiplier": ints(multiplier),
                "shift": ints(shift),
                "zero": i64_attr(zero),
                "axis": None if axis is None else i64_attr(axis),
                "clip": None if clip is None else ints(clip),
                "rounding": StringAttr(rounding),
            },
        )

    def verify_(self) -> None:
        if _int_width(self.input, "input") > 32:
            # numerics.requantize is exact only while |acc| < 2**32.
            raise VerifyException("input must be at most 32 bits wide")
        width = _int_width(self.output, "result")
        _check_rounding(self.rounding)
        m, s = self.multiplier.get_values(), self.shift.get_values()
        if len(m) != len(s):
            raise VerifyException(f"{len(m)} multipliers but {len(s)} shifts")
        _check_axis(self, self.axis, len(m))
        if any(not 0 <= v < numerics.MULTIPLIER_LIMIT for v in m):
            raise VerifyException("multipliers must be in [0, 2**31)")
        lo, hi = numerics.SHIFT_RANGE
        if any(not lo <= v <= hi for v in s):
            raise VerifyException(f"shifts must be in [{lo}, {hi}]")
        if self.clip is not None:
            lo, hi = numerics.qrange(width)
            clip = self.clip.get_values()
            if len(clip) != 2 or not lo <= clip[0] <= clip[1] <= hi:
                raise VerifyException(
                    f"clip {list(clip)} must be [lo, hi] within [{lo}, {hi}]"
                )
        if shape_of(self.input) != shape_of(self.output):
            raise VerifyException("result must have the input shape")


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """Identity that marks a value as deliberately unquantized (float island edge).

    ``%y = qnt.barrier %x : tensor<4xf32>``
    """

    name = "qnt.barrier"

    T: ClassVar = VarConstraint("T", AnyTensorTypeConstr)
    input = operand_def(T)
    output = result_def(T)

    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($output)"

    def __init__(self, input: Value):
        super().__init__(operands=[input], result_types=[SSAValue.get(input).type])


# ----------------------------------------------------------------- qnt.exact

EXACT = "qnt.exact"


def set_exact(op: Operation, grids: numerics.Grids) -> None:
    """Mark an op as computing its integer lowering's numbers (see ``exact``)."""
    entries: dict[str, Attribute] = {
        "input": DenseArrayBase.from_list(f32, list(grids.in_scales)),
        "input_bits": DenseArrayBase.from_list(i64, list(grids.in_bits)),
        "output": DenseArrayBase.from_list(f32, [grids.out_scale]),
        "output_bits": IntegerAttr(grids.out_bits, 64),
    }
    if grids.w_scales:
        entries["weight"] = DenseArrayBase.from_list(f32, list(grids.w_scales))
        entries["weight_bits"] = IntegerAttr(grids.w_bits, 64)
    op.attributes[EXACT] = DictionaryAttr(entries)


def _scales(attr: Attribute | None, name: str, zero_ok: bool) -> tuple[float, ...]:
    if not (isinstance(attr, DenseArrayBase) and attr.elt_type == f32):
        raise VerifyException(f"{EXACT} {name} must be an array<f32: ...>")
    got = attr.get_values()
    v = np.asarray(got, np.float64)
    ok = bool(np.all(np.isfinite(v) & ((v > 0) | (zero_ok & (v == 0)))))
    if not got or not ok:
        raise VerifyException(f"{EXACT} {name} scales must be positive and finite")
    return got


def _width(attr: Attribute | None, name: str) -> int:
    if not isinstance(attr, IntegerAttr) or attr.value.data not in (8, 16, 32):
        raise VerifyException(f"{EXACT} {name} must be 8, 16 or 32")
    return attr.value.data


def exact(op: Operation) -> numerics.Grids | None:
    """The grids of an op marked ``qnt.exact``, None for an unmarked op.

    ``qnt.exact = {input = array<f32: s_a, ...>, input_bits = array<i64: 8, ...>,
    output = array<f32: s_y>, output_bits = 8 : i64}`` (a gemm adds ``weight =
    array<f32: s_w...>, weight_bits = 8 : i64``) on a float op says: its operands
    hold values on these grids (an input scale of 0 marks a float constant), and
    the op computes what its integer lowering computes, including the one
    requantization onto ``output``, and returns the output codes times ``s_y``
    (``numerics.fixed_point_gemm`` and its kin). Export writes it for QAT modules
    evaluated in VALIDATION below consistency level 2.
    """
    attr = op.attributes.get(EXACT)
    if attr is None:
        return None
    if not isinstance(attr, DictionaryAttr):
        raise VerifyException(f"{EXACT} must be a dictionary, got {attr}")
    fields = attr.data
    expected = {"input", "input_bits", "output", "output_bits"}
    if "weight" in fields or "weight_bits" in fields:
        expected |= {"weight", "weight_bits"}
    if set(fields) != expected:
        raise VerifyException(
            f"{EXACT} needs exactly the entries {sorted(expected)}, got "
            f"{sorted(fields)}"
        )
    in_scales = _scales(fields["input"], "input", zero_ok=True)
    in_bits = fields["input_bits"]
    if not (isinstance(in_bits, DenseArrayBase) and in_bits.elt_type == i64):
        raise VerifyException(f"{EXACT} input_bits must be an array<i64: ...>")
    bits = tuple(int(b) for b in in_bits.get_values())
    if len(bits) != len(in_scales) or any(b not in (8, 16, 32) for b in bits):
        raise VerifyException(
            f"{EXACT} input_bits needs one width (8, 16 or 32) per input scale"
        )
    out = _scales(fields["output"], "output", zero_ok=False)
    if len(out) != 1:
        raise VerifyException(f"{EXACT} output must hold one scale")
    weight: tuple[float, ...] = ()
    w_bits = 0
    if "weight" in fields:
        weight = _scales(fields["weight"], "weight", zero_ok=False)
        w_bits = _width(fields["weight_bits"], "weight_bits")
    return numerics.Grids(
        in_scales,
        bits,
        out[0],
        _width(fields["output_bits"], "output_bits"),
        weight,
        w_bits,
    )


# The ops through which a value keeps its grid: the op table's moves (codes
# moved or selected) and clamps, and the float island edge; followed from a
# marked op to the fake quantizations around it.
_GRID_KEEPING = frozenset(
    e.hbir
    for e in op_table.OPS
    if e.hbir and e.lowering in (op_table.MOVE, op_table.CLAMP)
) | {"qnt.barrier"}


def _keeps_grid(op: Operation) -> bool:
    if op.name == "hbir.resize2d":  # a move when nearest, an average when bilinear
        return op.mode.data == "nearest"
    if op.name == "hbir.concat":  # several inputs: see _producer_grid
        return False
    return op.name in _GRID_KEEPING


def _fake_quant_grid(op: Operation) -> tuple[tuple[float, ...], int] | None:
    """(float32 scales, bits) of a fake quantization / quantize / dequantize op,
    None for other ops."""
    if isinstance(op, ConstFakeQuantOp):
        scale, _ = numerics.scale_from_min_max(
            np.asarray(op.min.get_values()),
            np.asarray(op.max.get_values()),
            op.bits.value.data,
            bool(op.narrowRange.value.data),
        )
        scales = np.atleast_1d(scale).astype(np.float32)
        return tuple(scales.tolist()), op.bits.value.data
    if isinstance(op, QuantizeOp | DequantizeOp):
        coded = op.output if isinstance(op, QuantizeOp) else op.input
        element = tensor_type(coded).element_type
        if not isinstance(element, IntegerType):
            return None
        return tuple(op.scales.get_values()), element.width.data
    return None


_CONSTANT = "a float constant"


def _producer_grid(value: SSAValue):
    """The grid ``value`` holds: walking back through grid-keeping ops to a fake
    quantization; ``_CONSTANT`` for an ``hbir.constant``; None when unknown."""
    for _ in range(64):
        op = value.owner
        if not isinstance(op, Operation):
            return None
        grid = _fake_quant_grid(op)
        if grid is not None:
            return grid
        if op.name == "hbir.constant":
            return _CONSTANT
        if op.name == "hbir.concat" and EXACT not in op.attributes:
            # pieces of one tensor put back together (torch.roll)
            grids = {_producer_grid(v) for v in op.operands}
            return grids.pop() if len(grids) == 1 else None
        if op.name == "hbir.index_copy":  # into zeros: the written values' grid
            canvas = op.operands[0].owner
            if getattr(canvas, "name", None) != "hbir.constant" or np.any(
                dense_array(canvas.value)
            ):
                return None
            value = op.operands[2]
            continue
        if not _keeps_grid(op) or not op.operands:
            return None
        value = op.operands[0]
    return None


def _consumer_grid(value: SSAValue):
    """The grid ``value`` is rounded onto: forward through single-use
    grid-keeping ops (a fused relu) to a fake quantization; None when unknown."""
    for _ in range(64):
        uses = list(value.uses)
        if len(uses) != 1:
            return None
        op = uses[0].operation
        grid = _fake_quant_grid(op)
        if grid is not None:
            return grid
        if not _keeps_grid(op) or len(op.results) != 1:
            return None
        value = op.results[0]
    return None


def _grid_text(found) -> str:
    if isinstance(found, tuple):
        scales = ", ".join(f"{v:g}" for v in found[0])
        return f"the grid [{scales}] ({found[1]} bits)"
    return found or "no fake quantization"


def _on(scales: tuple[float, ...], bits: int, found) -> bool:
    want = tuple(np.asarray(scales, np.float64).astype(np.float32).tolist())
    return isinstance(found, tuple) and found == (want, bits)


def check_exact(op: Operation) -> None:
    """A ``qnt.exact`` mark that parses and agrees with the fake quantizations
    around ``op``: each coded operand's, the weight's and the output's scales and
    width are those of the fake quantization it comes from / is rounded onto; an
    input scale of 0 marks a float constant. A disagreeing mark would make qat.bc
    compute on other grids than convert lowers the op with."""
    grids = exact(op)
    if grids is None:
        return
    coded = len(grids.in_scales) + (1 if grids.w_scales else 0)
    if coded > len(op.operands) or (not grids.w_scales and coded != len(op.operands)):
        raise VerifyException(
            f"{EXACT} gives {len(grids.in_scales)} input scales"
            + (" and weight scales" if grids.w_scales else "")
            + f" for {len(op.operands)} operands"
        )
    for i, (scale, bits) in enumerate(zip(grids.in_scales, grids.in_bits, strict=True)):
        found = _producer_grid(op.operands[i])
        if scale == 0.0 and isinstance(found, tuple):
            raise VerifyException(
                f"{EXACT} calls operand {i} a float constant, but it comes from "
                f"{_grid_text(found)}"
            )
        if scale != 0.0 and not _on((scale,), bits, found):
            raise VerifyException(
                f"{EXACT} puts operand {i} on the grid {scale:g} ({bits} bits), but "
                f"it comes from {_grid_text(found)}"
            )
    if grids.w_scales:
        found = _producer_grid(op.operands[len(grids.in_scales)])
        if not _on(grids.w_scales, grids.w_bits, found):
            raise VerifyException(
                f"{EXACT} weight grid disagrees with the weight operand, which "
                f"comes from {_grid_text(found)}"
            )
    found = _consumer_grid(op.results[0])
    if not _on((grids.out_scale,), grids.out_bits, found):
        raise VerifyException(
            f"{EXACT} puts the result on the grid {grids.out_scale:g} "
            f"({grids.out_bits} bits), but it is rounded onto {_grid_text(found)}"
        )


# ----------------------------------------------------------------- qnt.inexact

INEXACT = "qnt.inexact"

# Why an op of qat.bc may compute other numbers than its integer lowering in
# quantized.bc (each cause is listed by convert's advice and named by hbir doctor).
INEXACT_CAUSES = {
    "float_validation": (
        "exported inside float_validation(): qat.bc computes the op in float, "
        "quantized.bc in its integer lowering"
    ),
}


def set_inexact(op: Operation, cause: str) -> None:
    """Name why ``op`` may differ from its integer lowering (``INEXACT_CAUSES``)."""
    if cause not in INEXACT_CAUSES:
        raise ValueError(f"unknown {INEXACT} cause {cause!r}")
    op.attributes[INEXACT] = StringAttr(cause)


def inexact(op: Operation) -> str | None:
    """The named cause of an op marked ``qnt.inexact``, None for other ops."""
    attr = op.attributes.get(INEXACT)
    if attr is None:
        return None
    if not isinstance(attr, StringAttr) or attr.data not in INEXACT_CAUSES:
        raise VerifyException(
            f"{INEXACT} must be one of {sorted(INEXACT_CAUSES)} (a string), got {attr}"
        )
    if EXACT in op.attributes:
        raise VerifyException(f"an op cannot be both {EXACT} and {INEXACT}")
    return attr.data


def check_marks(op: Operation) -> None:
    """``op``'s ``qnt.exact`` and ``qnt.inexact`` marks, verified."""
    if EXACT in op.attributes:
        check_exact(op)
    if INEXACT in op.attributes:
        inexact(op)


QNT = Dialect(
    "qnt",
    [ConstFakeQuantOp, QuantizeOp, DequantizeOp, RequantizeOp, BarrierOp],
    [],
)
