"""Fusing conv + batch norm (+ relu/relu6) and linear + relu before quantization.

The batch norm is folded into the conv once, at prepare time, with its running
statistics (``torch.nn.utils.fusion.fuse_conv_bn_weights``): QAT then trains the
folded weights directly, which is what deployment runs, and batch statistics no longer
move. The relu becomes the conv's ``fused_relu``, so its output fake quant sees the
post-relu value, as the fused hardware op produces it. A candidate that cannot be
fused is reported with the reason (``model_check_result.txt``).
"""

from __future__ import annotations

import copy
import operator
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.nn.utils.fusion import fuse_conv_bn_weights

RELU_FUNCTIONS = {F.relu: "relu", torch.relu: "relu", F.relu6: "relu6"}
RELU_METHODS = {"relu": "relu"}
RELU_MODULES = {nn.ReLU: "relu", nn.ReLU6: "relu6"}
CONVS = (nn.Conv2d, nn.ConvTranspose2d)


@dataclass(frozen=True)
class Unfused:
    """A fusable pattern left unfused: the node names, their types, and why."""

    names: tuple[str, ...]
    types: tuple[str, ...]
    reason: str


def relu_kind(node: fx.Node | None, modules: dict[str, nn.Module]) -> str | None:
    """``"relu"`` / ``"relu6"`` if ``node`` applies that activation, else None."""
    if node is None:
        return None
    if node.op == "call_module":
        return RELU_MODULES.get(type(modules[node.target]))
    if node.op == "call_function":
        if node.target is F.hardtanh and _hardtanh_bounds(node) == (0.0, 6.0):
            return "relu6"
        return RELU_FUNCTIONS.get(node.target)
    if node.op == "call_method":
        return RELU_METHODS.get(node.target)
    return None


def _hardtanh_bounds(node: fx.Node) -> tuple[float, float]:
    args = list(node.args[1:3]) + [None, None]
    lo = node.kwargs.get("min_val", args[0] if args[0] is not None else -1.0)
    hi = node.kwargs.get("max_val", args[1] if args[1] is not None else 1.0)
    return float(lo), float(hi)


def _is_batch_norm(node: fx.Node, modules) -> bool:
    return node.op == "call_module" and isinstance(modules[node.target], nn.BatchNorm2d)


_BATCH_NORM_ARGS = ("input", "running_mean", "running_var", "weight", "bias")
_BATCH_NORM_ARGS += ("training", "momentum", "eps")


def _batch_norm_of(node: fx.Node, gm: fx.GraphModule, modules):
    """The batch norm ``node`` applies: an ``nn.BatchNorm2d`` module, or an
    eval-mode ``F.batch_norm`` on module attributes (timm's ``BatchNormAct2d``
    calls it) as the ``nn.BatchNorm2d`` it computes; else None."""
    if _is_batch_norm(node, modules):
        return modules[node.target]
    if node.op != "call_function" or node.target is not F.batch_norm:
        return None
    args = dict(zip(_BATCH_NORM_ARGS, node.args, strict=False)) | dict(node.kwargs)
    if args.get("training", False):
        return None
    tensors = {}
    for name in ("running_mean", "running_var", "weight", "bias"):
        arg = args.get(name)
        if arg is not None and not (isinstance(arg, fx.Node) and arg.op == "get_attr"):
            return None
        tensors[name] = None if arg is None else operator.attrgetter(arg.target)(gm)
    if tensors["running_mean"] is None or tensors["running_var"] is None:
        return None
    bn = nn.BatchNorm2d(tensors["running_mean"].numel(), eps=args.get("eps", 1e-5))
    bn.running_mean, bn.running_var = tensors["running_mean"], tensors["running_var"]
    for name in ("weight", "bias"):  # buffers in a frozen batch norm
        t = tensors[name]
        if t is not None and not isinstance(t, nn.Parameter):
            t = nn.Parameter(t.detach(), requires_grad=False)
        setattr(bn, name, t)
    return bn.eval()


def _bn_name(node: fx.Node) -> str:
    return node.target if node.op == "call_module" else node.name


def _describe(node: fx.Node, modules) -> str:
    if node.op == "call_module":
        return type(modules[node.target]).__name__
    return getattr(node.target, "__name__", str(node.target))


def _fold(conv: nn.Module, bn: nn.BatchNorm2d) -> nn.Module:
    fused = copy.deepcopy(conv)
    transpose = isinstance(conv, nn.ConvTranspose2d)
    weight, bias = fuse_conv_bn_weights(
        conv.weight,
        conv.bias,
        bn.running_mean,
        bn.running_var,
        bn.eps,
        bn.weight,
        bn.bias,
        transpose,
    )
    fused.weight, fused.bias = weight, bias
    return fused


def _why_not_fold(conv_node, bn_node, bn, modules, calls) -> str | None:
    conv = modules[conv_node.target]
    if calls[conv_node.target] > 1:
        return f"'{conv_node.target}' is called {calls[conv_node.target]} times"
    if len(conv_node.users) > 1:
        return f"the output of '{conv_node.target}' is also used elsewhere"
    if bn.running_mean is None or bn.running_var is None:
        return f"'{bn_node.name}' has no running statistics"
    if isinstance(conv, nn.ConvTranspose2d) and conv.groups != 1:
        return "transposed conv with groups > 1"
    return None


def fuse(gm: fx.GraphModule) -> list[Unfused]:
    """Fold conv+bn and fuse conv/linear+relu in ``gm`` in place; report leftovers.

    A fused conv/linear node gets ``node.meta["hbir_fused_relu"]``.
    """
    modules = dict(gm.named_modules())
    calls = Counter(n.target for n in gm.graph.nodes if n.op == "call_module")
    unfused: list[Unfused] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not isinstance(
            modules[node.target], (*CONVS, nn.Linear)
        ):
            continue
        for user in list(node.users):
            bn = _batch_norm_of(user, gm, modules)
            if isinstance(modules[node.target], CONVS) and bn is not None:
                reason = _why_not_fold(node, user, bn, modules, calls)
                if reason is None:
                    fused = _fold(modules[node.target], bn)
                    gm.add_submodule(node.target, fused)
                    modules[node.target] = fused
                    inputs = user.all_input_nodes
                    user.replace_all_uses_with(node)
                    gm.graph.erase_node(user)
                    for n in inputs:  # the statistics' get_attr nodes
                        if n.op == "get_attr" and not n.users:
                            gm.graph.erase_node(n)
                else:
                    names = (node.target, _bn_name(user))
                    types = (_describe(node, modules), "BatchNorm2d")
                    unfused.append(Unfused(names, types, reason))
        for user in list(node.users):
            kind = relu_kind(user, modules)
            if kind is None:
                continue
            reason = None
            if calls[node.target] > 1:
                reason = f"'{node.target}' is called {calls[node.target]} times"
            elif len(node.users) > 1:
                reason = f"the output of '{node.target}' is also used elsewhere"
            if reason is None:
                node.meta["hbir_fused_relu"] = kind
                user.replace_all_uses_with(node)
                gm.graph.erase_node(user)
            else:
                names = (node.target, user.name)
                unfused.append(Unfused(names, (_describe(node, modules), kind), reason))
    reported = {name for u in unfused for name in u.names}
    for node in gm.graph.nodes:
        if _batch_norm_of(node, gm, modules) is not None:
            if _bn_name(node) not in reported:
                reason = "not after a conv: quantized as a per-channel affine"
                unfused.append(Unfused((_bn_name(node),), ("BatchNorm2d",), reason))
    gm.graph.lint()
    return unfused
