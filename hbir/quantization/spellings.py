"""Torch spellings of the op table (``"nn.Conv2d"``, ``"F.relu"``, ``"Tensor.view"``)
resolved to what an fx graph node targets."""

from __future__ import annotations

import operator
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

Kind = Literal["module", "function", "method"]

_ROOTS = {"torch": torch, "F": F, "nn": nn, "operator": operator}


def resolve(spelling: str) -> tuple[Kind, Any]:
    """``("module", nn.Conv2d)``, ``("function", F.relu)`` or ``("method", "view")``."""
    root, _, name = spelling.partition(".")
    if root == "Tensor":
        if not hasattr(torch.Tensor, name):
            raise AttributeError(f"op table: torch.Tensor has no method {name!r}")
        return "method", name
    target = _ROOTS[root]
    for part in name.split("."):  # torch.linalg.vector_norm
        target = getattr(target, part)
    if isinstance(target, type) and issubclass(target, nn.Module):
        return "module", target
    return "function", target
