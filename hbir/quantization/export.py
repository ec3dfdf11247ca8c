"""``export``: a prepared model (``qat.pt``) to HBIR (``qat.bc``).

Export is a 1:1 import followed by the passes of the ``export`` phase
(``passes/pipelines.py``: configure-lut, fold-constants, cleanup), as torch-mlir does
it. The importer is one dispatch loop over the fx graph of the prepared model plus
the rule tables of ``export_rules.py`` ({module class / function / method name:
builder}; the pass-through ones derived from the op table). Each builder emits the
torch computations of the module's forward with its quantization parameters as
``qnt`` ops, in the same order and precision, so the interpreter (which runs the
same torch kernels) reproduces ``pre_export(model)`` bit for bit. Sizes computed in
the graph are read as their values on the example inputs, and a value computed from
constants and sizes only, in a form IR cannot hold, is imported as that constant.

Every emitted op carries a location ``loc("<module path>|<torch op>#<call index>"(
"<user file>":<line>:0))`` naming its torch origin, shown by
``get_asm(enable_debug_info=True)``.

A graph that is not a prepared model (a plain float ``nn.Module``) is traced with
torch.fx and exported as float ops, with a loud warning: it has no fake quantization
to convert.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
import os
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import fx, nn
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BoolAttr,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FileLineColLoc,
    FunctionType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    NameLoc,
    StringAttr,
    TensorType,
    UnknownLoc,
    f32,
    f64,
    i64,
)
from xdsl.ir import Block, Operation, Region, SSAValue

import hbir
from hbir import diagnostics
from hbir.default_march import default_march
from hbir.dialects import hbir as hb
from hbir.dialects import qnt
from hbir.module import (
    ATTR_ARG_NAME,
    ATTR_CONSISTENCY_LEVEL,
    ATTR_FUSE_REQUANTIZE,
    ATTR_HIGH_PRECISION_QPP,
    ATTR_LEGACY_ROUND,
    ATTR_PREPARED_MARCH,
)
from hbir.quantization.fake_quantize import FakeQuantize
from hbir.quantization.options import QuantOptions, using
from hbir.quantization.pre_export import PreExportError, check_frozen
from hbir.quantization.rounding import is_legacy_round
from hbir.quantization.tracing import (
    HbirTracer,
    restore_sources,
    source_location,
    user_frame,
)

_TORCH_TO_IR = {torch.float32: f32, torch.float64: f64}


class ExportError(hbir.HbirError):
    """Ops export cannot translate; the message lists every one with its source line."""


class Unsupported(Exception):
    """Raised by a builder for a variant of a known op it cannot translate."""


def _ir_float(dtype: torch.dtype):
    if dtype not in _TORCH_TO_IR:
        raise Unsupported(f"tensors of dtype {dtype} (float32 and float64 only)")
    return _TORCH_TO_IR[dtype]


def _input_type(t: torch.Tensor) -> TensorType:
    """A model input's type: float, or int64 ids / indices (``hbir.INDEX``)."""
    if t.dtype == torch.int64:
        return TensorType(hb.INDEX, list(t.shape))
    if t.dtype == torch.bool:  # a mask (a padding mask)
        return TensorType(IntegerType(1), list(t.shape))
    if t.dtype not in _TORCH_TO_IR:
        raise ExportError(
            f"an input of dtype {t.dtype}: inputs are float32, float64, int64 (ids "
            "and indices) or bool (masks)"
        )
    return TensorType(_TORCH_TO_IR[t.dtype], list(t.shape))


class Exporter:
    """State of one export: the fx graph, recorded values, the block being built."""

    def __init__(self, gm: fx.GraphModule, recorded: dict[fx.Node, Any]):
        self.gm = gm
        self.modules = dict(gm.named_modules())
        self.recorded = recorded
        self.values: dict[fx.Node, Any] = {}
        self.block: Block | None = None
        self.node: fx.Node | None = None
        self._calls: Counter[str] = Counter()
        self._location = UnknownLoc()
        self.fake_quant_count = 0
        self.constants: set[fx.Node] = set()

    # ---- emission
    def emit(self, op: Operation) -> SSAValue | tuple[SSAValue, ...]:
        """Append ``op`` at the current node's location; return its result(s)."""
        op.location = self._location
        self.block.add_op(op)
        return op.results[0] if len(op.results) == 1 else tuple(op.results)

    def constant(self, array: np.ndarray | torch.Tensor) -> SSAValue:
        if isinstance(array, torch.Tensor):
            array = array.detach().cpu().numpy()
        array = np.ascontiguousarray(array)
        element = {
            np.dtype(np.float32): f32,
            np.dtype(np.float64): f64,
            np.dtype(np.int64): i64,  # index tensors (hbir.INDEX)
        }.get(array.dtype)
        if element is None:
            raise Unsupported(f"a constant of dtype {array.dtype}")
        t = TensorType(element, list(array.shape))
        return self.emit(
            hb.ConstantOp(DenseIntOrFPElementsAttr(t, BytesAttr(array.tobytes())))
        )

    def fake_quant(self, value: SSAValue, fq: FakeQuantize | None) -> SSAValue:
        """``qnt.const_fake_quant`` for an enabled FakeQuantize (else the value)."""
        if fq is None or not bool(fq.fake_quant_enabled[0]):
            return value
        scale = fq.scale.detach().double().numpy()
        if not fq.activation_post_process.has_data():
            warnings.warn(
                f"{self._where()}: the fake quant has observed nothing, so its scale "
                "is the initial 1.0 (calibrate before export)",
                stacklevel=3,
            )
        zero = fq.zero_point.detach().double().numpy()
        return self.fake_quant_raw(
            value, scale, zero, int(fq.quant_min), int(fq.quant_max), fq.ch_axis
        )

    def fake_quant_raw(
        self, value: SSAValue, scale, zero, qmin: int, qmax: int, ch_axis: int
    ) -> SSAValue:
        """``qnt.const_fake_quant`` over ``[s * (qmin - zp), s * (qmax - zp)]``.

        The float64 products are exact, so convert recovers the float32 scale.
        """
        bits = int(qmax - qmin).bit_length()
        self.fake_quant_count += 1
        axis = ch_axis if ch_axis >= 0 else None
        return self.emit(
            qnt.ConstFakeQuantOp(
                value,
                list(scale * (qmin - zero)),
                list(scale * (qmax - zero)),
                bits=bits,
                narrow_range=qmin + qmax == 0,
                axis=axis,
            )
        )

    def cast(self, value: SSAValue, dtype: torch.dtype) -> SSAValue:
        element = _ir_float(dtype)
        if hb.tensor_type(value).element_type == element:
            return value
        return self.emit(hb.CastOp(value, element))

    def tensor(self, arg: Any, like: SSAValue | None = None) -> SSAValue:
        """An IR value for a graph argument: a node's value or a Python number."""
        if isinstance(arg, fx.Node):
            value = self.values[arg]
            if isinstance(value, torch.Tensor):  # folded from parameters and sizes
                return self._folded(arg.name, value)
            if not isinstance(value, SSAValue):
                raise Unsupported(f"argument {arg.name} is not a tensor")
            return value
        if isinstance(arg, int | float) and not isinstance(arg, bool):
            return self.constant(np.asarray(arg, self._number_dtype(like)))
        raise Unsupported(f"argument {arg!r}")

    def _folded(self, name: str, value: torch.Tensor) -> SSAValue:
        """A tensor computed from parameters, buffers and sizes only (a learned
        query expanded to the batch): a float constant; integer ones are refused."""
        if not value.is_floating_point():
            raise _integer_constant(name, value)
        return self.constant(value)

    def tensor_of(self, v, like) -> SSAValue:
        """An IR value or a Python number (as a rank-0 constant of ``like``'s type)."""
        if isinstance(v, SSAValue):
            return v
        if _is_number_value(v):
            return self.constant(np.asarray(v, self._number_dtype(like)))
        if isinstance(v, torch.Tensor):
            return self._folded("an argument", v)
        raise Unsupported(f"argument {v!r}")

    def _number_dtype(self, like: SSAValue | None):
        """A Python number next to ``like``: of its precision; int64 beside
        indices (``idx % w``)."""
        if like is None:
            return np.float32
        element = hb.tensor_type(like).element_type
        if element == hb.INDEX:
            return np.int64
        return np.float64 if element == f64 else np.float32

    def dtype(self, value: SSAValue) -> torch.dtype:
        element = hb.tensor_type(value).element_type
        return {f32: torch.float32, f64: torch.float64}.get(element, torch.float32)

    def recorded_shape(self, node: fx.Node | None = None) -> tuple[int, ...]:
        value = self.recorded[node or self.node]
        return tuple(value.shape)

    # ---- locations
    def _where(self) -> str:
        frame = user_frame(self.node.meta.get("stack_trace")) if self.node else None
        return frame.split(": ", 1)[0] if frame else f"node {self.node.name}"

    def _set_location(self, node: fx.Node, what: str) -> None:
        path = node.target if node.op == "call_module" else node.name
        key = f"{path}|{what}"
        index = self._calls[key]
        self._calls[key] += 1
        inner = UnknownLoc()
        where = source_location(node)  # relative path, real column (tracing.py)
        if where:
            file, line, column = where
            inner = FileLineColLoc(StringAttr(file), IntAttr(line), IntAttr(column))
        self._location = NameLoc(StringAttr(f"{key}#{index}"), inner)

    # ---- the dispatch loop
    def run(self, name: str, input_names, output_names) -> ModuleOp:
        from hbir.quantization import export_rules as rules

        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        leaves: list[torch.Tensor] = []
        for node in placeholders:
            _flatten(self.recorded[node], leaves, node.name)
        self.block = Block(arg_types=[_input_type(t) for t in leaves])
        args = iter(self.block.args)
        for node in placeholders:
            # Tuple / list / dict inputs become one argument per tensor, in order.
            self.values[node] = _rebuild(self.recorded[node], args)

        problems: list[str] = []
        failed: set[fx.Node] = set()
        outputs: list[SSAValue] = []
        for node in self.gm.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                continue
            if node.op == "output":
                if not problems:
                    outputs = self._outputs(node.args[0])
                continue
            if failed.intersection(node.all_input_nodes):
                # Follows from a problem already listed: one line per cause.
                failed.add(node)
                self.values[node] = None
                continue
            if node.op == "get_attr":
                self.constants.add(node)
                self.values[node] = self._get_attr(node)
                continue
            if not _is_tensor_node(self.recorded.get(node)):
                # Shapes, sizes, Python numbers: evaluated on the example inputs.
                self.constants.add(node)
                self.values[node] = self.recorded.get(node)
                continue
            builder, what = rules.find(node, self.modules)
            if builder not in rules.INDEX_READERS and self._folds(
                node, builder is not None
            ):
                # Computed from constants and sizes only, in a form IR cannot hold
                # (index math on an int64 buffer, a mask made by torch.zeros): its
                # value on the example is the constant.
                self._set_location(node, "constant")
                self.constants.add(node)
                self.values[node] = self._constant_value(self.recorded[node])
                continue
            if builder is None:
                problems.append(_problem(node, f"unsupported op {what}"))
                failed.add(node)
                self.values[node] = None
                continue
            self._set_location(node, what)
            try:
                with _sizes_resolved(node, self.recorded):
                    self.values[node] = builder(self, node)
                if all(n in self.constants for n in node.all_input_nodes):
                    self.constants.add(node)  # constant math, imported as IR
            except Unsupported as e:
                problems.append(_problem(node, f"{what}: {e}"))
                failed.add(node)
                self.values[node] = None
        if problems:
            raise ExportError(
                f"export found {len(problems)} unsupported op(s):\n"
                + "\n".join(problems)
            )
        return self._module(name, outputs, input_names, output_names)

    def _get_attr(self, node: fx.Node):
        value = operator.attrgetter(node.target)(self.gm)
        self._set_location(node, "get_attr")
        return self._constant_value(value)

    def _constant_value(self, value):
        """A float tensor as ``hbir.constant``; other values (int64 index buffers)
        stay Python values, for index math that folds (``_folds``)."""
        if isinstance(value, torch.Tensor) and value.dtype in _TORCH_TO_IR:
            return self.constant(value)
        return value

    def _folds(self, node: fx.Node, importable: bool) -> bool:
        """A node computed from constants and sizes only that export cannot import
        (no rule, or an integer tensor IR cannot hold). Constant math that imports
        is left to the ``fold-constants`` pass."""
        inputs = node.all_input_nodes
        if not all(n in self.constants for n in inputs):
            return False
        if not importable:
            return True
        values = [self.recorded.get(n) for n in inputs] + [self.recorded.get(node)]
        return any(
            isinstance(v, torch.Tensor) and v.dtype not in _TORCH_TO_IR for v in values
        )

    def _outputs(self, arg) -> list[SSAValue]:
        flat: list[SSAValue] = []

        def walk(a):
            if isinstance(a, fx.Node):
                v = self.values[a]
                if isinstance(v, tuple | list):
                    for x in v:
                        walk_value(x)
                else:
                    walk_value(v)
            elif isinstance(a, list | tuple):
                for x in a:
                    walk(x)
            elif isinstance(a, dict):
                for key in a:
                    walk(a[key])
            else:
                raise ExportError(f"model output {a!r} is not a tensor")

        def walk_value(v):
            if not isinstance(v, SSAValue):
                raise ExportError(f"model output {v!r} is not a tensor")
            flat.append(v)

        walk(arg)
        return flat

    def _module(self, name, outputs, input_names, output_names) -> ModuleOp:
        self._location = UnknownLoc()
        self.block.add_op(func.ReturnOp(*outputs))
        in_names = _names(input_names, len(self.block.args), "input")
        out_names = _names(output_names, len(outputs), "output")
        ftype = FunctionType.from_lists(
            [a.type for a in self.block.args], [o.type for o in outputs]
        )
        f = func.FuncOp(
            name,
            ftype,
            Region(self.block),
            arg_attrs=_name_attrs(in_names, "input"),
            res_attrs=_name_attrs(out_names, "output"),
        )
        return ModuleOp([f])


@contextlib.contextmanager
def _sizes_resolved(node: fx.Node, recorded: dict):
    """``node``'s arguments with sizes computed in the graph (``x.size(2) - h``) as
    their values on the example inputs, for the duration of one builder call.

    The prepared model keeps sizes as graph values so that training can change the
    batch size; HBIR shapes are static, so export reads their example values.
    """

    def value(n: fx.Node):
        v = recorded.get(n)
        return v if _is_size(v) else n

    args, kwargs = node.args, node.kwargs
    node.args = fx.node.map_arg(args, value)
    node.kwargs = fx.node.map_arg(kwargs, value)
    try:
        yield
    finally:
        node.args, node.kwargs = args, kwargs


def _flatten(value, leaves: list, name: str) -> None:
    if isinstance(value, torch.Tensor):
        leaves.append(value)
    elif isinstance(value, list | tuple):
        for v in value:
            _flatten(v, leaves, name)
    elif isinstance(value, dict):
        for v in value.values():
            _flatten(v, leaves, name)
    else:
        raise ExportError(f"input {name} holds a {type(value).__name__}, not tensors")


def _rebuild(value, args):
    if isinstance(value, torch.Tensor):
        return next(args)
    if isinstance(value, list | tuple):
        return type(value)(_rebuild(v, args) for v in value)
    return {k: _rebuild(v, args) for k, v in value.items()}


def _integer_constant(name: str, value: torch.Tensor) -> Unsupported:
    return Unsupported(
        f"{name} is a {value.dtype} constant of shape {tuple(value.shape)}: HBIR "
        "holds float constants (integer index math folds only when all of its inputs "
        "are parameters, buffers or sizes)"
    )


def _is_size(v) -> bool:
    """A Python number or a tuple of them (``torch.Size``): a value shapes make."""
    if isinstance(v, list | tuple):
        return all(_is_size(x) for x in v)
    return isinstance(v, int | float | bool)


def _is_number_value(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_tensor_node(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, list | tuple) and any(
        isinstance(v, torch.Tensor) for v in value
    )


def _problem(node: fx.Node, message: str) -> str:
    frame = user_frame(node.meta.get("stack_trace")) or f"(graph node {node.name})"
    return f"  {frame}\n    {message}"


def _names(names: Sequence[str] | None, count: int, kind: str) -> list[str]:
    if names is None:
        return [f"_{kind}_{i}" for i in range(count)]
    names = list(names)
    if len(names) != count:
        raise ExportError(f"{kind}_names has {len(names)} names for {count} {kind}s")
    if len(set(names)) != len(names):
        raise ExportError(f"{kind}_names repeats a name: {names}")
    return names


def _name_attrs(names: list[str], kind: str):
    from xdsl.dialects.builtin import ArrayAttr

    if all(n == f"_{kind}_{i}" for i, n in enumerate(names)):
        return None
    return ArrayAttr([DictionaryAttr({ATTR_ARG_NAME: StringAttr(n)}) for n in names])


class _Recorder(fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.values: dict[fx.Node, Any] = {}

    def run_node(self, n: fx.Node):
        result = super().run_node(n)
        self.values[n] = result
        return result


_exporting: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "hbir_exporting", default=False
)


def is_exporting() -> bool:
    """True while ``export`` runs the model (the reference's ``is_exporting``:
    a forward may take an export-only path)."""
    return _exporting.get()


def check(
    model: nn.Module,
    example_inputs,
    *,
    save_dir: str | os.PathLike | None = None,
    only_record_errors: bool = True,
) -> bool:
    """Whether ``model`` exports (the reference's ``hbdk4.check``): False and
    every op export cannot translate (with its source line), printed and, with
    ``save_dir``, written to ``export_check.txt``; ``only_record_errors=False``
    also writes the op counts of the qat.bc when it exports."""
    try:
        qat_bc = export(model, example_inputs)
        ok, text = True, "export: ok\n"
        if not only_record_errors:
            for f in qat_bc.functions:
                text += "".join(
                    f"@{f.name}: {op}: {n}\n" for op, n in f.statistics().items()
                )
    except ExportError as e:
        ok, text = False, f"{e}\n"
        print(text, end="")
    if save_dir is not None:
        path = os.path.join(save_dir, "export_check.txt")
        try:
            os.makedirs(save_dir, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            raise hbir.HbirOutputError(path, "the export check", e) from None
    return ok


def _flatten_inputs(example_inputs) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def export(
    model: nn.Module,
    example_inputs,
    name: str = "forward",
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    stop_after: str | None = None,
    options: QuantOptions | None = None,
) -> hbir.Module:
    """Translate a prepared (QAT) model into an ``hbir.Module`` (``qat.bc``).

    ``options`` (``QuantOptions``): the rounding (``legacy_round``) and validation
    mode the export records and traces with; by default the options in force.

    The model must be in eval mode with observers disabled
    (``FakeQuantState.VALIDATION``).
    Inputs and outputs (tensors, or tuples/lists/dicts of them) flatten to
    ``_input_N`` / ``_output_N`` unless names are given.

    Export is the 1:1 import of the captured graph followed by the passes of the
    ``export`` phase (``hbir.passes.pipelines``). ``stop_after="import"`` returns
    the import alone, a pass name stops after that pass (as ``hbir-opt
    --compile-to=<pass>`` does).
    """
    if options is not None:
        with using(options):
            return export(
                model, example_inputs, name, input_names, output_names, stop_after
            )
    inputs = _flatten_inputs(example_inputs)
    if isinstance(model, fx.GraphModule):
        gm = model
        restore_sources(gm)  # lost if it was saved whole and loaded back
    else:
        gm = fx.GraphModule(model, HbirTracer().trace(model))
    try:
        check_frozen(gm, "export")
    except PreExportError as e:
        raise ExportError(str(e)) from None
    recorder = _Recorder(gm)
    token = _exporting.set(True)
    try:
        with torch.no_grad():
            recorder.run(*inputs)
        exporter = Exporter(gm, recorder.values)
        with torch.no_grad():
            module_op = exporter.run(name, input_names, output_names)
    finally:
        _exporting.reset(token)
    if exporter.fake_quant_count == 0:
        warnings.warn(
            "export: the model has no enabled fake quantization: this is a float model "
            "(prepare it, calibrate and set FakeQuantState.VALIDATION to get a qat.bc "
            "that convert can turn into fixed point)",
            UserWarning,
            stacklevel=2,
        )
    level = getattr(model, "_consistency_level", None)
    attrs = {
        ATTR_LEGACY_ROUND: BoolAttr.from_bool(is_legacy_round()),
        ATTR_HIGH_PRECISION_QPP: BoolAttr.from_bool(
            bool(getattr(model, "_high_precision_qpp", False))
        ),
        ATTR_FUSE_REQUANTIZE: BoolAttr.from_bool(
            bool(getattr(model, "_fuse_requantize", True))
        ),
    }
    if level is not None:
        attrs[ATTR_CONSISTENCY_LEVEL] = IntegerAttr(level, i64)
    march = getattr(model, "_march", None) or default_march()
    if march is not None:  # set_march's: convert refuses another march
        attrs[ATTR_PREPARED_MARCH] = StringAttr(march)
    module_op.attributes.update(attrs)
    where = f"export of {type(model).__name__}"
    diagnostics.verify(module_op, filename=where)
    if stop_after != "import":
        _run_export_passes(module_op, stop_after or "export", where)
    return hbir.Module(module_op)


def _run_export_passes(module_op: ModuleOp, stop: str, where: str) -> None:
    """The ``export`` phase's passes up to ``stop``, verifying once at the end
    (after each with ``HBIR_VERIFY_EACH``: ``passes/pipelines.py``)."""
    from hbir.dialects import make_context
    from hbir.passes import get_all_passes
    from hbir.passes.pipelines import pipeline_up_to, verify_each

    try:
        phases = pipeline_up_to(stop)
    except ValueError as e:
        raise ExportError(f"export: stop_after: {e}") from None
    if [phase for phase, _ in phases] != ["export"]:
        raise ExportError(f"export: stop_after={stop!r} is not a pass of export")
    ctx = make_context()
    available = get_all_passes()
    specs, each = phases[0][1], verify_each()
    for spec in specs:
        available[spec]()().apply(ctx, module_op)
        if each:
            diagnostics.verify(module_op, filename=f"{where}, after pass '{spec}'")
    if not each:
        diagnostics.verify(module_op, filename=f"{where}, after its passes")
