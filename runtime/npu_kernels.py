"""Interpreter kernels for the ``npu`` dialect (registered into
``runtime/interpreter.py``'s ``KERNELS``).

Each kernel computes what the hbir / qnt ops it was lowered from compute, through
the same specified functions (``runtime/integer_ops.py``, ``runtime/numerics.py``)
and the same exact-sum engines, so the program after every compile pass can be
executed and compared bit for bit with ``quantized.bc``. Spatial ops view their
NHWC operands as NCHW (a transposed view, no copy of the semantics) and give
their results back as NHWC.

The post-process of a fused op (``dialects/npu.py``, ``PostProcessOp``) runs step
by step, each step saturating to the width the unfused op had: the raw result to
``acc_bits`` (the width of the op's own result before fusion), the left shift and
the bias to si32, the requantization to the result type narrowed by ``clip``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import IntegerType

from hbir.dialects import npu
from hbir.dialects.hbir import dense_array, numpy_dtype
from hbir.runtime import integer_ops, numerics
from hbir.runtime import interpreter as interp

_NCHW = (0, 3, 1, 2)
_NHWC = (0, 2, 3, 1)


def _width(value) -> int:
    t = value.type.element_type
    assert isinstance(t, IntegerType), f"expected an integer tensor, got {t}"
    return t.width.data


def _out(op, y: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(y).astype(numpy_dtype(op.results[0].type.element_type))


def _raw_bits(op: npu.PostProcessOp) -> int:
    """What the op's exact value saturates to before its post-process."""
    if op.acc_bits is not None:
        return op.acc_bits.value.data
    if op.pre_shift is not None or op.multiplier is not None:
        return 32
    return _width(op.results[0])


def _channel_axis(op: npu.PostProcessOp, ndim: int) -> int:
    return op.channel_axis() % ndim


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = v.size
    return np.asarray(v, np.int64).reshape(shape)


def post_process(op: npu.PostProcessOp, acc: np.ndarray, bias=None) -> np.ndarray:
    """The fused steps after the exact value ``acc`` (int64, already saturated to
    the raw width); ``bias`` only when it is added after a ``pre_shift``."""
    mode = op.rounding.data
    lo32, hi32 = numerics.qrange(32)
    y = np.asarray(acc, np.int64)
    axis = _channel_axis(op, y.ndim)
    if op.pre_shift is not None:
        k = op.pre_shift.value.data
        y = numerics.requantize(y, [1], [-k], 0, lo32, hi32, None, mode)
        if bias is not None:
            y = np.clip(y + _along(bias, y.ndim, axis), lo32, hi32)
    lo, hi = numerics.qrange(_width(op.results[0]))
    if op.clip is not None:
        c_lo, c_hi = op.clip.get_values()
        lo, hi = max(lo, c_lo), min(hi, c_hi)
    if op.multiplier is None:
        return _out(op, np.clip(y, lo, hi))
    m = np.asarray(op.multiplier.get_values())
    s = np.asarray(op.shift.get_values())
    y = numerics.requantize(y, m, s, 0, lo, hi, axis if m.size > 1 else None, mode)
    return _out(op, y)


def _split_bias(op, bias):
    """(bias inside the accumulator, bias after the pre-shift)."""
    if bias is None:
        return None, None
    return (None, bias) if op.pre_shift is not None else (bias, None)


# ------------------------------------------------------------------ TAE


def _conv(op: npu.ConvOp, x, w, bias=None):
    inner, after = _split_bias(op, bias)
    xt, wt = np.transpose(x, _NCHW), np.transpose(w, _NCHW)
    integer_ops.check_f64_exact(x, w, w.shape[1] * w.shape[2] * w.shape[3])
    acc = integer_ops.conv2d(
        xt,
        wt,
        inner,
        tuple(op.stride.get_values()),
        op.pads(),
        tuple(op.dilation.get_values()),
        op.groups.value.data,
        bits=_raw_bits(op),
        engine=interp._conv2d_engine,
    )
    return (post_process(op, np.transpose(acc, _NHWC), after),)


def _conv_transpose(op: npu.ConvTransposeOp, x, w, bias=None):
    inner, after = _split_bias(op, bias)
    groups = op.groups.value.data
    integer_ops.check_f64_exact(x, w, (w.shape[0] // groups) * w.shape[1] * w.shape[2])
    acc = integer_ops.conv_transpose2d(
        np.transpose(x, _NCHW),
        np.transpose(w, _NCHW),
        inner,
        tuple(op.stride.get_values()),
        tuple(op.padding.get_values()),
        tuple(op.output_padding.get_values()),
        groups,
        tuple(op.dilation.get_values()),
        bits=_raw_bits(op),
        engine=interp._conv_transpose2d_engine,
    )
    return (post_process(op, np.transpose(acc, _NHWC), after),)


def _gemm(op: npu.GemmOp, a, b, bias=None):
    inner, after = _split_bias(op, bias)
    bits = _raw_bits(op)
    if op.transpose_b.value.data:
        integer_ops.check_f64_exact(a, b, b.shape[-1])
        acc = integer_ops.linear(a, b, inner, bits=bits, engine=interp._linear_engine)
    else:
        integer_ops.check_f64_exact(a, b, a.shape[-1])
        acc = integer_ops.matmul(a, b, bits=bits, engine=interp._matmul_engine)
    return (post_process(op, acc, after),)


# ------------------------------------------------------------------ VAE

_ELTWISE = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


def _eltwise(op: npu.EltwiseOp, a, b):
    args = [np.asarray(a, np.int64), np.asarray(b, np.int64)]
    if op.in_multiplier is not None:
        lo32, hi32 = numerics.qrange(32)
        ms, ss = op.in_multiplier.get_values(), op.in_shift.get_values()
        mode = op.rounding.data
        args = [
            numerics.requantize(v, [m], [s], 0, lo32, hi32, None, mode)
            for v, m, s in zip(args, ms, ss, strict=True)
        ]
    y = _ELTWISE[op.kind.data](*args)
    return (post_process(op, integer_ops.saturate(y, _raw_bits(op))),)


def _rescale(op: npu.RescaleOp, x):
    return (post_process(op, np.asarray(x, np.int64)),)


def _reduce(op: npu.ReduceOp, x):
    dims = tuple(d % x.ndim for d in op.dims.get_values())
    keep = bool(op.keepdim.value.data)
    kind = op.kind.data
    if kind == "max":
        y = np.max(x, axis=dims, keepdims=keep).astype(np.int64)
    else:
        y = np.sum(x, axis=dims, dtype=np.int64, keepdims=keep)
        if kind == "mean":
            count = int(np.prod([x.shape[d] for d in dims]))
            y = numerics.divide_round(y, count, op.rounding.data)
    return (post_process(op, integer_ops.saturate(y, _raw_bits(op))),)


def _cast(op: npu.CastOp, x):
    lo, hi = numerics.qrange(_width(op.output))
    return (_out(op, np.clip(x.astype(np.int64), lo, hi)),)


def _lut(op: npu.LutOp, x):
    return interp._lut(op, x)


# ------------------------------------------------------------------ AAE


def _pool(op: npu.PoolOp, x):
    xt = np.transpose(x, _NCHW)
    kernel = tuple(op.kernel.get_values())
    stride = tuple(op.stride.get_values())
    padding = tuple(op.padding.get_values())
    if op.kind.data == "max":
        y = integer_ops.max_pool2d(
            xt,
            kernel,
            stride,
            padding,
            tuple(op.dilation.get_values()),
            bool(op.ceil_mode.value.data),
        ).astype(np.int64)
    else:
        t, lf, b, r = integer_ops.pads4(padding)
        if (t, lf) != (b, r):
            raise interp.InterpreterError("average pool padding must be symmetric")
        padding = (t, lf)
        out_hw = tuple(op.output.type.get_shape()[1:3])
        y = numerics.average_pool(
            xt, kernel, stride, padding, bool(op.count_include_pad.value.data), out_hw
        )
        y = integer_ops.saturate(y, _raw_bits(op))
    return (post_process(op, np.transpose(y, _NHWC)),)


def _resize(op: npu.ResizeOp, x):
    xt = np.transpose(x, _NCHW)
    mode = op.mode.data
    corners = bool(op.align_corners.value.data) if mode == "bilinear" else None
    size = tuple(op.size.get_values())
    bits = _width(op.output)
    if op.weight_bits is not None:
        scale = None if op.scale is None else list(op.scale.get_values())
        y = integer_ops.resize_bilinear_npu(xt, size, corners, scale, bits)
    else:
        how = (
            {"scale_factor": tuple(op.scale.get_values())}
            if op.scale is not None
            else {"size": size}
        )
        t = torch.from_numpy(np.ascontiguousarray(xt).astype(np.float64))
        f = F.interpolate(t, mode=mode, align_corners=corners, **how).numpy()
        y = integer_ops.resize_rint(f, bits)
    return (_out(op, np.transpose(y, _NHWC)),)


# ------------------------------------------------------------------ data movement


def _constant(op: npu.ConstantOp):
    return (dense_array(op.value),)


def _transpose(op: npu.TransposeOp, x):
    return (np.ascontiguousarray(np.transpose(x, tuple(op.perm.get_values()))),)


def _reshape(op: npu.ReshapeOp, x):
    return (np.ascontiguousarray(x).reshape(op.output.type.get_shape()),)


def _concat(op: npu.ConcatOp, *xs):
    return (np.concatenate(xs, axis=op.dim.value.data),)


def _slice(op: npu.SliceOp, x):
    bounds = zip(
        op.begin.get_values(), op.end.get_values(), op.step.get_values(), strict=True
    )
    return (np.ascontiguousarray(x[tuple(slice(b, e, s) for b, e, s in bounds)]),)


def _move(op, x):
    return (x,)


# ------------------------------------------------------------------ CPU islands


def _cpu_call(op: npu.CpuCallOp, *args, rounding: str = numerics.HALF_EVEN):
    """Run the island's hbir / qnt ops with the interpreter's own kernels."""
    import functools

    kernels = interp.KERNELS
    if rounding != numerics.HALF_EVEN:
        kernels = {
            cls: functools.partial(k, rounding=rounding)
            if cls in interp._ROUNDED
            else k
            for cls, k in interp.KERNELS.items()
        }
    block = op.body.block
    env = dict(zip(block.args, args, strict=True))
    for inner in block.ops:
        if isinstance(inner, npu.YieldOp):
            return tuple(env[v] for v in inner.values)
        kernel = kernels.get(type(inner))
        if kernel is None:
            raise interp.InterpreterError(f"'{inner.name}' has no interpreter kernel")
        results = kernel(inner, *[env[v] for v in inner.operands])
        for value, y in zip(inner.results, results, strict=True):
            interp._check_result(inner, value, y)
            env[value] = y
    raise interp.InterpreterError("npu.cpu_call region has no npu.yield")


KERNELS = {
    npu.ConstantOp: _constant,
    npu.ConvOp: _conv,
    npu.ConvTransposeOp: _conv_transpose,
    npu.GemmOp: _gemm,
    npu.EltwiseOp: _eltwise,
    npu.RescaleOp: _rescale,
    npu.ReduceOp: _reduce,
    npu.CastOp: _cast,
    npu.LutOp: _lut,
    npu.PoolOp: _pool,
    npu.ResizeOp: _resize,
    npu.TransposeOp: _transpose,
    npu.ReshapeOp: _reshape,
    npu.ConcatOp: _concat,
    npu.SliceOp: _slice,
    npu.DmaLoadOp: _move,
    npu.DmaStoreOp: _move,
    npu.CpuCallOp: _cpu_call,
}
