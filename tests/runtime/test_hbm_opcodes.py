"""One spec per opcode: the npu dialect and the ``.hbm`` loader accept the same ops.

For every opcode a valid npu op is built, then varied one thing at a time: the
result's shape, each operand's and result's element type and rank (rank 0,
empty), each property (values dropped, added, negated, out of range, another
kind). For every variant the npu
dialect's verifier and the loader (the emitter's fields and constants, then
``hbm/verify.verify_instruction``: the generic checks and the opcode's rule) must
agree. The base op must be accepted and every changed result shape refused, so
removing a rule (or the dialect's call of it) fails here too.
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    f32,
    f64,
    i1,
    i64,
)
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.test_value import create_ssa_value

from hbir.dialects import npu
from hbir.dialects.hbir import i64_attr, ints, numpy_dtype, si
from hbir.hbm.emit import _fields, _Function
from hbir.hbm.verify import verify_instruction
from hbir.runtime import numerics
from hbir.runtime.hbm_opcodes import BY_NAME, OPCODES
from hbir.runtime.hbm_program import FunctionCode, Instruction

ELEMENTS = {"si8": si(8), "si16": si(16), "si32": si(32), "f32": f32, "i64": i64}
ELEMENTS["f16"] = Float16Type()


UI8 = IntegerType(8, Signedness.UNSIGNED)  # camera planes only (not retyped to)


def _t(element: str, *shape: int) -> TensorType:
    return TensorType(UI8 if element == "ui8" else ELEMENTS[element], list(shape))


def _post(m=(1 << 30,), s=(35,), clip=None) -> dict:
    return npu.post_properties(list(m), list(s), clip)


def _segmented() -> dict:
    table = numerics.build_lut("sigmoid", 2**-12, 16, 1 / 127, 8, num_tables=6)
    a = table.to_arrays()
    props = {
        "function": StringAttr("sigmoid"),
        "kind": StringAttr(table.kind),
        "rounding": StringAttr("half_even"),
        "in_scale": FloatAttr(table.in_scale, f32),
        "out_scale": FloatAttr(table.out_scale, f32),
    }
    for name in npu.LutOp._INT_FIELDS:
        props[name] = i64_attr(int(a[name]))
    for name in npu.LutOp._ARRAY_FIELDS:
        props[name] = ints([int(v) for v in a[name]])
    return props


def _table() -> dict:
    t = TensorType(si(8), [256])
    values = np.arange(-128, 128, dtype=np.int8)[::-1].copy()
    return {"table": DenseIntOrFPElementsAttr.from_list(t, values.tolist())}


# opcode -> (op class, operand types, result types, properties): a valid op.
BASE = {
    "conv": (
        npu.ConvOp,
        [_t("si8", 1, 5, 5, 3), _t("si8", 4, 3, 3, 3), _t("si32", 4)],
        [_t("si8", 1, 5, 5, 4)],
        {
            "stride": ints([1, 1]),
            "padding": ints([1, 1]),
            "dilation": ints([1, 1]),
            "groups": i64_attr(1),
            **_post(clip=[0, 127]),
        },
    ),
    "conv_transpose": (
        npu.ConvTransposeOp,
        [_t("si8", 1, 4, 4, 4), _t("si8", 4, 2, 2, 2)],
        [_t("si32", 1, 8, 8, 2)],
        {
            "stride": ints([2, 2]),
            "padding": ints([0, 0]),
            "output_padding": ints([0, 0]),
            "dilation": ints([1, 1]),
            "groups": i64_attr(1),
        },
    ),
    "gemm": (
        npu.GemmOp,
        [_t("si8", 2, 16), _t("si8", 10, 16), _t("si32", 10)],
        [_t("si8", 2, 10)],
        {"transpose_b": BoolAttr.from_bool(True), **_post()},
    ),
    "eltwise": (
        npu.EltwiseOp,
        [_t("si8", 1, 4, 4, 8), _t("si8", 1, 4, 4, 8)],
        [_t("si8", 1, 4, 4, 8)],
        {
            "kind": StringAttr("add"),
            "in_multiplier": ints([1 << 30, 1 << 29]),
            "in_shift": ints([10, 10]),
            **_post(s=(30,)),
        },
    ),
    "rescale": (
        npu.RescaleOp,
        [_t("si32", 2, 8)],
        [_t("si8", 2, 8)],
        _post(m=[1 << 30] * 8, s=[30] * 8) | {"axis": i64_attr(1)},
    ),
    "reduce": (
        npu.ReduceOp,
        [_t("si8", 1, 4, 4, 8)],
        [_t("si32", 1, 1, 1, 8)],
        {
            "kind": StringAttr("sum"),
            "dims": ints([1, 2]),
            "keepdim": BoolAttr.from_bool(True),
        },
    ),
    "cast": (npu.CastOp, [_t("si8", 2, 3)], [_t("si32", 2, 3)], {}),
    "fp16_map": (
        npu.Fp16MapOp,
        [_t("f16", 2, 3)],
        [_t("f16", 2, 3)],
        {"function": StringAttr("sigmoid")},
    ),
    "lut": (npu.LutOp, [_t("si8", 4)], [_t("si8", 4)], _table()),
    "lut_segmented": (npu.LutOp, [_t("si16", 4)], [_t("si8", 4)], _segmented()),
    "pool": (
        npu.PoolOp,
        [_t("si8", 1, 6, 6, 4)],
        [_t("si8", 1, 3, 3, 4)],
        {
            "kind": StringAttr("max"),
            "kernel": ints([2, 2]),
            "stride": ints([2, 2]),
            "padding": ints([0, 0]),
            "dilation": ints([1, 1]),
        },
    ),
    "resize": (
        npu.ResizeOp,
        [_t("si8", 1, 4, 4, 8)],
        [_t("si32", 1, 8, 8, 8)],
        {
            "size": ints([8, 8]),
            "mode": StringAttr("bilinear"),
            "weight_bits": i64_attr(numerics.BILINEAR_BITS),
        },
    ),
    "transpose": (
        npu.TransposeOp,
        [_t("si8", 1, 3, 4, 5)],
        [_t("si8", 1, 4, 5, 3)],
        {"perm": ints([0, 2, 3, 1])},
    ),
    "reshape": (npu.ReshapeOp, [_t("si8", 2, 6)], [_t("si8", 3, 4)], {}),
    "slice": (
        npu.SliceOp,
        [_t("si8", 2, 16)],
        [_t("si8", 2, 8)],
        {"begin": ints([0, 0]), "end": ints([2, 16]), "step": ints([1, 2])},
    ),
    "concat": (
        npu.ConcatOp,
        [_t("si8", 2, 4), _t("si8", 2, 3)],
        [_t("si8", 2, 7)],
        {"dim": i64_attr(1)},
    ),
    "topk": (
        npu.TopkOp,
        [_t("si8", 2, 8)],
        [_t("i64", 2, 3)],
        {"k": i64_attr(3), "dim": i64_attr(1), "largest": BoolAttr.from_bool(True)},
    ),
    "gather": (
        npu.GatherOp,
        [_t("si8", 2, 8), _t("i64", 2, 3)],
        [_t("si8", 2, 3)],
        {"dim": i64_attr(1)},
    ),
    "index_select": (
        npu.IndexSelectOp,
        [_t("si16", 8, 4), _t("i64", 3)],
        [_t("si16", 3, 4)],
        {"dim": i64_attr(0)},
    ),
    "index_copy": (
        npu.IndexCopyOp,
        [_t("si8", 3, 16), _t("i64", 4), _t("si8", 3, 4)],
        [_t("si8", 3, 16)],
        {"dim": i64_attr(1)},
    ),
    "max_pool_indices": (
        npu.MaxPoolIndicesOp,
        [_t("si8", 1, 4, 8, 7)],
        [_t("i64", 1, 4, 5, 4)],
        {
            "kernel": ints([3, 2]),
            "stride": ints([2, 2]),
            "padding": ints([1, 1]),
            "dilation": ints([1, 1]),
            "ceil_mode": BoolAttr.from_bool(True),
        },
    ),
    "roi_resize": (
        npu.RoiResizeOp,
        [_t("ui8", 1, 8, 6, 1), _t("ui8", 1, 4, 3, 2), _t("si32", 1, 4)],
        [_t("si8", 1, 5, 7, 3)],
        {
            "size": ints([5, 7]),
            "interpolate_mode": StringAttr("nearest"),
            "expansion_mode": StringAttr("border"),
            "pad_value": ints([16, -128]),
        },
    ),
    "max_unpool": (
        npu.MaxUnpoolOp,
        [_t("si16", 1, 4, 4, 3), _t("i64", 1, 4, 4, 3)],
        [_t("si16", 1, 4, 8, 6)],
        {"size": ints([8, 6])},
    ),
    "grid_sample": (
        npu.GridSampleOp,
        [_t("si8", 1, 8, 8, 4), _t("si16", 1, 5, 6, 2)],
        [_t("si32", 1, 5, 6, 4)],
        {
            "mode": StringAttr("bilinear"),
            "padding_mode": StringAttr("zeros"),
            "align_corners": BoolAttr.from_bool(False),
            "grid_scale": FloatAttr(2.0**-14, f64),
        },
    ),
    "compare": (
        npu.CompareOp,
        [_t("si8", 2, 8), _t("si32", 1)],
        [TensorType(i1, [2, 8])],
        {"kind": StringAttr("ge")},
    ),
    "select": (
        npu.SelectOp,
        [TensorType(i1, [2, 8]), _t("si8", 2, 8), _t("si8", 1)],
        [_t("si8", 2, 8)],
        {},
    ),
    "dma_load": (npu.DmaLoadOp, [_t("si8", 2, 8)], [_t("si8", 2, 8)], {}),
    "dma_store": (npu.DmaStoreOp, [_t("si16", 2, 8)], [_t("si16", 2, 8)], {}),
}
# cpu_call is checked against its island's parsed signature (hbm/test_container).
NOT_AN_OP = {"cpu_call"}


def _changed_values(attr) -> list:
    """Other values of a property's kind: some legal, most not."""
    if isinstance(attr, IntegerAttr) and attr.type == i1:  # a BoolAttr
        return [BoolAttr.from_bool(not attr.value.data)]
    if isinstance(attr, IntegerAttr):
        v = attr.value.data
        return [i64_attr(x) for x in {v + 1, v - 1, -1, 0, 3, 40, 1 << 31}]
    if isinstance(attr, StringAttr):
        return [StringAttr("bogus"), StringAttr("max"), StringAttr("half_up")]
    if isinstance(attr, FloatAttr):
        return [FloatAttr(-attr.value.data, f32), FloatAttr(0.0, f32)]
    if isinstance(attr, DenseArrayBase) and isinstance(attr.elt_type, Float64Type):
        return [DenseArrayBase.from_list(f64, [2.0])]
    if isinstance(attr, DenseArrayBase):
        v = list(attr.get_values())
        variants = [v[:-1], [*v, v[-1]], [-x for x in v], [x + 1 for x in v]]
        variants += [[x * 4 for x in v], [1 << 31 for _ in v], [0 for _ in v]]
        return [ints(x) for x in variants]
    if isinstance(attr, DenseIntOrFPElementsAttr):
        return [DenseIntOrFPElementsAttr.from_list(TensorType(si(8), [4]), [0] * 4)]
    raise AssertionError(f"no variants for {attr}")


def _shape_changed(t: TensorType, opcode: str) -> list[TensorType]:
    """Result types of another shape (for a reshape: of another element count)."""
    shape = list(t.get_shape())
    out = [TensorType(t.element_type, shape[:i] + [n + 1] + shape[i + 1 :])
           for i, n in enumerate(shape)]  # fmt: skip
    return (
        out if opcode == "reshape" else [*out, TensorType(t.element_type, [*shape, 1])]
    )


def _retyped(t: TensorType) -> list[TensorType]:
    return [
        TensorType(e, t.get_shape()) for e in ELEMENTS.values() if e != t.element_type
    ]


def _variants(opcode: str):
    """(label, operand types, result types, properties, must be refused)."""
    cls, args, outs, props = BASE[opcode]
    yield "base", args, outs, props, False
    for t in _shape_changed(outs[0], opcode):
        yield f"result shape {t}", args, [t], props, True
    for i, a in enumerate(args):
        for t in _retyped(a):
            yield f"operand {i} {t}", [*args[:i], t, *args[i + 1 :]], outs, props, None
    for t in _retyped(outs[0]):
        yield f"result {t}", args, [t], props, None
    for i, a in enumerate(args):  # rank 0 and empty tensors (hostile input)
        for t in (TensorType(a.element_type, []), TensorType(a.element_type, [0])):
            yield f"operand {i} {t}", [*args[:i], t, *args[i + 1 :]], outs, props, None
    for t in (
        TensorType(outs[0].element_type, []),
        TensorType(outs[0].element_type, [0]),
    ):
        yield f"result {t}", args, [t], props, None
    for name, attr in props.items():
        for v in _changed_values(attr):
            yield f"{name} = {v}", args, outs, {**props, name: v}, None
    if len(args) > 2:  # without the optional bias
        yield "no bias", args[:2], outs, props, None
    extra = {
        "post": _post(clip=[-5, 5]),
        "axis": {"axis": i64_attr(0)},
        "acc_bits": {"acc_bits": i64_attr(16)},
        "pre_shift": {"pre_shift": i64_attr(4)},
    }
    if issubclass(cls, npu.PostProcessOp):
        for label, more in extra.items():
            if label == "axis" and not hasattr(cls, "axis"):
                continue  # (no such property: IRDL's own refusal)
            yield f"with {label}", args, outs, {**props, **more}, None


def _dialect_accepts(op) -> bool:
    try:
        op.verify()
    except VerifyException:
        return False
    return True


def _loader_accepts(op) -> bool:
    """The instruction the emitter writes for ``op``, through the loader's check
    (an op whose fields cannot even be read has no instruction: refused)."""
    try:
        opcode, fields = op.opcode_fields()
    except (IndexError, TypeError, ValueError):
        return False
    state = _Function(None, False)
    ids = [state._add("sram", 0, 1 << 20, v.type) for v in (*op.operands, *op.results)]
    fields = _fields(state, opcode, fields)
    n = len(op.operands)
    spec = BY_NAME[opcode]
    ins = Instruction(spec.number, tuple(ids[:n]), tuple(ids[n:]), fields, spec.unit)
    code = FunctionCode("f", (), (), state.buffers, (), (), [ins], [], state.constants)

    def fail(what):
        raise AssertionError(what)

    try:
        verify_instruction(code, ins, fail)
    except AssertionError:
        return False
    return True


def test_every_opcode_has_cases():
    assert set(BASE) == {op.name for op in OPCODES} - NOT_AN_OP


@pytest.mark.parametrize("opcode", sorted(BASE))
def test_the_dialect_and_the_loader_accept_the_same_ops(opcode):
    cls = BASE[opcode][0]
    refused = 0
    for label, args, outs, props, must_refuse in _variants(opcode):
        op = cls.create(
            operands=[create_ssa_value(t) for t in args],
            result_types=outs,
            properties=props,
        )
        try:
            numpy_dtype_ok = all(
                numpy_dtype(v.type.element_type) is not None
                for v in (*op.operands, *op.results)
            )
        except ValueError:
            numpy_dtype_ok = False
        assert numpy_dtype_ok
        dialect, loader = _dialect_accepts(op), _loader_accepts(op)
        assert dialect == loader, (
            f"{opcode} {label}: the dialect {'accepts' if dialect else 'refuses'}, "
            f"the loader {'accepts' if loader else 'refuses'}"
        )
        if label == "base":
            assert dialect, f"{opcode}: the valid op is refused"
            assert op.opcode_fields()[0] == opcode
        if must_refuse:
            assert not dialect, f"{opcode} {label}: a wrong result shape is accepted"
        refused += not dialect
    assert refused > 0
