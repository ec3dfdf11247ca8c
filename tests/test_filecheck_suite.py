"""Runs the lit + filecheck suite (tests/filecheck) as part of pytest."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

SUITE = Path(__file__).parent / "filecheck"


def test_lit_filecheck_suite():
    lit = shutil.which("lit", path=os.path.dirname(sys.executable)) or shutil.which(
        "lit"
    )
    assert lit, "lit is not installed: pip install -e '.[test]'"
    res = subprocess.run(
        [lit, "-v", str(SUITE)], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert "Failed" not in res.stdout
