"""Torch calls with several meanings, rewritten after tracing to the op each one is.

``torch.max`` / ``torch.min`` (and ``Tensor.max`` / ``Tensor.min``) are three ops:

* ``max(x)``, over every element: ``torch.amax(x)``;
* ``max(x, y)`` with a tensor ``y``: ``torch.maximum(x, y)``;
* ``max(x, dim, keepdim)``: the ``(values, indices)`` pair. Where only the values
  are read (``[0]``, ``.values``) it is ``torch.amax(x, dim, keepdim)``; where the
  indices are read it stays as it is, and prepare refuses it (its result holds an
  integer tensor).

So the op table's spellings (``torch.amax``, ``torch.maximum``, ...) apply to each
call as written, and the user's line stays on the new node.
"""

from __future__ import annotations

import operator

import torch
from torch import fx

from hbir.quantization import functionalize

# call -> (over dims, elementwise)
_EXTREMES = {
    torch.max: (torch.amax, torch.maximum),
    torch.min: (torch.amin, torch.minimum),
}
_METHODS = {"max": torch.max, "min": torch.min}
_VALUES = ((operator.getitem, 0), (getattr, "values"))
_INDICES = ((operator.getitem, 1), (getattr, "indices"))


def _extreme(node: fx.Node):
    if node.op == "call_function" and node.target in _EXTREMES:
        return node.target
    if node.op == "call_method" and node.target in _METHODS:
        return _METHODS[node.target]
    return None


def _is_tensor(arg) -> bool:
    return isinstance(arg, fx.Node) and functionalize.SHAPE_META in arg.meta


def _reads(user: fx.Node, node: fx.Node, accessors) -> bool:
    return (
        user.op == "call_function"
        and len(user.args) == 2
        and user.args[0] is node
        and (user.target, user.args[1]) in accessors
    )


def canonicalize(gm: fx.GraphModule) -> None:
    """Rewrite every ``max`` / ``min`` call of ``gm`` to the op it is (module doc)."""
    graph = gm.graph
    for node in list(graph.nodes):
        call = _extreme(node)
        if call is None:
            continue
        over, elementwise = _EXTREMES[call]
        x, *rest = node.args
        kwargs = dict(node.kwargs)
        other = kwargs.pop("other", rest[0] if rest and _is_tensor(rest[0]) else None)
        if other is not None:
            _replace(graph, node, elementwise, (x, other))
            continue
        dim = kwargs.pop("dim", rest[0] if rest else None)
        keepdim = kwargs.pop("keepdim", rest[1] if len(rest) > 1 else False)
        if kwargs:
            continue  # out= and the like: left to prepare's rules
        if dim is None:
            _replace(graph, node, over, (x,))
            continue
        users = list(node.users)
        values = [u for u in users if _reads(u, node, _VALUES)]
        unread = [u for u in users if _reads(u, node, _INDICES) and not u.users]
        if len(values) + len(unread) != len(users):
            continue  # the indices are read
        with graph.inserting_before(node):
            new = graph.call_function(over, (x, dim, keepdim))
        new.meta = dict(node.meta)
        for user in values:
            user.replace_all_uses_with(new)
        for user in values + unread:
            graph.erase_node(user)
        graph.erase_node(node)
    graph.lint()
    gm.recompile()


def _replace(graph: fx.Graph, node: fx.Node, target, args: tuple) -> None:
    with graph.inserting_before(node):
        new = graph.call_function(target, args)
    new.meta = dict(node.meta)
    node.replace_all_uses_with(new)
    graph.erase_node(node)
