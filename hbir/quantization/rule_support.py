"""What prepare's op rules share: the refusal and the facts of a graph value."""

from __future__ import annotations

from typing import Any

from torch import fx, nn


class Unsupported(Exception):
    """This call of a known op has arguments prepare cannot quantize."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise Unsupported(message)


def is_tensor_arg(x: Any) -> bool:
    """A graph value that is a tensor (sizes computed in the graph are not)."""
    if not isinstance(x, fx.Node):
        return False
    value = x.meta.get("hbir_value")
    return value is None or value.is_tensor


def rank(node) -> int:
    """The rank of a graph value, as it was on the example inputs."""
    return len(node.meta["hbir_value"].shape)


def parameter(t):
    """A traced weight as a parameter of the QAT module (shared if it is one)."""
    if t is None or isinstance(t, nn.Parameter):
        return t
    return nn.Parameter(t.detach().clone(), requires_grad=False)
