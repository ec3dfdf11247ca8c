"""The ``npu`` dialect: the program the NPU runs, after the compile passes.

``quantized.bc`` (hbir / qnt, NCHW, one op per arithmetic step) is lowered by the
``compile`` phase (``passes/npu_*.py``) into these ops, so that every decision a
real NPU compiler makes prints as IR before bytecode is emitted:

* **layout**: spatial ops (``npu.conv``, ``npu.conv_transpose``, ``npu.pool``,
  ``npu.resize``) take NHWC activations and OHWI weights; layout-free ops
  (``npu.eltwise``, ``npu.rescale``, ``npu.lut``, ``npu.reduce``, ...) follow their
  operands; ``npu.transpose`` is explicit and ``npu-layout`` cancels pairs of it.
  Channel alignment is a storage property: buffers are sized with the channel
  count rounded up to the march's ``channel_align`` (``aligned_bytes``); values
  keep their logical shapes.
* **fusion**: compute ops carry their post-process (``POST`` properties below):
  a left shift of the accumulator (``pre_shift``), an si32 ``bias`` operand, one
  requantization (``multiplier`` / ``shift`` / ``rounding``) and a ``clip`` (a
  folded relu / clip). ``npu.eltwise`` also rescales its two inputs
  (``in_multiplier`` / ``in_shift``).
* **tiles, schedule, buffers**: ``npu-tile`` splits ops into tiles (attribute
  ``npu.tile = array<i64: index, count>``; ``npu.slice`` with halo in,
  ``npu.concat`` out), ``npu-schedule`` inserts ``npu.dma_load`` /
  ``npu.dma_store`` and records each op's unit and start / end cycle
  (``npu.unit``, ``npu.start``, ``npu.end``), ``npu-plan-memory`` gives every value
  a buffer (``npu.buffer = {space = "ddr" | "sram", offset, size}``) and the module
  its peaks (``npu.ddr_peak_bytes``, ``npu.sram_peak_bytes``, ...).
* **CPU islands**: ``npu.cpu_call`` holds the float ops convert left on the CPU
  (and the quantize / dequantize at the model's edges) as a nested region of
  ordinary hbir / qnt ops.

The integer semantics of every op are those of the hbir / qnt ops it came from
(``runtime/numerics.py``, ``runtime/integer_ops.py``); ``runtime/npu_kernels.py``
executes them, so the program after every compile pass can be run and compared
bit for bit with ``quantized.bc``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    AnyTensorTypeConstr,
    BoolAttr,
    DenseArrayBase,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from hbir.dialects.hbir import (
    CompareOperands,
    ConvOperands,
    ConvTransposeOperands,
    IndexCopyOperands,
    IndexReadOperands,
    LutProperties,
    MaxUnpoolOperands,
    SelectOperands,
    TensorConstant,
    UnaryOp,
    Value,
    i64_attr,
    ints,
    shape_of,
    tensor_type,
)

# Attributes the compile passes write (discardable: printing keeps them).
ATTR_TILE = "npu.tile"  # array<i64: index, count>
ATTR_UNIT = "npu.unit"  # "tae" | "vae" | "aae" | "dte" | "dma" | "cpu"
ATTR_START = "npu.start"  # cycle the op starts (npu-schedule's estimate)
ATTR_END = "npu.end"
ATTR_BUFFER = "npu.buffer"  # {space, offset, size}
# Debug origin (npu-lower stamps them; the passes after it carry them): the
# quantized.bc op IDs (``dialects/op_ids.py``) an op computes (part of), and the
# op whose whole result the op's first result is, in the layout
# ``np.transpose(result, npu.value_perm)`` (no ``npu.value_perm``: the same).
ATTR_ORIGIN = "npu.origin"  # array<i64: id, ...>
ATTR_VALUE_OF = "npu.value_of"  # id : i64
ATTR_VALUE_PERM = "npu.value_perm"  # array<i64: ...>
# Module attributes.
ATTR_SRAM_LIMIT = "npu.sram_limit"  # bytes; set by npu-tile, checked by verify
ATTR_CHANNEL_ALIGN = "npu.channel_align"
ATTR_LAYOUT = "npu.layout"


def _values(attr: DenseArrayBase | None) -> tuple[int, ...]:
    return () if attr is None else tuple(attr.get_values())


# ------------------------------------------------------------------ debug origin


def origin(op: Operation) -> tuple[int, ...]:
    """The quantized.bc op IDs ``op`` computes (part of); () if unknown."""
    attr = op.attributes.get(ATTR_ORIGIN)
    return _values(attr) if isinstance(attr, DenseArrayBase) else ()


def value_of(op: Operation) -> tuple[int, tuple[int, ...] | None] | None:
    """(id, perm): ``np.transpose(op's first result, perm)`` is the whole result
    of quantized.bc's op ``id`` (perm None: as it is); None if it is no such value."""
    attr = op.attributes.get(ATTR_VALUE_OF)
    if not isinstance(attr, IntegerAttr):
        return None
    perm = op.attributes.get(ATTR_VALUE_PERM)
    return attr.value.data, _values(perm) if isinstance(perm, DenseArrayBase) else None


def set_origin(op: Operation, ids: Sequence[int]) -> None:
    if ids:
        op.attributes[ATTR_ORIGIN] = ints(sorted(set(ids)))


def set_value_of(op: Operation, found: tuple[int, Sequence[int] | None] | None) -> None:
    """Record (or, with None, drop) which quantized.bc value ``op`` computes; an
    identity perm is not recorded."""
    op.attributes.pop(ATTR_VALUE_OF, None)
    op.attributes.pop(ATTR_VALUE_PERM, None)
    if found is None:
        return
    op_id, perm = found
    op.attributes[ATTR_VALUE_OF] = i64_attr(op_id)
    if perm is not None and tuple(perm) != tuple(range(len(perm))):
        op.attributes[ATTR_VALUE_PERM] = ints(perm)


def permuted_value_of(op: Operation, perm: Sequence[int]) -> tuple | None:
    """``op``'s value, seen through a result ``r2`` with ``r = np.transpose(r2,
    perm)`` (``r`` being ``op``'s first result)."""
    found = value_of(op)
    if found is None:
        return None
    op_id, q = found
    q = tuple(range(len(perm))) if q is None else q
    return op_id, tuple(perm[i] for i in q)


def absorb(new: Operation, replaced: Operation, absorbed: Sequence[Operation]) -> None:
    """``new`` computes what ``absorbed`` did and gives ``replaced``'s result:
    the union of their origins, ``replaced``'s value."""
    set_origin(new, [i for o in (*absorbed, replaced) for i in origin(o)])
    set_value_of(new, value_of(replaced))


# ------------------------------------------------------------------ post-process


# ------------------------------------------------------------------ the opcode spec


def _array(attr: DenseArrayBase | None):
    """A ``buffer``-kind field's value: an int64 array, or None."""
    if attr is None:
        return None
    import numpy as np  # here: loading the dialect does not load numpy

    return np.asarray(attr.get_values(), np.int64)


def _in_rank(d: int, rank: int) -> int:
    """A dim counted from the front (a dim out of range stays out of range, for
    the spec to refuse)."""
    return d % rank if -rank <= d < rank else d


def _value(v: SSAValue) -> tuple[tuple[int, ...], str]:
    t = v.type
    if not isinstance(t, TensorType):
        raise VerifyException(f"expected a tensor, got {t}")
    return tuple(t.get_shape()), _dtype_name(t.element_type)


@functools.cache
def _dtype_name(element: Attribute) -> str:
    from hbir.dialects.hbir import numpy_dtype

    return numpy_dtype(element).name


class OpcodeOp(IRDLOperation):
    """An npu op that is one NPU instruction. Its opcode's spec in
    ``runtime/hbm_opcodes.py`` (operands, fields, dtype and shape rules) is its
    verifier: ``opcode_fields()`` reads the op as the instruction's fields (the
    dialect's defaults resolved: what the emitter writes and the kernels read),
    and the op verifies exactly when that instruction would load."""

    def mnemonic(self) -> str:
        """The opcode's name: the op's, but for a table lookup's two forms."""
        return self.name.removeprefix("npu.")

    def opcode_fields(self) -> tuple[str, dict]:
        """(mnemonic, fields); an instruction without fields has none."""
        return self.mnemonic(), {}

    def verify_(self) -> None:
        from hbir.runtime.hbm_opcodes import check_values

        try:
            name, fields = self.opcode_fields()
            operands = [_value(v) for v in self.operands]
            results = [_value(v) for v in self.results]
        except (IndexError, TypeError, ValueError, ZeroDivisionError) as e:
            raise VerifyException(f"malformed {self.name}: {e}") from None
        problem = check_values(name, operands, results, fields)
        if problem is not None:
            raise VerifyException(problem)


class PostProcessOp(OpcodeOp):
    """A compute op with its requantization fused in (the NPU's post-process).

    From the op's exact result ``acc`` (saturated to ``acc_bits``: the width of
    the op's own result before fusion; without it si32 when a post-process is
    present, else the result width): ``pre_shift`` — ``acc = sat32(acc << pre_shift)``;
    ``bias`` — ``acc = sat32(acc + bias[c])`` (without ``pre_shift`` the bias is
    added inside the accumulator, before its saturation); ``multiplier`` / ``shift`` —
    ``y = clamp(round(acc * m[c] / 2**s[c]), lo, hi)`` with ``[lo, hi]`` the result
    type's range narrowed by ``clip``; without a multiplier ``y`` is ``acc``
    saturated to the result type and clipped. ``c`` runs over the channel axis
    (``channel_axis()``).
    """

    acc_bits = opt_prop_def(IntegerAttr[I64])
    pre_shift = opt_prop_def(IntegerAttr[I64])
    multiplier = opt_prop_def(DenseArrayBase[I64])
    shift = opt_prop_def(DenseArrayBase[I64])
    clip = opt_prop_def(DenseArrayBase[I64])
    rounding = prop_def(StringAttr, default_value=StringAttr("half_even"))

    irdl_options = (ParsePropInAttrDict(),)

    def channel_axis(self) -> int:
        return -1

    def has_post(self) -> bool:
        return self.multiplier is not None

    def post_fields(self) -> dict:
        """The post-process as the opcode spells it (``hbm_opcodes.POST``): the
        defaults resolved, ``clip`` the op's or else the result type's range."""
        from hbir.runtime.hbm_opcodes import NONE

        element = tensor_type(self.results[0]).element_type
        # (a result that is no integer: the spec refuses it, whatever the width)
        width = element.width.data if isinstance(element, IntegerType) else 32
        if self.acc_bits is not None:
            acc = self.acc_bits.value.data
        elif self.pre_shift is not None or self.multiplier is not None:
            acc = 32
        else:
            acc = width
        # always given: the result range unless the op narrows it
        clip = (-(1 << (width - 1)), (1 << (width - 1)) - 1)
        if self.clip is not None:
            clip = _values(self.clip)
        rank = len(shape_of(self.results[0]))
        return {
            "acc_bits": acc,
            "pre_shift": NONE if self.pre_shift is None else self.pre_shift.value.data,
            "multiplier": _array(self.multiplier),
            "shift": _array(self.shift),
            "rounding": self.rounding.data,
            "clip": clip,
            "axis": _in_rank(self.channel_axis(), max(rank, 1)),
        }


def post_properties(
    multiplier: Sequence[int] | None = None,
    shift: Sequence[int] | None = None,
    clip: Sequence[int] | None = None,
    rounding: str = "half_even",
    pre_shift: int | None = None,
) -> dict[str, Attribute]:
    props: dict[str, Attribute] = {"rounding": StringAttr(rounding)}
    if multiplier is not None:
        props["multiplier"] = ints(multiplier)
        props["shift"] = ints(shift or [])
    if clip is not None:
        props["clip"] = ints(clip)
    if pre_shift is not None:
        props["pre_shift"] = i64_attr(pre_shift)
    return props


_GEMM_FORMAT = (
    "$input `,` $weight (`bias` `(` $bias^ `)`)? attr-dict `:` "
    "functional-type(operands, results)"
)
_MAP_FORMAT = "$input attr-dict `:` type($input) `->` type($output)"


class MapOp(OpcodeOp):
    """An instruction of one operand and one result (its properties its own)."""

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = _MAP_FORMAT


# ------------------------------------------------------------------ constant


@irdl_op_definition
class ConstantOp(TensorConstant):
    """A constant held in DDR (weights, biases, tables).

    ``%w = npu.constant dense<[1, 2]> : tensor<2xsi8>``
    """

    name = "npu.constant"


# ------------------------------------------------------------------ TAE (gemm)


@irdl_op_definition
class ConvOp(ConvOperands, PostProcessOp):
    """2-D convolution on NHWC codes with an OHWI weight (TAE), post-process fused.

    The exact accumulator (``integer_ops.conv2d_acc``: int64 sums saturated to
    si32) then the post-process; ``padding`` is ``[top, left]`` (symmetric, as the
    hbir op) or ``[top, left, bottom, right]`` (a tile's own padding).

    ``%y = npu.conv %x, %w bias(%b) {stride = array<i64: 1, 1>, padding =
    array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64, pre_shift =
    11 : i64, multiplier = array<i64: 1382974125>, shift = array<i64: 51>, clip =
    array<i64: 0, 127>} : (tensor<2x16x16x3xsi8>, tensor<8x3x3x3xsi8>,
    tensor<8xsi32>) -> tensor<2x16x16x8xsi8>``
    """

    name = "npu.conv"

    traits = traits_def(Pure())
    assembly_format = _GEMM_FORMAT

    def pads(self) -> tuple[int, int, int, int]:
        """``(top, left, bottom, right)``."""
        p = _values(self.padding)
        return (p[0], p[1], p[0], p[1]) if len(p) == 2 else p  # type: ignore

    def opcode_fields(self) -> tuple[str, dict]:
        return "conv", {
            "stride": _values(self.stride),
            "padding": self.pads(),
            "dilation": _values(self.dilation),
            "groups": self.groups.value.data,
        } | self.post_fields()


@irdl_op_definition
class ConvTransposeOp(ConvTransposeOperands, PostProcessOp):
    """Transposed 2-D convolution on NHWC codes (TAE), post-process fused.

    The weight is ``[C_in, KH, KW, C_out / groups]`` (torch's
    ``[C_in, C_out / groups, KH, KW]`` with the channels last).

    ``%y = npu.conv_transpose %x, %w {stride = array<i64: 2, 2>, padding =
    array<i64: 0, 0>, output_padding = array<i64: 0, 0>, dilation = array<i64: 1,
    1>, groups = 1 : i64} : (tensor<1x4x4x16xsi8>, tensor<16x2x2x4xsi8>) ->
    tensor<1x8x8x4xsi32>``
    """

    name = "npu.conv_transpose"

    traits = traits_def(Pure())
    assembly_format = _GEMM_FORMAT

    def opcode_fields(self) -> tuple[str, dict]:
        return "conv_transpose", {
            "stride": _values(self.stride),
            "padding": _values(self.padding),
            "output_padding": _values(self.output_padding),
            "dilation": _values(self.dilation),
            "groups": self.groups.value.data,
        } | self.post_fields()


@irdl_op_definition
class GemmOp(PostProcessOp):
    """Batched matrix product on codes (TAE), post-process fused.

    ``transpose_b``: ``y = a @ b^T`` with ``b`` of shape ``[N, K]`` (a linear
    layer); otherwise ``y = a @ b`` (batched, broadcast over leading dims).

    ``%y = npu.gemm %a, %b bias(%c) {transpose_b = true, multiplier = array<i64:
    1764998857>, shift = array<i64: 50>} : (tensor<2x16xsi8>, tensor<10x16xsi8>,
    tensor<10xsi32>) -> tensor<2x10xsi8>``
    """

    name = "npu.gemm"

    input = operand_def(AnyTensorTypeConstr)
    weight = operand_def(AnyTensorTypeConstr)
    bias = opt_operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    transpose_b = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))

    traits = traits_def(Pure())
    assembly_format = _GEMM_FORMAT

    def opcode_fields(self) -> tuple[str, dict]:
        fields = {"transpose_b": bool(self.transpose_b.value.data)}
        return "gemm", fields | self.post_fields()


# ------------------------------------------------------------------ VAE (vector)


@irdl_op_definition
class EltwiseOp(PostProcessOp):
    """Elementwise binary op on codes (VAE), with input rescales and post-process.

    Each operand first goes through ``requantize(x, in_multiplier[i],
    in_shift[i])`` into si32 (when ``in_multiplier`` is present), then ``kind`` is
    computed exactly (int64, numpy broadcasting) and saturated to si32, then the
    post-process.

    ``%y = npu.eltwise %a, %b {kind = "add", in_multiplier = array<i64:
    1983992576, 1086021120>, in_shift = array<i64: 12, 9>, multiplier = array<i64:
    1100244736>, shift = array<i64: 51>} : (tensor<2x8x8x8xsi8>,
    tensor<2x8x8x8xsi8>) -> tensor<2x8x8x8xsi8>``
    """

    name = "npu.eltwise"

    lhs = operand_def(AnyTensorTypeConstr)
    rhs = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    kind = prop_def(StringAttr)
    in_multiplier = opt_prop_def(DenseArrayBase[I64])
    in_shift = opt_prop_def(DenseArrayBase[I64])
    axis = opt_prop_def(IntegerAttr[I64])  # channel axis of per-channel params

    traits = traits_def(Pure())
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def channel_axis(self) -> int:
        return -1 if self.axis is None else self.axis.value.data

    def opcode_fields(self) -> tuple[str, dict]:
        return "eltwise", {
            "kind": self.kind.data,
            "in_multiplier": _values(self.in_multiplier),
            "in_shift": _values(self.in_shift),
        } | self.post_fields()


@irdl_op_definition
class RescaleOp(PostProcessOp):
    """Requantization alone (VAE): the post-process applied to the input codes.

    ``%y = npu.rescale %x {multiplier = array<i64: 1073741824>, shift = array<i64:
    30>, clip = array<i64: 0, 127>} : tensor<2x8x8x8xsi8> -> tensor<2x8x8x8xsi8>``
    """

    name = "npu.rescale"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    axis = opt_prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    assembly_format = _MAP_FORMAT

    def channel_axis(self) -> int:
        return -1 if self.axis is None else self.axis.value.data

    def opcode_fields(self) -> tuple[str, dict]:
        return "rescale", self.post_fields()


@irdl_op_definition
class CastOp(MapOp):
    """Integer widening / narrowing with saturation (VAE).

    ``%y = npu.cast %x : tensor<2x6x8xsi8> -> tensor<2x6x8xsi32>``
    """

    name = "npu.cast"


@irdl_op_definition
class Fp16MapOp(MapOp):
    """An fp16 op of one operand (VAE; the float16 qconfig on nash-p / nash-h):
    ``function`` (sigmoid, tanh, exp, silu, gelu, gelu_tanh) computed in float32
    on the widened binary16 input, the result rounded once to binary16 (half to
    even, overflow to inf).

    ``%y = npu.fp16_map %x {function = "sigmoid"} : tensor<4xf16> -> tensor<4xf16>``
    """

    name = "npu.fp16_map"

    function = prop_def(StringAttr)

    def opcode_fields(self) -> tuple[str, dict]:
        return "fp16_map", {"function": self.function.data}


@irdl_op_definition
class LutOp(LutProperties, MapOp):
    """Table lookup on codes (VAE): the properties and semantics of ``hbir.lut``
    (an int8 ``table``, or the segmented table's fields).

    ``%y = npu.lut %x {table = dense<...> : tensor<256xsi8>} : tensor<4xsi8> ->
    tensor<4xsi8>``
    """

    name = "npu.lut"

    def mnemonic(self) -> str:
        return "lut" if self.table is not None else "lut_segmented"

    def opcode_fields(self) -> tuple[str, dict]:
        if self.table is not None:
            from hbir.dialects.hbir import dense_array

            return self.mnemonic(), {"table": dense_array(self.table).astype("int64")}
        names = ("function", "kind", "rounding", "in_scale", "out_scale")
        missing = [n for n in (*names, *self._INT_FIELDS) if getattr(self, n) is None]
        if missing:
            raise ValueError(f"a segmented table needs {missing}")
        f = {
            "function": self.function.data,
            "kind": self.kind.data,
            "rounding": self.rounding.data,
            "in_scale": float(self.in_scale.value.data),
            "out_scale": float(self.out_scale.value.data),
        }
        for name in self._INT_FIELDS:
            f[name] = getattr(self, name).value.data
        for name in self._ARRAY_FIELDS:
            f[name] = _array(getattr(self, name))
        return self.mnemonic(), f


@irdl_op_definition
class ReduceOp(PostProcessOp):
    """Sum / max / mean over ``dims`` (VAE; over H and W of NHWC: a global pool).

    sum: exact int64, saturated to si32; max: exact; mean: the exact sum divided
    once, half-to-even (``numerics.divide_round``). Then the post-process.

    ``%y = npu.reduce %x {kind = "sum", dims = array<i64: 1, 2>, keepdim = true,
    multiplier = array<i64: 1148498319>, shift = array<i64: 33>} :
    tensor<2x4x4x16xsi8> -> tensor<2x1x1x16xsi8>``
    """

    name = "npu.reduce"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    kind = prop_def(StringAttr)
    dims = prop_def(DenseArrayBase[I64])
    keepdim = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    axis = opt_prop_def(IntegerAttr[I64])  # channel axis of per-channel params

    def channel_axis(self) -> int:
        return -1 if self.axis is None else self.axis.value.data

    traits = traits_def(Pure())
    assembly_format = _MAP_FORMAT

    def opcode_fields(self) -> tuple[str, dict]:
        rank = len(shape_of(self.input))
        return "reduce", {
            "kind": self.kind.data,
            "dims": tuple(_in_rank(d, rank) for d in _values(self.dims)),
            "keepdim": bool(self.keepdim.value.data),
        } | self.post_fields()


# ------------------------------------------------------------------ AAE (pool, resize)


@irdl_op_definition
class PoolOp(PostProcessOp):
    """Windowed max / average pooling on NHWC codes (AAE).

    max: exact; avg: the exact window sum divided once by the window count,
    half-to-even (torch's count rules: ``count_include_pad``, ceil_mode).
    ``padding`` is ``[top, left]`` or ``[top, left, bottom, right]``.

    ``%y = npu.pool %x {kind = "max", kernel = array<i64: 2, 2>, stride =
    array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} :
    tensor<2x16x16x8xsi8> -> tensor<2x8x8x8xsi8>``
    """

    name = "npu.pool"

    input = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    kind = prop_def(StringAttr)
    kernel = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    dilation = prop_def(DenseArrayBase[I64])
    ceil_mode = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    count_include_pad = prop_def(BoolAttr, default_value=BoolAttr.from_bool(True))

    traits = traits_def(Pure())
    assembly_format = _MAP_FORMAT

    def opcode_fields(self) -> tuple[str, dict]:
        p = _values(self.padding)
        return "pool", {
            "kind": self.kind.data,
            "kernel": _values(self.kernel),
            "stride": _values(self.stride),
            "padding": (p[0], p[1], p[0], p[1]) if len(p) == 2 else p,
            "dilation": _values(self.dilation),
            "ceil_mode": bool(self.ceil_mode.value.data),
            "count_include_pad": bool(self.count_include_pad.value.data),
        } | self.post_fields()


@irdl_op_definition
class ResizeOp(MapOp):
    """Nearest / bilinear / bicubic resize of NHWC codes (AAE), as
    ``hbir.resize2d``.

    ``%y = npu.resize %x {size = array<i64: 8, 8>, mode = "nearest"} :
    tensor<1x4x4x8xsi8> -> tensor<1x8x8x8xsi8>``
    """

    name = "npu.resize"
    size = prop_def(DenseArrayBase[I64])
    mode = prop_def(StringAttr, default_value=StringAttr("nearest"))
    align_corners = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    scale = opt_prop_def(DenseArrayBase[Float64Type])
    weight_bits = opt_prop_def(IntegerAttr[I64])

    def opcode_fields(self) -> tuple[str, dict]:
        from hbir.runtime.hbm_opcodes import NONE

        return "resize", {
            "size": _values(self.size),
            "mode": self.mode.data,
            "align_corners": bool(self.align_corners.value.data),
            "scale": () if self.scale is None else tuple(self.scale.get_values()),
            "weight_bits": NONE
            if self.weight_bits is None
            else self.weight_bits.value.data,
        }


@irdl_op_definition
class GridSampleOp(OpcodeOp):
    """``F.grid_sample`` on NHWC codes (AAE) at a grid of codes (N x Ho x Wo x 2,
    normalised (x, y) in units of ``grid_scale``): the exact int32 sums of the NPU's
    bilinear weights (``numerics.grid_sample_sum``, units of 2**-14).

    ``%y = npu.grid_sample %x, %g {mode = "bilinear", padding_mode = "zeros",
    align_corners = false, grid_scale = 7.8e-03 : f64} : (tensor<1x8x8x4xsi8>,
    tensor<1x5x6x2xsi8>) -> tensor<1x5x6x4xsi32>``
    """

    name = "npu.grid_sample"

    input = operand_def(AnyTensorTypeConstr)
    grid = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    mode = prop_def(StringAttr)
    padding_mode = prop_def(StringAttr)
    align_corners = prop_def(BoolAttr)
    grid_scale = prop_def(FloatAttr)

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $grid attr-dict `:` functional-type(operands, results)"
    )

    def opcode_fields(self) -> tuple[str, dict]:
        from hbir.runtime.numerics import BILINEAR_BITS

        return "grid_sample", {
            "mode": self.mode.data,
            "padding_mode": self.padding_mode.data,
            "align_corners": bool(self.align_corners.value.data),
            "grid_scale": float(self.grid_scale.value.data),
            "weight_bits": BILINEAR_BITS,
        }


# ------------------------------------------------------------------ DTE / views


@irdl_op_definition
class TransposeOp(MapOp):
    """Layout change (DTE): ``y = np.transpose(x, perm)``.

    ``%y = npu.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<2x3x16x16xsi8>
    -> tensor<2x16x16x3xsi8>``
    """

    name = "npu.transpose"
    perm = prop_def(DenseArrayBase[I64])

    def opcode_fields(self) -> tuple[str, dict]:
        return "transpose", {"perm": _values(self.perm)}


@irdl_op_definition
class ReshapeOp(MapOp):
    """A view with another shape (same elements, row-major).

    ``%y = npu.reshape %x : tensor<2x16x1x1xsi8> -> tensor<2x16xsi8>``
    """

    name = "npu.reshape"


@irdl_op_definition
class ConcatOp(OpcodeOp):
    """Concatenation along ``dim``: the inputs written side by side into one buffer.

    ``%y = npu.concat %a, %b {dim = 3 : i64} : (tensor<2x4x4x8xsi8>,
    tensor<2x4x4x8xsi8>) -> tensor<2x4x4x16xsi8>``
    """

    name = "npu.concat"

    inputs = var_operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"

    def opcode_fields(self) -> tuple[str, dict]:
        rank = len(shape_of(self.output))
        return "concat", {"dim": _in_rank(self.dim.value.data, rank)}


@irdl_op_definition
class SliceOp(MapOp):
    """A strided window ``x[begin:end:step]``, as Python slices it: a negative
    step walks backwards (``torch.flip`` of a dim of size n: ``[n-1 : -n-1 : -1]``).

    ``%y = npu.slice %x {begin = array<i64: 0, 0>, end = array<i64: 2, 8>, step =
    array<i64: 1, 1>} : tensor<2x16xsi8> -> tensor<2x8xsi8>``
    """

    name = "npu.slice"
    begin = prop_def(DenseArrayBase[I64])
    end = prop_def(DenseArrayBase[I64])
    step = prop_def(DenseArrayBase[I64])

    def opcode_fields(self) -> tuple[str, dict]:
        return "slice", {
            "begin": _values(self.begin),
            "end": _values(self.end),
            "step": _values(self.step),
        }


# ------------------------------------------------------------------ selection


@irdl_op_definition
class TopkOp(MapOp):
    """The int64 indices of the ``k`` largest (``largest = false``: smallest) codes
    along ``dim``, in order, equal codes by index (``runtime/selection.py``).

    ``%i = npu.topk %x {k = 3 : i64, dim = 1 : i64, largest = true} :
    tensor<2x8xsi8> -> tensor<2x3xi64>``
    """

    name = "npu.topk"
    k = prop_def(IntegerAttr[I64])
    dim = prop_def(IntegerAttr[I64])
    largest = prop_def(BoolAttr, default_value=BoolAttr.from_bool(True))

    def opcode_fields(self) -> tuple[str, dict]:
        rank = len(shape_of(self.input))
        return "topk", {
            "k": self.k.value.data,
            "dim": _in_rank(self.dim.value.data, rank),
            "largest": bool(self.largest.value.data),
        }


@irdl_op_definition
class CompareOp(CompareOperands, OpcodeOp):
    """A bool mask of two integer operands (VAE): as they are, or with ``scales``
    as the float32 values ``fl32(q * s)`` (``runtime/selection.py``).

    ``%m = npu.compare %a, %t {kind = "ge"} : (tensor<1x16xsi8>, tensor<1xsi32>)
    -> tensor<1x16xi1>``
    """

    name = "npu.compare"

    def opcode_fields(self) -> tuple[str, dict]:
        scales = () if self.scales is None else tuple(self.scales.get_values())
        return "compare", {"kind": self.kind.data, "scales": scales}


@irdl_op_definition
class SelectOp(SelectOperands, OpcodeOp):
    """``where(mask, lhs, rhs)`` of codes on one grid (VAE).

    ``%y = npu.select %m, %a, %b : (tensor<2x8xi1>, tensor<2x8xsi8>,
    tensor<1xsi8>) -> tensor<2x8xsi8>``
    """

    name = "npu.select"


class _IndexReadOp(IndexReadOperands, OpcodeOp):
    """Reads ``input`` at an int64 ``index`` along ``dim`` (DTE); an index out of
    range stops the program."""

    def opcode_fields(self) -> tuple[str, dict]:
        rank = len(shape_of(self.input))
        return self.mnemonic(), {"dim": _in_rank(self.dim.value.data, rank)}


@irdl_op_definition
class GatherOp(_IndexReadOp):
    """``torch.gather``: ``y[i][j] = x[i][index[i][j]]`` for ``dim = 1``.

    ``%y = npu.gather %x, %i {dim = 1 : i64} : (tensor<2x8xsi8>, tensor<2x3xi64>)
    -> tensor<2x3xsi8>``
    """

    name = "npu.gather"


@irdl_op_definition
class IndexSelectOp(_IndexReadOp):
    """``torch.index_select``: the slices at a 1-d ``index`` along ``dim``.

    ``%y = npu.index_select %x, %i {dim = 0 : i64} : (tensor<8x4xsi8>,
    tensor<3xi64>) -> tensor<3x4xsi8>``
    """

    name = "npu.index_select"


@irdl_op_definition
class IndexCopyOp(IndexCopyOperands, OpcodeOp):
    """``input`` with ``source``'s slices written at an int64 1-d ``index`` along
    ``dim`` (DTE; the last of repeated indices wins).

    ``%y = npu.index_copy %x, %i, %s {dim = 1 : i64} : (tensor<3x16xsi8>,
    tensor<4xi64>, tensor<3x4xsi8>) -> tensor<3x16xsi8>``
    """

    name = "npu.index_copy"

    def opcode_fields(self) -> tuple[str, dict]:
        rank = len(shape_of(self.input))
        return "index_copy", {"dim": _in_rank(self.dim.value.data, rank)}


@irdl_op_definition
class MaxPoolIndicesOp(MapOp):
    """The int64 flat ``h * W + w`` of each window's first maximum (AAE), on NCHW
    codes: the layout its indices count in (``selection.max_pool_indices``).

    ``%i = npu.max_pool_indices %x {kernel = array<i64: 2, 2>, stride =
    array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} :
    tensor<1x4x8x8xsi8> -> tensor<1x4x4x4xi64>``
    """

    name = "npu.max_pool_indices"
    kernel = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    dilation = prop_def(DenseArrayBase[I64])
    ceil_mode = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))

    def opcode_fields(self) -> tuple[str, dict]:
        return "max_pool_indices", {
            "kernel": _values(self.kernel),
            "stride": _values(self.stride),
            "padding": _values(self.padding),
            "dilation": _values(self.dilation),
            "ceil_mode": bool(self.ceil_mode.value.data),
        }


@irdl_op_definition
class MaxUnpoolOp(MaxUnpoolOperands, OpcodeOp):
    """Zeros of H x W ``size`` per channel with each NCHW input code written at
    its int64 flat index (DTE; ``selection.max_unpool``).

    ``%y = npu.max_unpool %x, %i {size = array<i64: 8, 8>} :
    (tensor<1x4x4x4xsi8>, tensor<1x4x4x4xi64>) -> tensor<1x4x8x8xsi8>``
    """

    name = "npu.max_unpool"

    def opcode_fields(self) -> tuple[str, dict]:
        return "max_unpool", {"size": _values(self.size)}


@irdl_op_definition
class RoiResizeOp(OpcodeOp):
    """The camera resizer: each image's roi of an NV12 (``y``, ``uv``) or gray
    (``y``) frame, resized to ``size``, centred int8 NHWC (``numerics.roi_resize``;
    the hbir op's ``hbir.roi_resize``). It runs on the DMA queue: it reads the
    frame in DDR (up to 8192 x 8192, beyond any SRAM) and writes the image there.

    ``%img = npu.roi_resize %y, %uv roi(%roi : tensor<1x4xsi32>) {size =
    array<i64: 4, 4>, interpolate_mode = "bilinear", expansion_mode = "constant",
    pad_value = array<i64: 0, -128>} : tensor<1x8x8x1xui8>, tensor<1x4x4x2xui8>
    -> tensor<1x4x4x3xsi8>``
    """

    name = "npu.roi_resize"

    planes = var_operand_def(AnyTensorTypeConstr)  # y (and uv)
    roi = operand_def(AnyTensorTypeConstr)
    output = result_def(AnyTensorTypeConstr)
    size = prop_def(DenseArrayBase[I64])
    interpolate_mode = prop_def(StringAttr, default_value=StringAttr("bilinear"))
    expansion_mode = prop_def(StringAttr, default_value=StringAttr("constant"))
    pad_value = prop_def(DenseArrayBase[I64])

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$planes `roi` `(` $roi `:` type($roi) `)` attr-dict `:` type($planes) "
        "`->` type($output)"
    )

    def opcode_fields(self) -> tuple[str, dict]:
        return "roi_resize", {
            "size": _values(self.size),
            "interpolate_mode": self.interpolate_mode.data,
            "expansion_mode": self.expansion_mode.data,
            "pad_value": _values(self.pad_value),
        }


class _MoveOp(UnaryOp, OpcodeOp):
    """A copy between memories: the result has the operand's type."""


@irdl_op_definition
class DmaLoadOp(_MoveOp):
    """Copy a tile from DDR into SRAM (the DMA queue).

    ``%s = npu.dma_load %d : tensor<2x16x16x8xsi8>``
    """

    name = "npu.dma_load"


@irdl_op_definition
class DmaStoreOp(_MoveOp):
    """Copy a result from SRAM back to DDR (the DMA queue).

    ``%d = npu.dma_store %s : tensor<2x16x16x8xsi8>``
    """

    name = "npu.dma_store"


# ------------------------------------------------------------------ CPU islands


@irdl_op_definition
class YieldOp(IRDLOperation):
    """The terminator of an ``npu.cpu_call`` region.

    ``npu.yield %a, %b : tensor<2x4xf32>, tensor<2x4xsi8>``
    """

    name = "npu.yield"

    values = var_operand_def()
    traits = traits_def(IsTerminator())
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, *values: Value):
        super().__init__(operands=[list(values)])


@irdl_op_definition
class CpuCallOp(IRDLOperation):
    """Ops that run on the CPU: a nested region of hbir / qnt ops (a float island,
    or the quantize / dequantize at the model's edges). The region's arguments
    are the call's operands; ``npu.yield`` gives its results.

    ``%y = npu.cpu_call(%x) ({ ^bb0(%a: tensor<2x10xsi8>): %f = qnt.dequantize %a
    {...} : tensor<2x10xsi8> -> tensor<2x10xf32>  npu.yield %f :
    tensor<2x10xf32> }) {reason = "dequantize"} : (tensor<2x10xsi8>) ->
    tensor<2x10xf32>`` (printed in generic form)
    """

    name = "npu.cpu_call"

    args = var_operand_def()
    res = var_result_def()
    body = region_def("single_block")
    reason = opt_prop_def(StringAttr)

    irdl_options = (ParsePropInAttrDict(),)

    def __init__(
        self,
        args: Sequence[Value],
        result_types: Sequence[Attribute],
        body: Region,
        reason: str | None = None,
    ):
        super().__init__(
            operands=[list(args)],
            result_types=[list(result_types)],
            regions=[body],
            properties={} if reason is None else {"reason": StringAttr(reason)},
        )

    def verify_(self) -> None:
        block = self.body.block
        if [a.type for a in block.args] != [v.type for v in self.args]:
            raise VerifyException("region arguments must match the call's operands")
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("the region must end in npu.yield")
        if [v.type for v in last.values] != [r.type for r in self.res]:
            raise VerifyException("npu.yield must give the call's result types")
        for op in block.ops:
            if op.dialect_name() == "npu" and not isinstance(op, YieldOp):
                raise VerifyException(f"'{op.name}' cannot run inside a CPU island")


# ------------------------------------------------------------------ sizes, SRAM


def element_bytes(t: TensorType) -> int:
    e = t.element_type
    if isinstance(e, IntegerType):
        return max(1, e.width.data // 8)
    return max(1, getattr(e, "bitwidth", 32) // 8)


def aligned_bytes(t: Attribute, channel_align: int = 1) -> int:
    """Bytes of a tensor in a buffer: 4-d tensors (NHWC) with the channel count
    rounded up to ``channel_align``."""
    if not isinstance(t, TensorType):
        return 0
    shape = list(t.get_shape())
    if len(shape) == 4 and channel_align > 1:
        shape[3] = -(-shape[3] // channel_align) * channel_align
    n = 1
    for v in shape:
        n *= v
    return n * element_bytes(t)


def is_compute(op) -> bool:
    """The op computes in SRAM (its operands and results form a working set): its
    opcode runs on a compute unit (``hbm_opcodes.COMPUTE_UNITS``), not a view, a
    DMA copy or the CPU."""
    from hbir.runtime.hbm_opcodes import BY_NAME, COMPUTE_UNITS

    return isinstance(op, OpcodeOp) and BY_NAME[op.mnemonic()].unit in COMPUTE_UNITS


def working_set(op, channel_align: int = 1) -> int:
    """SRAM bytes an op needs at once: every operand and every result."""
    values = list(op.operands) + list(op.results)
    return sum(aligned_bytes(v.type, channel_align) for v in values)


class SramError(VerifyException):
    """A tile whose working set exceeds the march's SRAM."""


def verify_sram(module: ModuleOp) -> None:
    """Once ``npu-tile`` has run (the module has ``npu.sram_limit``), every compute
    op's working set must fit in SRAM."""
    limit = module.attributes.get(ATTR_SRAM_LIMIT)
    if not isinstance(limit, IntegerAttr):
        return
    align = module.attributes.get(ATTR_CHANNEL_ALIGN)
    align = align.value.data if isinstance(align, IntegerAttr) else 1
    for op in module.walk():
        if is_compute(op):
            need = working_set(op, align)
            if need > limit.value.data:
                raise SramError(
                    f"'{op.name}' needs {need} bytes of SRAM at once, the march "
                    f"has {limit.value.data}"
                )


NPU = Dialect(
    "npu",
    [
        ConstantOp,
        ConvOp,
        ConvTransposeOp,
        GemmOp,
        EltwiseOp,
        RescaleOp,
        CastOp,
        Fp16MapOp,
        LutOp,
        ReduceOp,
        PoolOp,
        ResizeOp,
        GridSampleOp,
        TransposeOp,
        ReshapeOp,
        ConcatOp,
        SliceOp,
        TopkOp,
        CompareOp,
        SelectOp,
        GatherOp,
        IndexSelectOp,
        IndexCopyOp,
        MaxPoolIndicesOp,
        MaxUnpoolOp,
        RoiResizeOp,
        DmaLoadOp,
        DmaStoreOp,
        CpuCallOp,
        YieldOp,
    ],
    [],
)
