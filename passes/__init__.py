"""The pass registry: one table of hbir's passes, plus the user's.

Registration is lazy: a pass module is imported only when the pass is used or
``--help`` lists it, so ``hbir-opt`` starts fast and never imports torch.

User passes come from two places:

* the ``hbir.passes`` entry-point group of any installed package
  (``[project.entry-points."hbir.passes"] my-pass = "my_pkg.passes:MyPass"``);
* ``load_plugin("my_pkg.passes")`` (``hbir-opt --load-plugin my_pkg.passes``),
  which imports a module whose passes call ``@register_pass``.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

from xdsl.passes import ModulePass

from hbir.errors import HbirError

PassFactory = Callable[[], type[ModulePass]]

# name -> (module, class). A pass lives in passes/<name with _>.py.
_OURS: dict[str, tuple[str, str]] = {
    "cleanup": ("hbir.passes.cleanup", "CleanupPass"),
    "configure-lut": ("hbir.passes.configure_lut", "ConfigureLutPass"),
    "fold-constants": ("hbir.passes.fold_constants", "FoldConstantsPass"),
    "expand-fake-quant": ("hbir.passes.expand_fake_quant", "ExpandFakeQuantPass"),
    "check-march": ("hbir.passes.check_march", "CheckMarchPass"),
    "sink-dequantize": ("hbir.passes.sink_dequantize", "SinkDequantizePass"),
    "convert-gemm": ("hbir.passes.convert_gemm", "ConvertGemmPass"),
    "convert-elementwise": (
        "hbir.passes.convert_elementwise",
        "ConvertElementwisePass",
    ),
    "convert-pool": ("hbir.passes.convert_pool", "ConvertPoolPass"),
    "convert-lut": ("hbir.passes.convert_lut", "ConvertLutPass"),
    "fold-requantize": ("hbir.passes.fold_requantize", "FoldRequantizePass"),
    "convert-fp16": ("hbir.passes.convert_fp16", "ConvertFp16Pass"),
    "convert": ("hbir.passes.convert", "ConvertPass"),
    "remove-fake-quant": ("hbir.passes.remove_fake_quant", "RemoveFakeQuantPass"),
    "npu-lower": ("hbir.passes.npu_lower", "NpuLowerPass"),
    "npu-fuse": ("hbir.passes.npu_fuse", "NpuFusePass"),
    "npu-layout": ("hbir.passes.npu_layout", "NpuLayoutPass"),
    "npu-tile": ("hbir.passes.npu_tile", "NpuTilePass"),
    "npu-schedule": ("hbir.passes.npu_schedule", "NpuSchedulePass"),
    "npu-plan-memory": ("hbir.passes.npu_plan_memory", "NpuPlanMemoryPass"),
    "insert-transpose": ("hbir.passes.insert_transpose", "InsertTransposePass"),
    "insert-split": ("hbir.passes.insert_split", "InsertSplitPass"),
    "insert-image-preprocess": (
        "hbir.passes.insert_image_preprocess",
        "InsertImagePreprocessPass",
    ),
    "insert-image-convert": (
        "hbir.passes.insert_image_convert",
        "InsertImageConvertPass",
    ),
    "insert-roi-resize": ("hbir.passes.insert_roi_resize", "InsertRoiResizePass"),
    "remove-io-op": ("hbir.passes.remove_io_op", "RemoveIoOpPass"),
    "convert-image-preprocess": (
        "hbir.passes.convert_image_preprocess",
        "ConvertImagePreprocessPass",
    ),
}

_registered: dict[str, PassFactory] = {}

ENTRY_POINT_GROUP = "hbir.passes"


class PassRegistryError(HbirError):
    """A plugin that cannot be loaded or a pass name registered twice."""


def _lazy(module: str, cls: str) -> PassFactory:
    return lambda: getattr(importlib.import_module(module), cls)


def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    """Class decorator for user passes: ``@register_pass class MyPass(ModulePass)``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise PassRegistryError(f"{cls.__name__} has no pass name (class attr `name`)")
    if name in _OURS or (name in _registered and _registered[name]() is not cls):
        raise PassRegistryError(f"pass name '{name}' is already registered")
    _registered[name] = lambda: cls
    return cls


def load_plugin(module_name: str) -> None:
    """Import a user module that registers passes with ``@register_pass``."""
    try:
        importlib.import_module(module_name)
    except ImportError as e:
        raise PassRegistryError(f"cannot load plugin '{module_name}': {e}") from None


@functools.cache
def _entry_points() -> tuple:
    """The installed packages' ``hbir.passes`` entry points, read once per
    process: scanning every installed distribution's metadata takes a tenth of
    a second, which ``hbir-opt`` would pay three times before it starts."""
    from importlib.metadata import entry_points

    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def _entry_point_passes() -> dict[str, PassFactory]:
    found: dict[str, PassFactory] = {}
    for ep in _entry_points():
        found[ep.name] = _entry_point_loader(ep)
    return found


def _entry_point_loader(ep) -> PassFactory:
    def load() -> type[ModulePass]:
        try:
            return ep.load()
        except Exception as e:  # a broken user package: name it, do not crash
            raise PassRegistryError(
                f"cannot load pass '{ep.name}' from entry point '{ep.value}': "
                f"{type(e).__name__}: {e}"
            ) from None

    return load


def get_all_passes() -> dict[str, PassFactory]:
    """Pass name -> factory returning the pass class: ours, then the user's."""
    passes: dict[str, PassFactory] = {n: _lazy(m, c) for n, (m, c) in _OURS.items()}
    for source in (_entry_point_passes(), _registered):
        for name, factory in source.items():
            if name in _OURS:
                raise PassRegistryError(
                    f"user pass '{name}' clashes with hbir's own pass"
                )
            passes[name] = factory
    return passes


def summary(pass_cls: type[ModulePass]) -> str:
    """The first line of a pass's docstring."""
    return _first_line(pass_cls.__doc__)


def _first_line(doc: str | None) -> str:
    doc = (doc or "").strip()
    return doc.splitlines()[0] if doc else "(no description)"


def source_summary(module: str, cls: str) -> str | None:
    """The first docstring line of ``module.cls``, read from its source file.

    ``hbir-opt --help`` lists every pass this way, without importing pass modules
    (and the numpy they need). None when the source cannot be read.
    """
    import ast

    node = _class_source(module, cls)
    return None if node is None else _first_line(ast.get_docstring(node))


def _class_source(module: str, cls: str):
    """The ``ast.ClassDef`` of ``module.cls`` read from its source file, without
    importing the module; None when the source cannot be read.

    Only the class's own lines are parsed (from ``class cls`` to the next
    top-level line): parsing each whole pass module made ``hbir-opt --help``
    take half a second. A class whose text does not parse alone (a string
    with lines at column 0) is found in the parsed module instead."""
    import ast

    text = _source_text(module)
    if text is None:
        return None
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(f"class {cls}")]
    for start in starts:
        end = start + 1
        while end < len(lines) and not _top_level(lines[end]):
            end += 1
        try:
            tree = ast.parse("\n".join(lines[start:end]))
        except SyntaxError:
            break
        if tree.body and isinstance(tree.body[0], ast.ClassDef):
            if tree.body[0].name == cls:
                return tree.body[0]
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return node
    return None


def _top_level(line: str) -> bool:
    """A line that ends a class body: code at column 0 (not a blank line, a
    comment or a closing bracket)."""
    return bool(line) and not line[0].isspace() and line[0] not in "#)]}"


@functools.cache
def _source_text(module: str) -> str | None:
    """The source of ``module``, found without importing it (None: unreadable)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
        with open(spec.origin, encoding="utf-8") as f:
            return f.read()
    except (ImportError, AttributeError, OSError, TypeError, ValueError):
        return None


def _option_text(name: str, annotation: str, default: str | None) -> str:
    text = f"{name}=<{annotation}>"
    return text + (" (required)" if default is None else f" (default {default})")


def source_options(module: str, cls: str) -> list[str] | None:
    """The options of ``module.cls`` as ``name=<type> (default ...)``, read from
    its source (the dataclass fields), or None when the source cannot be read."""
    import ast

    node = _class_source(module, cls)
    if node is None:
        return None
    return [
        _option_text(
            ast.unparse(item.target),
            ast.unparse(item.annotation),
            None if item.value is None else ast.unparse(item.value),
        )
        for item in node.body
        if isinstance(item, ast.AnnAssign)
        and "ClassVar" not in ast.unparse(item.annotation)
    ]


def pass_options(pass_cls: type[ModulePass]) -> list[str]:
    """The options of an imported pass class, as ``source_options`` gives them."""
    import dataclasses

    found = []
    for field in dataclasses.fields(pass_cls):
        if field.name == "name" or not field.init:
            continue
        annotation = getattr(field.type, "__name__", None) or str(field.type)
        default = None
        if field.default is not dataclasses.MISSING:
            default = repr(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = repr(field.default_factory())
        found.append(_option_text(field.name, annotation, default))
    return found


def options() -> dict[str, list[str]]:
    """Pass name -> its options, for every hbir pass, without importing them."""
    return {name: source_options(m, c) or [] for name, (m, c) in _OURS.items()}


def summaries() -> dict[str, str]:
    """Pass name -> one-line summary, for every registered pass."""
    sources = {name: spec for name, spec in _OURS.items()}
    for ep in _entry_points():
        module, _, cls = ep.value.partition(":")
        sources[ep.name] = (module.strip(), cls.strip())
    found = {name: source_summary(m, c) for name, (m, c) in sources.items()}
    for name, factory in {**_entry_point_passes(), **_registered}.items():
        if found.get(name) is None:
            found[name] = summary(factory())
    return found
