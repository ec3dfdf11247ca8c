"""In-place writes in a traced forward, captured as values.

A graph node is a value: the QAT modules, export and the integer pipeline compute
each op out of place. An in-place write (``canvas[:, idx] = feats``,
``y.add_(z)``, ``F.relu(x, inplace=True)``) changes a tensor that other nodes read
afterwards; taken as it is, the readers would see the value before the write (the
write silently lost), or, for a tensor made inside forward that tracing froze into
a constant, the write would change that constant on every call (state carried from
one call to the next).

So after tracing:

* :func:`functionalize` rewrites every in-place write into its out-of-place form
  and points every later reader of the written tensor at the new value. A write
  into a parameter or buffer of the model (state kept between calls), or into a
  tensor that is also read through a view (the write would reach both), is refused
  with the user's line.
* :func:`fold_factories` folds what depends on no input, parameter or buffer (a
  ``torch.zeros`` canvas before its write, a position table) back into graph
  constants, as tracing would have frozen it: constants are read, never written.

Tensor factories (:data:`FACTORIES`) are traced as graph nodes for this (see
``tracing.ConcreteTracer``), so that the tensor a forward makes and then writes
into is a value of the graph, not a trace-time constant.
"""

from __future__ import annotations

import operator

import torch
from torch import fx, nn

# Tensor factories traced as nodes: a tensor made inside forward is a graph value.
FACTORIES = ("zeros", "ones", "full", "empty")
FACTORIES += ("zeros_like", "ones_like", "full_like", "empty_like", "tensor")
FACTORY_META = "hbir_factory"
SHAPE_META = "hbir_shape"  # a tensor node's shape on the example inputs
# a tensor computed from sizes and factories only (a causal mask of the sequence
# length): its value on the example inputs
FROM_SIZES_META = "hbir_from_sizes"


def index_assign(tensor: torch.Tensor, index, value) -> torch.Tensor:
    """``tensor[index] = value`` as a value: a new tensor, ``tensor`` unchanged."""
    out = tensor.clone()
    out[index] = value
    return out


def copy_assign(tensor: torch.Tensor, source) -> torch.Tensor:
    """``tensor.copy_(source)`` as a value: ``source`` broadcast to ``tensor``'s
    shape and dtype."""
    return torch.as_tensor(source).to(tensor.dtype).expand_as(tensor).clone()


_IN_PLACE_OPERATORS = {
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.itruediv: operator.truediv,
    operator.ifloordiv: operator.floordiv,
    operator.imatmul: operator.matmul,
}
# In-place methods whose out-of-place form is not ``name[:-1]``.
_IN_PLACE_METHODS = {
    "copy_": copy_assign,
    "zero_": torch.zeros_like,
    "fill_": torch.full_like,
}
# Methods named like in-place ones that change no tensor data.
_NOT_WRITES = frozenset({"requires_grad_", "retain_grad_", "share_memory_"})

# Ops whose result shares its input's memory (the first argument).
_VIEW_METHODS = frozenset(
    {"view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze"}
    | {"unsqueeze", "transpose", "permute", "t", "expand", "expand_as", "narrow"}
    | {"select", "split", "chunk", "unbind", "diagonal", "as_strided", "unfold"}
    | {"movedim", "swapaxes", "detach", "contiguous", "__getitem__"}
)
_VIEW_FUNCTIONS = frozenset(
    {operator.getitem, torch.flatten, torch.reshape, torch.transpose, torch.permute}
    | {torch.squeeze, torch.unsqueeze, torch.narrow, torch.select, torch.split}
    | {torch.chunk, torch.unbind, torch.t, torch.movedim, torch.swapaxes}
    | {torch.diagonal, torch.detach, getattr}
)


class InPlaceError(Exception):
    """An in-place write that cannot be captured as a value (``prepare`` reports
    it as a ``PrepareError`` with the user's line)."""

    def __init__(self, node: fx.Node, message: str):
        super().__init__(message)
        self.node = node


def _is_view(node: fx.Node) -> bool:
    if node.op == "call_method":
        return node.target in _VIEW_METHODS
    return node.op == "call_function" and node.target in _VIEW_FUNCTIONS


def _written(node: fx.Node, modules: dict[str, nn.Module]):
    """(the node ``node`` writes into in place, the out-of-place node's (op, target,
    args, kwargs)), or None when ``node`` writes nothing in place."""
    args, kwargs = node.args, dict(node.kwargs)
    if not args or not isinstance(args[0], fx.Node):
        return None
    if node.op == "call_function" and node.target is operator.setitem:
        return args[0], ("setitem", None, args, kwargs)
    if node.op == "call_function" and node.target in _IN_PLACE_OPERATORS:
        if SHAPE_META not in node.meta:
            return None  # ``n += 1`` on a size: a new number, nothing written
        return args[0], ("call_function", _IN_PLACE_OPERATORS[node.target], args, {})
    if node.op == "call_function" and kwargs.get("inplace") is True:
        kwargs["inplace"] = False
        return args[0], ("call_function", node.target, args, kwargs)
    if node.op == "call_method":
        name = node.target
        if name == "__setitem__":
            return args[0], ("setitem", None, args, kwargs)
        if not name.endswith("_") or name.startswith("_") or name in _NOT_WRITES:
            return None
        if name in _IN_PLACE_METHODS:
            return args[0], ("call_function", _IN_PLACE_METHODS[name], args, kwargs)
        if not hasattr(torch.Tensor, name[:-1]):
            raise InPlaceError(
                node, f"Tensor.{name} writes in place and has no out-of-place form"
            )
        return args[0], ("call_method", name[:-1], args, kwargs)
    if node.op == "call_module" and getattr(modules.get(node.target), "inplace", 0):
        return args[0], None  # the module's QAT form computes out of place
    return None


def _spans(key, shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """``key`` as one ``(start, stop)`` per dimension when it is basic slicing
    (slices of step 1 and ``...``); else None."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        return None
    if Ellipsis in key:
        at = key.index(Ellipsis)
        fill = (slice(None),) * (len(shape) - len(key) + 1)
        key = key[:at] + fill + key[at + 1 :]
    key = key + (slice(None),) * (len(shape) - len(key))
    if len(key) != len(shape) or not all(isinstance(k, slice) for k in key):
        return None
    spans = []
    for k, size in zip(key, shape, strict=True):
        if not all(v is None or type(v) is int for v in (k.start, k.stop, k.step)):
            return None
        start, stop, step = k.indices(size)
        if step != 1 or stop <= start:
            return None
        spans.append((start, stop))
    return spans


def _assigned(graph: fx.Graph, tensor, key, value) -> fx.Node:
    """``tensor[key] = value`` as a node: for basic slicing with a tensor of the
    slice's shape, the untouched slices and ``value`` concatenated (ops every
    stage has); else ``index_assign``."""
    shape = tensor.meta.get(SHAPE_META) if isinstance(tensor, fx.Node) else None
    spans = None if shape is None else _spans(key, shape)
    if spans is not None and isinstance(value, fx.Node):
        written = tuple(b - a for a, b in spans)
        if value.meta.get(SHAPE_META) == written:
            dims = [d for d, span in enumerate(spans) if span != (0, shape[d])]
            return _concatenated(graph, tensor, shape, spans, dims, value)
    return graph.call_function(index_assign, (tensor, key, value))


def _concatenated(graph, base, shape, spans, dims, value) -> fx.Node:
    """``base`` with ``value`` written at ``spans``, splitting along ``dims``."""
    if not dims:
        return value
    d, rest = dims[0], dims[1:]
    a, b = spans[d]

    def part(start, stop):
        key = (slice(None),) * d + (slice(start, stop),)
        node = graph.call_function(operator.getitem, (base, key))
        node.meta[SHAPE_META] = shape[:d] + (stop - start,) + shape[d + 1 :]
        return node

    pieces = [part(0, a)] if a > 0 else []
    middle = part(a, b) if rest else None
    inner_shape = shape[:d] + (b - a,) + shape[d + 1 :]
    pieces.append(_concatenated(graph, middle, inner_shape, spans, rest, value))
    if b < shape[d]:
        pieces.append(part(b, shape[d]))
    out = graph.call_function(torch.cat, (pieces, d))
    out.meta[SHAPE_META] = shape
    return out


def _check_writable(
    node: fx.Node, written: fx.Node, order: dict, state: dict[str, str]
) -> None:
    """Refuse a write whose effect other nodes would see through shared memory."""
    if written.op == "get_attr" and written.target in state:
        raise InPlaceError(
            node,
            f"forward writes into the model's {state[written.target]} "
            f"'{written.target}' in place: state carried from one call to the next "
            "cannot be deployed; compute a new tensor instead",
        )
    base = written
    while _is_view(base) and isinstance(base.args[0], fx.Node):
        if len(base.args[0].users) > 1:
            raise InPlaceError(
                node,
                "an in-place write into a view of a tensor that is read elsewhere "
                "(the write would change both): write into a copy (.clone()) or "
                "build the tensor out of place",
            )
        base = base.args[0]
    for view in written.users:
        if view is node or not _is_view(view) or order[view] > order[node]:
            continue
        if any(order[u] > order[node] for u in view.users):
            raise InPlaceError(
                node,
                "an in-place write into a tensor that is read afterwards through a "
                "view made before the write: write into a copy (.clone()) or build "
                "the tensor out of place",
            )


def model_state(model: nn.Module) -> dict[str, str]:
    """The model's own parameters and buffers (not the constants tracing adds):
    name -> "parameter" / "buffer"."""
    state = {name: "parameter" for name, _ in model.named_parameters()}
    state.update({name: "buffer" for name, _ in model.named_buffers()})
    return state


def functionalize(gm: fx.GraphModule, state: dict[str, str]) -> None:
    """Rewrite ``gm``'s in-place writes out of place (see the module docstring);
    raise ``InPlaceError`` for a write that cannot be captured. ``state``: the
    model's parameters and buffers (``model_state``)."""
    graph = gm.graph
    modules = dict(gm.named_modules())
    for node in list(graph.nodes):
        found = _written(node, modules)
        if found is None:
            continue
        written, replacement = found
        order = {n: i for i, n in enumerate(graph.nodes)}
        _check_writable(node, written, order, state)
        if replacement is None:
            value = node
        else:
            op, target, args, kwargs = replacement
            with graph.inserting_before(node):
                if op == "setitem":
                    value = _assigned(graph, *args)
                else:
                    value = graph.create_node(op, target, args, kwargs)
            value.meta = {**node.meta, **value.meta}
            node.replace_all_uses_with(value)  # ``y = x.add_(z)``: y is the value
            graph.erase_node(node)
        later = [
            u
            for u in written.users
            if u is not value and order.get(u, -1) > order[node]
        ]
        for user in later:
            user.replace_input_with(written, value)
    graph.lint()
    gm.recompile()


def fold_factories(gm: fx.GraphModule, state: dict[str, str]) -> None:
    """Fold the nodes that depend only on tensor factories and trace-time
    constants (no input, nor any of the model's parameters and buffers:
    ``state``) into graph constants (buffers, as tracing stores its constants)."""
    graph = gm.graph
    registered = set(state)
    constant: set[fx.Node] = set()
    foldable: list[fx.Node] = []
    for node in graph.nodes:
        inputs = node.all_input_nodes
        if node.op == "get_attr" and node.target not in registered:
            constant.add(node)
        elif node.op in ("call_function", "call_method") and all(
            n in constant for n in inputs
        ):
            if node.meta.get(FACTORY_META) or any(n in foldable for n in inputs):
                constant.add(node)
                foldable.append(node)
    if not foldable:
        return
    values: dict[fx.Node, object] = {}
    for node in graph.nodes:
        if node in constant:
            values[node] = _evaluate(gm, node, values)
    folded = set(foldable)
    for node in foldable:
        readers = [u for u in node.users if u not in folded]
        if not readers:
            continue
        value = values[node]
        if isinstance(value, torch.Tensor):
            name = _fresh_attribute(gm, "_tensor_constant")
            gm.register_buffer(name, value)
            with graph.inserting_before(node):
                value = graph.get_attr(name)
            value.meta = dict(node.meta)
            value.meta.pop(FACTORY_META, None)
        for user in readers:
            _replace_input(user, node, value)
    for node in reversed(foldable):
        if not node.users:
            graph.erase_node(node)
    graph.lint()
    gm.recompile()


def _replace_input(user: fx.Node, node: fx.Node, value) -> None:
    """``user`` reads ``value`` (a node or a Python value) where it read ``node``."""

    def swap(n: fx.Node):
        return value if n is node else n

    user.args = fx.node.map_arg(user.args, swap)
    user.kwargs = fx.node.map_arg(user.kwargs, swap)


def _evaluate(gm: fx.GraphModule, node: fx.Node, values: dict):
    if node.op == "get_attr":
        return operator.attrgetter(node.target)(gm)
    args = fx.node.map_arg(node.args, values.__getitem__)
    kwargs = fx.node.map_arg(node.kwargs, values.__getitem__)
    with torch.no_grad():
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        return node.target(*args, **kwargs)


def _fresh_attribute(gm: fx.GraphModule, base: str) -> str:
    k = 0
    while hasattr(gm, f"{base}{k}"):
        k += 1
    return f"{base}{k}"
