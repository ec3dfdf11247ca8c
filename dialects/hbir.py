"""The ``hbir`` dialect: tensor operations with PyTorch semantics, NCHW layout.

In ``qat.bc`` every op is float; after convert the arithmetic ops carry integer
element types (``si8``, ``si16`` operands, ``si32`` accumulators and biases). Integer
results are computed exactly in int64 and saturate to the result type. Transcendental
ops exist only in float form: in fixed point they become ``hbir.lut``.

Every op prints in a pretty form (properties in the attribute dictionary) and in
MLIR's generic form, which MLIR's own tools accept with
``--allow-unregistered-dialect``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects.builtin import (
    I64,
    AnyFloat,
    AnyTensorTypeConstr,
    BFloat16Type,
    BoolAttr,
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    f64,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AnyAttr,
    AttrSizedOperandSegments,
    IRDLOperation,
    ParamAttrConstraint,
    ParsePropInAttrDict,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import ConstantLike, Pure
from xdsl.utils.exceptions import VerifyException

from hbir.dialects import shapes
from hbir.runtime import op_table

if TYPE_CHECKING:  # numerics loads numpy, which parsing and printing do not need
    from hbir.runtime import numerics
    from hbir.runtime.numerics import LutConfig

Value = SSAValue | Operation

# ------------------------------------------------------------------ helpers


# A module attribute: the model rounds ties half up (the reference's legacy
# rounding), in fake quantization, lookup tables and every integer step.
ATTR_LEGACY_ROUND = "hbir.legacy_round"


def si(width: int) -> IntegerType:
    """The signed integer type ``si<width>`` used for quantized tensors."""
    return IntegerType(width, Signedness.SIGNED)


def ints(values: Sequence[int]) -> DenseArrayBase:
    """An i64 dense array. Values in the signed range are packed at once: xDSL's
    ``from_list`` normalizes each value in Python, which made the per-channel
    multipliers and shifts npu-tile slices a third of ViT-B/16's compile."""
    data = tuple(int(v) for v in values)
    if not data or (min(data) >= _I64_MIN and max(data) <= _I64_MAX):
        if len(data) <= 16:  # op ids, shapes, strides: set again by every pass
            return _short_ints(data)
        return _packed_ints(data)
    return DenseArrayBase.from_list(i64, list(values))


def _packed_ints(data: tuple[int, ...]) -> DenseArrayBase:
    return DenseArrayBase(i64, BytesAttr(i64.pack(data)))


# ``ints`` of a short array: one shared attribute per value (as ``i64_attr``)
_short_ints = functools.lru_cache(maxsize=1 << 14)(_packed_ints)


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


@functools.lru_cache(maxsize=1 << 16)
def i64_attr(value: int) -> IntegerAttr:
    """An i64 integer attribute (attributes are immutable, so one per value is
    shared: xDSL verifies each attribute it makes, ~50 us, and the compile
    passes set the same op ids, sizes and cycle counts many times)."""
    return IntegerAttr(value, i64)


def f64_attr(value: float) -> FloatAttr:
    return FloatAttr(float(value), f64)


def tensor_type(value: Value) -> TensorType:
    t = SSAValue.get(value).type
    assert isinstance(t, TensorType), f"expected a tensor, got {t}"
    return t


def shape_of(value: Value) -> tuple[int, ...]:
    return tuple(tensor_type(value).get_shape())


def with_shape(value: Value, shape: Sequence[int], element_type=None) -> TensorType:
    """The type of ``value`` with a new shape (and optionally element type)."""
    return TensorType(element_type or tensor_type(value).element_type, list(shape))


def is_float(t: Attribute) -> bool:
    if isinstance(t, TensorType):
        t = t.element_type
    return isinstance(t, AnyFloat)


def is_int(t: Attribute) -> bool:
    if isinstance(t, TensorType):
        t = t.element_type
    return isinstance(t, IntegerType)


# numpy has no bf16: its values are carried as float32.
_FLOAT_DTYPES = {
    Float16Type: "float16",
    Float32Type: "float32",
    Float64Type: "float64",
    BFloat16Type: "float32",
}


@functools.cache
def numpy_dtype(element: Attribute):
    """The numpy dtype holding tensors of an element type (signless ints: signed)."""
    import numpy as np  # here, so that loading the dialect does not load numpy

    if isinstance(element, IntegerType):
        width = element.width.data
        if width == 1:
            return np.dtype(bool)
        if width not in (8, 16, 32, 64):
            raise ValueError(f"unsupported integer width {width} ({element})")
        unsigned = element.signedness.data == Signedness.UNSIGNED
        return np.dtype(f"{'uint' if unsigned else 'int'}{width}")
    if isinstance(element, IndexType):
        return np.dtype(np.int64)
    dtype = _FLOAT_DTYPES.get(type(element))
    if dtype is None:
        raise ValueError(f"unsupported element type {element}")
    return np.dtype(dtype)


def dense_array(attr: DenseIntOrFPElementsAttr):
    """A dense attribute as a writable numpy array of its type's shape.

    The dtype is ``numpy_dtype`` of the element type. The bytes are xDSL's:
    little endian, ``bf16`` as its 16 bits (the upper half of a float32, so it
    widens exactly), ``i1`` as one byte per value (true is stored as -1). A splat
    stored once is expanded to the full shape.
    """
    import numpy as np

    t = attr.get_type()
    element = t.element_type
    shape = tuple(t.get_shape())
    dtype = numpy_dtype(element)
    raw = attr.data.data
    if isinstance(element, BFloat16Type):
        flat = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    elif dtype.kind == "b":
        flat = np.frombuffer(raw, np.int8) != 0
    else:
        flat = np.frombuffer(raw, dtype.newbyteorder("<"))
    if flat.size == 1 and math.prod(shape) != 1:  # a splat kept once
        return np.full(shape, flat[0], dtype)
    return flat.reshape(shape).astype(dtype)


def _values(attr: DenseArrayBase) -> tuple[int, ...]:
    return tuple(attr.get_values())


def _expect_shape(op: IRDLOperation, rule, *args) -> None:
    """Run a shape rule and check it against the op's (first) result type."""
    try:
        expected = tuple(rule(*args))
    except shapes.ShapeError as e:
        raise VerifyException(str(e)) from None
    got = tuple(tensor_type(op.results[0]).get_shape())
    if got != expected:
        raise VerifyException(f"expected result shape {expected}, got {got}")


def _same_element_types(op: IRDLOperation, *values: SSAValue) -> None:
    types = {tensor_type(v).element_type for v in values}
    if len(types) > 1:
        names = sorted(str(t) for t in types)  # (printing is slow: only here)
        raise VerifyException(f"element types differ: {', '.join(names)}")


UNARY_FORMAT = "$input attr-dict `:` type($output)"
MAP_FORMAT = "$input attr-dict `:` type($input) `->` type($output)"
BINARY_FORMAT = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"


# ------------------------------------------------------------------ constant


class TensorConstant(IRDLOperation):
    """A constant tensor: its value and a result of the value's type (``hbir`` and
    ``npu`` constants alike)."""

    T: ClassVar = VarConstraint("T", AnyTensorTypeConstr)
    value = prop_def(ParamAttrConstraint(DenseIntOrFPElementsAttr, (T, AnyAttr())))
    output = result_def(T)

    traits = traits_def(Pure(), ConstantLike())
    assembly_format = "attr-dict $value"

    def __init__(self, value: DenseIntOrFPElementsAttr):
        super().__init__(properties={"value": value}, result_types=[value.get_type()])


@irdl_op_definition
class ConstantOp(TensorConstant):
    """A tensor constant; large ones print as hex blobs.

    ``%w = hbir.constant dense<[1.0, 2.0]> : tensor<2xf32>``
    """

    name = "hbir.constant"


# ------------------------------------------------------------------ elementwise


class UnaryOp(IRDLOperation):
    """Elementwise op whose result has the operand's type."""

    T: ClassVar = VarConstraint("T", AnyTensorTypeConstr)
    input = operand_def(T)
    output = result_def(T)

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = UNARY_FORMAT

    def __init__(self, input: Value, properties: dict[str, Attribute] | None = None):
        super().__init__(
            operands=[input],
            result_types=[SSAValue.get(input).type],
            properties=properties or {},
        )


class FloatUnaryOp(UnaryOp):
    """Elementwise float op; in fixed point it becomes ``hbir.lut``.

    Which table evaluates it is the op table's (``op_table.LUT_TABLES``). Export
    imports the op with the ``num_tables`` the torch module asks for; the
    ``configure-lut`` pass adds the input and output grids of the fake
    quantizations around it (``in_scale``, ``in_bits``, ``out_scale``,
    ``out_bits``). A configured op computes exactly its fixed-point table on the
    input codes, as ``pre_export`` does in torch, instead of the float function.

    ``%y = hbir.sigmoid %x {num_tables = 24 : i64, in_scale = 6.25e-02 : f64,
    in_bits = 8 : i64, out_scale = 3.90625e-03 : f64, out_bits = 8 : i64} :
    tensor<4xf32>``
    """

    num_tables = opt_prop_def(IntegerAttr[I64])
    in_scale = opt_prop_def(FloatAttr)
    in_bits = opt_prop_def(IntegerAttr[I64])
    out_scale = opt_prop_def(FloatAttr)
    out_bits = opt_prop_def(IntegerAttr[I64])

    def table_name(self) -> str:
        """The ``numerics.LUT_FUNCTIONS`` table this op is evaluated with."""
        return op_table.table_name(self.name)

    def lut_config(self) -> LutConfig | None:
        """The table configuration, or None (float function, or grids not set)."""
        from hbir.runtime.numerics import LutConfig

        if any(getattr(self, name) is None for name in LutConfig.FIELDS):
            return None
        return LutConfig(*(getattr(self, name).value.data for name in LutConfig.FIELDS))

    def set_lut_config(self, config: LutConfig) -> None:
        self.num_tables = i64_attr(config.num_tables)
        self.in_scale = f64_attr(config.in_scale)
        self.in_bits = i64_attr(config.in_bits)
        self.out_scale = f64_attr(config.out_scale)
        self.out_bits = i64_attr(config.out_bits)

    def verify_(self) -> None:
        if not is_float(self.input.type):
            raise VerifyException(
                f"input must be float, got {tensor_type(self.input).element_type}; "
                "integer forms go through hbir.lut"
            )
        if self.name not in op_table.LUT_TABLES:
            raise VerifyException("has no lookup table in the op table")
        from hbir.runtime import numerics
        from hbir.runtime.numerics import LutConfig

        present = [getattr(self, name) is not None for name in LutConfig.FIELDS]
        if any(present[1:]) and not all(present):
            missing = [
                n for n, p in zip(LutConfig.FIELDS, present, strict=True) if not p
            ]
            raise VerifyException(f"table configuration lacks {', '.join(missing)}")
        if self.num_tables is None:
            return
        try:
            numerics.check_num_tables(self.num_tables.value.data)
            self.lut_config()
        except ValueError as e:
            raise VerifyException(str(e)) from None


@irdl_op_definition
class NegOp(UnaryOp):
    """``-x``. ``%y = hbir.neg %x : tensor<4xf32>``"""

    name = "hbir.neg"


@irdl_op_definition
class AbsOp(UnaryOp):
    """``|x|`` (integers saturate). ``%y = hbir.abs %x : tensor<4xsi8>``"""

    name = "hbir.abs"


@irdl_op_definition
class ReluOp(UnaryOp):
    """``max(x, 0)``. ``%y = hbir.relu %x : tensor<1x8x4x4xf32>``"""

    name = "hbir.relu"


@irdl_op_definition
class ClipOp(UnaryOp):
    """``min(max(x, min), max)``; integer inputs clip to the bounds rounded half to
    even and saturated to the type.

    ``%y = hbir.clip %x {min = 0.0 : f64, max = 6.0 : f64} : tensor<4xf32>``
    """

    name = "hbir.clip"

    min = prop_def(FloatAttr)
    max = prop_def(FloatAttr)

    def __init__(self, input: Value, min: float, max: float):
        super().__init__(input, {"min": f64_attr(min), "max": f64_attr(max)})

    def verify_(self) -> None:
        if self.min.value.data > self.max.value.data:
            raise VerifyException(
                f"min {self.min.value.data} is greater than max {self.max.value.data}"
            )


@irdl_op_definition
class SigmoidOp(FloatUnaryOp):
    """``1 / (1 + exp(-x))``. ``%y = hbir.sigmoid %x : tensor<4xf32>``"""

    name = "hbir.sigmoid"


@irdl_op_definition
class TanhOp(FloatUnaryOp):
    """``tanh(x)``. ``%y = hbir.tanh %x : tensor<4xf32>``"""

    name = "hbir.tanh"


@irdl_op_definition
class ExpOp(FloatUnaryOp):
    """``exp(x)``. ``%y = hbir.exp %x : tensor<4xf32>``"""

    name = "hbir.exp"


@irdl_op_definition
class LogOp(FloatUnaryOp):
    """Natural log. ``%y = hbir.log %x : tensor<4xf32>``"""

    name = "hbir.log"


@irdl_op_definition
class SqrtOp(FloatUnaryOp):
    """``sqrt(x)``. ``%y = hbir.sqrt %x : tensor<4xf32>``"""

    name = "hbir.sqrt"


@irdl_op_definition
class RsqrtOp(FloatUnaryOp):
    """``1 / sqrt(x)``. ``%y = hbir.rsqrt %x : tensor<4xf32>``"""

    name = "hbir.rsqrt"


@irdl_op_definition
class ReciprocalOp(FloatUnaryOp):
    """``1 / x``. ``%y = hbir.reciprocal %x : tensor<4xf32>``"""

    name = "hbir.reciprocal"


@irdl_op_definition
class SinOp(FloatUnaryOp):
    """``sin(x)``. ``%y = hbir.sin %x : tensor<4xf32>``"""

    name = "hbir.sin"


@irdl_op_definition
class CosOp(FloatUnaryOp):
    """``cos(x)``. ``%y = hbir.cos %x : tensor<4xf32>``"""

    name = "hbir.cos"


@irdl_op_definition
class GeluOp(FloatUnaryOp):
    """GELU, exact (``erf``) or ``tanh`` approximation as in torch.

    ``%y = hbir.gelu %x {approximate = "none"} : tensor<4xf32>``
    """

    name = "hbir.gelu"

    approximate = prop_def(StringAttr, default_value=StringAttr("none"))

    def __init__(self, input: Value, approximate: str = "none"):
        super().__init__(input, {"approximate": StringAttr(approximate)})

    def table_name(self) -> str:
        return op_table.table_name(self.name, self.approximate.data)

    def verify_(self) -> None:
        super().verify_()
        if self.approximate.data not in ("none", "tanh"):
            raise VerifyException(
                f"approximate must be 'none' or 'tanh', got {self.approximate.data!r}"
            )


@irdl_op_definition
class SiluOp(FloatUnaryOp):
    """``x * sigmoid(x)``. ``%y = hbir.silu %x : tensor<4xf32>``"""

    name = "hbir.silu"


@irdl_op_definition
class HardsigmoidOp(FloatUnaryOp):
    """``relu6(x + 3) / 6``. ``%y = hbir.hardsigmoid %x : tensor<4xf32>``"""

    name = "hbir.hardsigmoid"


@irdl_op_definition
class HardswishOp(FloatUnaryOp):
    """``x * relu6(x + 3) / 6``. ``%y = hbir.hardswish %x : tensor<4xf32>``"""

    name = "hbir.hardswish"


class ParametricUnaryOp(FloatUnaryOp):
    """A table op with one float parameter (``numerics.LUT_PARAMETERS``): its table
    is ``numerics.table_key(table, parameter)``."""

    PARAMETER: ClassVar[str] = ""

    def __init__(self, input: Value, value: float | None = None):
        props = {} if value is None else {self.PARAMETER: f64_attr(value)}
        super().__init__(input, props)

    def parameter_value(self) -> float:
        return getattr(self, self.PARAMETER).value.data

    def table_name(self) -> str:
        from hbir.runtime import numerics

        return numerics.table_key(super().table_name(), self.parameter_value())

    def verify_(self) -> None:
        super().verify_()
        from hbir.runtime import numerics

        try:
            numerics.split_table_key(self.table_name())
        except ValueError as e:
            raise VerifyException(f"{self.PARAMETER}: {e}") from None


@irdl_op_definition
class LeakyReluOp(ParametricUnaryOp):
    """``x if x >= 0 else slope * x``.

    ``%y = hbir.leaky_relu %x {slope = 0.1 : f64} : tensor<4xf32>``
    """

    name = "hbir.leaky_relu"
    PARAMETER: ClassVar[str] = "slope"
    slope = prop_def(FloatAttr, default_value=f64_attr(0.01))


@irdl_op_definition
class EluOp(ParametricUnaryOp):
    """``x if x > 0 else alpha * (exp(x) - 1)``.

    ``%y = hbir.elu %x {alpha = 1.0 : f64} : tensor<4xf32>``
    """

    name = "hbir.elu"
    PARAMETER: ClassVar[str] = "alpha"
    alpha = prop_def(FloatAttr, default_value=f64_attr(1.0))


@irdl_op_definition
class CeluOp(ParametricUnaryOp):
    """``x if x > 0 else alpha * (exp(x / alpha) - 1)``.

    ``%y = hbir.celu %x {alpha = 1.0 : f64} : tensor<4xf32>``
    """

    name = "hbir.celu"
    PARAMETER: ClassVar[str] = "alpha"
    alpha = prop_def(FloatAttr, default_value=f64_attr(1.0))


@irdl_op_definition
class SoftplusOp(ParametricUnaryOp):
    """``log(1 + exp(beta * x)) / beta``.

    ``%y = hbir.softplus %x {beta = 1.0 : f64} : tensor<4xf32>``
    """

    name = "hbir.softplus"
    PARAMETER: ClassVar[str] = "beta"
    beta = prop_def(FloatAttr, default_value=f64_attr(1.0))


@irdl_op_definition
class SeluOp(FloatUnaryOp):
    """``scale * elu(x, alpha)`` with torch's constants. ``%y = hbir.selu %x :
    tensor<4xf32>``"""

    name = "hbir.selu"


@irdl_op_definition
class MishOp(FloatUnaryOp):
    """``x * tanh(softplus(x))``. ``%y = hbir.mish %x : tensor<4xf32>``"""

    name = "hbir.mish"


@irdl_op_definition
class ErfOp(FloatUnaryOp):
    """The error function. ``%y = hbir.erf %x : tensor<4xf32>``"""

    name = "hbir.erf"


@irdl_op_definition
class LogSigmoidOp(FloatUnaryOp):
    """``log(sigmoid(x))``. ``%y = hbir.logsigmoid %x : tensor<4xf32>``"""

    name = "hbir.logsigmoid"


@irdl_op_definition
class SoftsignOp(FloatUnaryOp):
    """``x / (1 + |x|)``. ``%y = hbir.softsign %x : tensor<4xf32>``"""

    name = "hbir.softsign"


@irdl_op_definition
class TanhshrinkOp(FloatUnaryOp):
    """``x - tanh(x)``. ``%y = hbir.tanhshrink %x : tensor<4xf32>``"""

    name = "hbir.tanhshrink"


class BinaryOp(IRDLOperation):
    """Elementwise op on two operands with numpy/torch broadcasting."""

    lhs = operand_def(AnyTensorTypeConstr)
    rhs = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)

    traits = traits_def(Pure())
    assembly_format = BINARY_FORMAT

    def __init__(self, lhs: Value, rhs: Value, result_type: Attribute | None = None):
        if result_type is None:
            result_type = with_shape(
                lhs, shapes.broadcast(shape_of(lhs), shape_of(rhs))
            )
        super().__init__(operands=[lhs, rhs], result_types=[result_type])

    def verify_(self) -> None:
        _same_element_types(self, self.lhs, self.rhs, self.output)
        _expect_shape(self, shapes.broadcast, shape_of(self.lhs), shape_of(self.rhs))


@irdl_op_definition
class AddOp(BinaryOp):
    """``lhs + rhs``.

    ``%z = hbir.add %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>``
    """

    name = "hbir.add"


@irdl_op_definition
class SubOp(BinaryOp):
    """``lhs - rhs``.

    ``%z = hbir.sub %x, %y : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>``
    """

    name = "hbir.sub"


@irdl_op_definition
class MulOp(BinaryOp):
    """``lhs * rhs``.

    ``%z = hbir.mul %x, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>``
    """

    name = "hbir.mul"


@irdl_op_definition
class DivOp(BinaryOp):
    """``lhs / rhs`` (float only).

    ``%z = hbir.div %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>``
    """

    name = "hbir.div"

    def verify_(self) -> None:
        super().verify_()
        if not is_float(self.lhs.type):
            raise VerifyException(
                "div is float only; fixed point uses reciprocal + mul"
            )


class IndexBinaryOp(BinaryOp):
    """Integer arithmetic on index tensors (``i64``), exact; a zero divisor is an
    error when the op runs."""

    def verify_(self) -> None:
        super().verify_()
        if not is_int(self.lhs.type):
            raise VerifyException("operands must be integer (index) tensors")


@irdl_op_definition
class FloorDivideOp(IndexBinaryOp):
    """``lhs // rhs``, rounded toward minus infinity (torch's ``floor_divide``).

    ``%y = hbir.floor_divide %i, %w : (tensor<6xi64>, tensor<i64>) -> tensor<6xi64>``
    """

    name = "hbir.floor_divide"


@irdl_op_definition
class RemainderOp(IndexBinaryOp):
    """``lhs % rhs`` with the divisor's sign (torch's ``remainder``).

    ``%y = hbir.remainder %i, %w : (tensor<6xi64>, tensor<i64>) -> tensor<6xi64>``
    """

    name = "hbir.remainder"


@irdl_op_definition
class MaximumOp(BinaryOp):
    """Elementwise maximum.

    ``%z = hbir.maximum %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>``
    """

    name = "hbir.maximum"


@irdl_op_definition
class MinimumOp(BinaryOp):
    """Elementwise minimum.

    ``%z = hbir.minimum %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>``
    """

    name = "hbir.minimum"


# ------------------------------------------------------------------ normalisation


@irdl_op_definition
class SoftmaxOp(IRDLOperation):
    """Softmax along ``dim`` (float).

    ``%y = hbir.softmax %x {dim = -1 : i64} : tensor<2x8xf32> -> tensor<2x8xf32>``
    """

    name = "hbir.softmax"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    def __init__(self, input: Value, dim: int = -1):
        super().__init__(
            operands=[input],
            result_types=[SSAValue.get(input).type],
            properties={"dim": i64_attr(dim)},
        )

    def verify_(self) -> None:
        if not is_float(self.input.type):
            raise VerifyException("softmax is float only; fixed point decomposes it")
        if self.input.type != self.output.type:
            raise VerifyException("result type must equal the input type")
        try:
            shapes.normalize_dim(self.dim.value.data, len(shape_of(self.input)))
        except shapes.ShapeError as e:
            raise VerifyException(str(e)) from None


@irdl_op_definition
class LayerNormOp(IRDLOperation):
    """Layer normalisation over the trailing ``normalized_shape`` dims, as in torch.

    ``%y = hbir.layer_norm %x weight(%g : tensor<8xf32>) bias(%b : tensor<8xf32>)
    {normalized_shape = array<i64: 8>, eps = 1.0e-05 : f64} : tensor<2x8xf32> ->
    tensor<2x8xf32>``
    """

    name = "hbir.layer_norm"

    input = operand_def(AnyTensorTypeConstr)
    weight = opt_operand_def(AnyTensorTypeConstr)
    bias = opt_operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    normalized_shape = prop_def(DenseArrayBase[I64])
    eps = prop_def(FloatAttr, default_value=f64_attr(1e-5))

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    assembly_format = (
        "$input (`weight` `(` $weight^ `:` type($weight) `)`)? "
        "(`bias` `(` $bias^ `:` type($bias) `)`)? attr-dict "
        "`:` type($input) `->` type($output)"
    )

    def __init__(
        self,
        input: Value,
        normalized_shape: Sequence[int],
        weight: Value | None = None,
        bias: Value | None = None,
        eps: float = 1e-5,
    ):
        super().__init__(
            operands=[input, weight, bias],
            result_types=[SSAValue.get(input).type],
            properties={
                "normalized_shape": ints(normalized_shape),
                "eps": f64_attr(eps),
            },
        )

    def verify_(self) -> None:
        if not is_float(self.input.type):
            raise VerifyException("layer_norm is float only; fixed point decomposes it")
        x = shape_of(self.input)
        norm = _values(self.normalized_shape)
        if not norm or tuple(x[len(x) - len(norm) :]) != norm:
            raise VerifyException(
                f"normalized_shape {list(norm)} is not the trailing shape of {x}"
            )
        for name, v in (("weight", self.weight), ("bias", self.bias)):
            if v is not None and shape_of(v) != norm:
                raise VerifyException(
                    f"{name} has shape {shape_of(v)}, expected {norm}"
                )
        if self.input.type != self.output.type:
            raise VerifyException("result type must equal the input type")


# ------------------------------------------------------------------ reductions


class ReduceOp(IRDLOperation):
    """Reduction over ``dims``; ``keepdim`` keeps them as size 1.

    ``dims`` lists every reduced dimension: an empty list reduces nothing (unlike
    ``torch.sum(x, dim=[])``, which reduces everything).
    """

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    dims = prop_def(DenseArrayBase[I64])
    keepdim = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    def _check_element_types(self) -> None:
        _same_element_types(self, self.input, self.output)

    def __init__(
        self,
        input: Value,
        dims: Sequence[int],
        keepdim: bool = False,
        result_type: Attribute | None = None,
    ):
        if result_type is None:
            result_type = with_shape(
                input, shapes.reduce(shape_of(input), dims, keepdim)
            )
        super().__init__(
            operands=[input],
            result_types=[result_type],
            properties={"dims": ints(dims), "keepdim": BoolAttr.from_bool(keepdim)},
        )

    def verify_(self) -> None:
        self._check_element_types()
        _expect_shape(
            self,
            shapes.reduce,
            shape_of(self.input),
            _values(self.dims),
            self.keepdim.value.data,
        )


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """Sum over ``dims`` (integers: exact, then saturate to the result type, which
    may be a wider signed integer, e.g. si8 in, si32 out).

    ``%y = hbir.reduce_sum %x {dims = array<i64: 1>} : tensor<2x8xf32> ->
    tensor<2xf32>``
    """

    name = "hbir.reduce_sum"

    def _check_element_types(self) -> None:
        x, y = (
            tensor_type(self.input).element_type,
            tensor_type(self.output).element_type,
        )
        if is_int(x) and is_int(y) and y.width.data >= x.width.data:
            return
        _same_element_types(self, self.input, self.output)


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """Mean over ``dims`` (integers: exact sum, one division rounded by
    ``rounding``, half to even unless it says ``"half_up"``).

    ``%y = hbir.reduce_mean %x {dims = array<i64: -1>, keepdim = true} :
    tensor<2x8xf32> -> tensor<2x1xf32>``
    """

    name = "hbir.reduce_mean"

    rounding = opt_prop_def(StringAttr)

    def verify_(self) -> None:
        super().verify_()
        if self.rounding is not None:
            from hbir.runtime.numerics import ROUNDING_MODES

            if self.rounding.data not in ROUNDING_MODES:
                raise VerifyException(
                    f"rounding must be one of {ROUNDING_MODES}, "
                    f"got {self.rounding.data!r}"
                )


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """Maximum over ``dims``.

    ``%y = hbir.reduce_max %x {dims = array<i64: 0>} : tensor<2x8xf32> ->
    tensor<8xf32>``
    """

    name = "hbir.reduce_max"


@irdl_op_definition
class ReduceMinOp(ReduceOp):
    """Minimum over ``dims``.

    ``%y = hbir.reduce_min %x {dims = array<i64: 0>} : tensor<2x8xf32> ->
    tensor<8xf32>``
    """

    name = "hbir.reduce_min"


# ------------------------------------------------------------------ selection
# The tie rule and the integer semantics: runtime/selection.py.

INDEX = i64  # the element type of index tensors (torch's int64)


def _check_index_type(value: SSAValue, what: str) -> None:
    element = tensor_type(value).element_type
    if element != INDEX:
        raise VerifyException(f"{what} must be an i64 tensor, got {element}")


def _dim(op: IRDLOperation) -> int:
    return op.dim.value.data


@irdl_op_definition
class TopkOp(IRDLOperation):
    """The ``k`` largest (``largest = false``: smallest) values along ``dim`` and
    their i64 indices, in order; equal values by index, the lower first. A sort is
    a top-k of the whole dim.

    ``%v, %i = hbir.topk %x {k = 3 : i64, dim = 1 : i64} : (tensor<2x8xf32>) ->
    (tensor<2x3xf32>, tensor<2x3xi64>)``
    """

    name = "hbir.topk"

    input = operand_def(AnyTensorTypeConstr)
    values = result_def(AnyTensorTypeConstr)
    indices = result_def(AnyTensorTypeConstr)
    k = prop_def(IntegerAttr[I64])
    dim = prop_def(IntegerAttr[I64])
    largest = prop_def(BoolAttr, default_value=BoolAttr.from_bool(True))

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: Value, k: int, dim: int, largest: bool = True):
        shape = shapes.topk(shape_of(input), k, dim)
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape), with_shape(input, shape, INDEX)],
            properties={
                "k": i64_attr(k),
                "dim": i64_attr(dim),
                "largest": BoolAttr.from_bool(largest),
            },
        )

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.values)
        _check_index_type(self.indices, "indices")
        _expect_shape(
            self, shapes.topk, shape_of(self.input), self.k.value.data, _dim(self)
        )
        if shape_of(self.indices) != shape_of(self.values):
            raise VerifyException("indices and values have different shapes")


class ArgExtremeOp(IRDLOperation):
    """The i64 index of the first extreme value along ``dim``."""

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    dim = prop_def(IntegerAttr[I64])
    keepdim = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    def __init__(self, input: Value, dim: int, keepdim: bool = False):
        shape = shapes.reduce(shape_of(input), [dim], keepdim)
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape, INDEX)],
            properties={"dim": i64_attr(dim), "keepdim": BoolAttr.from_bool(keepdim)},
        )

    def verify_(self) -> None:
        _check_index_type(self.output, "the result")
        _expect_shape(
            self,
            shapes.reduce,
            shape_of(self.input),
            [_dim(self)],
            self.keepdim.value.data,
        )


@irdl_op_definition
class ArgmaxOp(ArgExtremeOp):
    """Index of the first maximum along ``dim``.

    ``%i = hbir.argmax %x {dim = 1 : i64} : tensor<2x8xf32> -> tensor<2xi64>``
    """

    name = "hbir.argmax"


@irdl_op_definition
class ArgminOp(ArgExtremeOp):
    """Index of the first minimum along ``dim``.

    ``%i = hbir.argmin %x {dim = 1 : i64} : tensor<2x8xf32> -> tensor<2xi64>``
    """

    name = "hbir.argmin"


class IndexReadOperands(IRDLOperation):
    """The operands of a read at an index along ``dim`` (``hbir`` and ``npu``)."""

    input = operand_def(AnyTensorTypeConstr)
    index = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $index attr-dict `:` functional-type(operands, results)"
    )


class IndexReadOp(IndexReadOperands):
    """Reads ``input`` at an i64 ``index`` along ``dim`` (an index out of range is
    an error when the op runs)."""

    SHAPE_RULE: ClassVar = None

    def __init__(self, input: Value, index: Value, dim: int):
        shape = type(self).SHAPE_RULE(shape_of(input), shape_of(index), dim)
        super().__init__(
            operands=[input, index],
            result_types=[with_shape(input, shape)],
            properties={"dim": i64_attr(dim)},
        )

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.output)
        _check_index_type(self.index, "index")
        _expect_shape(
            self,
            type(self).SHAPE_RULE,
            shape_of(self.input),
            shape_of(self.index),
            _dim(self),
        )


@irdl_op_definition
class GatherOp(IndexReadOp):
    """``torch.gather``: ``y[i][j] = x[i][index[i][j]]`` for ``dim = 1``.

    ``%y = hbir.gather %x, %i {dim = 1 : i64} : (tensor<2x8xf32>, tensor<2x3xi64>)
    -> tensor<2x3xf32>``
    """

    name = "hbir.gather"
    SHAPE_RULE = staticmethod(shapes.gather)


@irdl_op_definition
class IndexSelectOp(IndexReadOp):
    """``torch.index_select``: the slices at a 1-d ``index`` along ``dim``.

    ``%y = hbir.index_select %x, %i {dim = 0 : i64} : (tensor<8x4xf32>,
    tensor<3xi64>) -> tensor<3x4xf32>``
    """

    name = "hbir.index_select"
    SHAPE_RULE = staticmethod(shapes.index_select)


class CompareOperands(IRDLOperation):
    """The operands of a comparison (``hbir`` and ``npu``)."""

    lhs = operand_def(AnyTensorTypeConstr)
    rhs = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    kind = prop_def(StringAttr)
    scales = opt_prop_def(DenseArrayBase)

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = BINARY_FORMAT


@irdl_op_definition
class CompareOp(CompareOperands):
    """``lhs <kind> rhs`` (eq, ne, gt, ge, lt, le) with broadcasting, as an ``i1``
    mask. Float: torch's comparison. Integer (after convert): codes compared as
    they are (one grid, or against integer thresholds), or with ``scales`` as the
    float32 values ``fl32(q * s)`` (``runtime/selection.py``).

    ``%m = hbir.compare %a, %b {kind = "eq"} : (tensor<1x2x4x4xf32>,
    tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xi1>``
    """

    name = "hbir.compare"

    def __init__(self, lhs: Value, rhs: Value, kind: str, scales=None):
        shape = shapes.broadcast(shape_of(lhs), shape_of(rhs))
        super().__init__(
            operands=[lhs, rhs],
            result_types=[TensorType(IntegerType(1), list(shape))],
            properties={
                "kind": StringAttr(kind),
                "scales": None
                if scales is None
                else DenseArrayBase.from_list(f64, [float(s) for s in scales]),
            },
        )

    def verify_(self) -> None:
        from hbir.runtime.selection import COMPARE_KINDS

        if self.kind.data not in COMPARE_KINDS:
            raise VerifyException(
                f"kind must be one of {COMPARE_KINDS}, got {self.kind.data!r}"
            )
        if tensor_type(self.output).element_type != IntegerType(1):
            raise VerifyException("the result is an i1 mask")
        _expect_shape(self, shapes.broadcast, shape_of(self.lhs), shape_of(self.rhs))
        floats = [is_float(v.type) for v in (self.lhs, self.rhs)]
        if any(floats) != all(floats):
            raise VerifyException("operands are both float or both integer")
        if self.scales is not None and len(self.scales.get_values()) != 2:
            raise VerifyException("scales: one per operand")


class SelectOperands(IRDLOperation):
    """The operands of a selection by a mask (``hbir`` and ``npu``)."""

    mask = operand_def(AnyTensorTypeConstr)
    lhs = operand_def(AnyTensorTypeConstr)
    rhs = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)

    traits = traits_def(Pure())
    assembly_format = (
        "$mask `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)"
    )


@irdl_op_definition
class SelectOp(SelectOperands):
    """``where(mask, lhs, rhs)`` with broadcasting: ``lhs`` where the ``i1`` mask is
    true, else ``rhs`` (a selection: both on the result's grid after convert).

    ``%y = hbir.select %m, %a, %b : (tensor<2x8xi1>, tensor<2x8xf32>,
    tensor<f32>) -> tensor<2x8xf32>``
    """

    name = "hbir.select"

    def __init__(self, mask: Value, lhs: Value, rhs: Value):
        shape = shapes.broadcast(
            shapes.broadcast(shape_of(mask), shape_of(lhs)), shape_of(rhs)
        )
        super().__init__(
            operands=[mask, lhs, rhs], result_types=[with_shape(lhs, shape)]
        )

    def verify_(self) -> None:
        if tensor_type(self.mask).element_type != IntegerType(1):
            raise VerifyException("the mask must be an i1 tensor")
        _same_element_types(self, self.lhs, self.rhs, self.output)
        try:
            shape = shapes.broadcast(
                shapes.broadcast(shape_of(self.mask), shape_of(self.lhs)),
                shape_of(self.rhs),
            )
        except shapes.ShapeError as e:
            raise VerifyException(str(e)) from None
        if shape_of(self.output) != shape:
            raise VerifyException(f"expected result shape {shape}")


class IndexCopyOperands(IRDLOperation):
    """The operands of a write at an index along ``dim`` (``hbir`` and ``npu``)."""

    input = operand_def(AnyTensorTypeConstr)
    index = operand_def(AnyTensorTypeConstr)
    source = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $index `,` $source attr-dict `:` functional-type(operands, results)"
    )


@irdl_op_definition
class IndexCopyOp(IndexCopyOperands):
    """``input`` with ``source``'s slices written at a 1-d i64 ``index`` along
    ``dim`` (``torch.index_copy``; ``canvas[:, idx] = feats``): of repeated indices
    the last write wins.

    ``%y = hbir.index_copy %canvas, %i, %src {dim = 1 : i64} : (tensor<3x16xf32>,
    tensor<4xi64>, tensor<3x4xf32>) -> tensor<3x16xf32>``
    """

    name = "hbir.index_copy"

    def __init__(self, input: Value, index: Value, source: Value, dim: int):
        super().__init__(
            operands=[input, index, source],
            result_types=[tensor_type(input)],
            properties={"dim": i64_attr(dim)},
        )

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.source, self.output)
        _check_index_type(self.index, "index")
        x = shape_of(self.input)
        try:
            written = shapes.index_select(x, shape_of(self.index), _dim(self))
        except shapes.ShapeError as e:
            raise VerifyException(str(e)) from None
        if shape_of(self.source) != written:
            raise VerifyException(
                f"source shape {list(shape_of(self.source))}, expected {list(written)}"
            )
        if shape_of(self.output) != x:
            raise VerifyException("the result has the input's shape")


# ------------------------------------------------------------------ conv / gemm


def _check_gemm_types(
    op: IRDLOperation, operands: Sequence[SSAValue], bias: SSAValue | None
) -> None:
    """Float: all float, equal types. Integer: si8/si16 operands, si32 bias/result."""
    out = tensor_type(op.results[0]).element_type
    if all(is_float(v.type) for v in operands):
        _same_element_types(op, *operands, op.results[0])
        if bias is not None:
            _same_element_types(op, operands[0], bias)
        return
    for v, name in zip(operands, ("input", "weight"), strict=False):
        t = tensor_type(v).element_type
        if t not in (si(8), si(16)):
            raise VerifyException(f"integer {name} must be si8 or si16, got {t}")
    if bias is not None and tensor_type(bias).element_type != si(32):
        raise VerifyException(
            f"integer bias must be si32, got {tensor_type(bias).element_type}"
        )
    if out != si(32):
        raise VerifyException(f"integer accumulation result must be si32, got {out}")


class ConvOperands(IRDLOperation):
    """The operands and properties of a convolution (``hbir`` in NCHW, ``npu`` in
    NHWC: the same fields)."""

    input = operand_def(AnyTensorTypeConstr)
    weight = operand_def(AnyTensorTypeConstr)
    bias = opt_operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    dilation = prop_def(DenseArrayBase[I64])
    groups = prop_def(IntegerAttr[I64], default_value=i64_attr(1))


@irdl_op_definition
class Conv2dOp(ConvOperands):
    """2-D convolution: NCHW input, OIHW weight, optional bias, torch semantics.

    Integer form: si8/si16 input and weight, si32 bias, exact si32 accumulator.

    ``%y = hbir.conv2d %x, %w bias(%b) {stride = array<i64: 1, 1>, padding =
    array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64} :
    (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>``
    """

    name = "hbir.conv2d"

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $weight (`bias` `(` $bias^ `)`)? attr-dict "
        "`:` functional-type(operands, results)"
    )

    def __init__(
        self,
        input: Value,
        weight: Value,
        bias: Value | None = None,
        stride: Sequence[int] = (1, 1),
        padding: Sequence[int] = (0, 0),
        dilation: Sequence[int] = (1, 1),
        groups: int = 1,
        result_type: Attribute | None = None,
    ):
        if result_type is None:
            shape = shapes.conv2d(
                shape_of(input), shape_of(weight), stride, padding, dilation, groups
            )
            element = None if is_float(SSAValue.get(input).type) else si(32)
            result_type = with_shape(input, shape, element)
        super().__init__(
            operands=[input, weight, bias],
            result_types=[result_type],
            properties={
                "stride": ints(stride),
                "padding": ints(padding),
                "dilation": ints(dilation),
                "groups": i64_attr(groups),
            },
        )

    def verify_(self) -> None:
        _check_gemm_types(self, [self.input, self.weight], self.bias)
        _expect_shape(
            self,
            shapes.conv2d,
            shape_of(self.input),
            shape_of(self.weight),
            _values(self.stride),
            _values(self.padding),
            _values(self.dilation),
            self.groups.value.data,
        )
        if self.bias is not None and shape_of(self.bias) != (shape_of(self.weight)[0],):
            raise VerifyException(
                f"bias has shape {shape_of(self.bias)}, "
                f"expected ({shape_of(self.weight)[0]},)"
            )


class ConvTransposeOperands(ConvOperands):
    """A convolution's operands and properties, and the ``output_padding`` of a
    transposed one."""

    output_padding = prop_def(DenseArrayBase[I64])


@irdl_op_definition
class ConvTranspose2dOp(ConvTransposeOperands):
    """Transposed 2-D convolution, weight ``(C_in, C_out / groups, kH, kW)``.

    ``%y = hbir.conv_transpose2d %x, %w {stride = array<i64: 2, 2>, padding =
    array<i64: 0, 0>, output_padding = array<i64: 0, 0>, dilation = array<i64: 1,
    1>} : (tensor<1x4x4x4xf32>, tensor<4x2x2x2xf32>) -> tensor<1x2x8x8xf32>``
    """

    name = "hbir.conv_transpose2d"

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = Conv2dOp.assembly_format

    def __init__(
        self,
        input: Value,
        weight: Value,
        bias: Value | None = None,
        stride: Sequence[int] = (1, 1),
        padding: Sequence[int] = (0, 0),
        output_padding: Sequence[int] = (0, 0),
        dilation: Sequence[int] = (1, 1),
        groups: int = 1,
        result_type: Attribute | None = None,
    ):
        if result_type is None:
            shape = shapes.conv_transpose2d(
                shape_of(input),
                shape_of(weight),
                stride,
                padding,
                output_padding,
                dilation,
                groups,
            )
            element = None if is_float(SSAValue.get(input).type) else si(32)
            result_type = with_shape(input, shape, element)
        super().__init__(
            operands=[input, weight, bias],
            result_types=[result_type],
            properties={
                "stride": ints(stride),
                "padding": ints(padding),
                "output_padding": ints(output_padding),
                "dilation": ints(dilation),
                "groups": i64_attr(groups),
            },
        )

    def verify_(self) -> None:
        _check_gemm_types(self, [self.input, self.weight], self.bias)
        _expect_shape(
            self,
            shapes.conv_transpose2d,
            shape_of(self.input),
            shape_of(self.weight),
            _values(self.stride),
            _values(self.padding),
            _values(self.output_padding),
            _values(self.dilation),
            self.groups.value.data,
        )
        channels = shape_of(self.output)[1]
        if self.bias is not None and shape_of(self.bias) != (channels,):
            raise VerifyException(
                f"bias has shape {shape_of(self.bias)}, expected ({channels},)"
            )


@irdl_op_definition
class LinearOp(IRDLOperation):
    """``y = x @ weight^T (+ bias)`` over the last dim.

    ``%y = hbir.linear %x, %w bias(%b) : (tensor<2x8xf32>, tensor<4x8xf32>,
    tensor<4xf32>) -> tensor<2x4xf32>``
    """

    name = "hbir.linear"

    input = operand_def(AnyTensorTypeConstr)
    weight = operand_def(AnyTensorTypeConstr)
    bias = opt_operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)

    traits = traits_def(Pure())
    assembly_format = (
        "$input `,` $weight (`bias` `(` $bias^ `)`)? attr-dict "
        "`:` functional-type(operands, results)"
    )

    def __init__(
        self,
        input: Value,
        weight: Value,
        bias: Value | None = None,
        result_type: Attribute | None = None,
    ):
        if result_type is None:
            shape = shapes.linear(shape_of(input), shape_of(weight))
            element = None if is_float(SSAValue.get(input).type) else si(32)
            result_type = with_shape(input, shape, element)
        super().__init__(operands=[input, weight, bias], result_types=[result_type])

    def verify_(self) -> None:
        _check_gemm_types(self, [self.input, self.weight], self.bias)
        _expect_shape(self, shapes.linear, shape_of(self.input), shape_of(self.weight))
        if self.bias is not None and shape_of(self.bias) != (shape_of(self.weight)[0],):
            raise VerifyException(
                f"bias has shape {shape_of(self.bias)}, "
                f"expected ({shape_of(self.weight)[0]},)"
            )


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """Batched matrix product with broadcast batch dims (torch.matmul, rank >= 2).

    ``%z = hbir.matmul %a, %b : (tensor<2x4x8xf32>, tensor<8x3xf32>) ->
    tensor<2x4x3xf32>``
    """

    name = "hbir.matmul"

    lhs = operand_def(AnyTensorTypeConstr)
    rhs = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)

    traits = traits_def(Pure())
    assembly_format = BINARY_FORMAT

    def __init__(self, lhs: Value, rhs: Value, result_type: Attribute | None = None):
        if result_type is None:
            shape = shapes.matmul(shape_of(lhs), shape_of(rhs))
            element = None if is_float(SSAValue.get(lhs).type) else si(32)
            result_type = with_shape(lhs, shape, element)
        super().__init__(operands=[lhs, rhs], result_types=[result_type])

    def verify_(self) -> None:
        _check_gemm_types(self, [self.lhs, self.rhs], None)
        _expect_shape(self, shapes.matmul, shape_of(self.lhs), shape_of(self.rhs))


# ------------------------------------------------------------------ pooling / resize


class Pool2dOp(IRDLOperation):
    """2-D pooling over NCHW with torch's window and ceil_mode rules."""

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    kernel = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    ceil_mode = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    def _dilation(self) -> tuple[int, int]:
        return (1, 1)

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.output)
        self._verify_window()

    def _verify_window(self) -> None:
        _expect_shape(
            self,
            shapes.pool2d,
            shape_of(self.input),
            _values(self.kernel),
            _values(self.stride),
            _values(self.padding),
            self._dilation(),
            self.ceil_mode.value.data,
        )


class MaxWindowOp(Pool2dOp):
    """A max pooling window (dilated): its values or its maxima's positions."""

    dilation = prop_def(DenseArrayBase[I64])

    def __init__(
        self,
        input: Value,
        kernel: Sequence[int],
        stride: Sequence[int] | None = None,
        padding: Sequence[int] = (0, 0),
        dilation: Sequence[int] = (1, 1),
        ceil_mode: bool = False,
    ):
        stride = kernel if stride is None else stride
        shape = shapes.pool2d(
            shape_of(input), kernel, stride, padding, dilation, ceil_mode
        )
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape, self.RESULT_ELEMENT)],
            properties={
                "kernel": ints(kernel),
                "stride": ints(stride),
                "padding": ints(padding),
                "dilation": ints(dilation),
                "ceil_mode": BoolAttr.from_bool(ceil_mode),
            },
        )

    RESULT_ELEMENT: ClassVar = None  # None: the input's

    def _dilation(self) -> tuple[int, int]:
        return _values(self.dilation)


@irdl_op_definition
class MaxPool2dOp(MaxWindowOp):
    """Max pooling (exact in any element type).

    ``%y = hbir.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2,
    2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} :
    tensor<1x4x8x8xf32> -> tensor<1x4x4x4xf32>``
    """

    name = "hbir.max_pool2d"


@irdl_op_definition
class MaxPool2dIndicesOp(MaxWindowOp):
    """The i64 positions of a max pooling's maxima (``F.max_pool2d(...,
    return_indices=True)[1]``): per window the flat ``h * W + w`` of its first
    maximum in row-major order, padding never chosen
    (``selection.max_pool_indices``; exact on codes, which are ordered as the
    values they stand for).

    ``%i = hbir.max_pool2d_indices %x {kernel = array<i64: 2, 2>, stride =
    array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} :
    tensor<1x4x8x8xf32> -> tensor<1x4x4x4xi64>``
    """

    name = "hbir.max_pool2d_indices"

    RESULT_ELEMENT: ClassVar = INDEX

    def verify_(self) -> None:
        _check_index_type(self.output, "the result")
        self._verify_window()


class MaxUnpoolOperands(IRDLOperation):
    """The operands of an unpooling (``hbir`` and ``npu``): values, their i64
    flat indices, the H x W ``size`` written."""

    input = operand_def(AnyTensorTypeConstr)
    indices = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    size = prop_def(DenseArrayBase[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $indices attr-dict `:` functional-type(operands, results)"
    )


@irdl_op_definition
class MaxUnpool2dOp(MaxUnpoolOperands):
    """``F.max_unpool2d``: zeros of H x W ``size`` per channel, each input
    element written at its i64 flat ``h * W + w`` index (of repeated indices the
    last in row-major order wins; ``selection.max_unpool``). Zero is a code on
    every grid, so it moves codes as it moves values.

    ``%y = hbir.max_unpool2d %x, %i {size = array<i64: 8, 8>} :
    (tensor<1x4x4x4xf32>, tensor<1x4x4x4xi64>) -> tensor<1x4x8x8xf32>``
    """

    name = "hbir.max_unpool2d"

    def __init__(self, input: Value, indices: Value, size: Sequence[int]):
        shape = (*shape_of(input)[:2], *size)
        super().__init__(
            operands=[input, indices],
            result_types=[with_shape(input, shape)],
            properties={"size": ints(size)},
        )

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.output)
        _check_index_type(self.indices, "indices")
        x = shape_of(self.input)
        if len(x) != 4:
            raise VerifyException(f"input has {len(x)} dims, expected 4")
        if shape_of(self.indices) != x:
            raise VerifyException(
                f"indices shape {list(shape_of(self.indices))}, expected {list(x)}"
            )
        size = _values(self.size)
        if len(size) != 2 or min(size) < 1:
            raise VerifyException(f"size must be 2 positive values, got {list(size)}")
        if shape_of(self.output) != (*x[:2], *size):
            raise VerifyException(f"expected result shape {(*x[:2], *size)}")


@irdl_op_definition
class AvgPool2dOp(Pool2dOp):
    """Average pooling; integers: exact window sum, one half-to-even division.

    ``%y = hbir.avg_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2,
    2>, padding = array<i64: 0, 0>} : tensor<1x4x8x8xf32> -> tensor<1x4x4x4xf32>``
    """

    name = "hbir.avg_pool2d"

    count_include_pad = prop_def(BoolAttr, default_value=BoolAttr.from_bool(True))

    def __init__(
        self,
        input: Value,
        kernel: Sequence[int],
        stride: Sequence[int] | None = None,
        padding: Sequence[int] = (0, 0),
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ):
        stride = kernel if stride is None else stride
        shape = shapes.pool2d(
            shape_of(input), kernel, stride, padding, (1, 1), ceil_mode
        )
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape)],
            properties={
                "kernel": ints(kernel),
                "stride": ints(stride),
                "padding": ints(padding),
                "ceil_mode": BoolAttr.from_bool(ceil_mode),
                "count_include_pad": BoolAttr.from_bool(count_include_pad),
            },
        )


@irdl_op_definition
class GlobalAvgPool2dOp(IRDLOperation):
    """Mean over H and W: ``N x C x H x W -> N x C x 1 x 1``.

    ``%y = hbir.global_avg_pool2d %x : tensor<1x4x8x8xf32> -> tensor<1x4x1x1xf32>``
    """

    name = "hbir.global_avg_pool2d"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)

    traits = traits_def(Pure())
    assembly_format = MAP_FORMAT

    def __init__(self, input: Value):
        n, c = shape_of(input)[:2]
        super().__init__(
            operands=[input], result_types=[with_shape(input, (n, c, 1, 1))]
        )

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.output)
        x = shape_of(self.input)
        if len(x) != 4:
            raise VerifyException(f"input has {len(x)} dims, expected 4")
        if shape_of(self.output) != (x[0], x[1], 1, 1):
            raise VerifyException(
                f"expected result shape {(x[0], x[1], 1, 1)}, "
                f"got {shape_of(self.output)}"
            )


@irdl_op_definition
class Resize2dOp(IRDLOperation):
    """Resize H and W to ``size`` (torch ``interpolate``: nearest, bilinear or
    bicubic).

    With ``scale`` the sampling positions follow torch's ``scale_factor`` (source
    index ``dst / scale``), which differs from ``in / out`` when the scale is not
    exact; ``size`` must then be ``floor(in * scale)``.

    With ``weight_bits`` (bilinear or bicubic, quantized models) the interpolation
    weights are the NPU's: integers in units of ``2**-weight_bits``
    (``numerics.resize_taps``, ``numerics.resize_weighted``). On float values the
    result is then the exact interpolated value; on integer codes it is the exact
    weighted sum in units of
    ``2**-(2 * weight_bits)``, an si32 result that a requantization ends.

    ``%y = hbir.resize2d %x {size = array<i64: 16, 16>, mode = "bilinear",
    align_corners = false} : tensor<1x4x8x8xf32> -> tensor<1x4x16x16xf32>``
    """

    name = "hbir.resize2d"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    size = prop_def(DenseArrayBase[I64])
    mode = prop_def(StringAttr, default_value=StringAttr("nearest"))
    align_corners = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    scale = opt_prop_def(DenseArrayBase[Float64Type])
    weight_bits = opt_prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    MODES: ClassVar = ("nearest", "bilinear", "bicubic")

    def __init__(
        self,
        input: Value,
        size: Sequence[int],
        mode: str = "nearest",
        align_corners: bool = False,
        scale: Sequence[float] | None = None,
        weight_bits: int | None = None,
        element_type: Attribute | None = None,
    ):
        shape = shapes.resize2d(shape_of(input), size)
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape, element_type)],
            properties={
                "size": ints(size),
                "mode": StringAttr(mode),
                "align_corners": BoolAttr.from_bool(align_corners),
                "scale": None
                if scale is None
                else DenseArrayBase.from_list(f64, [float(s) for s in scale]),
                "weight_bits": None if weight_bits is None else i64_attr(weight_bits),
            },
        )

    def verify_(self) -> None:
        if self.mode.data not in self.MODES:
            raise VerifyException(
                f"mode must be one of {self.MODES}, got {self.mode.data!r}"
            )
        if self.align_corners.value.data and self.mode.data == "nearest":
            raise VerifyException("align_corners does not apply to nearest mode")
        if self.weight_bits is not None:
            from hbir.runtime.numerics import BILINEAR_BITS, RESIZE_WEIGHTED_MODES

            if self.mode.data not in RESIZE_WEIGHTED_MODES:
                raise VerifyException(
                    f"weight_bits applies only to {RESIZE_WEIGHTED_MODES} modes"
                )
            if self.weight_bits.value.data != BILINEAR_BITS:
                raise VerifyException(
                    f"weight_bits must be {BILINEAR_BITS}, "
                    f"got {self.weight_bits.value.data}"
                )
            if not is_float(self.input.type):
                if tensor_type(self.output).element_type != si(32):
                    raise VerifyException("integer weighted sums are si32")
                _expect_shape(
                    self, shapes.resize2d, shape_of(self.input), _values(self.size)
                )
                return
        _same_element_types(self, self.input, self.output)
        _expect_shape(self, shapes.resize2d, shape_of(self.input), _values(self.size))
        if self.scale is not None:
            scale = self.scale.get_values()
            if len(scale) != 2:
                raise VerifyException(f"scale needs 2 values (H, W), got {len(scale)}")
            h, w = shape_of(self.input)[2:]
            implied = [math.floor(h * scale[0]), math.floor(w * scale[1])]
            if len(scale) != 2 or implied != list(_values(self.size)):
                raise VerifyException(
                    f"scale {list(scale)} implies size {implied}, "
                    f"got {list(_values(self.size))}"
                )


@irdl_op_definition
class GridSampleOp(IRDLOperation):
    """``F.grid_sample`` of an NCHW input at an N x Ho x Wo x 2 grid of normalised
    (x, y) coordinates, with the NPU's bilinear weights (units of 2**-7) or the
    nearest neighbour, ``zeros`` or ``border`` padding (``numerics.grid_taps``,
    ``numerics.grid_sample_sum``). Float: the sampled values. Integer (after
    convert): si8 / si16 input and grid codes, ``grid_scale`` the grid's scale, the
    exact si32 weighted sums in units of 2**-14.

    ``%y = hbir.grid_sample %x, %g {mode = "bilinear", padding_mode = "zeros",
    align_corners = false} : (tensor<1x4x8x8xf32>, tensor<1x5x6x2xf32>) ->
    tensor<1x4x5x6xf32>``
    """

    name = "hbir.grid_sample"

    input = operand_def(AnyTensorTypeConstr)
    grid = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    mode = prop_def(StringAttr, default_value=StringAttr("bilinear"))
    padding_mode = prop_def(StringAttr, default_value=StringAttr("zeros"))
    align_corners = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    grid_scale = opt_prop_def(FloatAttr)

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $grid attr-dict `:` functional-type(operands, results)"
    )

    def __init__(
        self,
        input: Value,
        grid: Value,
        mode: str = "bilinear",
        padding_mode: str = "zeros",
        align_corners: bool = False,
        grid_scale: float | None = None,
        element_type: Attribute | None = None,
    ):
        shape = shapes.grid_sample(shape_of(input), shape_of(grid))
        super().__init__(
            operands=[input, grid],
            result_types=[with_shape(input, shape, element_type)],
            properties={
                "mode": StringAttr(mode),
                "padding_mode": StringAttr(padding_mode),
                "align_corners": BoolAttr.from_bool(align_corners),
                "grid_scale": None if grid_scale is None else f64_attr(grid_scale),
            },
        )

    def verify_(self) -> None:
        from hbir.runtime.numerics import GRID_SAMPLE_MODES, GRID_SAMPLE_PADDINGS

        if self.mode.data not in GRID_SAMPLE_MODES:
            raise VerifyException(
                f"mode must be one of {GRID_SAMPLE_MODES}, got {self.mode.data!r}"
            )
        if self.padding_mode.data not in GRID_SAMPLE_PADDINGS:
            raise VerifyException(
                f"padding_mode must be one of {GRID_SAMPLE_PADDINGS}, "
                f"got {self.padding_mode.data!r}"
            )
        _expect_shape(
            self, shapes.grid_sample, shape_of(self.input), shape_of(self.grid)
        )
        if is_float(self.input.type):
            _same_element_types(self, self.input, self.grid, self.output)
            if self.grid_scale is not None:
                raise VerifyException("grid_scale is for integer grid codes")
            return
        for value, what in ((self.input, "input"), (self.grid, "grid")):
            if tensor_type(value).element_type not in (si(8), si(16)):
                raise VerifyException(f"integer {what} must be si8 or si16")
        if tensor_type(self.output).element_type != si(32):
            raise VerifyException("integer weighted sums are si32")
        if self.grid_scale is None or not self.grid_scale.value.data > 0:
            raise VerifyException("integer grid codes need a positive grid_scale")


# ------------------------------------------------------------------ data movement


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Concatenation along ``dim``.

    ``%z = hbir.concat %x, %y {dim = 1 : i64} : (tensor<1x2x4x4xf32>,
    tensor<1x3x4x4xf32>) -> tensor<1x5x4x4xf32>``
    """

    name = "hbir.concat"

    inputs = var_operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` functional-type($inputs, results)"

    def __init__(self, inputs: Sequence[Value], dim: int):
        shape = shapes.concat([shape_of(v) for v in inputs], dim)
        super().__init__(
            operands=[list(inputs)],
            result_types=[with_shape(inputs[0], shape)],
            properties={"dim": i64_attr(dim)},
        )

    def verify_(self) -> None:
        _same_element_types(self, *self.inputs, self.output)
        _expect_shape(
            self, shapes.concat, [shape_of(v) for v in self.inputs], self.dim.value.data
        )


@irdl_op_definition
class SliceOp(IRDLOperation):
    """Strided slice ``x[begin:end:step]`` per dimension (ends clamp to the size).

    ``%y = hbir.slice %x {begin = array<i64: 0, 2>, end = array<i64: 2, 8>, step =
    array<i64: 1, 2>} : tensor<2x8xf32> -> tensor<2x3xf32>``
    """

    name = "hbir.slice"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    begin = prop_def(DenseArrayBase[I64])
    end = prop_def(DenseArrayBase[I64])
    step = prop_def(DenseArrayBase[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    def __init__(
        self,
        input: Value,
        begin: Sequence[int],
        end: Sequence[int],
        step: Sequence[int] | None = None,
    ):
        step = [1] * len(begin) if step is None else step
        shape = shapes.slice_(shape_of(input), begin, end, step)
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape)],
            properties={"begin": ints(begin), "end": ints(end), "step": ints(step)},
        )

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.output)
        _expect_shape(
            self,
            shapes.slice_,
            shape_of(self.input),
            _values(self.begin),
            _values(self.end),
            _values(self.step),
        )


@irdl_op_definition
class SplitOp(IRDLOperation):
    """Split along ``dim`` into pieces of ``sizes``.

    ``%a, %b = hbir.split %x {sizes = array<i64: 3, 5>, dim = 1 : i64} :
    (tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>)``
    """

    name = "hbir.split"

    input = operand_def(AnyTensorTypeConstr)
    outputs = var_result_def(AnyTensorTypeConstr)
    sizes = prop_def(DenseArrayBase[I64])
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: Value, sizes: Sequence[int], dim: int):
        pieces = shapes.split(shape_of(input), sizes, dim)
        super().__init__(
            operands=[input],
            result_types=[[with_shape(input, s) for s in pieces]],
            properties={"sizes": ints(sizes), "dim": i64_attr(dim)},
        )

    def verify_(self) -> None:
        _same_element_types(self, self.input, *self.outputs)
        try:
            expected = shapes.split(
                shape_of(self.input), _values(self.sizes), self.dim.value.data
            )
        except shapes.ShapeError as e:
            raise VerifyException(str(e)) from None
        got = [shape_of(v) for v in self.outputs]
        if got != expected:
            raise VerifyException(f"expected result shapes {expected}, got {got}")


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """Reshape to the result type's shape (same element count, row-major order).

    ``%y = hbir.reshape %x : tensor<1x4x2x2xf32> -> tensor<1x16xf32>``
    """

    name = "hbir.reshape"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)

    traits = traits_def(Pure())
    assembly_format = MAP_FORMAT

    def __init__(self, input: Value, shape: Sequence[int]):
        target = shapes.reshape(shape_of(input), shape)
        super().__init__(operands=[input], result_types=[with_shape(input, target)])

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.output)
        _expect_shape(self, shapes.reshape, shape_of(self.input), shape_of(self.output))


@irdl_op_definition
class FlipOp(UnaryOp):
    """Reverse the order of elements along ``dims`` (``torch.flip``).

    ``%y = hbir.flip %x {dims = array<i64: 1>} : tensor<1x4x2x3xf32>``
    """

    name = "hbir.flip"

    dims = prop_def(DenseArrayBase[I64])

    def __init__(self, input: Value, dims: Sequence[int]):
        super().__init__(input, {"dims": ints(dims)})

    def verify_(self) -> None:
        rank = len(shape_of(self.input))
        dims = _values(self.dims)
        if any(not -rank <= d < rank for d in dims):
            raise VerifyException(f"dims {list(dims)} out of range for rank {rank}")
        if len({d % rank for d in dims}) != len(dims):
            raise VerifyException(f"dims {list(dims)} repeat a dim")


@irdl_op_definition
class TransposeOp(IRDLOperation):
    """Permute dimensions: ``y.shape[i] = x.shape[perm[i]]``.

    ``%y = hbir.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<1x4x2x3xf32>
    -> tensor<1x2x3x4xf32>``
    """

    name = "hbir.transpose"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    perm = prop_def(DenseArrayBase[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    def __init__(self, input: Value, perm: Sequence[int]):
        shape = shapes.transpose(shape_of(input), perm)
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape)],
            properties={"perm": ints(perm)},
        )

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.output)
        _expect_shape(self, shapes.transpose, shape_of(self.input), _values(self.perm))


@irdl_op_definition
class PadOp(IRDLOperation):
    """Constant padding with ``low`` / ``high`` amounts per dimension (on integer
    tensors ``value`` is rounded half to even and saturated).

    ``%y = hbir.pad %x {low = array<i64: 0, 1>, high = array<i64: 0, 2>, value =
    0.0 : f64} : tensor<2x4xf32> -> tensor<2x7xf32>``
    """

    name = "hbir.pad"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    low = prop_def(DenseArrayBase[I64])
    high = prop_def(DenseArrayBase[I64])
    value = prop_def(FloatAttr, default_value=f64_attr(0.0))

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    def __init__(
        self, input: Value, low: Sequence[int], high: Sequence[int], value: float = 0.0
    ):
        shape = shapes.pad(shape_of(input), low, high)
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape)],
            properties={"low": ints(low), "high": ints(high), "value": f64_attr(value)},
        )

    def verify_(self) -> None:
        _same_element_types(self, self.input, self.output)
        _expect_shape(
            self,
            shapes.pad,
            shape_of(self.input),
            _values(self.low),
            _values(self.high),
        )


@irdl_op_definition
class CastOp(IRDLOperation):
    """Element type conversion as torch ``.to(dtype)``.

    float -> int truncates toward zero and saturates (NaN becomes 0); int -> int
    saturates.

    ``%y = hbir.cast %x : tensor<4xsi8> -> tensor<4xf32>``
    """

    name = "hbir.cast"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)

    traits = traits_def(Pure())
    assembly_format = MAP_FORMAT

    def __init__(self, input: Value, element_type: Attribute):
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape_of(input), element_type)],
        )

    def verify_(self) -> None:
        if shape_of(self.input) != shape_of(self.output):
            raise VerifyException(
                f"cast keeps the shape: {shape_of(self.input)} "
                f"vs {shape_of(self.output)}"
            )


# ------------------------------------------------------------------ fixed point


class LutProperties(IRDLOperation):
    """The properties of a table lookup (``hbir.lut``, ``npu.lut``): an int8
    ``table`` or the fields of a segmented ``numerics.LutTable``."""

    table = opt_prop_def(DenseIntOrFPElementsAttr)
    function = opt_prop_def(StringAttr)
    kind = opt_prop_def(StringAttr)
    rounding = opt_prop_def(StringAttr)
    in_scale = opt_prop_def(FloatAttr)
    out_scale = opt_prop_def(FloatAttr)
    in_bits = opt_prop_def(IntegerAttr[I64])
    out_bits = opt_prop_def(IntegerAttr[I64])
    num_tables = opt_prop_def(IntegerAttr[I64])
    frac_bits = opt_prop_def(IntegerAttr[I64])
    phase_mult = opt_prop_def(IntegerAttr[I64])
    phase_shift = opt_prop_def(IntegerAttr[I64])
    phase_bits = opt_prop_def(IntegerAttr[I64])
    octave_step = opt_prop_def(IntegerAttr[I64])
    starts = opt_prop_def(DenseArrayBase[I64])
    offsets = opt_prop_def(DenseArrayBase[I64])
    slopes = opt_prop_def(DenseArrayBase[I64])

    # How each ``numerics.LutTable`` field is stored: ints, int arrays, f32 scales;
    # ``function``, ``kind`` and ``rounding`` as their names.
    _INT_FIELDS: ClassVar = (
        "in_bits",
        "out_bits",
        "num_tables",
        "frac_bits",
        "phase_mult",
        "phase_shift",
        "phase_bits",
        "octave_step",
    )
    _ARRAY_FIELDS: ClassVar = ("starts", "offsets", "slopes")
    SEGMENT_FIELDS: ClassVar = (
        ("function", "kind", "rounding", "in_scale", "out_scale")
        + _INT_FIELDS
        + _ARRAY_FIELDS
    )


@irdl_op_definition
class LutOp(LutProperties):
    """Table lookup on integer codes.

    int8 input, direct table: ``y = table[x + 128]`` (256 entries), exact by
    construction (``table[q] = quantize(f(q * s_in), s_out)``).

    int16 input, segmented table: the fields of ``numerics.LutTable.to_arrays``
    as properties (``function``, ``kind``, ``rounding``, ``in_scale``,
    ``out_scale``, ``in_bits``, ``out_bits``, ``num_tables``, ``frac_bits``,
    ``phase_mult``, ``phase_shift``, ``phase_bits``, ``octave_step``, ``starts``,
    ``offsets``, ``slopes``); the result is ``numerics.apply_lut`` of that table,
    integer interpolation with one rounding shift, exactly what ``pre_export``
    computes.

    ``%y = hbir.lut %x {table = dense<...> : tensor<256xsi8>} : tensor<4xsi8> ->
    tensor<4xsi8>``
    """

    name = "hbir.lut"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    def __init__(
        self,
        input: Value,
        table: DenseIntOrFPElementsAttr | None = None,
        segments: dict[str, Attribute] | None = None,
        element_type: Attribute | None = None,
    ):
        if table is not None:
            element = table.get_type().element_type
            properties: dict[str, Attribute] = {"table": table}
        else:
            assert segments is not None and element_type is not None
            element, properties = element_type, dict(segments)
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape_of(input), element)],
            properties=properties,
        )

    @classmethod
    def from_table(cls, codes: Value, table: numerics.LutTable) -> LutOp:
        """``hbir.lut`` on ``codes`` holding ``table`` (direct entries or segments)."""
        from xdsl.dialects.builtin import BytesAttr, f32

        out = si(table.out_bits)
        if table.kind == "direct":
            t = TensorType(out, [256])
            data = table.entries.astype(numpy_dtype(out)).tobytes()
            return cls(codes, DenseIntOrFPElementsAttr(t, BytesAttr(data)))
        arrays = table.to_arrays()
        props: dict[str, Attribute] = {
            "function": StringAttr(table.op),
            "kind": StringAttr(table.kind),
            "rounding": StringAttr(table.rounding),
            "in_scale": FloatAttr(table.in_scale, f32),
            "out_scale": FloatAttr(table.out_scale, f32),
        }
        for name in cls._INT_FIELDS:
            props[name] = i64_attr(int(arrays[name]))
        for name in cls._ARRAY_FIELDS:
            props[name] = ints([int(v) for v in arrays[name]])
        return cls(codes, segments=props, element_type=out)

    def lut_table(self) -> numerics.LutTable:
        """The segmented table the properties hold (the inverse of ``from_table``).

        ``LutTable.from_arrays`` validates it, so a hostile table cannot overflow.
        """
        import numpy as np

        from hbir.runtime import numerics

        def f32_bits(attr) -> int:
            return int(np.float32(attr.value.data).view(np.uint32))

        arrays: dict[str, np.ndarray | int] = {
            "op": numerics.LUT_OPS.index(self.function.data),
            "kind": numerics.LUT_KINDS.index(self.kind.data),
            "rounding": numerics.ROUNDING_MODES.index(self.rounding.data),
            "in_scale": f32_bits(self.in_scale),
            "out_scale": f32_bits(self.out_scale),
            "entries": np.zeros(0, np.int64),
        }
        for name in self._INT_FIELDS:
            arrays[name] = getattr(self, name).value.data
        for name in self._ARRAY_FIELDS:
            arrays[name] = np.asarray(getattr(self, name).get_values(), np.int64)
        return numerics.LutTable.from_arrays(arrays)

    def verify_(self) -> None:
        x = tensor_type(self.input).element_type
        out = tensor_type(self.output)
        if shape_of(self.output) != shape_of(self.input):
            raise VerifyException("result must have the input shape")
        present = [getattr(self, n) is not None for n in self.SEGMENT_FIELDS]
        if self.table is None:
            if not all(present):
                missing = [
                    n
                    for n, p in zip(self.SEGMENT_FIELDS, present, strict=True)
                    if not p
                ]
                raise VerifyException(
                    f"needs a table or segment fields; lacks {', '.join(missing)}"
                )
            if x != si(16):
                raise VerifyException(f"segmented table input must be si16, got {x}")
            for name in ("in_bits", "out_bits"):
                bits = getattr(self, name).value.data
                if bits not in (8, 16):
                    raise VerifyException(f"{name} must be 8 or 16, got {bits}")
            if self.in_bits.value.data != 16:
                raise VerifyException("segmented tables take 16-bit input codes")
            if out.element_type != si(self.out_bits.value.data):
                raise VerifyException(
                    f"result must be si{self.out_bits.value.data}, "
                    f"got {out.element_type}"
                )
            from hbir.runtime import numerics

            for name, known in (
                ("function", numerics.LUT_OPS),
                ("kind", numerics.LUT_KINDS),
                ("rounding", numerics.ROUNDING_MODES),
            ):
                if getattr(self, name).data not in known:
                    raise VerifyException(
                        f"{name} must be one of {', '.join(known)}, "
                        f"got {getattr(self, name).data!r}"
                    )
            try:  # numerics validates the table (segment counts, ranges)
                self.lut_table()
            except (ValueError, OverflowError) as e:
                raise VerifyException(f"segmented table: {e}") from None
            return
        if any(present):
            raise VerifyException("a direct table takes no segment fields")
        if x != si(8):
            raise VerifyException(f"input must be si8, got {x}")
        table = self.table.get_type()
        assert isinstance(table, TensorType)
        if tuple(table.get_shape()) != (256,):
            raise VerifyException(
                f"table has shape {tuple(table.get_shape())}, expected (256,)"
            )
        if table.element_type not in (si(8), si(16)):
            raise VerifyException(
                f"table must be si8 or si16, got {table.element_type}"
            )
        if out.element_type != table.element_type:
            raise VerifyException("result must have the input shape and the table type")


# ------------------------------------------------------------------ image input


@irdl_op_definition
class ImageConvertOp(IRDLOperation):
    """Camera planes (NHWC, ui8) to the centred image the NPU's input unit gives.

    ``mode = "nv12"``: ``y`` is ``N x H x W x 1``, ``uv`` the interleaved chroma
    plane ``N x H/2 x W/2 x 2``; the result is ``N x H x W x 3`` si8 YUV444,
    ``v - 128`` with each chroma sample repeated over its 2 x 2 pixels
    (``runtime/yuv.py``). ``mode = "gray"``: ``y`` alone, result ``y - 128``.

    ``%yuv = hbir.image_convert %y, %uv {mode = "nv12"} : (tensor<1x4x4x1xui8>,
    tensor<1x2x2x2xui8>) -> tensor<1x4x4x3xsi8>``
    """

    name = "hbir.image_convert"

    y = operand_def(AnyTensorTypeConstr)
    uv = opt_operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    mode = prop_def(StringAttr, default_value=StringAttr("nv12"))

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$y (`,` $uv^)? attr-dict `:` functional-type(operands, results)"

    MODES: ClassVar = ("nv12", "gray")

    def __init__(self, y: Value, uv: Value | None = None):
        n, h, w, _ = shape_of(y)
        mode, channels = ("gray", 1) if uv is None else ("nv12", 3)
        super().__init__(
            operands=[y, [] if uv is None else [uv]],
            result_types=[TensorType(si(8), [n, h, w, channels])],
            properties={"mode": StringAttr(mode)},
        )

    def verify_(self) -> None:
        mode = self.mode.data
        if mode not in self.MODES:
            raise VerifyException(f"mode must be one of {self.MODES}, got {mode!r}")
        y, channels = _verify_planes(mode, self.y, self.uv)
        want = TensorType(si(8), [y[0], y[1], y[2], channels])
        if tensor_type(self.output) != want:
            raise VerifyException(f"result must be {want}")


def _verify_planes(mode: str, y: Value, uv: Value | None) -> tuple[tuple, int]:
    """The NHWC ui8 camera planes of ``mode``: (the Y plane's shape, the image's
    channels)."""
    if (mode == "nv12") != (uv is not None):
        raise VerifyException(
            "nv12 takes y and uv planes" if mode == "nv12" else "gray takes y only"
        )
    u8 = IntegerType(8, Signedness.UNSIGNED)
    for name, v in (("y", y), ("uv", uv)):
        if v is not None and tensor_type(v).element_type != u8:
            raise VerifyException(
                f"{name} must be ui8, got {tensor_type(v).element_type}"
            )
    ys = shape_of(y)
    if len(ys) != 4 or ys[3] != 1:
        raise VerifyException(f"y has shape {ys}, expected N x H x W x 1 (NHWC)")
    if uv is None:
        return ys, 1
    if ys[1] % 2 or ys[2] % 2:
        raise VerifyException(f"y has shape {ys}: nv12 needs even H and W")
    uvs = shape_of(uv)
    if uvs != (ys[0], ys[1] // 2, ys[2] // 2, 2):
        raise VerifyException(
            f"uv has shape {uvs}, expected {(ys[0], ys[1] // 2, ys[2] // 2, 2)}"
        )
    return ys, 3


@irdl_op_definition
class RoiResizeOp(IRDLOperation):
    """A region of a camera frame, resized to the model's input (the resizer).

    ``y`` / ``uv`` are the frame's NV12 planes as for ``image_convert`` (``gray``:
    ``y`` alone), ``roi`` an si32 ``N x 4`` of (left, top, right, bottom), right
    and bottom inclusive, read at run time. Each image's roi, as YUV444, is padded
    where it leaves the frame (``expansion_mode``: ``constant`` with the bytes
    ``pad_value`` (Y, UV), or ``border``), resized to ``size`` with the NPU's
    bilinear taps or nearest (``interpolate_mode``), each sum rounded half to
    even, and centred: an si8 ``N x H x W x 3`` (or 1) image
    (``numerics.roi_resize``, ``yuv.roi_resize``).

    ``%img = hbir.roi_resize %y, %uv roi(%roi : tensor<1x4xsi32>) {size =
    array<i64: 4, 4>, mode = "nv12", interpolate_mode = "bilinear",
    expansion_mode = "constant", pad_value = array<i64: 0, -128>} :
    tensor<1x8x8x1xui8>, tensor<1x4x4x2xui8> -> tensor<1x4x4x3xsi8>``
    """

    name = "hbir.roi_resize"

    y = operand_def(AnyTensorTypeConstr)
    uv = opt_operand_def(AnyTensorTypeConstr)
    roi = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    size = prop_def(DenseArrayBase[I64])
    mode = prop_def(StringAttr, default_value=StringAttr("nv12"))
    interpolate_mode = prop_def(StringAttr, default_value=StringAttr("bilinear"))
    expansion_mode = prop_def(StringAttr, default_value=StringAttr("constant"))
    pad_value = prop_def(DenseArrayBase[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    assembly_format = (
        "$y (`,` $uv^)? `roi` `(` $roi `:` type($roi) `)` attr-dict `:` "
        "type($y) (`,` type($uv)^)? `->` type($output)"
    )

    MODES: ClassVar = ("nv12", "gray")
    INTERPOLATIONS: ClassVar = ("bilinear", "nearest")  # numerics.ROI_INTERPOLATIONS
    EXPANSIONS: ClassVar = ("constant", "border")  # numerics.ROI_EXPANSIONS

    def __init__(
        self,
        y: Value,
        uv: Value | None,
        roi: Value,
        size: Sequence[int],
        interpolate_mode: str = "bilinear",
        expansion_mode: str = "constant",
        pad_value: Sequence[int] = (0, -128),
    ):
        n = shape_of(y)[0]
        mode, channels = ("gray", 1) if uv is None else ("nv12", 3)
        super().__init__(
            operands=[y, [] if uv is None else [uv], roi],
            result_types=[TensorType(si(8), [n, *size, channels])],
            properties={
                "size": ints(size),
                "mode": StringAttr(mode),
                "interpolate_mode": StringAttr(interpolate_mode),
                "expansion_mode": StringAttr(expansion_mode),
                "pad_value": ints(pad_value),
            },
        )

    def verify_(self) -> None:
        mode = self.mode.data
        for what, value, legal in (
            ("mode", mode, self.MODES),
            ("interpolate_mode", self.interpolate_mode.data, self.INTERPOLATIONS),
            ("expansion_mode", self.expansion_mode.data, self.EXPANSIONS),
        ):
            if value not in legal:
                raise VerifyException(f"{what} must be one of {legal}, got {value!r}")
        y, channels = _verify_planes(mode, self.y, self.uv)
        roi = tensor_type(self.roi)
        if roi.element_type != si(32) or tuple(roi.get_shape()) != (y[0], 4):
            raise VerifyException(
                f"roi must be tensor<{y[0]}x4xsi32> (left, top, right, bottom per "
                f"image), got {roi}"
            )
        size = tuple(self.size.get_values())
        if len(size) != 2 or min(size) < 1:
            raise VerifyException(f"size must be two positive sizes, got {size}")
        pad = tuple(self.pad_value.get_values())
        if len(pad) != (1 if mode == "gray" else 2) or not all(
            -128 <= v <= 255 for v in pad
        ):
            raise VerifyException(
                f"pad_value must be {'(Y,)' if mode == 'gray' else '(Y, UV)'} "
                f"bytes in [-128, 255], got {pad}"
            )
        want = TensorType(si(8), [y[0], *size, channels])
        if tensor_type(self.output) != want:
            raise VerifyException(f"result must be {want}")


@irdl_op_definition
class ImagePreprocessOp(IRDLOperation):
    """Colour conversion and normalisation of an NHWC camera image.

    The input is si8 (centred, ``v = x + 128``) or ui8 (``v = x``). ``csc`` converts
    ``v``: ``"none"``; ``"yuv_bt601_{full,video}_to_{rgb,bgr}"``, the integer BT.601
    decoding; ``"bgr_to_rgb"`` / ``"rgb_to_bgr"``, a channel swap. Float result:
    ``(fl32(v) / divisor - mean[c]) / std[c]`` in float32. Integer result (after
    convert): ``table[c, v]``, a ``C x 256`` table of the codes
    ``quantize((v / divisor - mean[c]) / std[c])`` (``runtime/yuv.py``).

    ``%img = hbir.image_preprocess %yuv {csc = "yuv_bt601_full_to_rgb", divisor =
    255 : i64, mean = array<f64: 0.485, 0.456, 0.406>, std = array<f64: 0.229,
    0.224, 0.225>} : tensor<1x4x4x3xsi8> -> tensor<1x4x4x3xf32>``
    """

    name = "hbir.image_preprocess"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    csc = prop_def(StringAttr, default_value=StringAttr("none"))
    divisor = prop_def(IntegerAttr[I64], default_value=i64_attr(1))
    mean = prop_def(DenseArrayBase)
    std = prop_def(DenseArrayBase)
    table = opt_prop_def(DenseIntOrFPElementsAttr)

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = MAP_FORMAT

    # runtime/yuv.py's CSC_MODES (a test checks they agree)
    CSC_MODES: ClassVar = (
        "none",
        "yuv_bt601_full_to_rgb",
        "yuv_bt601_full_to_bgr",
        "yuv_bt601_video_to_rgb",
        "yuv_bt601_video_to_bgr",
        "bgr_to_rgb",
        "rgb_to_bgr",
    )

    def __init__(
        self,
        input: Value,
        mean: Sequence[float],
        std: Sequence[float],
        csc: str = "none",
        divisor: int = 1,
        element_type: Attribute | None = None,
        table: DenseIntOrFPElementsAttr | None = None,
    ):
        from xdsl.dialects.builtin import f32

        properties = {
            "csc": StringAttr(csc),
            "divisor": i64_attr(divisor),
            "mean": DenseArrayBase.from_list(f64, list(mean)),
            "std": DenseArrayBase.from_list(f64, list(std)),
        }
        if table is not None:
            properties["table"] = table
        super().__init__(
            operands=[input],
            result_types=[with_shape(input, shape_of(input), element_type or f32)],
            properties=properties,
        )

    def verify_(self) -> None:
        if self.csc.data not in self.CSC_MODES:
            raise VerifyException(
                f"csc must be one of {self.CSC_MODES}, got {self.csc.data!r}"
            )
        if self.divisor.value.data <= 0:
            raise VerifyException(
                f"divisor must be positive, got {self.divisor.value.data}"
            )
        x = shape_of(self.input)
        channels = (1, 3) if self.csc.data == "none" else (3,)
        if len(x) != 4 or x[3] not in channels:
            want = " or ".join(map(str, channels))
            raise VerifyException(
                f"input has shape {x}, expected N x H x W x {want} (NHWC)"
            )
        if tensor_type(self.input).element_type not in (
            si(8),
            IntegerType(8, Signedness.UNSIGNED),
        ):
            raise VerifyException("input must be si8 (centred) or ui8")
        for name, attr in (("mean", self.mean), ("std", self.std)):
            if len(attr) != x[3]:
                raise VerifyException(f"{name} needs {x[3]} values, got {len(attr)}")
        if any(s == 0 for s in self.std.get_values()):
            raise VerifyException("std values must be nonzero")
        if shape_of(self.output) != x:
            raise VerifyException("result must have the input shape")
        if is_float(self.output.type):
            if self.table is not None:
                raise VerifyException("a float result takes no table")
            return
        out = tensor_type(self.output).element_type
        if out not in (si(8), si(16)):
            raise VerifyException(f"result must be float, si8 or si16, got {out}")
        if self.table is None:
            raise VerifyException("an integer result needs its C x 256 code table")
        table = self.table.get_type()
        if tuple(table.get_shape()) != (x[3], 256) or table.element_type != out:
            raise VerifyException(
                f"table must be tensor<{x[3]}x256x{out}>, got {table}"
            )


HBIR = Dialect(
    "hbir",
    [
        ConstantOp,
        NegOp,
        AbsOp,
        ReluOp,
        ClipOp,
        SigmoidOp,
        TanhOp,
        ExpOp,
        LogOp,
        SqrtOp,
        RsqrtOp,
        ReciprocalOp,
        SinOp,
        CosOp,
        GeluOp,
        SiluOp,
        HardsigmoidOp,
        HardswishOp,
        LeakyReluOp,
        EluOp,
        CeluOp,
        SoftplusOp,
        SeluOp,
        MishOp,
        ErfOp,
        LogSigmoidOp,
        SoftsignOp,
        TanhshrinkOp,
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        MaximumOp,
        MinimumOp,
        FloorDivideOp,
        RemainderOp,
        SoftmaxOp,
        LayerNormOp,
        ReduceSumOp,
        ReduceMeanOp,
        ReduceMaxOp,
        ReduceMinOp,
        TopkOp,
        ArgmaxOp,
        ArgminOp,
        GatherOp,
        IndexSelectOp,
        IndexCopyOp,
        CompareOp,
        SelectOp,
        Conv2dOp,
        ConvTranspose2dOp,
        LinearOp,
        MatmulOp,
        MaxPool2dOp,
        MaxPool2dIndicesOp,
        MaxUnpool2dOp,
        AvgPool2dOp,
        GlobalAvgPool2dOp,
        Resize2dOp,
        GridSampleOp,
        ConcatOp,
        SliceOp,
        SplitOp,
        ReshapeOp,
        TransposeOp,
        FlipOp,
        PadOp,
        CastOp,
        LutOp,
        ImageConvertOp,
        RoiResizeOp,
        ImagePreprocessOp,
    ],
    [],
)


def ops_lowered_as(lowering: str) -> tuple[type[IRDLOperation], ...]:
    """The hbir op classes that the op table lowers as ``lowering`` (``"gemm"``...)."""
    names = op_table.ops_lowered_as(lowering)
    return tuple(cls for cls in HBIR.operations if cls.name in names)
