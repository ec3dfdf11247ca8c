"""Import ``timm`` on a machine whose torchvision C extension cannot load.

Installed into the venv with (torch 2.13.0+cpu must stay; ``--no-deps`` keeps pip from
replacing it with the CUDA torch that torchvision 0.28.0 / timm would pull in)::

    pip install torchvision==0.28.0 --no-deps
    pip install timm --no-deps                       # timm 1.0.31
    pip install huggingface_hub safetensors pyyaml   # timm's pure-python deps
    pip install pillow                               # torchvision.datasets imports PIL
    pip list | grep torch                            # torch 2.13.0+cpu, torchvision 0.28.0

Why: the torchvision 0.28.0 wheel here is a CUDA build. Its ``_C`` extension does not
load against the CPU torch, so ``torchvision.extension._has_ops()`` is False and the
operator schemas it would define (``torchvision::nms``, ``roi_align``, ...) do not exist.
``torchvision/_meta_registrations.py`` nevertheless calls
``torch.library.register_fake`` unconditionally for two of them, ``torchvision::nms``
and ``torchvision::qnms``, and that raises ``RuntimeError: operator torchvision::nms
does not exist`` during ``import torchvision`` (and so during ``import timm``). Every
other registration there (``roi_align``, ``ps_roi_align``, ``roi_pool``,
``ps_roi_pool``, ``deform_conv2d``, the ``_*_backward`` ops, ``qroi_align``, and the
autograd/autocast ones in ``_autograd_registrations.py``) is guarded by ``_has_ops()``
and needs nothing; measured by importing with only these two declared.

So ``import_timm()`` declares those two schemas first (the strings torchvision's own
C++ sources define: ``csrc/ops/nms.cpp`` and ``csrc/ops/quantized/cpu/qnms_kernel.cpp``)
and then imports. No timm model of the suite calls a torchvision C op; calling one
would fail with "no kernel" rather than run. Where a working torchvision is
installed (the schemas already exist), nothing is declared.
"""

from __future__ import annotations

import importlib
import types

import torch

# Schemas that torchvision/_meta_registrations.py registers fake kernels for without
# checking that its C extension loaded.
TORCHVISION_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}

# Kept alive for the whole process: a torch.library.Library removes its definitions
# when it is garbage collected.
_library: torch.library.Library | None = None


def _schema_exists(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
    except RuntimeError:
        return False
    return True


def declare_torchvision_schemas() -> list[str]:
    """Define the missing ``torchvision::`` schemas; return the names defined now.

    Idempotent: a second call (or a working torchvision) defines nothing.
    """
    global _library
    missing = [n for n in TORCHVISION_SCHEMAS if not _schema_exists(n)]
    if not missing:
        return []
    if _library is None:
        # FRAGMENT rather than DEF: it defines the same way, and does not clash
        # with another DEF library of the namespace made elsewhere in the process.
        _library = torch.library.Library("torchvision", "FRAGMENT")
    for name in missing:
        _library.define(TORCHVISION_SCHEMAS[name])
    return missing


def import_timm() -> types.ModuleType:
    """Declare the torchvision schemas (once) and return the ``timm`` module."""
    declare_torchvision_schemas()
    return importlib.import_module("timm")
