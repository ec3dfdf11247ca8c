"""Op identity across stages: the torch origin every op carries, and per-layer records.

Export gives every op the location ``loc("<path>|<torch op>#<call>"("file":line:col))``
(``hbir/quantization/export.py``): ``<path>`` is the torch module path of a module
call (``layer1.relu``) or the fx node name of a function / method call
(``_generated_add_0``, ``sigmoid``), ``<call>`` counts the calls of that path (a
module called twice, like torchvision's shared ``self.relu``, has calls 0 and 1).
Convert and the graph edits copy the location onto every op they make from an
op, so the ops of ``qat.bc``, ``quantized.bc`` (and later the hbm debug table)
that come from one torch call share one origin.

The torch side records the same key from the fx graph of the prepared model:
the path of a ``call_module`` node is its target and its call index is the number
of earlier nodes with that target; any other node's path is its (unique) name.
So ``qat.pt`` hooks, ``qat.bc`` ops and ``quantized.bc`` ops align exactly by
``Origin.key``, with no matching by names or shapes.

A layer's value is the value of the torch call: in HBIR, the result of the last
op of that origin (in program order) that is not a ``qnt.dequantize``. Integer
codes (``quantized.bc``) are dequantized with the grid of that origin: a
``qnt.dequantize`` of the same origin, else the last ``qnt.const_fake_quant`` of
that origin in a ``qat.bc`` given as ``grids``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import FileLineColLoc, NameLoc
from xdsl.ir import Operation

# "<path>|<torch op>#<call>"
_DESC = re.compile(r"^(?P<path>[^|]*)\|(?P<op>.*)#(?P<call>\d+)$")


@dataclass(frozen=True)
class Origin:
    """Where an op comes from in the user's torch code."""

    module_path: str
    torch_op: str
    call_index: int
    file: str | None = None
    line: int | None = None
    column: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        """What aligns stages: (module path or node name, call index)."""
        return self.module_path, self.call_index

    @property
    def source(self) -> str:
        """``file:line`` of the torch call, or "" when unknown."""
        return f"{self.file}:{self.line}" if self.file else ""

    def __str__(self) -> str:
        return f"{self.module_path}|{self.torch_op}#{self.call_index}"


def origin_of(op: Operation) -> Origin | None:
    """The origin in ``op``'s location, or None (an op written by hand)."""
    loc = op.location
    if not isinstance(loc, NameLoc):
        return None
    m = _DESC.match(loc.desc.data)
    if m is None:
        return None
    inner = loc.location
    file = line = column = None
    if isinstance(inner, FileLineColLoc):
        file, line, column = inner.filename.data, inner.line.data, inner.column.data
    return Origin(m["path"], m["op"], int(m["call"]), file, line, column)


def key_text(key: tuple[str, int]) -> str:
    return f"{key[0]}#{key[1]}"


@dataclass
class Layer:
    """One torch call's output in one stage."""

    key: tuple[str, int]
    op_type: str  # torch op, or "torch op[hbir op]" for HBIR
    value: np.ndarray  # float
    qscale: float | None = None
    quant_dtype: str = ""
    op_id: int | None = None  # %N in the HBIR model
    origin: Origin | None = None
    instruction: int | None = None  # a compiled model: the instruction's index


@dataclass
class Record:
    """The layers of one run of one stage, in execution order, and its outputs."""

    layers: dict[tuple[str, int], Layer] = field(default_factory=dict)
    outputs: list[np.ndarray] = field(default_factory=list)
    # Values of chosen ops by name (``record_hbir``'s ``taps``): the NV12 check's
    # codes entering the model body, per input.
    taps: dict[str, np.ndarray] = field(default_factory=dict)


# ------------------------------------------------------------------ torch side


def torch_keys(gm) -> dict:
    """fx node -> key, as export writes it into locations (see the module)."""
    keys = {}
    calls: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        path = node.target if node.op == "call_module" else node.name
        keys[node] = (path, calls.get(path, 0))
        calls[path] = calls.get(path, 0) + 1
    return keys


def _torch_type(node, modules) -> str:
    if node.op == "call_module":
        cls = type(modules[node.target])
        return f"{cls.__module__}.{cls.__qualname__}"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return getattr(node.target, "__name__", str(node.target))


def record_torch(gm, inputs: Iterable) -> Record:
    """Run an fx ``GraphModule`` on ``inputs``; every tensor node's value by key,
    with the dtype and scale of its output fake quant (``torch_grids``)."""
    import torch

    record = Record()
    keys = torch_keys(gm)
    recorder = _recorder_class()(gm, keys, record, torch_grids(gm, keys))
    with torch.no_grad():
        out = recorder.run(*inputs)
    recorder.env.clear()
    record.outputs = [
        t.detach().float().numpy() for t in _flatten(out) if isinstance(t, torch.Tensor)
    ]
    return record


@functools.cache
def _recorder_class():
    """The fx interpreter that records (made once: a class made per call would be
    a reference cycle holding a batch's tensors until the garbage collector runs)."""
    import torch
    from torch import fx

    class Recorder(fx.Interpreter):
        def __init__(self, gm, keys, record, grids):
            super().__init__(gm)
            self.keys, self.record, self.grids = keys, record, grids
            self.types = dict(gm.named_modules())

        def run_node(self, n):
            result = super().run_node(n)
            key = self.keys.get(n)
            value = result
            if isinstance(result, tuple) and result and torch.is_tensor(result[0]):
                result = result[0]  # (values, indices): the values, as in HBIR
            if (
                key is not None
                and n.op != "get_attr"
                and isinstance(result, torch.Tensor)
                and result.is_floating_point()
            ):
                grid = self.grids.get(key)
                self.record.layers[key] = Layer(
                    key,
                    _torch_type(n, self.types),
                    result.detach().float().numpy().copy(),
                    grid.qscale if grid is not None else None,
                    f"qint{grid.bits}" if grid is not None else "",
                )
            return value

    return Recorder


def _flatten(value) -> list:
    if isinstance(value, tuple | list):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flatten(v)]
    return [value]


# ------------------------------------------------------------------ HBIR side


@dataclass(frozen=True)
class Grid:
    scales: np.ndarray
    axis: int | None
    bits: int

    @property
    def qscale(self) -> float | None:
        return float(self.scales[0]) if self.scales.size == 1 else None

    def fits(self, codes: np.ndarray) -> bool:
        if self.scales.size == 1:
            return True
        return (
            self.axis is not None
            and self.axis < codes.ndim
            and codes.shape[self.axis] == self.scales.size
        )

    def dequantize(self, codes: np.ndarray) -> np.ndarray:
        s = self.scales.astype(np.float32)
        if self.axis is not None and s.size > 1:
            shape = [1] * codes.ndim
            shape[self.axis] = s.size
            s = s.reshape(shape)
        return (codes.astype(np.float32) * s).astype(np.float32)


def fake_quant_grids(func_op) -> dict[tuple[str, int], Grid]:
    """The grid of the last ``qnt.const_fake_quant`` of each origin that quantizes
    a computed value (a weight's, on a constant, is not the layer's grid)."""
    from hbir.dialects import qnt
    from hbir.dialects.hbir import ConstantOp
    from hbir.runtime import numerics

    grids = {}
    for op in func_op.walk():
        origin = origin_of(op)
        if origin is None or not isinstance(op, qnt.ConstFakeQuantOp):
            continue
        if isinstance(op.operands[0].owner, ConstantOp):
            continue
        bits = op.bits.value.data
        _, qmax = numerics.qrange(bits, bool(op.narrowRange.value.data))
        scales = np.asarray(op.max.get_values(), dtype=np.float64) / qmax
        axis = op.axis.value.data if op.axis is not None else None
        grids[origin.key] = Grid(scales.astype(np.float32), axis, bits)
    return grids


def torch_grids(gm, keys: dict | None = None) -> dict[tuple[str, int], Grid]:
    """The per-tensor output grid of every module call with an output fake quant
    (``keys``: ``torch_keys(gm)``, when the caller has it)."""
    from hbir.quantization.fake_quantize import FakeQuantize

    grids = {}
    modules = dict(gm.named_modules())
    for node, key in (keys if keys is not None else torch_keys(gm)).items():
        fq = getattr(modules.get(node.target), "activation_post_process", None)
        if node.op != "call_module" or not isinstance(fq, FakeQuantize):
            continue
        scale = fq.scale.detach().reshape(-1).float().numpy()
        if scale.size == 1:
            grids[key] = Grid(scale.copy(), None, fq.dtype.bits)
    return grids


def _dequantize_grids(func_op) -> dict[tuple[str, int], Grid]:
    from hbir.dialects import qnt
    from hbir.dialects.hbir import ConstantOp, tensor_type

    grids = {}
    for op in func_op.walk():
        origin = origin_of(op)
        if origin is None or not isinstance(op, qnt.DequantizeOp):
            continue
        if isinstance(op.operands[0].owner, ConstantOp):
            continue  # a weight's grid, not the layer's
        bits = tensor_type(op.input).element_type.width.data
        scales = np.asarray(op.scales.get_values(), dtype=np.float32)
        axis = op.axis.value.data if op.axis is not None else None
        grids[origin.key] = Grid(scales, axis, bits)
    return grids


def _own_grid(op: Operation) -> Grid | None:
    """The grid a ``qnt.quantize`` writes its codes on."""
    from hbir.dialects import qnt
    from hbir.dialects.hbir import tensor_type

    if not isinstance(op, qnt.QuantizeOp):
        return None
    bits = tensor_type(op.output).element_type.width.data
    axis = op.axis.value.data if op.axis is not None else None
    return Grid(np.asarray(op.scales.get_values(), dtype=np.float32), axis, bits)


def layer_ops(func_op) -> dict[tuple[str, int], Operation]:
    """The op whose result is each origin's value (see the module)."""
    from hbir.dialects.hbir import INDEX, ConstantOp, tensor_type

    last = {}
    for op in func_op.body.block.ops:
        origin = origin_of(op)
        if (
            origin is None
            or not op.results
            or op.name == "qnt.dequantize"
            or isinstance(op, ConstantOp)
            # the indices of max(dim) / argmax: its values are the layer's
            or tensor_type(op.results[0]).element_type == INDEX
        ):
            continue
        last[origin.key] = op
    return last


def record_hbir(
    function,
    feed: Mapping[str, np.ndarray],
    grids: Mapping[tuple[str, int], Grid] | None = None,
    on_layer: Callable | None = None,
    taps: Mapping[Operation, str] | None = None,
    on_op_first: Callable | None = None,
    keep_codes: bool = False,
) -> Record:
    """Run an ``hbir.Function`` on ``feed``; every origin's value (see the module).

    ``taps`` also keeps the result of each given op under its name
    (``Record.taps``); ``on_op_first(op, results)`` runs before anything is
    recorded, so it may rewrite a result in place. ``keep_codes``: integer codes
    of no known grid are kept as they are (compared code for code, as the
    compile stage does) instead of left out."""
    layers = _LayerMaker(function.op, grids, keep_codes)
    record = Record()

    def on_op(op, results):
        if on_op_first is not None:
            on_op_first(op, results)
        if taps and op in taps:
            record.taps[taps[op]] = np.array(results[0], copy=True)
        layer = layers.make(op, results[0])
        if layer is None:
            return
        record.layers[layer.key] = layer
        if on_layer is not None:
            on_layer(layer)

    out = function.feed(dict(feed), on_op=on_op)
    record.outputs = [np.asarray(v, dtype=np.float32) for v in out.values()]
    return record


def record_hbm(
    hbm_function,
    source,
    feed: Mapping[str, np.ndarray],
    grids: Mapping[tuple[str, int], Grid] | None = None,
    keep_codes: bool = False,
) -> Record:
    """Run a compiled function (``HbmFunction``) on ``feed``; every origin's value
    as its instructions compute it. ``source`` is the ``hbir.Function`` of the
    quantized.bc it was compiled from: the debug table names the op of that model
    whose whole result an instruction's result is (``DebugEntry.value_of``, put
    back in the op's layout by ``perm``), which gives the origin and the grid
    exactly as ``record_hbir`` on ``source`` would."""
    layers = _LayerMaker(source.op, grids, keep_codes)
    ops = {n: op for op, n in layers.ids.items()}
    record = Record()

    def on_instruction(index, instruction, debug, results):
        op = ops.get(debug.value_of) if debug.value_of is not None else None
        if op is None:
            return
        value = results[0]
        if debug.perm is not None:
            value = np.transpose(value, debug.perm)
        layer = layers.make(op, value)
        if layer is not None:
            layer.instruction = index
            record.layers[layer.key] = layer

    out = hbm_function.feed(dict(feed), on_instruction=on_instruction)
    record.outputs = [np.asarray(v, dtype=np.float32) for v in out.values()]
    return record


class _LayerMaker:
    """The ``Layer`` of an op's result: the op chosen for its origin
    (``layer_ops``), its value in float on its grid (codes dequantized)."""

    def __init__(self, func_op, grids, keep_codes: bool):
        from hbir.dialects.op_ids import op_ids

        self.chosen = {op: key for key, op in layer_ops(func_op).items()}
        self.ids = {op: n for n, op in op_ids(func_op).items()}
        self.own = _dequantize_grids(func_op)
        self.fq = fake_quant_grids(func_op)
        self.grids = grids or {}
        self.keep_codes = keep_codes

    def make(self, op: Operation, y: np.ndarray) -> Layer | None:
        from hbir.dialects.hbir import tensor_type

        key = self.chosen.get(op)
        if key is None:
            return None
        grid = (
            _own_grid(op)
            or self.own.get(key)
            or self.fq.get(key)
            or self.grids.get(key)
        )
        if np.issubdtype(y.dtype, np.integer):
            if grid is not None and grid.fits(y):
                y, dtype = grid.dequantize(y), f"qint{grid.bits}"
            elif self.keep_codes:
                grid, dtype = None, f"{y.dtype} codes"
                y = y.astype(np.float32)
            else:
                return None  # codes of no known grid: nothing to compare
        else:
            y = y.astype(np.float32, copy=True)
            element = tensor_type(op.results[0]).element_type
            dtype = f"qint{grid.bits}" if grid is not None else str(element)
        origin = origin_of(op)
        return Layer(
            key,
            f"{origin.torch_op}[{op.name}]",
            y,
            grid.qscale if grid is not None else None,
            dtype,
            self.ids.get(op),
            origin,
        )


def run_replacing(
    function,
    feed: Mapping[str, np.ndarray],
    key: tuple[str, int],
    value: np.ndarray,
    grids: Mapping[tuple[str, int], Grid] | None = None,
) -> list[np.ndarray]:
    """Outputs of ``function`` with the layer ``key`` replaced by ``value`` (float;
    quantized to the layer's grid where the model holds codes). The interpreter's
    hook sees the very array the next ops read, so writing into it replaces it."""
    func_op = function.op
    target = layer_ops(func_op).get(key)
    grid = _dequantize_grids(func_op).get(key) or (grids or {}).get(key)

    def on_op(op, results):
        if op is not target:
            return
        y = results[0]
        if np.issubdtype(y.dtype, np.integer):
            if grid is None or not grid.fits(y):
                return
            s = grid.scales.astype(np.float64)
            if grid.axis is not None and s.size > 1:
                shape = [1] * y.ndim
                shape[grid.axis] = s.size
                s = s.reshape(shape)
            info = np.iinfo(y.dtype)
            y[...] = np.clip(np.rint(value / s), info.min, info.max).astype(y.dtype)
        elif y.shape == value.shape:
            y[...] = value

    out = function.feed(dict(feed), on_op=on_op)
    return [np.asarray(v, dtype=np.float32) for v in out.values()]
