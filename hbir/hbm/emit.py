"""The emitter: a compiled npu-dialect module -> a :class:`Program` (``model.hbm``).

Takes the module after the whole compile phase (``npu-plan-memory`` has given
every value its ``npu.buffer``) and writes down, per function:

* a Buffer for every value: the plan's space / offset / size, the value's shape
  and dtype (an ``npu.reshape`` result is another Buffer on the same bytes);
* the constants (``npu.constant``) as ``const`` Buffers with their values, and
  the opcode fields of kind ``buffer`` (requantization multipliers and shifts,
  lookup tables) as further ``const`` Buffers placed after the plan's constants;
* one Instruction per op, in program order, with the opcode's fields
  (``npu_kernels.fields_of``: the same reading of the op the interpreter uses),
  the op's unit and start / end cycles;
* each ``npu.cpu_call`` as an island (HBIR text, run by the interpreter);
* the inputs and outputs (names, shapes, dtypes, layouts, scales) and the DDR /
  SRAM peaks;
* the debug table: per instruction the quantized.bc op IDs it computes, the op
  name of the last of them, the torch location, and which quantized.bc value its
  first result is (``npu.origin`` / ``npu.value_of`` / ``npu.value_perm``).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DictionaryAttr,
    FileLineColLoc,
    IntegerAttr,
    ModuleOp,
    NameLoc,
    StringAttr,
    TensorType,
)
from xdsl.ir import Block, Operation, Region, SSAValue

from hbir.asm import print_reference
from hbir.diagnostics import HbirError
from hbir.dialects import hbir as hbir_dialect
from hbir.dialects import npu
from hbir.dialects.hbir import dense_array, numpy_dtype
from hbir.dialects.op_ids import op_ids
from hbir.inputs import quant_info
from hbir.module import ATTR_ARG_NAME, Module
from hbir.passes.fixed_point import ATTR_LEGACY_ROUND
from hbir.runtime.hbm_opcodes import BY_NAME, NONE
from hbir.runtime.hbm_program import (
    Buffer,
    DebugEntry,
    FunctionCode,
    Instruction,
    Program,
    TensorDesc,
)
from hbir.runtime.npu_kernels import fields_of

__all__ = ["EmitError", "emit", "io_layouts"]

ALIGN = 64  # as npu-plan-memory places buffers
ATTR_ARG_BUFFERS = "npu.arg_buffers"
ATTR_BUFFERS = "npu.buffers"


class EmitError(HbirError):
    """A module the emitter cannot write (not compiled through npu-plan-memory)."""


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _dtype(t: TensorType) -> str:
    return np.dtype(numpy_dtype(t.element_type)).name


def _location(op: Operation) -> str:
    """The torch ``file:line:col`` of an op (with export's ``module|op#n`` after
    it when the location is named), or ""."""
    loc, name = op.location, ""
    if isinstance(loc, NameLoc):
        name, loc = f" ({loc.desc.data})", loc.location
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}{name}"
    return name.strip(" ()")


def io_layouts(f: func.FuncOp) -> dict[str, str]:
    """Input name -> layout of quantized.bc's function ``f``: an NV12 plane
    (``NV12_Y`` / ``NV12_UV``, or ``Y`` for a gray image) when
    ``hbir.image_convert`` or ``hbir.roi_resize`` reads it (``ROI`` its roi),
    ``NHWC`` when a transpose to NCHW does (``insert_transpose``), ``NCHW`` for
    another 4-d input, else ""."""
    layouts = {}
    for i, arg in enumerate(f.body.block.args):
        attrs = f.arg_attrs.data[i] if f.arg_attrs is not None else None
        name = _arg_name(attrs, f"_input_{i}")
        layout = "NCHW" if len(arg.type.get_shape()) == 4 else ""
        for use in arg.uses:
            user = use.operation
            if isinstance(user, hbir_dialect.ImageConvertOp):
                gray = len(user.operands) == 1
                layout = "Y" if gray else ("NV12_Y", "NV12_UV")[use.index]
            elif isinstance(user, hbir_dialect.RoiResizeOp):
                planes = ("Y", "ROI") if user.uv is None else ("NV12_Y", "NV12_UV")
                layout = (*planes, "ROI")[use.index]
            elif isinstance(user, hbir_dialect.TransposeOp) and tuple(
                user.perm.get_values()
            ) == (0, 3, 1, 2):
                layout = "NHWC"
        layouts[name] = layout
    return layouts


def _arg_name(attrs: DictionaryAttr | None, default: str) -> str:
    if attrs is not None and isinstance(attrs.data.get(ATTR_ARG_NAME), StringAttr):
        return attrs.data[ATTR_ARG_NAME].data
    return default


def _descs(types, attrs, prefix: str, layouts: dict[str, str]) -> tuple:
    descs = []
    for i, t in enumerate(types):
        a = attrs.data[i] if attrs is not None else None
        name = _arg_name(a, f"_{prefix}_{i}")
        info = quant_info(a)
        shape = tuple(t.get_shape())
        default = "NCHW" if len(shape) == 4 else ""
        descs.append(
            TensorDesc(
                name,
                shape,
                _dtype(t),
                layouts.get(name, default),
                () if info is None else tuple(float(s) for s in info.scales),
                () if info is None else tuple(info.zeros),
            )
        )
    return tuple(descs)


def _island(call: npu.CpuCallOp, legacy_round: bool) -> str:
    """The island as a module with one ``func.func @island``, in the text
    ``get_asm()`` prints (the reference's form, which parses back exactly)."""
    body = call.body.block
    block = Block(arg_types=[a.type for a in body.args])
    mapper: dict[SSAValue, SSAValue] = dict(zip(body.args, block.args, strict=True))
    for op in body.ops:
        if isinstance(op, npu.YieldOp):
            block.add_op(func.ReturnOp(*[mapper[v] for v in op.values]))
            break
        clone = op.clone(value_mapper=mapper)
        for old, new in zip(op.results, clone.results, strict=True):
            mapper[old] = new
        block.add_op(clone)
    f = func.FuncOp(
        "island",
        ([a.type for a in body.args], [r.type for r in call.res]),
        Region(block),
    )
    attrs = {ATTR_LEGACY_ROUND: BoolAttr.from_bool(legacy_round)}
    module = ModuleOp([f], attributes=attrs)
    return print_reference(module)


class _Function:
    """The state of emitting one function."""

    def __init__(self, f: func.FuncOp, legacy_round: bool):
        self.f = f
        self.legacy_round = legacy_round
        self.buffers: dict[int, Buffer] = {}
        self.ids: dict[SSAValue, int] = {}
        self.constants: dict[int, np.ndarray] = {}
        self.islands: list[str] = []
        self.const_end = 0  # the first free byte of the constant section

    def _add(self, space: str, offset: int, size: int, t: TensorType) -> int:
        i = len(self.buffers)
        self.buffers[i] = Buffer(
            i, space, offset, size, tuple(t.get_shape()), _dtype(t)
        )
        if space == "const":
            self.const_end = max(self.const_end, offset + size)
        return i

    def value(self, v: SSAValue, plan: DictionaryAttr) -> int:
        d = plan.data
        if not isinstance(v.type, TensorType):
            raise EmitError(f"{self.where()}: a value of type {v.type} has no buffer")
        i = self._add(
            d["space"].data, d["offset"].value.data, d["size"].value.data, v.type
        )
        self.ids[v] = i
        return i

    def constant(self, values: np.ndarray) -> int:
        """A ``const`` Buffer for a field's array: int32 when every value fits."""
        info = np.iinfo(np.int32)
        fits = values.size == 0 or (
            values.min() >= info.min and values.max() <= info.max
        )
        data = np.ascontiguousarray(values.astype(np.int32 if fits else np.int64))
        offset = _round(self.const_end)
        i = len(self.buffers)
        self.buffers[i] = Buffer(
            i,
            "const",
            offset,
            _round(max(data.nbytes, 1)),
            data.shape,
            data.dtype.name,
        )
        self.const_end = offset + self.buffers[i].size
        self.constants[i] = data
        return i

    def where(self) -> str:
        return f"emit: @{self.f.sym_name.data}"

    def plans(self, op: Operation) -> list[DictionaryAttr]:
        one = op.attributes.get(npu.ATTR_BUFFER)
        many = op.attributes.get(ATTR_BUFFERS)
        plans = [one] if one is not None else list(getattr(many, "data", []))
        if len(plans) != len(op.results) or not all(
            isinstance(p, DictionaryAttr) for p in plans
        ):
            raise EmitError(
                f"{self.where()}: '{op.name}' at {_location(op) or 'an unknown place'}"
                " has no buffer: emit takes a module compiled through "
                "npu-plan-memory (hbir.compile)"
            )
        return plans


def _fields(state: _Function, opcode: str, fields: dict) -> dict:
    """The op's fields with ``buffer``-kind arrays placed as constants."""
    out = {}
    for name, kind in BY_NAME[opcode].fields:
        v = fields[name]
        if kind == "buffer":
            v = NONE if v is None else state.constant(np.asarray(v))
        out[name] = v
    return out


def _int_attr(op: Operation, name: str) -> int:
    a = op.attributes.get(name)
    return a.value.data if isinstance(a, IntegerAttr) else 0


def _debug(op: Operation, names: dict[int, str]) -> DebugEntry:
    ids = npu.origin(op)
    found = npu.value_of(op)
    return DebugEntry(
        ids,
        names.get(ids[-1], "") if ids else "",
        _location(op),
        None if found is None else found[0],
        None if found is None else found[1],
    )


def emit_function(
    f: func.FuncOp,
    legacy_round: bool,
    names: dict[int, str],
    layouts: dict[str, str],
) -> FunctionCode:
    state = _Function(f, legacy_round)
    for op in f.body.block.ops:  # field constants go after all the plan's
        plan = op.attributes.get(npu.ATTR_BUFFER)
        if isinstance(op, npu.ConstantOp) and isinstance(plan, DictionaryAttr):
            end = plan.data["offset"].value.data + plan.data["size"].value.data
            state.const_end = max(state.const_end, end)
    arg_plans = f.attributes.get(ATTR_ARG_BUFFERS)
    args = f.body.block.args
    if not isinstance(arg_plans, ArrayAttr) or len(arg_plans.data) != len(args):
        raise EmitError(
            f"{state.where()}: the inputs have no buffers: emit takes a module "
            "compiled through npu-plan-memory (hbir.compile)"
        )
    inputs = tuple(state.value(a, p) for a, p in zip(args, arg_plans.data, strict=True))
    code, debug, outputs = [], [], ()
    for op in f.body.block.ops:
        if isinstance(op, func.ReturnOp):
            outputs = tuple(state.ids[v] for v in op.operands)
            break
        plans = state.plans(op)
        operands = tuple(state.ids[v] for v in op.operands)
        results = tuple(
            state.value(r, p) for r, p in zip(op.results, plans, strict=True)
        )
        if isinstance(op, npu.ConstantOp):
            state.constants[results[0]] = np.ascontiguousarray(dense_array(op.value))
            continue
        if isinstance(op, npu.CpuCallOp):
            opcode, fields = "cpu_call", {"island": len(state.islands)}
            state.islands.append(_island(op, legacy_round))
        else:
            opcode, fields = fields_of(op)
            fields = _fields(state, opcode, fields)
        unit = op.attributes.get(npu.ATTR_UNIT)
        code.append(
            Instruction(
                BY_NAME[opcode].number,
                operands,
                results,
                fields,
                unit.data if isinstance(unit, StringAttr) else BY_NAME[opcode].unit,
                _int_attr(op, npu.ATTR_START),
                _int_attr(op, npu.ATTR_END),
            )
        )
        debug.append(_debug(op, names))
    ft = f.function_type
    peaks = {
        space: max(
            [b.offset + b.size for b in state.buffers.values() if b.space == space],
            default=0,
        )
        for space in ("ddr", "sram")
    }
    return FunctionCode(
        f.sym_name.data,
        _descs(ft.inputs.data, f.arg_attrs, "input", layouts),
        _descs(ft.outputs.data, f.res_attrs, "output", {}),
        state.buffers,
        inputs,
        outputs,
        code,
        debug,
        state.constants,
        state.islands,
        peaks["ddr"],
        peaks["sram"],
    )


def emit(compiled: Module, source: Module | None = None) -> Program:
    """The :class:`Program` of ``compiled`` (``hbir.compile``'s npu module).

    ``source`` is the quantized.bc it was compiled from: it names the ops of the
    debug table and the inputs' layouts (without it: no names, and NCHW for
    every 4-d input).
    """
    march = compiled.march
    if march is None:
        raise EmitError("emit: the module records no march (hbir.march)")
    sources = {f.name: f.op for f in source.functions} if source is not None else {}
    functions = []
    for f in compiled.functions:
        src = sources.get(f.name)
        names = {} if src is None else {i: o.name for i, o in op_ids(src).items()}
        layouts = {} if src is None else io_layouts(src)
        functions.append(
            emit_function(f.op, compiled.rounding == "half_up", names, layouts)
        )
    return Program(march, functions)
