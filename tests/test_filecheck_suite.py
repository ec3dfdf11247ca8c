"""Runs the lit + filecheck suite (tests/filecheck) as part of pytest.

Both tools come with the test extra; found beside this Python (its venv's
scripts) before PATH. Without them the suite skips, saying how to install them.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).parent / "filecheck"
SCRIPTS = os.path.dirname(sys.executable)


def _tool(name: str) -> str | None:
    return shutil.which(name, path=SCRIPTS) or shutil.which(name)


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
def test_lit_filecheck_suite():
    lit, filecheck = _tool("lit"), _tool("filecheck")
    missing = [n for n, path in (("lit", lit), ("filecheck", filecheck)) if not path]
    if missing:
        pytest.skip(f'{" and ".join(missing)} not installed: pip install -e ".[test]"')
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(
        [os.path.dirname(filecheck), SCRIPTS, env.get("PATH", "")]
    )
    res = subprocess.run(
        [lit, "-v", str(SUITE)], capture_output=True, text=True, check=False, env=env
    )
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert "Failed" not in res.stdout
