"""Shared test setup: one thread everywhere (the CI machine has 2 shared cores)."""

import importlib.util
import os
import sys

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

# Every compile a test runs (in this process and in the tools it starts) verifies
# the IR after each pass, not only once at the end (passes/pipelines.py).
os.environ.setdefault("HBIR_VERIFY_EACH", "1")


def _load_shared(name: str, file: str) -> None:
    """Make tests/<file> importable as ``name`` (the model zoo and its stages,
    the planted faults of tests/profiler).

    Loaded by path rather than by putting tests/ on sys.path, so that no test
    folder can ever stand in for a package (the tests of hbir/ live in
    tests/core for that reason).
    """
    path = os.path.join(os.path.dirname(__file__), file)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


for _name in ("zoo", "zoo_stages", "lut_reference", "compile_models", "cli_runs"):
    _load_shared(_name, f"{_name}.py")
_load_shared("profiler_faults", os.path.join("profiler", "faults.py"))


def pytest_configure(config):
    if "torch" in sys.modules or _torch_available():
        import torch

        torch.set_num_threads(1)
    if not hasattr(config, "workerinput"):  # once: the run, not each xdist worker
        _byte_compile_the_package()


def _byte_compile_the_package() -> None:
    """Write the package's ``.pyc`` files before any test starts a process.

    The suite starts a few hundred Python processes (the tools, lit's hbir-opt
    runs, the examples, the worker pools). Where the environment turns ``.pyc``
    writing off (``PYTHONDONTWRITEBYTECODE``, as on the machines here), each
    would compile hbir's modules from source again: ~0.5 s of each hbir-opt
    start, ~1 s of each ``hbir`` command's.
    """
    import compileall

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder in ("hbir", "dialects", "passes", "runtime", "tools"):
        compileall.compile_dir(os.path.join(root, folder), quiet=1)


def _torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True
