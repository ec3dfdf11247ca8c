"""Shared test setup: one thread everywhere (the CI machine has 2 shared cores)."""

import os
import sys

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

# Tests import shared fixtures (the model zoo) as plain modules from tests/.
sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    if "torch" in sys.modules or _torch_available():
        import torch

        torch.set_num_threads(1)


def _torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True
