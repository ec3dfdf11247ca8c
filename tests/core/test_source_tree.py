"""The package imports from its own checkout, and no test folder can pose as it.

A second checkout beside an editable install of the first: ``hbir`` comes from
the current folder, and so must its subpackages kept outside ``hbir/``
(``hbir/source_tree.py``); with tests/ on ``sys.path``, ``import hbir`` is still
the package.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import hbir
from hbir import source_tree

ROOT = Path(__file__).parents[2]


def test_the_subpackages_of_this_checkout_are_its_own_folders():
    folders = source_tree.subpackage_folders(str(ROOT / "hbir"))
    assert folders == {
        f"hbir.{name}": str(ROOT) for name in ("dialects", "passes", "runtime", "tools")
    }
    assert Path(hbir.runtime.__file__).parent == ROOT / "runtime"


def test_a_second_checkout_imports_its_own_subpackages(tmp_path):
    shutil.copytree(ROOT / "hbir", tmp_path / "hbir")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for name in ("dialects", "passes", "runtime", "tools"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"CHECKOUT = {name!r}\n")
    code = (
        "import hbir.runtime, hbir.tools, hbir.dialects;"
        "print(hbir.__file__, hbir.runtime.CHECKOUT, hbir.tools.CHECKOUT)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    path, runtime, tools = res.stdout.split()
    assert Path(path).parent == tmp_path / "hbir"
    assert (runtime, tools) == ("runtime", "tools")


def test_no_test_folder_stands_in_for_the_package(tmp_path):
    assert not (ROOT / "tests" / "hbir").exists()
    code = "import hbir; print(hbir.__file__)"
    res = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, 'tests'); {code}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()).parent != ROOT / "tests" / "hbir"
    assert Path(res.stdout.strip()).name == "__init__.py"
