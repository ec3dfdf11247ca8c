"""Layering: imports point one way, the torch side loads no xDSL, and importing
hbir changes nothing in xDSL.

docs/architecture.md, Layers: ``runtime.numerics`` <- ``dialects`` <- ``passes``,
``runtime`` <- ``hbir`` (face) <- ``tools``. Imports are read from the sources with
``ast``, so a lazy import inside a function counts as much as one at the top.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# Source folder -> package, as pyproject.toml's package-dir maps them.
PACKAGES = {
    "hbir": "hbir",
    "dialects": "hbir.dialects",
    "passes": "hbir.passes",
    "runtime": "hbir.runtime",
    "tools": "hbir.tools",
}
# Every layer may raise the plain error classes (hbir/errors.py imports nothing).
ERRORS = "hbir.errors"


def _modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package."""
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """The modules ``name`` imports (``from p import m`` names ``p.m`` if a module)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else base)
    return found


def _ours(imports: set[str]) -> set[str]:
    return {m for m in imports if m == "hbir" or m.startswith("hbir.")}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _plain_runtime() -> set[str]:
    """Runtime modules below the dialects: plain data and numpy, no xDSL, no torch,
    and of ours only the error classes and other such modules."""
    candidates = {m for m in MODULES if _under(m, "hbir.runtime")}
    plain = set()
    changed = True
    while changed:
        changed = False
        for m in sorted(candidates - plain):
            imports = _imports(m)
            if any(_under(i, "xdsl") or _under(i, "torch") for i in imports):
                continue
            if _ours(imports) <= plain | {ERRORS, "hbir.runtime"}:
                plain.add(m)
                changed = True
    return plain


PLAIN_RUNTIME = _plain_runtime()

# Layer -> the packages / modules of ours it may import.
ALLOWED = {
    "hbir.dialects": {"hbir.dialects", ERRORS, *PLAIN_RUNTIME},
    "hbir.runtime": {"hbir.runtime", "hbir.dialects", ERRORS},
    "hbir.passes": {"hbir.passes", "hbir.dialects", "hbir.runtime", ERRORS},
}


def test_numerics_and_op_table_are_plain_runtime_modules():
    assert {"hbir.runtime.numerics", "hbir.runtime.op_table"} <= PLAIN_RUNTIME
    assert "hbir.runtime.interpreter" not in PLAIN_RUNTIME


def test_errors_module_imports_nothing():
    assert _imports(ERRORS) == set()


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_no_import_points_upward(layer):
    upward = []
    for name in sorted(m for m in MODULES if _under(m, layer)):
        for imported in sorted(_ours(_imports(name))):
            if not any(_under(imported, ok) for ok in ALLOWED[layer]):
                upward.append(f"{MODULES[name].relative_to(ROOT)}: {imported}")
    assert not upward, "imports pointing upward:\n" + "\n".join(upward)


def _run(code: str) -> None:
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr


def test_torch_side_imports_no_xdsl():
    _run(
        "import sys\n"
        "import hbir\n"
        "assert not [m for m in sys.modules if m.startswith('xdsl')], 'hbir'\n"
        "import hbir.quantization\n"
        "bad = sorted(m for m in sys.modules\n"
        "             if m.startswith('xdsl') or m == 'hbir.dialects.hbir')\n"
        "assert not bad, bad\n"
        "assert callable(hbir.quantization.export)  # lazy: loads xDSL now\n"
        "assert 'xdsl' in sys.modules\n"
    )


def test_lazy_export_stays_the_function_when_its_module_loads_first():
    """The submodule ``hbir.quantization.export`` shares the function's name."""
    _run(
        "import importlib\n"
        "module = importlib.import_module('hbir.quantization.export')\n"
        "from hbir.quantization import ExportError, export\n"
        "assert export is module.export and ExportError is module.ExportError\n"
    )


def test_importing_hbir_changes_nothing_in_xdsl():
    """Our workarounds of xDSL bugs live in our own parser and printer subclasses
    (``diagnostics.TrackingParser``, ``files.HbirPrinter``); plain ``xdsl-opt`` in
    the same environment must keep xDSL's behaviour."""
    _run(
        "import importlib, sys\n"
        "import xdsl.parser.attribute_parser as attribute_parser\n"
        "import xdsl.printer, xdsl.parser, xdsl.irdl, xdsl.xdsl_opt_main\n"
        "import xdsl.targets.mlir, xdsl.dialects.builtin\n"
        "original_print_float = xdsl.printer.Printer.print_float\n"
        "original_base = attribute_parser.base\n"
        "def snapshot():\n"
        "    return {\n"
        "        (m, k): id(v)\n"
        "        for m, mod in list(sys.modules.items()) if m.startswith('xdsl')\n"
        "        for k, v in list(vars(mod).items())\n"
        "    } | {\n"
        "        (c.__qualname__, k): id(v)\n"
        "        for c in xdsl.printer.Printer.__mro__\n"
        "        + xdsl.parser.Parser.__mro__\n"
        "        for k, v in vars(c).items()\n"
        "    }\n"
        "before = snapshot()\n"
        "for name in ['hbir', 'hbir.diagnostics', 'hbir.files', 'hbir.module',\n"
        "             'hbir.conversion', 'hbir.tools.hbir_opt', 'hbir.tools.universe']:\n"
        "    importlib.import_module(name)\n"
        "import hbir\n"
        "hbir.Module.parse('func.func @f() {\\n  func.return\\n}').module.get_asm()\n"
        "after = snapshot()\n"
        "changed = sorted(str(k) for k in before if after.get(k) != before[k])\n"
        "assert not changed, changed\n"
        "assert xdsl.printer.Printer.print_float is original_print_float\n"
        "assert attribute_parser.base is original_base\n"
        "assert not hasattr(attribute_parser.base, 'cache_info')\n"
    )


def test_mode_lists_kept_below_the_dialect_agree_with_it():
    # The dialect does not import numpy at start-up, and numerics / the hbm loader
    # sit below it: each writes its mode list, and they must be one list.
    from hbir.dialects import hbir
    from hbir.runtime import hbm_opcodes, numerics

    assert hbir.Resize2dOp.MODES == hbm_opcodes.RESIZE_MODES
    assert hbir.RoiResizeOp.INTERPOLATIONS == numerics.ROI_INTERPOLATIONS
    assert hbir.RoiResizeOp.EXPANSIONS == numerics.ROI_EXPANSIONS
