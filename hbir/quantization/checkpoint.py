"""``qat.pt`` from the command line: a whole saved model, or a ``state_dict`` and
the code that builds the model.

The README saves ``qat.state_dict()`` (tensors only: ``torch.load`` reads it with
``weights_only=True``); a whole model (``torch.save(qat, ...)``) works as well.
A ``state_dict`` needs the model it belongs to, named as ``module:factory``:

* ``module`` is an importable module (``mypkg.models``) or a Python file
  (``examples/digits_e2e.py``, loaded by path; its ``__main__`` block does not run);
* ``factory`` is a callable of it (``build_qat_model``, ``Net``, ``models.Net``)
  that takes no arguments and returns the prepared model (what
  ``hbir.quantization.prepare`` returned), or the float model, which is then
  prepared here on the example inputs with ``qconfig`` (``module:name`` of a
  ``QConfig`` / ``QconfigSetter``; default: ``get_qconfig()``), as resuming does
  in docs/quantization.md.

The model comes back in eval mode; one built for a ``state_dict`` is put in
``FakeQuantState.VALIDATION`` (the state is not part of a ``state_dict``), a whole
model keeps the state it was saved in.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import sys
import tempfile
import zipfile
from collections.abc import Callable

from hbir.errors import HbirError, HbirFileError

__all__ = ["CheckpointError", "load_object", "load_qat"]


class CheckpointError(HbirError):
    """A ``module:factory`` that cannot be found or called, or a ``state_dict``
    that does not fit the model it builds."""


def load_object(spec: str, what: str = "--model") -> object:
    """The object ``spec`` (``module:name``, see the module) names."""
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise CheckpointError(
            f"{what} {spec!r}: expected module:name (mypkg.models:build or "
            "path/to/file.py:build)"
        )
    module = _module(module_name, what, spec)
    value: object = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise CheckpointError(
                f"{what} {spec}: {module_name} has no attribute {attribute!r}"
            )
        value = getattr(value, part)
    return value


def _module(name: str, what: str, spec: str):
    if name.endswith(".py") or os.sep in name:
        if not os.path.isfile(name):
            raise CheckpointError(f"{what} {spec}: {name}: no such file")
        folder = os.path.dirname(os.path.abspath(name))
        stem = os.path.splitext(os.path.basename(name))[0]
        file_spec = importlib.util.spec_from_file_location(f"_hbir_model_{stem}", name)
        module = importlib.util.module_from_spec(file_spec)
        sys.path.insert(0, folder)  # the file's own sibling imports
        try:
            sys.modules[file_spec.name] = module
            file_spec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(file_spec.name, None)
            raise CheckpointError(
                f"{what} {spec}: importing {name} failed: {type(e).__name__}: {e}"
            ) from None
        finally:
            sys.path.remove(folder)
        return module
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise CheckpointError(f"{what} {spec}: cannot import {name}: {e}") from None


def load_qat(
    path: str | os.PathLike,
    factory: str | Callable | None = None,
    example_inputs=None,
    qconfig: str | object | None = None,
):
    """The prepared model of ``path`` (a whole model, or a ``state_dict`` for the
    model ``factory`` builds), in eval mode; see the module."""
    from torch import fx, nn

    path = os.fspath(path)
    content, whole = _read(path)
    if whole:
        if not isinstance(content, fx.GraphModule):
            raise HbirFileError(
                f"{path}: expected qat.pt, the prepared model (what "
                "hbir.quantization.prepare returned) or its state_dict; got "
                f"{type(content).__name__}"
            )
        return content.eval()
    if not isinstance(content, dict) or not all(isinstance(k, str) for k in content):
        raise HbirFileError(
            f"{path}: expected qat.pt, a prepared model or its state_dict; got "
            f"{type(content).__name__}"
        )
    if factory is None:
        raise CheckpointError(
            f"{path} is a state_dict (qat.state_dict(), as the README saves it): "
            "name the code that builds its model with --model module:factory "
            "(e.g. --model examples/digits_e2e.py:DigitsNet), or save the whole "
            "model with torch.save(qat, path)"
        )
    build = load_object(factory) if isinstance(factory, str) else factory
    if not callable(build):
        raise CheckpointError(f"--model {factory}: not callable")
    try:
        model = build()
    except Exception as e:
        raise CheckpointError(
            f"--model {factory}: calling it failed: {type(e).__name__}: {e}"
        ) from None
    if not isinstance(model, nn.Module):
        raise CheckpointError(
            f"--model {factory}: returned {type(model).__name__}, not a torch model"
        )
    if not _is_prepared(model):
        model = _prepare(model, factory, example_inputs, qconfig)
    try:
        model.load_state_dict(content)
    except RuntimeError as e:
        detail = " ".join(str(e).split())
        raise CheckpointError(
            f"{path} does not fit the model --model {factory} builds (same "
            f"architecture and qconfig as when it was saved?): {detail[:600]}"
        ) from None
    return _validation(model)


def _read(path: str) -> tuple[object, bool]:
    """The file's content, and whether it is a whole pickled model (which only
    ``weights_only=False`` reads: the file is then trusted like any code)."""
    import torch

    from hbir.hbm.container import MAGIC

    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
    except OSError as e:
        raise HbirFileError(f"{path}: cannot read qat.pt: {e.strerror}") from None
    if head == MAGIC or path.endswith((".bc", ".mlir", ".hbm")):
        raise HbirFileError(
            f"{path}: an hbir model file, not qat.pt (the prepared torch model "
            "or its state_dict)"
        )
    if not zipfile.is_zipfile(path) and head[:1] != b"\x80":  # nor a legacy pickle
        raise HbirFileError(
            f"{path}: cannot read qat.pt: not a torch.save file (neither the zip "
            "archive torch.save writes nor a pickle)"
        )
    try:
        return torch.load(path, weights_only=True), False
    except pickle.UnpicklingError:
        pass  # more than tensors: a whole model
    except Exception as e:
        raise HbirFileError(
            f"{path}: cannot read qat.pt: not a torch.save file ({_first_line(e)})"
        ) from None
    try:
        return torch.load(path, weights_only=False), True
    except Exception as e:
        raise HbirFileError(
            f"{path}: cannot read qat.pt: the saved model does not load "
            f"({_first_line(e)})"
        ) from None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"


def _is_prepared(model) -> bool:
    from hbir.quantization.fake_quantize import FakeQuantize

    return any(isinstance(m, FakeQuantize) for m in model.modules())


def _prepare(model, factory, example_inputs, qconfig):
    from hbir.quantization.prepare import prepare
    from hbir.quantization.qconfig import QConfig, QconfigSetter

    if example_inputs is None:
        raise CheckpointError(
            f"--model {factory} builds a float model: preparing it needs example "
            "inputs (--data)"
        )
    if isinstance(qconfig, str):
        qconfig = load_object(qconfig, "--qconfig")
        if not isinstance(qconfig, QConfig | QconfigSetter):
            raise CheckpointError(
                f"--qconfig: expected a QConfig or QconfigSetter, got "
                f"{type(qconfig).__name__}"
            )
    with tempfile.TemporaryDirectory() as folder:  # prepare's two check files
        return prepare(model.eval(), example_inputs, qconfig, out_dir=folder)


def _validation(model):
    from hbir.quantization.states import FakeQuantState, set_fake_quantize

    model.eval()
    set_fake_quantize(model, FakeQuantState.VALIDATION)
    return model
