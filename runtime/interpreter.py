"""Reference interpreter: runs a ``func.func`` of hbir / qnt ops on numpy arrays.

One table ``KERNELS = {OpClass: kernel}`` and one loop over the function's block.
A kernel is a small pure function ``(op, *operand_arrays) -> tuple of results``.

Float ops call exactly the torch functional a torch model calls, on
``torch.from_numpy`` views, so an exported model and its IR agree bit for bit.
Integer ops (element types ``si8`` / ``si16`` / ``si32``) are exact: conv, linear
and matmul sum with ``runtime/kernels.py`` (``torch._int_mm`` for int8, float
kernels only where every partial sum provably stays exact; the operand widths
must keep it below 2**53), then add the si32 bias in int64 and saturate to si32;
elementwise ops and sums run in int64 and saturate to
the result type; means and average pools divide an exact int64 sum once with
``numerics.divide_round`` (half-to-even). Quantization follows
``runtime/numerics.py``, the single source of integer semantics; selection, index
reads and writes, comparisons (``i64`` indices, ``i1`` masks) follow
``runtime/selection.py``.

Arrays use the element type's numpy dtype (``si8`` and ``i8`` -> int8, ``ui8`` ->
uint8, ``f16`` -> float16, ...). numpy has no bfloat16, so ``bf16`` values travel as
float32 arrays holding bf16-representable values; float kernels compute in float32
and round once to bf16, which is what torch's CPU kernels do internally for most ops
but is not guaranteed bit-exact for all of them.

Data-movement ops (transpose, slice, split) return numpy views where torch returns
views, so a following reduction sees the same strides as in the torch model.

``run_function`` runs a function as a plan prepared once (``runtime/plan.py``);
with ``on_op`` it runs this module's loop, op by op.

This module imports torch: only code that executes a model imports it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BFloat16Type,
    FileLineColLoc,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import dense_array, numpy_dtype, shape_of
from hbir.errors import HbirError
from hbir.runtime import (
    hbm_opcodes,
    integer_ops,
    kernels,
    numerics,
    op_table,
    selection,
    yuv,
)

Kernel = Callable[..., tuple[np.ndarray, ...]]


class InterpreterError(HbirError, RuntimeError):
    """An op that could not be executed; the message starts with its location."""


# ------------------------------------------------------------------ types


def _element(value: SSAValue) -> Attribute:
    t = value.type
    assert isinstance(t, TensorType), f"expected a tensor, got {t}"
    return t.element_type


def _shape(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def code_range(element: Attribute, narrow_range: bool = False) -> tuple[int, int]:
    """The integer code range of an element type; narrow drops the lowest code."""
    dtype = numpy_dtype(element)
    if dtype.kind == "f":
        raise InterpreterError(f"expected an integer type, got {element}")
    info = np.iinfo(dtype)
    return int(info.min) + int(narrow_range), int(info.max)


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (once, half-to-even) and carry the values as float32."""
    return torch.from_numpy(x).bfloat16().float().numpy()


# ------------------------------------------------------------------ conversions


def _t(x: np.ndarray) -> torch.Tensor:
    """A torch view of a numpy array (no copy); numpy's 0-d results are scalars."""
    return torch.from_numpy(np.asarray(x))


def _f64(x: np.ndarray) -> torch.Tensor:
    """Integer codes as a float64 tensor (exact)."""
    return torch.from_numpy(x.astype(np.float64))


def _float_out(op: Operation, y: torch.Tensor | np.ndarray) -> np.ndarray:
    """A float result in the storage dtype of the op's first result."""
    element = _element(op.results[0])
    y = y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)  # 0-d: scalars
    if isinstance(element, BFloat16Type):
        return _round_bf16(y)
    with np.errstate(over="ignore"):  # f16: beyond 65520 rounds to inf (IEEE)
        return y.astype(numpy_dtype(element), copy=False)


def _int_out(op: Operation, y: np.ndarray) -> np.ndarray:
    """An exact int64 result saturated to the op's (first) result type."""
    element = _element(op.results[0])
    lo, hi = code_range(element)
    return np.asarray(np.clip(y, lo, hi), numpy_dtype(element))


def _is_float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f"


def exact_grids(op: Operation) -> numerics.Grids:
    """``qnt.exact(op)``, parsed once per mark: the parse is cached on the op
    and reused while the op carries the same (immutable) attribute object."""
    mark = op.attributes[qnt.EXACT]
    cached = op.__dict__.get("_hbir_grids")
    if cached is None or cached[0] is not mark:
        cached = op.__dict__["_hbir_grids"] = (mark, qnt.exact(op))
    return cached[1]


# ------------------------------------------------------------------ constant


def _constant(op: hbir.ConstantOp) -> tuple[np.ndarray, ...]:
    return (dense_array(op.value),)


# ------------------------------------------------------------------ elementwise


def _unary_float(fn: Callable[..., torch.Tensor]) -> Kernel:
    """A float-only elementwise op (in fixed point these become hbir.lut).

    With a table configuration (export of a quantized nonlinear op) the op computes
    its fixed-point table on the input codes, exactly as ``pre_export`` does. An op
    with a parameter (``ParametricUnaryOp``) passes it to ``fn`` second.
    """

    def kernel(
        op: hbir.FloatUnaryOp, x: np.ndarray, rounding: str = numerics.HALF_EVEN
    ) -> tuple[np.ndarray, ...]:
        config = op.lut_config()
        if config is None:
            parameters = ()
            if isinstance(op, hbir.ParametricUnaryOp):
                parameters = (op.parameter_value(),)
            return (_float_out(op, fn(_t(x), *parameters)),)
        return (_float_out(op, _t(_lut_forward(op, x, config, rounding))),)

    return kernel


def _lut_forward(op, x: np.ndarray, config, rounding: str) -> np.ndarray:
    return numerics.lut_forward(
        op.table_name(),
        x,
        config.in_scale,
        config.in_bits,
        config.out_scale,
        config.out_bits,
        config.num_tables,
        rounding,
    ).astype(x.dtype)


def _elementwise(
    float_fn: Callable, int_fn: Callable | None, exact: str | None = None
) -> Kernel:
    """Float: the torch op. Integer: the numpy op in int64, saturated to the result.
    Marked ``qnt.exact`` (add / sub / mul): ``numerics.fixed_point_binary``."""

    def kernel(
        op: Operation, *args: np.ndarray, rounding: str = numerics.HALF_EVEN
    ) -> tuple[np.ndarray, ...]:
        if exact is not None and qnt.EXACT in op.attributes:
            y = numerics.fixed_point_binary(exact, exact_grids(op), *args, rounding)
            return (_float_out(op, y),)
        if _is_float(args[0]):
            return (_float_out(op, float_fn(*map(_t, args))),)
        if int_fn is None:
            raise InterpreterError(f"no integer form for element type {args[0].dtype}")
        return (_int_out(op, int_fn(*(a.astype(np.int64) for a in args))),)

    return kernel


def _relu_int(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


def _clip(
    op: hbir.ClipOp, x: np.ndarray, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    """Float: torch.clamp; marked ``qnt.exact``: ``numerics.fixed_point_clip``.
    Integer: clip to the bounds rounded half-to-even."""
    lo, hi = op.min.value.data, op.max.value.data
    if qnt.EXACT in op.attributes:
        y = numerics.fixed_point_clip(exact_grids(op), x, lo, hi, rounding)
        return (_float_out(op, y),)
    if _is_float(x):
        return (_float_out(op, torch.clamp(_t(x), lo, hi)),)
    lo, hi = round(lo), round(hi)  # Python's round() is half-to-even
    return (_int_out(op, np.clip(x.astype(np.int64), lo, hi)),)


def _gelu(
    op: hbir.GeluOp, x: np.ndarray, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    config = op.lut_config()
    if config is not None:
        return (_float_out(op, _t(_lut_forward(op, x, config, rounding))),)
    return (_float_out(op, F.gelu(_t(x), approximate=op.approximate.data)),)


# ------------------------------------------------------------------ normalisation


def _softmax(op: hbir.SoftmaxOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_float_out(op, torch.softmax(_t(x), op.dim.value.data)),)


def _layer_norm(op: hbir.LayerNormOp, x: np.ndarray, *rest: np.ndarray):
    params = iter(rest)  # the optional operands that are present, in order
    weight = _t(next(params)) if op.weight is not None else None
    bias = _t(next(params)) if op.bias is not None else None
    shape = tuple(op.normalized_shape.get_values())
    y = F.layer_norm(_t(x), shape, weight, bias, op.eps.value.data)
    return (_float_out(op, y),)


# ------------------------------------------------------------------ reductions


def _reduce_args(op: hbir.ReduceOp) -> tuple[tuple[int, ...], bool]:
    return tuple(op.dims.get_values()), bool(op.keepdim.value.data)


def _exact_mean(op, x, dims, keepdim, divisor, rounding):
    """A sum / mean marked ``qnt.exact``: ``numerics.fixed_point_mean``."""
    y = numerics.fixed_point_mean(
        exact_grids(op), x, tuple(dims), keepdim, divisor, rounding
    )
    return (_float_out(op, y),)


def _reduce_sum(
    op: hbir.ReduceSumOp, x: np.ndarray, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    dims, keepdim = _reduce_args(op)
    if not dims:  # the IR reduces nothing (torch would read [] as "all dims")
        return (x,)
    if qnt.EXACT in op.attributes:
        return _exact_mean(op, x, dims, keepdim, 1, rounding)
    if _is_float(x):
        return (_float_out(op, torch.sum(_t(x), dims, keepdim)),)
    return (_int_out(op, np.sum(x, axis=dims, dtype=np.int64, keepdims=keepdim)),)


def _reduce_mean(
    op: hbir.ReduceMeanOp, x: np.ndarray, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    dims, keepdim = _reduce_args(op)
    if not dims:
        return (x,)
    if qnt.EXACT in op.attributes:
        count = int(np.prod([x.shape[d] for d in dims]))
        return _exact_mean(op, x, dims, keepdim, count, rounding)
    if _is_float(x):
        return (_float_out(op, torch.mean(_t(x), dims, keepdim)),)
    total = np.sum(x, axis=dims, dtype=np.int64, keepdims=keepdim)
    count = int(np.prod([x.shape[d] for d in dims]))
    mode = numerics.HALF_EVEN if op.rounding is None else op.rounding.data
    return (_int_out(op, numerics.divide_round(total, count, mode)),)


def _reduce_extreme(torch_fn, numpy_fn) -> Kernel:
    """reduce_max / reduce_min: they select an input value (float or codes)."""

    def kernel(op: hbir.ReduceOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
        dims, keepdim = _reduce_args(op)
        if not dims:
            return (x,)
        if _is_float(x):
            return (_float_out(op, torch_fn(_t(x), dims, keepdim)),)
        return (np.asarray(numpy_fn(x, axis=dims, keepdims=keepdim)),)

    return kernel


# ------------------------------------------------------------------ selection
# runtime/selection.py: the tie rule; floats through its torch forms (as the
# prepared model calls them), codes through its numpy forms.


def _topk(op: hbir.TopkOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    k, dim = op.k.value.data, op.dim.value.data
    largest = bool(op.largest.value.data)
    if _is_float(x):
        values, indices = selection.topk(_t(x), k, dim, largest)
        return _float_out(op, values), indices.numpy()
    indices = selection.topk_indices(x, k, dim, largest)
    return np.take_along_axis(x, indices, axis=dim), indices


def _arg_extreme(largest: bool) -> Kernel:
    def kernel(op: hbir.ArgExtremeOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
        dim, keepdim = op.dim.value.data, bool(op.keepdim.value.data)
        if _is_float(x):
            pick = torch.argmax if largest else torch.argmin
            return (pick(_t(x), dim, keepdim).numpy(),)
        return (selection.arg_extreme(x, dim, keepdim, largest),)

    return kernel


def _index_read(torch_fn, numpy_fn) -> Kernel:
    def kernel(op: hbir.IndexReadOp, x, index) -> tuple[np.ndarray, ...]:
        dim = op.dim.value.data
        if _is_float(x):
            # the range check of the codes' form (torch's names no op)
            selection.check_index(index, x.shape[dim % x.ndim], op.name)
            return (_float_out(op, torch_fn(_t(x), dim, _t(index))),)
        return (numpy_fn(x, index, dim),)

    return kernel


def _compare(op: hbir.CompareOp, a, b) -> tuple[np.ndarray, ...]:
    kind = op.kind.data
    if _is_float(a):
        return (getattr(torch, kind)(_t(a), _t(b)).numpy(),)
    scales = None if op.scales is None else op.scales.get_values()
    return (np.asarray(selection.compare(kind, a, b, scales)),)


def _select(op: hbir.SelectOp, mask, a, b) -> tuple[np.ndarray, ...]:
    if _is_float(a):
        return (_float_out(op, torch.where(_t(mask), _t(a), _t(b))),)
    return (np.where(mask, a, b).astype(a.dtype),)


def _index_copy(op: hbir.IndexCopyOp, x, index, source) -> tuple[np.ndarray, ...]:
    dim = op.dim.value.data
    if _is_float(x):  # (the codes' form checks the range itself)
        selection.check_index(index, x.shape[dim % x.ndim], op.name)
        y = selection.index_copy(_t(x), dim, _t(index), _t(source))
        return (_float_out(op, y),)
    return (selection.index_copy_codes(x, index, source, dim),)


def _max_pool2d_indices(op: hbir.MaxPool2dIndicesOp, x) -> tuple[np.ndarray, ...]:
    """torch's indices, values or codes alike (``selection.max_pool_indices``)."""
    return (
        selection.max_pool_indices(
            x,
            op.kernel.get_values(),
            op.stride.get_values(),
            op.padding.get_values(),
            op.dilation.get_values(),
            shape_of(op.output)[2:],
        ),
    )


def _max_unpool2d(op: hbir.MaxUnpool2dOp, x, indices) -> tuple[np.ndarray, ...]:
    """Values or codes moved (``selection.max_unpool``)."""
    return (selection.max_unpool(x, indices, tuple(op.size.get_values())),)


# ------------------------------------------------------------------ conv / gemm


def f64_inexact(x_dtype, w_dtype, terms: int) -> bool:
    """Whether ``terms`` products of the dtypes' extreme codes could pass 2**53
    (the bound the integer gemms were specified with; they refuse beyond it)."""
    bound = terms * kernels.magnitude(x_dtype) * kernels.magnitude(w_dtype)
    return bound > 2**53


def _check_exact(x: np.ndarray, w: np.ndarray, terms: int) -> None:
    if f64_inexact(x.dtype, w.dtype, terms):
        raise InterpreterError(
            f"{terms}-term {x.dtype} x {w.dtype} accumulation may exceed 2**53"
        )


def _exact_gemm(
    op, x, w, b, gemm, *, terms: int, axis: int, w_axis, rounding: str, w_out_axis=0
):
    """A float gemm marked ``qnt.exact``: its integer lowering's numbers
    (``numerics.fixed_point_gemm``), with ``gemm`` the float64 torch kernel."""
    grids = exact_grids(op)

    def accumulate(a: np.ndarray, c: np.ndarray) -> np.ndarray:
        return gemm(torch.from_numpy(a), torch.from_numpy(c)).numpy()

    bias = None if b is None else np.asarray(b, np.float64)
    y = numerics.fixed_point_gemm(
        grids,
        x,
        w,
        accumulate,
        bias=bias,
        terms=terms,
        axis=axis,
        w_axis=w_axis if len(grids.w_scales) > 1 else None,
        w_out_axis=w_out_axis,
        mode=rounding,
    )
    return (_float_out(op, y),)


def _conv2d(op: hbir.Conv2dOp, x: np.ndarray, w: np.ndarray, b=None, *, rounding=None):
    params = (
        tuple(op.stride.get_values()),
        tuple(op.padding.get_values()),
        tuple(op.dilation.get_values()),
        op.groups.value.data,
    )
    terms = w.shape[1] * w.shape[2] * w.shape[3]
    if qnt.EXACT in op.attributes:
        gemm = functools.partial(_conv2d_f64, params=params)
        mode = rounding or numerics.HALF_EVEN
        return _exact_gemm(
            op, x, w, b, gemm, terms=terms, axis=1, w_axis=0, rounding=mode
        )
    if _is_float(x):
        bias = None if b is None else _t(b)
        return (_float_out(op, F.conv2d(_t(x), _t(w), bias, *params)),)
    _check_exact(x, w, terms)
    y = integer_ops.conv2d(
        x, w, b, *params, bits=result_bits(op), engine=_conv2d_engine
    )
    return (_int_out(op, y),)


def _conv2d_f64(a: torch.Tensor, c: torch.Tensor, *, params) -> torch.Tensor:
    return F.conv2d(a, c, None, *params)


def _conv_transpose2d_f64(a: torch.Tensor, c: torch.Tensor, *, params):
    return F.conv_transpose2d(a, c, None, *params)


def result_bits(op: Operation) -> int:
    """The width of the op's integer result (what its exact value saturates to)."""
    return code_range(_element(op.results[0]))[1].bit_length() + 1


# Exact-sum engines for ``integer_ops`` (its semantics; ``runtime/kernels.py``
# picks an exact fast path: torch._int_mm for int8, float where provably exact).
def _conv2d_engine(x, w, stride, pads, dilation, groups):
    packed = kernels.pack_conv2d(w, x.dtype, groups)
    return kernels.conv2d_sums(x, packed, stride, pads, dilation)


def _conv_transpose2d_engine(x, w, stride, padding, output_padding, groups, dilation):
    return F.conv_transpose2d(
        _f64(x), _f64(w), None, stride, padding, output_padding, groups, dilation
    ).numpy()


def _linear_engine(x, w):
    return kernels.linear_sums(x, kernels.pack_linear(w, x.dtype))


def _conv_transpose2d(
    op: hbir.ConvTranspose2dOp, x: np.ndarray, w: np.ndarray, b=None, *, rounding=None
):
    stride = tuple(op.stride.get_values())
    padding = tuple(op.padding.get_values())
    output_padding = tuple(op.output_padding.get_values())
    groups, dilation = op.groups.value.data, tuple(op.dilation.get_values())
    params = (stride, padding, output_padding, groups, dilation)
    # Each output sums at most (C_in / groups) * kH * kW products.
    terms = (w.shape[0] // groups) * w.shape[2] * w.shape[3]
    if qnt.EXACT in op.attributes:
        gemm = functools.partial(_conv_transpose2d_f64, params=params)
        mode = rounding or numerics.HALF_EVEN
        return _exact_gemm(
            op,
            x,
            w,
            b,
            gemm,
            terms=terms,
            axis=1,
            w_axis=1,
            rounding=mode,
            w_out_axis=1,
        )
    if _is_float(x):
        bias = None if b is None else _t(b)
        return (_float_out(op, F.conv_transpose2d(_t(x), _t(w), bias, *params)),)
    _check_exact(x, w, terms)
    y = integer_ops.conv_transpose2d(
        x, w, b, *params, bits=result_bits(op), engine=_conv_transpose2d_engine
    )
    return (_int_out(op, y),)


def _linear(op: hbir.LinearOp, x: np.ndarray, w: np.ndarray, b=None, *, rounding=None):
    if qnt.EXACT in op.attributes:
        mode = rounding or numerics.HALF_EVEN
        return _exact_gemm(
            op, x, w, b, F.linear, terms=w.shape[1], axis=-1, w_axis=0, rounding=mode
        )
    if _is_float(x):
        bias = None if b is None else _t(b)
        return (_float_out(op, F.linear(_t(x), _t(w), bias)),)
    _check_exact(x, w, w.shape[1])
    y = integer_ops.linear(x, w, b, bits=result_bits(op), engine=_linear_engine)
    return (_int_out(op, y),)


def _matmul(op: hbir.MatmulOp, a: np.ndarray, b: np.ndarray, *, rounding=None):
    if qnt.EXACT in op.attributes:
        mode = rounding or numerics.HALF_EVEN
        return _exact_gemm(
            op,
            a,
            b,
            None,
            torch.matmul,
            terms=a.shape[-1],
            axis=-1,
            w_axis=None,
            rounding=mode,
            w_out_axis=-1,
        )
    if _is_float(a):
        return (_float_out(op, torch.matmul(_t(a), _t(b))),)
    _check_exact(a, b, a.shape[-1])
    y = integer_ops.matmul(a, b, bits=result_bits(op), engine=kernels.matmul_sums)
    return (_int_out(op, y),)


# ------------------------------------------------------------------ pooling / resize


def _pool_args(op: hbir.Pool2dOp) -> dict:
    return {
        "kernel_size": tuple(op.kernel.get_values()),
        "stride": tuple(op.stride.get_values()),
        "padding": tuple(op.padding.get_values()),
        "ceil_mode": bool(op.ceil_mode.value.data),
    }


def _max_pool2d(
    op: hbir.MaxPool2dOp, x: np.ndarray, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    """Marked ``qnt.exact``: the pooled codes rescaled onto the output grid."""
    args = _pool_args(op) | {"dilation": tuple(op.dilation.get_values())}
    if _is_float(x):
        y = F.max_pool2d(_t(x), **args)
        if qnt.EXACT in op.attributes:
            y = numerics.fixed_point_rescale(exact_grids(op), y.numpy(), mode=rounding)
            y = torch.from_numpy(y)
        return (_float_out(op, y),)
    y = integer_ops.max_pool2d(
        x,
        args["kernel_size"],
        args["stride"],
        args["padding"],
        args["dilation"],
        args["ceil_mode"],
    )
    return (y,)


def _avg_pool2d(
    op: hbir.AvgPool2dOp, x: np.ndarray, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    """Float: F.avg_pool2d. Integer: ``numerics.average_pool`` (exact window sum,
    one half-to-even division). Marked ``qnt.exact``:
    ``numerics.fixed_point_avg_pool``."""
    args = _pool_args(op)
    include_pad = bool(op.count_include_pad.value.data)
    window = (args["kernel_size"], args["stride"], args["padding"])
    out_hw = tuple(_shape(op.results[0])[2:])
    if qnt.EXACT in op.attributes:
        y = numerics.fixed_point_avg_pool(
            exact_grids(op), x, *window, include_pad, out_hw, rounding
        )
        return (_float_out(op, y),)
    if _is_float(x):
        y = F.avg_pool2d(_t(x), **args, count_include_pad=include_pad)
        return (_float_out(op, y),)
    return (_int_out(op, numerics.average_pool(x, *window, include_pad, out_hw)),)


def _global_avg_pool2d(
    op: hbir.GlobalAvgPool2dOp, x: np.ndarray, rounding: str = numerics.HALF_EVEN
):
    """Float: ``F.adaptive_avg_pool2d(x, 1)`` (torchvision's head; torch computes it
    as ``x.mean((2, 3), keepdim=True)``, so both spellings agree bit for bit).
    Integer: exact sum over H x W, one half-to-even division. Marked
    ``qnt.exact``: ``numerics.fixed_point_mean``."""
    if qnt.EXACT in op.attributes:
        return _exact_mean(op, x, (2, 3), True, x.shape[2] * x.shape[3], rounding)
    if _is_float(x):
        return (_float_out(op, F.adaptive_avg_pool2d(_t(x), 1)),)
    return (_int_out(op, integer_ops.global_avg_pool2d(x, bits=result_bits(op))),)


def _resize2d(
    op: hbir.Resize2dOp, x: np.ndarray, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    """``F.interpolate``; integer bilinear: float64, then half-to-even.

    With a ``scale`` property the call passes ``scale_factor`` (torch then samples
    at ``dst / scale``), otherwise ``size`` (samples at ``dst * in / out``).
    """
    mode = op.mode.data
    corners = bool(op.align_corners.value.data) if mode != "nearest" else None
    if op.weight_bits is not None:
        return (_npu_weighted(op, x, corners, rounding),)
    if op.scale is not None:
        how = {"scale_factor": tuple(op.scale.get_values())}
    else:
        how = {"size": tuple(op.size.get_values())}
    if _is_float(x):
        y = F.interpolate(_t(x), mode=mode, align_corners=corners, **how)
        return (_float_out(op, y),)
    y = F.interpolate(_f64(x), mode=mode, align_corners=corners, **how).numpy()
    return (_int_out(op, integer_ops.resize_rint(y, result_bits(op))),)


def _npu_weighted(
    op: hbir.Resize2dOp, x: np.ndarray, corners: bool, rounding: str
) -> np.ndarray:
    """Bilinear / bicubic with the NPU's integer weights
    (``numerics.resize_weighted``); marked ``qnt.exact``: the integer pipeline's
    numbers (``numerics.fixed_point_resize``)."""
    mode, size = op.mode.data, tuple(op.size.get_values())
    scale = None if op.scale is None else list(op.scale.get_values())
    if _is_float(x):
        taps = integer_ops.resize_npu_taps(mode, x.shape[2:], size, corners, scale)
        if qnt.EXACT in op.attributes:
            y = numerics.fixed_point_resize(exact_grids(op), x, *taps, rounding)
        else:
            y = numerics.resize_weighted(x.astype(np.float64), *taps)
        return y.astype(numpy_dtype(_element(op.output)))
    y = integer_ops.resize_npu(x, mode, size, corners, scale, result_bits(op))
    return _int_out(op, y)


def _grid_sample(
    op: hbir.GridSampleOp, x, grid, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    """The NPU's weights (``numerics.grid_sample_sum``); marked ``qnt.exact``: the
    integer pipeline's numbers; integer: the si32 sums from the grid's codes."""
    how = (bool(op.align_corners.value.data), op.padding_mode.data, op.mode.data)
    if _is_float(x) and qnt.EXACT in op.attributes:
        y = numerics.fixed_point_grid_sample(exact_grids(op), x, grid, *how, rounding)
        return (y.astype(numpy_dtype(_element(op.output))),)
    if _is_float(x):
        y = numerics.grid_sample_sum(
            x.astype(np.float64), grid.astype(np.float64), *how
        )
        return (_float_out(op, y),)
    g = grid.astype(np.float64) * np.float64(np.float32(op.grid_scale.value.data))
    return (_int_out(op, numerics.grid_sample_sum(x.astype(np.int64), g, *how)),)


# ------------------------------------------------------------------ data movement


def _concat(
    op: hbir.ConcatOp, *xs: np.ndarray, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    """Marked ``qnt.exact``: each input's codes rescaled onto the output grid."""
    if qnt.EXACT in op.attributes:
        grids = exact_grids(op)
        xs = tuple(
            numerics.fixed_point_rescale(grids, x, i, mode=rounding)
            for i, x in enumerate(xs)
        )
    return (np.concatenate(xs, axis=op.dim.value.data),)


def _slice(op: hbir.SliceOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    # Python slices clamp begin / end exactly like shapes.slice_.
    begin, end, step = op.begin.get_values(), op.end.get_values(), op.step.get_values()
    bounds = zip(begin, end, step, strict=True)
    return (x[tuple(slice(b, e, s) for b, e, s in bounds)],)


def _flip(op: hbir.FlipOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (np.flip(x, tuple(op.dims.get_values())).copy(),)


def _split(op: hbir.SplitOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    cuts = np.cumsum(op.sizes.get_values())[:-1]
    return tuple(np.split(x, cuts, axis=op.dim.value.data))


def _reshape(op: hbir.ReshapeOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (x.reshape(_shape(op.output)),)


def _transpose(op: hbir.TransposeOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (np.transpose(x, tuple(op.perm.get_values())),)


def _pad(op: hbir.PadOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Constant padding; negative amounts crop (as F.pad). Integer tensors pad with
    the value rounded half-to-even and saturated to the element type."""
    low, high = op.low.get_values(), op.high.get_values()
    crop = tuple(
        slice(max(-lo, 0), n - max(-hi, 0))
        for n, lo, hi in zip(x.shape, low, high, strict=True)
    )
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in zip(low, high, strict=True)]
    value = op.value.value.data
    if not _is_float(x):
        value = numerics.pad_code(value, x.dtype)
    y = np.pad(x[crop], widths, constant_values=value)
    return (_float_out(op, y) if _is_float(x) else y,)


def _cast(op: hbir.CastOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """As torch ``.to(dtype)``, except that float -> int truncates toward zero and
    saturates (NaN -> 0) and int -> int saturates instead of wrapping."""
    element = _element(op.output)
    dtype = numpy_dtype(element)
    if dtype.kind == "f":
        return (_float_out(op, x),)
    if not _is_float(x):
        return (_int_out(op, x.astype(np.int64)),)
    lo, hi = code_range(element)
    v = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
    top = float(hi) if float(hi) <= hi else np.nextafter(float(hi), 0.0)
    y = np.clip(v, lo, top).astype(np.int64)  # top: the largest float <= hi
    y[v > top] = hi
    return (y.astype(dtype),)


# ------------------------------------------------------------------ fixed point


def _lut(op: hbir.LutOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """int8: a direct 256-entry table. int16: ``numerics.apply_lut`` of the
    segmented table the op's properties hold (``LutTable.to_arrays`` fields)."""
    if op.table is not None:
        return (dense_array(op.table)[x.astype(np.int64) + 128],)
    table = op.lut_table()
    y = numerics.apply_lut(table, x.astype(np.int64))
    return (y.astype(numpy_dtype(_element(op.output))),)


# ------------------------------------------------------------------ image input


def _image_convert(op: hbir.ImageConvertOp, y: np.ndarray, uv=None):
    """NV12 (or gray) planes -> the centred NHWC image (``runtime/yuv.py``)."""
    planes = y if uv is None else yuv.nv12_to_yuv444(y, uv)
    return (yuv.center(planes),)


def _roi_resize(op: hbir.RoiResizeOp, y: np.ndarray, *planes):
    """The roi of each frame, resized and centred (``yuv.roi_resize``)."""
    *uv, roi = planes
    out = yuv.roi_resize(
        y,
        uv[0] if uv else None,
        roi,
        op.size.get_values(),
        op.interpolate_mode.data,
        op.expansion_mode.data,
        op.pad_value.get_values(),
    )
    return (out,)


def _image_preprocess(op: hbir.ImagePreprocessOp, x: np.ndarray):
    """Integer colour conversion, then float32 normalisation (float result) or the
    per-channel code table (integer result), both ``runtime/yuv.py``."""
    csc = op.csc.data
    if op.table is not None:
        codes = yuv.preprocess_codes(x, csc, dense_array(op.table).astype(np.int64))
        return (codes.astype(numpy_dtype(_element(op.output))),)
    mean, std = op.mean.get_values(), op.std.get_values()
    img = yuv.preprocess(x, csc, op.divisor.value.data, mean, std)
    return (_float_out(op, img),)


# ------------------------------------------------------------------ qnt


def op_axis(op: Operation) -> int | None:
    axis = op.axis  # type: ignore[attr-defined]
    return None if axis is None else axis.value.data


def _const_fake_quant(
    op: qnt.ConstFakeQuantOp, x: np.ndarray, *, rounding: str = numerics.HALF_EVEN
) -> tuple[np.ndarray, ...]:
    y = numerics.const_fake_quant(
        x,
        np.asarray(op.min.get_values()),
        np.asarray(op.max.get_values()),
        op.bits.value.data,
        bool(op.narrowRange.value.data),
        op_axis(op),
        rounding,
    )
    return (_float_out(op, y),)


def quantizer(op: qnt.QuantizeOp) -> Callable[[np.ndarray], tuple[np.ndarray]]:
    """``qnt.quantize``'s kernel with its parameters read from the op once (the
    prepared plan keeps it; ``_quantize`` calls it per op)."""
    element = _element(op.output)
    qmin, qmax = code_range(element, bool(op.narrowRange.value.data))
    scales = np.asarray(op.scales.get_values(), np.float32)
    zeros = np.asarray(op.zeros.get_values())
    axis, mode, dtype = op_axis(op), op.rounding.data, numpy_dtype(element)
    quantize = kernels.Quantizer(scales, zeros, qmin, qmax, axis, mode, dtype)

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        return (quantize(np.asarray(x)),)

    return run


def _quantize(op: qnt.QuantizeOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return quantizer(op)(x)


def dequantizer(op: qnt.DequantizeOp) -> Callable[[np.ndarray], tuple[np.ndarray]]:
    """``qnt.dequantize``'s kernel with its parameters read from the op once."""
    scales = np.asarray(op.scales.get_values(), np.float32)
    zeros = np.asarray(op.zeros.get_values())
    dtype = np.float64 if numpy_dtype(_element(op.output)) == np.float64 else np.float32
    axis = op_axis(op)

    def run(q: np.ndarray) -> tuple[np.ndarray]:
        return (_float_out(op, numerics.dequantize(q, scales, zeros, axis, dtype)),)

    return run


def _dequantize(op: qnt.DequantizeOp, q: np.ndarray) -> tuple[np.ndarray, ...]:
    return dequantizer(op)(q)


def _requantize(op: qnt.RequantizeOp, x: np.ndarray) -> tuple[np.ndarray, ...]:
    element = _element(op.output)
    lo, hi = code_range(element)
    if op.clip is not None:
        clip_lo, clip_hi = op.clip.get_values()
        lo, hi = max(lo, clip_lo), min(hi, clip_hi)
    y = numerics.requantize(
        x,
        np.asarray(op.multiplier.get_values()),
        np.asarray(op.shift.get_values()),
        op.zero.value.data,
        lo,
        hi,
        op_axis(op),
        op.rounding.data,
    )
    return (y.astype(numpy_dtype(element)),)


def _identity(op: Operation, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (x,)


# ------------------------------------------------------------------ the table

_HBIR_QNT_KERNELS: dict[type[Operation], Kernel] = {
    hbir.ConstantOp: _constant,
    hbir.NegOp: _elementwise(torch.neg, np.negative),
    hbir.AbsOp: _elementwise(torch.abs, np.abs),
    hbir.ReluOp: _elementwise(torch.relu, _relu_int),
    hbir.ClipOp: _clip,
    hbir.SigmoidOp: _unary_float(torch.sigmoid),
    hbir.TanhOp: _unary_float(torch.tanh),
    hbir.ExpOp: _unary_float(torch.exp),
    hbir.LogOp: _unary_float(torch.log),
    hbir.SqrtOp: _unary_float(torch.sqrt),
    hbir.RsqrtOp: _unary_float(torch.rsqrt),
    hbir.ReciprocalOp: _unary_float(torch.reciprocal),
    hbir.SinOp: _unary_float(torch.sin),
    hbir.CosOp: _unary_float(torch.cos),
    hbir.GeluOp: _gelu,
    hbir.SiluOp: _unary_float(F.silu),
    hbir.HardsigmoidOp: _unary_float(F.hardsigmoid),
    hbir.HardswishOp: _unary_float(F.hardswish),
    hbir.LeakyReluOp: _unary_float(F.leaky_relu),
    hbir.EluOp: _unary_float(F.elu),
    hbir.CeluOp: _unary_float(F.celu),
    hbir.SoftplusOp: _unary_float(F.softplus),
    hbir.SeluOp: _unary_float(F.selu),
    hbir.MishOp: _unary_float(F.mish),
    hbir.ErfOp: _unary_float(torch.erf),
    hbir.LogSigmoidOp: _unary_float(F.logsigmoid),
    hbir.SoftsignOp: _unary_float(F.softsign),
    hbir.TanhshrinkOp: _unary_float(F.tanhshrink),
    hbir.AddOp: _elementwise(torch.add, np.add, "add"),
    hbir.SubOp: _elementwise(torch.sub, np.subtract, "sub"),
    hbir.MulOp: _elementwise(torch.mul, np.multiply, "mul"),
    hbir.DivOp: _elementwise(torch.div, None),
    hbir.MaximumOp: _elementwise(torch.maximum, np.maximum, "maximum"),
    hbir.MinimumOp: _elementwise(torch.minimum, np.minimum, "minimum"),
    hbir.FloorDivideOp: _elementwise(None, selection.floor_divide),
    hbir.RemainderOp: _elementwise(None, selection.remainder),
    hbir.SoftmaxOp: _softmax,
    hbir.LayerNormOp: _layer_norm,
    hbir.ReduceSumOp: _reduce_sum,
    hbir.ReduceMeanOp: _reduce_mean,
    hbir.ReduceMaxOp: _reduce_extreme(torch.amax, np.max),
    hbir.ReduceMinOp: _reduce_extreme(torch.amin, np.min),
    hbir.TopkOp: _topk,
    hbir.ArgmaxOp: _arg_extreme(True),
    hbir.ArgminOp: _arg_extreme(False),
    hbir.GatherOp: _index_read(torch.gather, selection.gather),
    hbir.IndexSelectOp: _index_read(torch.index_select, selection.index_select),
    hbir.IndexCopyOp: _index_copy,
    hbir.CompareOp: _compare,
    hbir.SelectOp: _select,
    hbir.Conv2dOp: _conv2d,
    hbir.ConvTranspose2dOp: _conv_transpose2d,
    hbir.LinearOp: _linear,
    hbir.MatmulOp: _matmul,
    hbir.MaxPool2dOp: _max_pool2d,
    hbir.MaxPool2dIndicesOp: _max_pool2d_indices,
    hbir.MaxUnpool2dOp: _max_unpool2d,
    hbir.AvgPool2dOp: _avg_pool2d,
    hbir.GlobalAvgPool2dOp: _global_avg_pool2d,
    hbir.Resize2dOp: _resize2d,
    hbir.GridSampleOp: _grid_sample,
    hbir.ConcatOp: _concat,
    hbir.SliceOp: _slice,
    hbir.SplitOp: _split,
    hbir.ReshapeOp: _reshape,
    hbir.TransposeOp: _transpose,
    hbir.FlipOp: _flip,
    hbir.PadOp: _pad,
    hbir.CastOp: _cast,
    hbir.LutOp: _lut,
    hbir.ImageConvertOp: _image_convert,
    hbir.RoiResizeOp: _roi_resize,
    hbir.ImagePreprocessOp: _image_preprocess,
    qnt.ConstFakeQuantOp: _const_fake_quant,
    qnt.QuantizeOp: _quantize,
    qnt.DequantizeOp: _dequantize,
    qnt.RequantizeOp: _requantize,
    qnt.BarrierOp: _identity,
}


# ------------------------------------------------------------------ the loop


def where(op: Operation) -> str:
    """``file:line:col`` of an op, or its location as printed (``loc(...)``)."""
    loc = op.location
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    return str(loc)


def op_error(op: Operation, message: str) -> InterpreterError:
    return InterpreterError(f"{where(op)}: error: '{op.name}' op {message}")


InputType = tuple[np.dtype, tuple[int, ...], bool]


def input_type(arg: SSAValue) -> InputType:
    """What ``bind_input`` checks an input against: its dtype, its shape, and
    whether it is bf16 (rounded once on the way in)."""
    element = _element(arg)
    return numpy_dtype(element), _shape(arg), isinstance(element, BFloat16Type)


def bind_input(
    index: int, arg: SSAValue, x: np.ndarray, expected: InputType | None = None
) -> np.ndarray:
    """``x`` checked against block argument ``arg`` (``expected`` is its
    ``input_type``, for a caller that binds it on every call)."""
    x = np.asarray(x)
    dtype, shape, bf16 = input_type(arg) if expected is None else expected
    if x.dtype != dtype:
        name = _input_name(index, arg)
        raise ValueError(f"{name} has dtype {x.dtype}, expected {dtype} ({arg.type})")
    if x.shape != shape:
        raise ValueError(
            f"{_input_name(index, arg)} has shape {x.shape}, expected {shape}"
        )
    if not x.flags.writeable:  # torch.from_numpy warns on read-only arrays
        x = x.copy()
    return _round_bf16(x) if bf16 else x


def _input_name(index: int, arg: SSAValue) -> str:
    return f"input {index}" + (f" (%{arg.name_hint})" if arg.name_hint else "")


def check_result(op: Operation, value: SSAValue, y: np.ndarray) -> None:
    """Catch a kernel that disagrees with the IR's result type."""
    dtype, shape = numpy_dtype(_element(value)), _shape(value)
    if not isinstance(y, np.ndarray) or y.dtype != dtype or y.shape != shape:
        got = f"{y.dtype} {y.shape}" if isinstance(y, np.ndarray) else type(y).__name__
        raise op_error(op, f"produced {got}, expected {dtype} {shape}")


def _on_f16(kernel: Kernel) -> Kernel:
    """An fp16 op (``op_table.FP16_OPS``; convert-fp16): its ``f16`` operands
    widened to float32 (exact), the float32 kernel, the result rounded once to
    its ``f16`` type by ``_float_out`` (half to even, overflow to inf) -- the
    numbers ``qat.bc`` computes between its casts. An op ``npu.fp16_map``
    computes runs that instruction's own function (``kernels.fp16_unary``)."""

    @functools.wraps(kernel)  # keeps the signature (``rounding``)
    def run(op: Operation, *args: np.ndarray, **kwargs) -> tuple[np.ndarray, ...]:
        function = hbm_opcodes.fp16_function(op.name, getattr(op, "approximate", None))
        if function is not None and args[0].dtype == np.float16 and len(args) == 1:
            return (kernels.fp16_unary(function, args[0]),)  # npu.fp16_map's own
        wide = (a.astype(np.float32) if a.dtype == np.float16 else a for a in args)
        return kernel(op, *wide, **kwargs)

    return run


_FP16 = {op_table.BY_OP[op].hbir for op in op_table.FP16_OPS}
_HBIR_QNT_KERNELS |= {
    cls: _on_f16(k) for cls, k in _HBIR_QNT_KERNELS.items() if cls.name in _FP16
}

# The npu dialect's kernels (runtime/npu_kernels.py, which imports this module
# for its engines: imported last).
from hbir.runtime import npu_kernels  # noqa: E402

# The one table: every hbir, qnt and npu op's kernel.
KERNELS: dict[type[Operation], Kernel] = _HBIR_QNT_KERNELS | npu_kernels.KERNELS

# Kernels whose result depends on the model's rounding mode (fake quantization,
# the lookup-table ops, the ops ``qnt.exact`` can mark): those taking ``rounding``.
_ROUNDED = {
    cls
    for cls, kernel in KERNELS.items()
    if "rounding" in inspect.signature(kernel).parameters
}


@functools.cache
def kernel_table(rounding: str) -> dict[type[Operation], Kernel]:
    """``KERNELS`` with the model's ``rounding`` bound into the kernels that take
    it (fake quantization and table lookups follow the model's rounding mode)."""
    if rounding not in numerics.ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {rounding!r}")
    if rounding == numerics.HALF_EVEN:
        return KERNELS
    return {
        cls: functools.partial(k, rounding=rounding) if cls in _ROUNDED else k
        for cls, k in KERNELS.items()
    }


def run_function(
    func_op: func.FuncOp,
    inputs: Sequence[np.ndarray],
    *,
    rounding: str = numerics.HALF_EVEN,
    on_op: Callable[[Operation, tuple[np.ndarray, ...]], None] | None = None,
) -> list[np.ndarray]:
    """Execute ``func_op`` on ``inputs`` and return its ``func.return`` operands.

    ``rounding`` is the model's mode for ``qnt.const_fake_quant`` (``half_up`` when
    the module has ``hbir.legacy_round``); quantize / requantize carry their own.
    ``on_op(op, results)`` is called after every op except the terminator.

    Without ``on_op`` the function runs as a prepared plan (``runtime/plan.py``:
    built once, cached on ``func_op``); with it, op by op, so that every op,
    constants included, reports its results.
    """
    table = kernel_table(rounding)
    if on_op is None:
        from hbir.runtime import plan

        return plan.prepared(func_op, rounding).run(inputs)
    name = func_op.sym_name.data
    if len(func_op.body.blocks) != 1:
        raise InterpreterError(f"@{name} must have exactly one block")
    block = func_op.body.block
    if len(inputs) != len(block.args):
        raise ValueError(f"@{name} takes {len(block.args)} inputs, got {len(inputs)}")
    env: dict[SSAValue, np.ndarray] = {
        arg: bind_input(i, arg, x)
        for i, (arg, x) in enumerate(zip(block.args, inputs, strict=True))
    }
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            return [env[v] for v in op.arguments]
        kernel = table.get(type(op))
        if kernel is None:
            raise op_error(op, "has no interpreter kernel")
        try:
            results = kernel(op, *[env[v] for v in op.operands])
        except InterpreterError as e:
            raise op_error(op, str(e)) from e
        except Exception as e:
            raise op_error(op, f"failed: {type(e).__name__}: {e}") from e
        for value, y in zip(op.results, results, strict=True):
            check_result(op, value, y)
            env[value] = y
        on_op(op, results)
    raise InterpreterError(f"@{name} has no func.return")
