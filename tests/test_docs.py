"""The README and docs/ stay true: every Python block runs (``docs_pages.py``)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hbir.runtime.numerics import DEFAULT_NUM_TABLES

# not in the fast tier (docs/testing.md); the tests share a costly module
# fixture, so one process runs them all (pyproject's --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs")]

TESTS = Path(__file__).parent
ROOT = TESTS.parent
PAGES = ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def pages_run(tmp_path_factory):
    """The output of one run over every page (each page in its own process)."""
    res = subprocess.run(
        [sys.executable, str(TESTS / "docs_pages.py"), *PAGES],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path_factory.mktemp("docs"),
        timeout=600,
    )
    return res.stdout + res.stderr


@pytest.mark.parametrize("page", PAGES)
def test_python_blocks_run(pages_run, page):
    assert re.search(rf"^{re.escape(page)}: ok \(\d+ blocks\)$", pages_run, re.M), (
        pages_run[-6000:]
    )


def test_every_page_with_python_is_run():
    counts = {
        page: (ROOT / ("" if page == "README.md" else "docs") / page)
        .read_text()
        .count("```python")
        for page in PAGES
    }
    assert counts["README.md"] >= 2 and counts["quantization.md"] >= 3
    assert sum(counts.values()) >= 15


def test_lut_page_lists_the_default_num_tables():
    text = (ROOT / "docs" / "lut-numerics.md").read_text()
    table = text.split("### Error at the default num_tables")[1].split("\n\n")[1]
    listed = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        listed.setdefault(cells[0], int(cells[2]))
    assert listed == DEFAULT_NUM_TABLES


def test_the_readme_loads_only_files_the_main_command_writes():
    readme = (ROOT / "README.md").read_text()
    taste = readme.split("## A taste of the IR tools")[1].split("## Layout")[0]
    loaded = re.findall(r'hbir\.load\("([^"]+)"\)', taste)
    assert loaded and all(p.startswith("out/digits/") for p in loaded)
    example = (ROOT / "examples" / "digits_e2e.py").read_text()
    assert 'ap.add_argument("--out", default="out/digits")' in example
    for path in loaded:
        assert f'"{Path(path).name}"' in example
