"""Makes the test model zoo (tests/zoo.py, tests/zoo_stages.py) importable here.

Loaded by path, as tests/conftest.py does, so benchmarks share the zoo's models.
"""

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"

for _name in ("zoo", "zoo_stages"):
    if _name not in sys.modules:
        _spec = importlib.util.spec_from_file_location(_name, TESTS / f"{_name}.py")
        _module = importlib.util.module_from_spec(_spec)
        sys.modules[_name] = _module
        _spec.loader.exec_module(_module)
