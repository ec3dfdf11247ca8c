"""Tracing a float model into a torch.fx graph, and pointing errors at user code.

Why torch.fx and not torch.export: QAT needs a trainable ``nn.Module`` that keeps the
user's module hierarchy (names like ``layer1.0.conv1`` for qconfig overrides and
reports), real ``nn.Parameter`` objects for the optimizer, and buffers that update in
train mode (observers, scales). ``fx.GraphModule`` is exactly that, and its graph is
plain Python we can rewrite node by node. ``torch.export`` produces a functionalised
ATen graph whose parameters are lifted to inputs and whose buffers do not mutate
in place; it is built for inference export, not for a training loop.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import operator
import os
import re
import sys
import traceback
from dataclasses import dataclass

import torch
from torch import fx, nn
from torch.fx import _symbolic_trace
from torch.fx.node import _get_qualified_name

from hbir.errors import HbirError
from hbir.quantization import canonical, functionalize, stubs
from hbir.quantization.decompositions import Decomposition
from hbir.quantization.op_rules import TRACED_THROUGH, module_rule
from hbir.quantization.qat_modules import DeQuantStub, QATModule


class PrepareError(HbirError):
    """A model ``prepare`` cannot handle; the message names the op and source line."""


class HbirTracer(fx.Tracer):
    """fx tracer that records stack traces and keeps stubs, QAT modules and modules
    with a prepare rule (subclasses that keep their base's ``forward`` too) as
    leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True

    def create_node(self, *args, **kwargs) -> fx.Node:
        node = super().create_node(*args, **kwargs)
        # Only where torch found the user's code (not placeholders, the output).
        position = _user_position(sys._getframe(1)) if node.stack_trace else None
        if position is not None:
            node.meta[SOURCE_POSITION] = position
        return node

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        if isinstance(m, (Decomposition, *TRACED_THROUGH)):
            return False
        leaves = (stubs.QuantStub, stubs.DeQuantStub, QATModule, DeQuantStub)
        if isinstance(m, leaves) or module_rule(m) is not None:
            return True
        return super().is_leaf_module(m, qualname)


# Tensor properties and methods that cannot change between calls: a concrete trace
# answers them with the example's values. Sizes stay graph nodes (the batch size of
# training differs from the example's), but their values are known while tracing.
_FIXED_ATTRIBUTES = frozenset({"ndim", "dtype", "device", "is_cuda", "is_nested"})
_FIXED_METHODS = frozenset({"dim", "is_floating_point", "is_contiguous"})
# Methods that read tensor data into Python: the value would be frozen at the
# example's.
_DATA_METHODS = frozenset({"item", "tolist", "numpy"})


class _ConcreteProxy(fx.Proxy):
    """A proxy that also holds its node's value on the example inputs.

    Python needs a plain value where control flow or a builtin consumes a proxy
    (``if h != w``, ``range(n)``, ``len(x)``): those get the example's value, so the
    graph follows the example's branch, as ``torch.export`` specialises.
    """

    def __getattr__(self, name: str):
        if name in _FIXED_ATTRIBUTES:
            return getattr(_real(self), name)
        return super().__getattr__(name)

    def _size_value(self):
        """The example's value of a size (not of tensor data: that would silently
        freeze one input's branch into the graph)."""
        value = _real(self)
        if isinstance(value, torch.Tensor):
            raise fx.proxy.TraceError(
                "control flow or a Python number depends on tensor values, which "
                "differ between inputs"
            )
        return value

    def __bool__(self) -> bool:
        return bool(self._size_value())

    def __index__(self) -> int:
        return operator.index(self._size_value())

    def __int__(self) -> int:
        return int(self._size_value())

    def __float__(self) -> float:
        return float(self._size_value())

    def __len__(self) -> int:
        return len(self._not_tensor("len(x)"))

    def __setitem__(self, key, value) -> None:
        # ``x[key] = value``: a node (``functionalize`` makes it a value)
        self.tracer.create_proxy(
            "call_function", operator.setitem, (self, key, value), {}
        )

    def __iter__(self):
        return iter([self[i] for i in range(len(self._not_tensor("iterating x")))])

    def _not_tensor(self, what: str):
        """A tuple of sizes or outputs, or a tensor whose first dim cannot be the
        batch (``q, k, v = qkv`` along a dim of 3): ``len`` / iteration over a
        tensor whose first dim has an example input's batch size is refused, since
        training changes it."""
        value = _real(self)
        if isinstance(value, torch.Tensor) and (
            value.dim() == 0 or value.shape[0] in self.tracer.batch_sizes
        ):
            raise fx.proxy.TraceError(
                f"{what} on a tensor reads its batch size, which differs between "
                "calls: use x.shape[0] or x.unbind(0)"
            )
        return value


def _real(value):
    """The example value behind a proxy (recursively through containers)."""
    if isinstance(value, fx.proxy.Attribute):
        return getattr(_real(value.root), value.attr)
    if isinstance(value, fx.Proxy):
        return value.__dict__["value"]
    if isinstance(value, list | tuple):
        return type(value)(_real(v) for v in value)
    if isinstance(value, dict):
        return {k: _real(v) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_real(value.start), _real(value.stop), _real(value.step))
    return value


_MISSING = object()


class ConcreteTracer(HbirTracer):
    """Traces while running the example inputs, so code may branch on shapes.

    Every node also computes its value on the example inputs, so code may branch
    on sizes (``if h != w``) and loop over them.
    Helpers that ``torch.fx.wrap`` hides from symbolic tracing (attention masks,
    stochastic depth) are traced into, since their shape logic is concrete here.
    """

    # A buffer is a graph value too (``self.pos.expand(x.shape[0], -1, -1)``: a
    # plain tensor's method cannot take traced sizes).
    proxy_buffer_attributes = True

    def __init__(self, example_inputs: tuple) -> None:
        super().__init__()
        self._inputs = iter(example_inputs)
        # the first dims of the example inputs: what a batch dim looks like
        self.batch_sizes = {
            x.shape[0]
            for x in example_inputs
            if isinstance(x, torch.Tensor) and x.dim() > 0
        }
        self._computing = 0  # > 0 while running the model for a node's value
        self._factory_functions: set = set()  # the originals of the traced factories
        # (the root, id -> name of its parameters and buffers): ``getattr``'s table
        self._names_of: tuple[nn.Module | None, dict[int, str]] = (None, {})

    def call_module(self, m, forward, args, kwargs):
        if self._computing:  # module calls inside a value computation just run
            return forward(*args, **kwargs)
        try:
            self.path_of_module(m)
        except NameError:  # made inside forward (``nn.SiLU()(x)``): its ops
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        """torch.fx's ``getattr`` (a parameter or buffer of the root read in
        ``forward`` becomes one ``get_attr`` node per name), finding the name
        in a table of the root's tensors rather than by walking every module
        on every read, which made tracing quadratic (12 of 15 s of tracing
        timm's MobileOne). A tensor the table does not name, or no longer
        names, takes torch's own search."""
        if self._computing or not isinstance(attr_val, torch.Tensor):
            return attr_val
        name = self._attribute_names().get(id(attr_val))
        if name is None or self._root_tensor(name) is not attr_val:
            return super().getattr(attr, attr_val, parameter_proxy_cache)
        if name not in parameter_proxy_cache:
            parameter_proxy_cache[name] = self.create_proxy("get_attr", name, (), {})
        return parameter_proxy_cache[name]

    def _attribute_names(self) -> dict[int, str]:
        """id -> name of the root's parameters, then of its buffers, each
        tensor under the first name torch's search would find it by."""
        if self._names_of[0] is not self.root:
            names: dict[int, str] = {}
            for name, p in self.root.named_parameters():
                names.setdefault(id(p), name)
            for name, b in self.root.named_buffers():
                if not isinstance(b, nn.Parameter):
                    names.setdefault(id(b), name)
            self._names_of = (self.root, names)
        return self._names_of[1]

    def _root_tensor(self, name: str):
        """The root's parameter or buffer ``name`` now (read from the module's
        own tables: tracing patches ``nn.Module.__getattr__`` to come here)."""
        owner, _, leaf = name.rpartition(".")
        module = self.root.get_submodule(owner)
        found = module._parameters.get(leaf)
        return module._buffers.get(leaf) if found is None else found

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _ConcreteProxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, *rest, **options):
        if kind == "call_method" and target in _DATA_METHODS:
            raise fx.proxy.TraceError(
                f"Tensor.{target}() reads tensor values into Python, which differ "
                "between inputs (data-dependent)"
            )
        real_args, real_kwargs = _real(args), _real(kwargs)
        if kind == "call_method" and target in _FIXED_METHODS:
            return getattr(real_args[0], target)(*real_args[1:], **real_kwargs)
        proxy = super().create_proxy(kind, target, args, kwargs, *rest, **options)
        self._computing += 1
        try:
            value = self._value(kind, target, real_args, real_kwargs)
        finally:
            self._computing -= 1
        proxy.__dict__["value"] = value
        if isinstance(value, torch.Tensor):
            node = proxy.node
            node.meta[functionalize.SHAPE_META] = tuple(value.shape)
            tensors = [n for n in node.all_input_nodes if n.op != "get_attr"]
            tensors = [n for n in tensors if functionalize.SHAPE_META in n.meta]
            if kind in ("call_function", "call_method") and (
                (not tensors and target in self._factory_functions)
                or (
                    tensors
                    and all(functionalize.FROM_SIZES_META in n.meta for n in tensors)
                )
            ):
                # as made (an in-place write while tracing must not change it)
                node.meta[functionalize.FROM_SIZES_META] = value.clone()
        return proxy

    def _factory(self, original):
        """``torch.<factory>`` while tracing: a graph node (its value computed),
        so a tensor made inside forward is a value of the graph."""

        @functools.wraps(original)
        def traced(*args, **kwargs):
            if self._computing:
                return original(*args, **kwargs)
            proxy = self.create_proxy("call_function", original, args, kwargs)
            proxy.node.meta[functionalize.FACTORY_META] = True
            return proxy

        return traced

    def _value(self, kind, target, args, kwargs):
        if kind == "placeholder":
            value = next(self._inputs, _MISSING)
            if value is _MISSING:
                if not args:  # no default either
                    raise fx.proxy.TraceError(f"no example input for '{target}'")
                return args[0]  # a parameter with a default
            return value
        if kind == "get_attr":
            return operator.attrgetter(target)(self.root)
        if kind == "call_function":
            return target(*args, **kwargs)
        if kind == "call_method":
            return getattr(args[0], target)(*args[1:], **kwargs)
        if kind == "call_module":
            return self.root.get_submodule(target)(*args, **kwargs)
        return None

    def trace(self, root, concrete_args=None):
        wrapped = dict(_symbolic_trace._wrapped_fns_to_patch)
        _symbolic_trace._wrapped_fns_to_patch.clear()
        factories = {name: getattr(torch, name) for name in functionalize.FACTORIES}
        self._factory_functions = set(factories.values())
        try:
            for name, original in factories.items():
                setattr(torch, name, self._factory(original))
            with torch.no_grad():
                return super().trace(root, concrete_args)
        finally:
            for name, original in factories.items():
                setattr(torch, name, original)
            _symbolic_trace._wrapped_fns_to_patch.update(wrapped)


def trace(model: nn.Module, example_inputs: tuple) -> fx.GraphModule:
    """Trace ``model`` on ``example_inputs``; a failure names the user's line."""
    was_training = model.training
    model.eval()
    state = functionalize.model_state(model)
    before = {name: t.detach().clone() for name, t in _tensors(model)}
    tracer = ConcreteTracer(example_inputs)
    try:
        graph = tracer.trace(model)
    except Exception as error:
        where = user_frame_of_traceback(error.__traceback__) or "(source line unknown)"
        raise PrepareError(
            f"prepare could not trace {type(model).__name__}: "
            f"{type(error).__name__}: {error}\n  {where}\n"
            "Tracing follows the example inputs: control flow may depend on shapes, "
            "not on tensor values."
        ) from error
    finally:
        model.train(was_training)
    for name, t in _tensors(model):  # written outside the graph: plain tensors
        if name in before and not torch.equal(t, before[name]):
            where = _line_writing(model, example_inputs, t) or "(source line unknown)"
            raise PrepareError(
                f"prepare cannot trace {type(model).__name__}: forward writes into "
                f"the model's {state[name]} '{name}' in place: state carried from "
                "one call to the next cannot be deployed; compute a new tensor "
                f"instead\n  {where}"
            )
    gm = fx.GraphModule(tracer.root, graph, type(model).__name__)
    try:
        functionalize.functionalize(gm, state)
    except functionalize.InPlaceError as error:
        where = user_frame(error.node.stack_trace) or "(source line unknown)"
        raise PrepareError(
            f"prepare cannot trace {type(model).__name__}: {error}\n  {where}"
        ) from None
    functionalize.fold_factories(gm, state)
    canonical.canonicalize(gm)
    _drop_unread_attributes(gm)
    gm.train(was_training)
    return gm


def _drop_unread_attributes(gm: fx.GraphModule) -> None:
    """Attributes read only by code that did not run (the checks of a fast path a
    trace does not take: nn.TransformerEncoderLayer reads its attention's
    ``in_proj_weight``), which prepare may replace by modules without them."""
    for node in list(gm.graph.nodes):
        if node.op == "get_attr" and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()


class _WriteFinder(torch.overrides.TorchFunctionMode):
    """Records the user's line of the first in-place call on ``tensor``."""

    def __init__(self, tensor: torch.Tensor):
        super().__init__()
        self.tensor, self.line = tensor, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        writes = name.endswith("_") and not name.startswith("_") or "setitem" in name
        if self.line is None and writes and args and args[0] is self.tensor:
            for frame in reversed(traceback.extract_stack()):
                if _is_user_file(frame.filename):
                    line = (frame.line or "").strip()
                    self.line = f"{frame.filename}:{frame.lineno}: {line}"
                    break
        return func(*args, **(kwargs or {}))


def _line_writing(model: nn.Module, example_inputs: tuple, tensor) -> str | None:
    """Where the forward writes into ``tensor`` (run once more to find it)."""
    finder = _WriteFinder(tensor)
    try:
        with torch.no_grad(), finder:
            model(*example_inputs)
    except Exception:  # the write was seen while tracing: the line is a bonus
        pass
    return finder.line


def _tensors(model: nn.Module):
    """The model's parameters and buffers, by name."""
    yield from model.named_parameters()
    yield from model.named_buffers()


# ----------------------------------------------------------------- values


@dataclass(frozen=True)
class ValueInfo:
    """What a node produced on the example inputs."""

    is_tensor: bool
    dtype: torch.dtype | None = None
    shape: tuple[int, ...] | None = None
    holds_index_tensor: bool = False  # an integer / bool tensor, or a tuple with one

    @property
    def is_float_tensor(self) -> bool:
        return self.is_tensor and self.dtype.is_floating_point


def _is_index_tensor(value) -> bool:
    if isinstance(value, torch.Tensor):
        return not value.dtype.is_floating_point
    if isinstance(value, tuple | list):
        return any(_is_index_tensor(v) for v in value)
    return False


def describe_value(value) -> ValueInfo:
    if isinstance(value, torch.Tensor):
        return ValueInfo(True, value.dtype, tuple(value.shape), _is_index_tensor(value))
    return ValueInfo(False, holds_index_tensor=_is_index_tensor(value))


class _Recorder(fx.Interpreter):
    def run_node(self, n: fx.Node):
        result = super().run_node(n)
        n.meta["hbir_value"] = describe_value(result)
        return result


def record_values(gm: fx.GraphModule, example_inputs: tuple) -> None:
    """Run ``gm`` once (eval mode, no grad) and store each node's ``ValueInfo``."""
    was_training = gm.training
    gm.eval()
    try:
        with torch.no_grad():
            _Recorder(gm).run(*example_inputs)
    except Exception as error:
        raise PrepareError(
            f"the float model failed on example_inputs: {type(error).__name__}: {error}"
        ) from error
    finally:
        gm.train(was_training)


def value_of(node: fx.Node) -> ValueInfo:
    return node.meta.get("hbir_value", ValueInfo(False))


# ----------------------------------------------------------------- source locations

_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*\n(?P<code>[^\n]*)'
)
_INTERNAL_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, stubs)
)


def _is_user_file(path: str) -> bool:
    return not os.path.abspath(path).startswith(_INTERNAL_DIRS)


def user_frame(stack_trace: str | None) -> str | None:
    """``file:line: code`` of the innermost user frame in an fx node stack trace."""
    frames = [m.groupdict() for m in _FRAME.finditer(stack_trace or "")]
    for frame in reversed(frames):
        if _is_user_file(frame["file"]):
            return f"{frame['file']}:{frame['line']}: {frame['code'].strip()}"
    return None


# node.meta key: (file, line, column) of the user code that made the node, the
# column 1-based as MLIR counts (0: unknown). prepare copies node meta along.
SOURCE_POSITION = "hbir_source_position"
_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_source_root: str | None = None


def set_source_root(root: str | os.PathLike | None) -> None:
    """The folder the source paths in exported locations are relative to.

    By default each file's project root: the nearest folder above it that holds
    ``pyproject.toml``, ``setup.py``, ``setup.cfg`` or ``.git``, else the current
    directory. ``None`` restores the default.
    """
    global _source_root
    _source_root = None if root is None else os.path.abspath(root)


@functools.lru_cache(maxsize=256)
def _project_root(folder: str) -> str | None:
    while True:
        if any(os.path.exists(os.path.join(folder, m)) for m in _PROJECT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


_LIBRARY_FOLDERS = ("site-packages", "dist-packages")


def _library_root(path: str) -> str | None:
    """The ``site-packages`` (or ``dist-packages``) folder on ``sys.path`` that
    holds ``path``, when it is a file of an installed library."""
    for entry in sys.path:
        entry = os.path.abspath(entry or os.curdir)
        if os.path.basename(entry) in _LIBRARY_FOLDERS and path.startswith(
            entry + os.sep
        ):
            return entry
    return None


def source_path(path: str) -> str:
    """``path`` as a model file stores it: relative to the source root, so that a
    model carries no absolute path of the machine it was exported on. A file of
    an installed library is relative to its ``site-packages``
    (``timm/layers/conv_bn_act.py``), whatever the source root."""
    path = os.path.abspath(path)
    root = (
        _library_root(path)
        or _source_root
        or _project_root(os.path.dirname(path))
        or os.getcwd()
    )
    try:
        relative = os.path.relpath(path, root)
    except ValueError:  # another drive
        return os.path.basename(path)
    return relative.replace(os.sep, "/")


def _user_position(frame) -> tuple[str, int, int] | None:
    """(file, line, 1-based column) of the innermost user frame from ``frame`` out,
    read from Python's own instruction positions (3.11+)."""
    while frame is not None and not _is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    code = frame.f_code
    positions = itertools.islice(code.co_positions(), frame.f_lasti // 2, None)
    line, _, col, _ = next(positions, (None, None, None, None))
    line = line or frame.f_lineno
    if col is None:
        return code.co_filename, line, 0
    # co_positions counts UTF-8 bytes; MLIR columns count characters from 1.
    text = linecache.getline(code.co_filename, line).encode()
    return code.co_filename, line, len(text[:col].decode(errors="ignore")) + 1


def source_location(node: fx.Node) -> tuple[str, int, int] | None:
    """(path as ``source_path`` stores it, line, column) of the user code that
    made ``node``; the column is 0 where only the stack trace is known."""
    position = node.meta.get(SOURCE_POSITION)
    if position is None:
        frames = [m.groupdict() for m in _FRAME.finditer(node.stack_trace or "")]
        users = [f for f in frames if _is_user_file(f["file"])]
        if not users:
            return None
        position = (users[-1]["file"], int(users[-1]["line"]), 0)
    file, line, column = position
    return source_path(file), line, column


# GraphModule attribute: each node's source, kept where pickling keeps it. A
# whole-saved qat.pt (``torch.save(qat)``) is rebuilt from its generated code when
# loaded, and the rebuilt nodes have lost their ``meta``; ``restore_sources`` puts
# it back, so that export still names the user's lines in another process.
KEPT_SOURCES = "_hbir_node_sources"
_SOURCE_KEYS = ("stack_trace", SOURCE_POSITION)


def _node_key(node: fx.Node) -> tuple[str, str]:
    return node.op, str(node.target)


def keep_sources(gm: fx.GraphModule) -> None:
    """Store every node's source (stack trace and position) on ``gm`` itself, in
    graph order with the node's name and (op, target)."""
    kept = []
    for node in gm.graph.nodes:
        meta = {k: node.meta[k] for k in _SOURCE_KEYS if node.meta.get(k)}
        kept.append((node.name, _node_key(node), meta))
    setattr(gm, KEPT_SOURCES, kept)


def restore_sources(gm: fx.GraphModule) -> None:
    """Put the sources ``keep_sources`` stored back on nodes that lost them: by
    position where the graph still has the same (op, target) sequence, else by
    node name. Nodes that match neither stay without a source."""
    kept = getattr(gm, KEPT_SOURCES, None)
    nodes = list(gm.graph.nodes)
    if not kept or any(n.meta.get(k) for n in nodes for k in _SOURCE_KEYS):
        return
    if [key for _, key, _ in kept] == [_node_key(n) for n in nodes]:
        pairs = zip(nodes, (meta for _, _, meta in kept), strict=True)
    else:
        by_name = {name: meta for name, _, meta in kept}
        pairs = ((n, by_name.get(n.name, {})) for n in nodes)
    for node, meta in pairs:
        node.meta.update(meta)
        if "stack_trace" in meta:
            node.stack_trace = meta["stack_trace"]


def user_frame_of_traceback(tb) -> str | None:
    for frame in reversed(traceback.extract_tb(tb)):
        if _is_user_file(frame.filename):
            return f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return None


def describe_target(node: fx.Node, modules: dict[str, nn.Module]) -> str:
    """A readable name for what a call node calls."""
    if node.op == "call_module":
        cls = type(modules[node.target])
        return f"{cls.__module__}.{cls.__qualname__} (module '{node.target}')"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    try:
        return _get_qualified_name(node.target)
    except Exception:
        return repr(node.target)
