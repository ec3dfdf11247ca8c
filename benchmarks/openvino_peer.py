"""The OpenVINO int8 peer of the benchmarks: the same QDQ model ONNX Runtime runs.

OpenVINO reads ``ort_peer``'s static QDQ quantization of the float model (u8
activations, s8 weights per channel, calibrated on the same batches) and runs
its convs and linears as int8 kernels (oneDNN's brgconv / brgemm), on one
inference thread, for latency. openvino is a benchmark-only dependency (the
``bench`` extra): ``available()`` says whether it is installed and
``INSTALL_HINT`` how.
"""

from __future__ import annotations

import importlib.util

import numpy as np

INSTALL_HINT = "pip install openvino"


def available() -> bool:
    return importlib.util.find_spec("openvino") is not None


def compiled(onnx_path: str, threads: int = 1):
    """A callable running ``onnx_path`` (one input) on OpenVINO's CPU plugin:
    ``run(x)`` gives its outputs. The file may be deleted once this returns."""
    import openvino as ov

    core = ov.Core()
    model = core.compile_model(
        core.read_model(onnx_path),
        "CPU",
        {
            "INFERENCE_NUM_THREADS": threads,
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
        },
    )
    request = model.create_infer_request()

    def run(x: np.ndarray):
        return request.infer({0: x})

    return run
