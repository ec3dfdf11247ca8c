"""The ONNX Runtime int8 peer of the benchmarks: a float torch model as static QDQ.

As the benchmarks measure it: the float model exported to ONNX, quantized by
``onnxruntime.quantization.quantize_static`` per channel in QDQ form with u8
activations and s8 weights (u8s8: ORT's fast x86 kernels; s8s8 runs 2.6x slower
there), calibrated on a few batches, without ORT's pre-processing step, and run
with one intra-op thread. onnx and onnxruntime are benchmark-only dependencies:
``available()`` says whether they are installed and ``INSTALL_HINT`` how.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile

import numpy as np

INSTALL_HINT = "pip install onnx onnxruntime"


def available() -> bool:
    return all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime"))


def sessions(model, example, calibration: list[np.ndarray], threads: int = 1):
    """ORT sessions of ``model`` (float torch, one input): ``"fp32"``, and
    ``"int8"`` quantized to QDQ (u8s8, per channel) on ``calibration``; run either
    with ``session.run(None, {"input": x})``."""
    with tempfile.TemporaryDirectory() as folder:
        files = onnx_files(model, example, calibration, folder)
        return {key: session(path, threads) for key, path in files.items()}


def session(path: str, threads: int = 1):
    """An ORT CPU session of the ONNX file ``path`` on ``threads`` threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: not its graph clean-up notes
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def onnx_files(
    model, example, calibration: list[np.ndarray], folder: str, any_batch=False
):
    """``{"fp32": path, "int8": path}``: ``model`` exported to ONNX in ``folder``,
    and its static QDQ quantization (u8s8, per channel) on ``calibration``, the
    model every int8 peer runs (``openvino_peer`` reads the same file).
    ``any_batch``: the input's and output's first dimension is left free (a
    batch of any size), else it is the example's."""
    import torch
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Batches(CalibrationDataReader):
        def __init__(self):
            self._batches = iter(calibration)

        def get_next(self):
            x = next(self._batches, None)
            return None if x is None else {"input": x}

    fp32 = os.path.join(folder, "fp32.onnx")
    int8 = os.path.join(folder, "int8.onnx")
    torch.onnx.export(
        model.eval(),
        (example,),
        fp32,
        input_names=["input"],
        output_names=["output"],
        opset_version=17,
        dynamo=False,
        dynamic_axes=(
            {"input": {0: "batch"}, "output": {0: "batch"}} if any_batch else None
        ),
    )
    # quantize_static logs its advice (pre-processing) as root warnings.
    root = logging.getLogger()
    level, root.level = root.level, logging.ERROR
    try:
        quantize_static(
            fp32,
            int8,
            Batches(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
        )
    finally:
        root.level = level
    return {"fp32": fp32, "int8": int8}
