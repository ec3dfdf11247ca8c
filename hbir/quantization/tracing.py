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

import os
import re
import traceback
from dataclasses import dataclass

import torch
from torch import fx, nn
from torch.fx.node import _get_qualified_name

from hbir.quantization import stubs
from hbir.quantization.decompositions import Decomposition
from hbir.quantization.qat_modules import DeQuantStub, QATModule


class PrepareError(Exception):
    """A model ``prepare`` cannot handle; the message names the op and source line."""


class HbirTracer(fx.Tracer):
    """fx tracer that records stack traces and keeps stubs and QAT modules as leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        if isinstance(m, Decomposition):
            return False
        leaves = (stubs.QuantStub, stubs.DeQuantStub, QATModule, DeQuantStub)
        return isinstance(m, leaves) or super().is_leaf_module(m, qualname)


def trace(model: nn.Module) -> fx.GraphModule:
    """Symbolically trace ``model``; a failure names the user's line that caused it."""
    tracer = HbirTracer()
    try:
        graph = tracer.trace(model)
    except Exception as error:
        where = user_frame_of_traceback(error.__traceback__) or "(source line unknown)"
        raise PrepareError(
            f"prepare could not trace {type(model).__name__}: {error}\n  {where}\n"
            "torch.fx tracing needs forward code whose control flow does not depend on "
            "tensor values."
        ) from error
    return fx.GraphModule(tracer.root, graph, type(model).__name__)


# ----------------------------------------------------------------- values


@dataclass(frozen=True)
class ValueInfo:
    """What a node produced on the example inputs."""

    is_tensor: bool
    dtype: torch.dtype | None = None
    shape: tuple[int, ...] | None = None

    @property
    def is_float_tensor(self) -> bool:
        return self.is_tensor and self.dtype.is_floating_point


def describe_value(value) -> ValueInfo:
    if isinstance(value, torch.Tensor):
        return ValueInfo(True, value.dtype, tuple(value.shape))
    return ValueInfo(False)


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
