"""The importer's rule tables: {module class | torch function | Tensor method: builder}.

A builder ``(exporter, node) -> value`` emits the IR of one graph node. Builders of
QAT modules mirror the module's ``forward`` step by step (input fake quants, weight
fake quant, the float op in the forward's precision, fused activation, output fake
quant, cast back), so the interpreter reproduces the torch forward bit for bit.
Data-movement builders read the shape each node produced on the example inputs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import fx, nn
from xdsl.dialects.builtin import Float16Type
from xdsl.ir import Operation, SSAValue

from hbir.dialects import hbir as hb
from hbir.dialects import qnt, shapes
from hbir.quantization import lut_modules as lut
from hbir.quantization import op_rules, stubs
from hbir.quantization import qat_modules as qat
from hbir.quantization.dtypes import qint32
from hbir.quantization.export import Exporter, Unsupported, _is_number_value
from hbir.quantization.fake_cast import FakeCast
from hbir.quantization.options import current_options, using
from hbir.quantization.spellings import resolve
from hbir.runtime import numerics, op_table, selection

Builder = Callable[[Exporter, fx.Node], object]

INF = float("inf")


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _arg(node: fx.Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _module(ex: Exporter, node: fx.Node) -> nn.Module:
    return ex.modules[node.target]


# ----------------------------------------------------------------- QAT plumbing


def _inputs(ex: Exporter, mod: nn.Module, values: list) -> list:
    """Apply the module's own input fake quants (when its qconfig has them)."""
    fqs = getattr(mod, "input_fake_quant", None)
    if fqs is None:
        return values
    it = iter(fqs)
    return [
        ex.fake_quant(v, next(it)) if not _is_number_value(v) else v for v in values
    ]


def _output(ex: Exporter, mod: nn.Module, y, dtype: torch.dtype | None = None):
    """The module's output fake quant, then back to the input precision."""
    y = ex.fake_quant(y, getattr(mod, "activation_post_process", None))
    return y if dtype is None else ex.cast(y, dtype)


def _activation(ex: Exporter, y, kind: str | None):
    if kind is None:
        return y
    if kind == "relu":
        return ex.emit(hb.ReluOp(y))
    if kind == "relu6":
        return ex.emit(hb.ClipOp(y, 0.0, 6.0))
    raise Unsupported(f"fused activation {kind!r}")


def _weight(ex: Exporter, mod: nn.Module):
    w = ex.constant(mod.weight)
    return ex.fake_quant(w, getattr(mod, "weight_fake_quant", None))


def _bias(ex: Exporter, mod: nn.Module, exact: bool, shape=None):
    """The float bias, or in exact mode the float64 bias on the int32 grid s_in*s_w;
    reshaped to ``shape`` (channels first) before its fake quantization, so the
    reshape is of a constant, which ``fold-constants`` folds."""
    if mod.bias is None:
        return None
    if not exact:
        return _reshaped(ex, ex.constant(mod.bias), shape or tuple(mod.bias.shape))
    b = ex.constant(mod.bias.detach().double())
    b = _reshaped(ex, b, shape or tuple(mod.bias.shape))
    fq_in = mod.input_fake_quants()[0] if mod.input_fake_quants() else None
    fq_w = mod.weight_fake_quant
    if fq_in is None or not (
        fq_in.fake_quant_enabled[0] and fq_w.fake_quant_enabled[0]
    ):
        return b
    s_in, s_w = (t.detach().cpu().numpy() for t in (fq_in.scale, mod._bias_scale()))
    scale = numerics.bias_scale(s_in, s_w).astype(np.float64)
    zero = np.zeros_like(scale)
    return ex.fake_quant_raw(b, scale, zero, qint32.min, qint32.max, 0)


def _weight_layer(op_builder):
    def build(ex: Exporter, node: fx.Node):
        mod = _module(ex, node)
        x = ex.tensor(node.args[0])
        dtype = ex.dtype(x)
        (x,) = _inputs(ex, mod, [x])
        w = _weight(ex, mod)
        exact = bool(getattr(mod, "exact", False))
        b = _bias(ex, mod, exact)
        if exact:
            x, w = ex.cast(x, torch.float64), ex.cast(w, torch.float64)
        if getattr(mod, "padding_mode", "zeros") != "zeros":
            raise Unsupported(f"padding_mode={mod.padding_mode!r}")
        y = ex.emit(_exact_if(mod, op_builder(mod, x, w, b)))
        y = _activation(ex, y, getattr(mod, "fused_relu", None))
        if not isinstance(mod, qat.QATModule):
            return y
        return _output(ex, mod, y, dtype)

    return build


def _exact_if(mod: nn.Module, op: Operation, *args) -> Operation:
    """Mark ``op`` ``qnt.exact`` when the module's VALIDATION forward is the
    fixed-point one (its ``fixed_point_grids(*args)``); ``qnt.inexact`` when it
    would be but ``float_validation()`` made it float (convert lowers it to the
    integer pipeline all the same: the two may differ)."""
    grids_of = getattr(mod, "fixed_point_grids", None)
    if grids_of is None:
        return op
    grids = grids_of(*args)
    if grids is not None:
        qnt.set_exact(op, grids)
    elif not current_options().fixed_point_validation:
        with using(fixed_point_validation=True):
            if grids_of(*args) is not None:
                qnt.set_inexact(op, "float_validation")
    return op


def _conv2d(mod, x, w, b):
    if isinstance(mod.padding, str):
        raise Unsupported(f"padding={mod.padding!r} (use explicit padding)")
    return hb.Conv2dOp(
        x, w, b, _pair(mod.stride), _pair(mod.padding), _pair(mod.dilation), mod.groups
    )


def _conv_transpose2d(mod, x, w, b):
    return hb.ConvTranspose2dOp(
        x,
        w,
        b,
        _pair(mod.stride),
        _pair(mod.padding),
        _pair(mod.output_padding),
        _pair(mod.dilation),
        mod.groups,
    )


def _linear(mod, x, w, b):
    return hb.LinearOp(x, w, b)


def _affine(ex: Exporter, node: fx.Node):
    """``x * w + b``; exact (level 2) like the weight layers (``_weight_layer``)."""
    mod = _module(ex, node)
    x = ex.tensor(node.args[0])
    dtype = ex.dtype(x)
    (x,) = _inputs(ex, mod, [x])
    x_shape = hb.shape_of(x)
    if mod.fixed_point_grids(len(x_shape)) is not None:
        # The integer pipeline's numbers: the depthwise 1x1 conv (qnt.exact),
        # channels last through a reshape to (-1, C, 1, 1) and back.
        channels = mod.weight.numel()
        x4 = x
        if len(x_shape) != 4 or mod.channels_last():
            x4 = _reshaped(ex, x, (math.prod(x_shape) // channels, channels, 1, 1))
        w = _broadcast_weight(ex, mod, (channels, 1, 1, 1))
        b = _bias(ex, mod, False)
        conv = hb.Conv2dOp(x4, w, b, (1, 1), (0, 0), (1, 1), channels)
        y = _output(ex, mod, ex.emit(_exact_if(mod, conv)))
        return ex.cast(_reshaped(ex, y, x_shape), dtype)
    shape = tuple(torch.empty(mod.weight.shape).reshape(mod.view_shape).shape)
    w = _broadcast_weight(ex, mod, shape)
    b = _bias(ex, mod, mod.exact, shape)
    if mod.exact:
        x, w = ex.cast(x, torch.float64), ex.cast(w, torch.float64)
    y = ex.emit(_exact_if(mod, hb.MulOp(x, w), len(x_shape)))
    if b is not None:
        y = ex.emit(hb.AddOp(y, b))
    return _output(ex, mod, y, dtype)


def _broadcast_weight(ex: Exporter, mod: nn.Module, shape: tuple[int, ...]):
    """The 1-D weight reshaped for broadcasting, then fake-quantized per channel
    along the dim that holds it: the same values as reshaping the fake-quantized
    weight, but the reshape is of a constant, which ``fold-constants`` folds."""
    w = _reshaped(ex, ex.constant(mod.weight), shape)
    fq = getattr(mod, "weight_fake_quant", None)
    if fq is None or not bool(fq.fake_quant_enabled[0]) or fq.ch_axis < 0:
        return ex.fake_quant(w, fq)
    if mod.weight.dim() != 1:
        raise Unsupported(f"a per-channel weight of shape {tuple(mod.weight.shape)}")
    axis = shape.index(mod.weight.numel()) if mod.weight.numel() > 1 else 0
    scale = fq.scale.detach().double().numpy()
    zero = fq.zero_point.detach().double().numpy()
    return ex.fake_quant_raw(w, scale, zero, int(fq.quant_min), int(fq.quant_max), axis)


def _reshaped(ex: Exporter, value, shape: tuple[int, ...]):
    if hb.shape_of(value) == shape:
        return value
    return ex.emit(hb.ReshapeOp(value, shape))


# ----------------------------------------------------------------- pooling


def _max_pool_op(x, kernel, stride, padding, dilation, ceil_mode):
    kernel = _pair(kernel)
    stride = kernel if stride is None or stride == [] else _pair(stride)
    return hb.MaxPool2dOp(x, kernel, stride, _pair(padding), _pair(dilation), ceil_mode)


def _max_pool_module_op(m, x):
    op = _max_pool_op(x, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)
    return _exact_if(m, op)


def _max_pool_module(ex: Exporter, node: fx.Node):
    """The pooled values; with ``return_indices`` (values, the input's indices,
    of the pool's own window)."""
    mod = _module(ex, node)
    (x,) = _inputs(ex, mod, [ex.tensor(node.args[0])])
    pool = _max_pool_module_op(mod, x)
    values = _output(ex, mod, ex.emit(pool))
    if not mod.return_indices:
        return values
    indices = hb.MaxPool2dIndicesOp(
        x,
        pool.kernel.get_values(),
        pool.stride.get_values(),
        pool.padding.get_values(),
        pool.dilation.get_values(),
        pool.ceil_mode.value.data,
    )
    return values, ex.emit(indices)


def _avg_pool_op(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    if divisor is not None:
        raise Unsupported("divisor_override")
    kernel = _pair(kernel)
    stride = kernel if stride is None or stride == [] else _pair(stride)
    return hb.AvgPool2dOp(
        x, kernel, stride, _pair(padding), ceil_mode, count_include_pad
    )


def _global_pool_op(x, output_size):
    if _pair(output_size) != (1, 1):
        raise Unsupported(f"adaptive pooling to {output_size} (only 1x1)")
    return hb.GlobalAvgPool2dOp(x)


def _unary_module(make):
    """A one-input module (QAT or float) whose op is ``make(mod, x)``."""

    def build(ex: Exporter, node: fx.Node):
        mod = _module(ex, node)
        (x,) = _inputs(ex, mod, [ex.tensor(node.args[0])])
        return _output(ex, mod, ex.emit(make(mod, x)))

    return build


def _clamp_op(mod, x):
    lo = -INF if mod.min_value is None else float(mod.min_value)
    hi = INF if mod.max_value is None else float(mod.max_value)
    return _exact_if(mod, hb.ClipOp(x, lo, hi))


# ----------------------------------------------------------------- binary / n-ary


_BINARY_OPS = {
    qat.QuantAdd: hb.AddOp,
    qat.QuantSub: hb.SubOp,
    qat.QuantMul: hb.MulOp,
    qat.QuantMaximum: hb.MaximumOp,
    qat.QuantMinimum: hb.MinimumOp,
    qat.QuantMatmul: hb.MatmulOp,
}


def _binary_module(ex: Exporter, node: fx.Node):
    mod = _module(ex, node)
    a, b = (_value_or_number(ex, v) for v in node.args[:2])
    a, b = _inputs(ex, mod, [a, b])
    operands = (a, b)
    like = a if not _is_number_value(a) else b
    dtype = ex.dtype(like)
    numbers = [_is_number_value(v) for v in (a, b)]
    grids = mod.fixed_point_grids(a, b)
    if grids is not None:
        # The integer pipeline's numbers (qnt.exact): float32 operands, a number
        # as the float32 constant of the forward.
        a, b = ex.tensor_of(a, like), ex.tensor_of(b, like)
        op = _BINARY_OPS[type(mod)](a, b)
        qnt.set_exact(op, grids)
        return _output(ex, mod, ex.emit(op), dtype)
    if getattr(mod, "exact_inputs", False) or getattr(mod, "exact", False):
        # A number is the float32 constant of the float32 forward, in float64.
        a, b = (_f64_number(ex, v) if _is_number_value(v) else v for v in (a, b))
    a, b = ex.tensor_of(a, like), ex.tensor_of(b, like)
    if getattr(mod, "exact_inputs", False):
        exact = iter(
            _exact_values(
                ex, mod, [v for v, n in zip((a, b), numbers, strict=True) if not n]
            )
        )
        a, b = (
            ex.cast(v, torch.float64) if n else next(exact)
            for v, n in zip((a, b), numbers, strict=True)
        )
    elif getattr(mod, "exact", False):
        a, b = ex.cast(a, torch.float64), ex.cast(b, torch.float64)
    y = ex.emit(_exact_if(mod, _BINARY_OPS[type(mod)](a, b), *operands))
    return _output(ex, mod, y, dtype)


def _f64_number(ex: Exporter, v):
    return ex.constant(np.asarray(np.float32(v), np.float64))


def _exact_values(ex: Exporter, mod: nn.Module, tensors: list) -> list:
    """Float32 tensors as their exact float64 values (qat_modules._exact_values)."""
    fqs = iter(mod.input_fake_quants())
    return [ex.fake_quant(ex.cast(v, torch.float64), next(fqs, None)) for v in tensors]


def _value_or_number(ex: Exporter, arg):
    return ex.values[arg] if isinstance(arg, fx.Node) else arg


def _cat_module(ex: Exporter, node: fx.Node):
    """``QuantCat``; ``QuantStack`` is the cat of its inputs viewed with a dim of
    size 1 at ``dim``."""
    mod = _module(ex, node)
    tensors = _inputs(ex, mod, [ex.tensor(t) for t in node.args[0]])
    dim = mod.dim
    if isinstance(mod, qat.QuantStack):
        rank = len(hb.shape_of(tensors[0])) + 1
        dim %= rank
        tensors = [
            _reshaped(ex, t, (*hb.shape_of(t)[:dim], 1, *hb.shape_of(t)[dim:]))
            for t in tensors
        ]
    concat = _exact_if(mod, hb.ConcatOp(tensors, dim), len(tensors))
    return _output(ex, mod, ex.emit(concat))


def _reduce_module(op_cls):
    def build(ex: Exporter, node: fx.Node):
        mod = _module(ex, node)
        (x,) = _inputs(ex, mod, [ex.tensor(node.args[0])])
        dtype = ex.dtype(x)
        grids = mod.fixed_point_grids()
        if grids is not None:
            # The integer pipeline's numbers (qnt.exact) on the float32 input.
            op = op_cls(x, list(mod.dims(len(hb.shape_of(x)))), bool(mod.keepdim))
            qnt.set_exact(op, grids)
            return _output(ex, mod, ex.emit(op), dtype)
        if mod.exact_inputs:
            (x,) = _exact_values(ex, mod, [x])
        elif mod.exact:
            x = ex.cast(x, torch.float64)
        rank = len(hb.shape_of(x))
        dims = range(rank) if mod.dim is None else mod.dim
        dims = [dims] if isinstance(dims, int) else list(dims)
        op = _exact_if(mod, op_cls(x, dims, bool(mod.keepdim)))
        return _output(ex, mod, ex.emit(op), dtype)

    return build


# ----------------------------------------------------------------- lookup tables


def _lut_module(ex: Exporter, node: fx.Node):
    """The hbir op, asking for the module's ``num_tables``; ``configure-lut`` adds
    the grids of the fake quantizations around it."""
    mod = _module(ex, node)
    (x,) = _inputs(ex, mod, [ex.tensor(node.args[0])])
    if isinstance(mod, lut.GELU):
        op = hb.GeluOp(x, mod.approximate)
    elif isinstance(mod, lut.ParametricLutModule):
        op = _hbir_class(op_table.BY_OP[mod.op].hbir)(x, mod.value)
    else:
        op = _hbir_class(op_table.BY_OP[mod.op].hbir)(x)
    op.num_tables = hb.i64_attr(mod.num_tables)
    return _output(ex, mod, ex.emit(op))


def _hbir_class(name: str):
    return next(cls for cls in hb.HBIR.operations if cls.name == name)


# ----------------------------------------------------------------- float modules


def _float_unary(op_cls, **props):
    def make(mod, x):
        kwargs = {k: getattr(mod, v) for k, v in props.items()}
        return op_cls(x, **kwargs)

    return _unary_module(make)


def _identity(ex: Exporter, node: fx.Node):
    return ex.values[node.args[0]]


def _float_layer_norm_module(ex: Exporter, node: fx.Node):
    mod = _module(ex, node)
    x = ex.tensor(node.args[0])
    w = ex.constant(mod.weight) if mod.weight is not None else None
    b = ex.constant(mod.bias) if getattr(mod, "bias", None) is not None else None
    return ex.emit(hb.LayerNormOp(x, tuple(mod.normalized_shape), w, b, mod.eps))


def _fake_cast(ex: Exporter, node: fx.Node):
    """``hbir.cast`` to ``f16`` and back: the value rounded to binary16 (half to
    even, overflow to inf), the very rounding of ``FakeCast``; convert keeps the
    ``f16`` value and the ops that read it run in fp16."""
    mod = _module(ex, node)
    x = ex.tensor(node.args[0])
    if not mod.enabled:
        return x
    element = hb.tensor_type(x).element_type
    return ex.emit(hb.CastOp(ex.emit(hb.CastOp(x, Float16Type())), element))


MODULE_IMPORTERS: dict[type, Builder] = {
    FakeCast: _fake_cast,
    qat.QuantStub: _unary_module(lambda mod, x: None),  # replaced below
    qat.DeQuantStub: _identity,
    stubs.QuantStub: _identity,
    stubs.DeQuantStub: _identity,
    nn.Identity: _identity,
    nn.Conv2d: _weight_layer(_conv2d),
    nn.ConvTranspose2d: _weight_layer(_conv_transpose2d),
    nn.Linear: _weight_layer(_linear),
    qat.QuantAffine: _affine,
    nn.MaxPool2d: lambda ex, node: _max_pool_module(ex, node),
    nn.AvgPool2d: _unary_module(
        lambda m, x: _exact_if(
            m,
            _avg_pool_op(
                x,
                m.kernel_size,
                m.stride,
                m.padding,
                m.ceil_mode,
                m.count_include_pad,
                m.divisor_override,
            ),
        )
    ),
    nn.AdaptiveAvgPool2d: _unary_module(
        lambda m, x: _exact_if(m, _global_pool_op(x, m.output_size))
    ),
    qat.Clamp: _unary_module(_clamp_op),
    qat.Abs: _unary_module(lambda m, x: hb.AbsOp(x)),
    qat.Resize: lambda ex, node: _resize_module(ex, node),
    qat.GridSample: lambda ex, node: _grid_sample_module(ex, node),
    qat.QuantSelect: lambda ex, node: _select_module(ex, node),
    qat.ConstantPad: lambda ex, node: _constant_pad_module(ex, node),
    nn.ReLU: _float_unary(hb.ReluOp),
    nn.ReLU6: _unary_module(lambda m, x: hb.ClipOp(x, 0.0, 6.0)),
    nn.Hardtanh: _unary_module(lambda m, x: hb.ClipOp(x, m.min_val, m.max_val)),
    nn.Sigmoid: _float_unary(hb.SigmoidOp),
    nn.Tanh: _float_unary(hb.TanhOp),
    nn.GELU: _float_unary(hb.GeluOp, approximate="approximate"),
    nn.SiLU: _float_unary(hb.SiluOp),
    nn.Hardsigmoid: _float_unary(hb.HardsigmoidOp),
    nn.Hardswish: _float_unary(hb.HardswishOp),
    nn.Softmax: _float_unary(hb.SoftmaxOp, dim="dim"),
    nn.LayerNorm: _float_layer_norm_module,
    nn.Flatten: _unary_module(lambda m, x: None),  # replaced below
    qat.QuantCat: _cat_module,
    qat.QuantMean: _reduce_module(hb.ReduceMeanOp),
    qat.QuantSum: _reduce_module(hb.ReduceSumOp),
    **{cls: _binary_module for cls in _BINARY_OPS},
    **{cls: _lut_module for cls in lut.LUT_MODULES.values()},
}


def _quant_stub(ex: Exporter, node: fx.Node):
    return _output(ex, _module(ex, node), ex.tensor(node.args[0]))


MODULE_IMPORTERS[qat.QuantStub] = _quant_stub


# ----------------------------------------------------------------- data movement


def _reshape(ex: Exporter, node: fx.Node):
    x = ex.tensor(node.args[0])
    shape = ex.recorded_shape(node)
    if shape == hb.shape_of(x):
        return x
    return ex.emit(hb.ReshapeOp(x, shape))


MODULE_IMPORTERS[nn.Flatten] = _reshape


def _permutation(node: fx.Node, rank: int) -> list[int]:
    """The dims permutation of permute / transpose / t / movedim / swapaxes."""
    target = node.target if isinstance(node.target, str) else node.target.__name__
    args = node.args[1:]
    if target == "permute":
        dims = args[0] if len(args) == 1 and isinstance(args[0], list | tuple) else args
        dims = node.kwargs.get("dims", dims)
        return [d % rank for d in dims]
    if target in ("transpose", "swapaxes"):
        names = ("dim0", "dim1") if target == "transpose" else ("axis0", "axis1")
        d0, d1 = (_arg(node, i + 1, n) % rank for i, n in enumerate(names))
        perm = list(range(rank))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return perm
    if target == "t":
        return list(range(rank))[::-1]
    if target == "movedim":
        source, destination = _arg(node, 1, "source"), _arg(node, 2, "destination")
        return _moved_dims(rank, source, destination)
    raise Unsupported(f"permutation of {target}")


def _moved_dims(rank: int, source, destination) -> list[int]:
    """The permutation of ``movedim(source, destination)`` (ints or sequences)."""
    source = [source] if isinstance(source, int) else list(source)
    destination = [destination] if isinstance(destination, int) else list(destination)
    perm: list[int | None] = [None] * rank
    for s, d in zip(source, destination, strict=True):
        perm[d % rank] = s % rank
    rest = iter(d for d in range(rank) if d not in {s % rank for s in source})
    return [p if p is not None else next(rest) for p in perm]


def _transpose(ex: Exporter, node: fx.Node):
    x = ex.tensor(node.args[0])
    perm = [int(p) for p in _permutation(node, len(hb.shape_of(x)))]
    if perm == sorted(perm):
        return x
    return ex.emit(hb.TransposeOp(x, perm))


def _to_same(ex: Exporter, node: fx.Node):
    """contiguous / clone / detach / float / to / type_as / type / long: values
    unchanged (indices stay i64; cast to float they become values)."""
    x = ex.tensor(node.args[0])
    dtype = ex.recorded[node].dtype
    if hb.tensor_type(x).element_type == hb.INDEX and dtype == torch.int64:
        return x
    if not dtype.is_floating_point:
        raise Unsupported(f"a cast to {dtype} (indices are int64)")
    return ex.cast(x, dtype)


def _getitem(ex: Exporter, node: fx.Node):
    base, index = node.args
    if isinstance(base, list | tuple):  # a decomposition's (output, None)
        value = [ex.values[b] if isinstance(b, fx.Node) else b for b in base]
    else:
        value = ex.values[base]
    if isinstance(value, list | tuple | dict):
        return value[index]
    return _index_tensor(ex, node, value, index)


def _index_tensor(ex: Exporter, node: fx.Node, x, index):
    """``x[...]`` with ints, slices, None and Ellipsis: a slice plus a reshape;
    with one 1-d integer tensor among full slices (``boxes[:, keep]``): an
    index_select."""
    shape = hb.shape_of(x)
    index = index if isinstance(index, tuple) else (index,)
    tensors = [i for i, v in enumerate(index) if isinstance(v, fx.Node)]
    if tensors:
        return _index_select_by(ex, x, index, tensors)
    if any(not isinstance(i, int | slice | type(None) | type(Ellipsis)) for i in index):
        raise Unsupported("advanced (tensor) indexing")
    dims = [i for i in index if i is not None]
    if Ellipsis in dims:
        at = dims.index(Ellipsis)
        fill = len(shape) - (len(dims) - 1)
        dims = dims[:at] + [slice(None)] * fill + dims[at + 1 :]
    dims += [slice(None)] * (len(shape) - len(dims))
    begin, end, step = [], [], []
    for size, i in zip(shape, dims, strict=True):
        if isinstance(i, int):
            i = i % size
            begin.append(i), end.append(i + 1), step.append(1)
        else:
            b, e, s = i.indices(size)
            if s <= 0:
                raise Unsupported("negative slice steps")
            begin.append(b), end.append(e), step.append(s)
    y = x
    if (begin, end, step) != ([0] * len(shape), list(shape), [1] * len(shape)):
        y = ex.emit(hb.SliceOp(x, begin, end, step))
    out = ex.recorded_shape(node)
    return y if hb.shape_of(y) == out else ex.emit(hb.ReshapeOp(y, out))


def _split(ex: Exporter, node: fx.Node):
    x = ex.tensor(node.args[0])
    outs = ex.recorded[node]
    target = node.target if isinstance(node.target, str) else node.target.__name__
    dim = _arg(node, 2, "dim", 0)
    if target in ("unbind",):
        dim = _arg(node, 1, "dim", 0)
    dim %= len(hb.shape_of(x))
    sizes = [int(t.shape[dim]) if target != "unbind" else 1 for t in outs]
    pieces = ex.emit(hb.SplitOp(x, sizes, dim))
    pieces = pieces if isinstance(pieces, tuple) else (pieces,)
    if target == "unbind":
        return tuple(
            ex.emit(hb.ReshapeOp(p, tuple(t.shape)))
            for p, t in zip(pieces, outs, strict=True)
        )
    return pieces


def _index_select_by(ex: Exporter, x, index: tuple, tensors: list[int]):
    """``x[:, idx]``: one 1-d index tensor, every other position a full slice (or
    one Ellipsis standing for them)."""
    rank = len(hb.shape_of(x))
    full = [v == slice(None) or v is Ellipsis for v in index]
    if len(tensors) != 1 or sum(full) != len(index) - 1:
        raise Unsupported("indexing with tensors beyond one index among full slices")
    at = tensors[0]
    if Ellipsis in index[at + 1 :]:
        at = rank - (len(index) - at)
    ids = _index(ex, index[tensors[0]])
    if len(hb.shape_of(ids)) != 1:
        raise Unsupported("indexing with an index tensor that is not 1-d")
    return ex.emit(hb.IndexSelectOp(x, ids, at))


def _narrow(ex: Exporter, node: fx.Node):
    x = ex.tensor(node.args[0])
    dim, start, length = (
        _arg(node, i, n) for i, n in ((1, "dim"), (2, "start"), (3, "length"))
    )
    shape = hb.shape_of(x)
    dim %= len(shape)
    start %= shape[dim]
    begin = [0] * len(shape)
    end = list(shape)
    begin[dim], end[dim] = start, start + length
    return ex.emit(hb.SliceOp(x, begin, end))


def _extreme(op_cls):
    """amax / amin: a reduce_max / reduce_min over ``dim`` (None: every dim)."""

    def build(ex: Exporter, node: fx.Node):
        x = ex.tensor(node.args[0])
        dim = _arg(node, 1, "dim", None)
        keepdim = bool(_arg(node, 2, "keepdim", False))
        rank = len(hb.shape_of(x))
        dims = list(range(rank)) if dim in (None, ()) else dim
        dims = [dims] if isinstance(dims, int) else list(dims)
        return ex.emit(op_cls(x, dims, keepdim))

    return build


# ----------------------------------------------------------------- selection


def _index(ex: Exporter, arg) -> SSAValue:
    """An i64 index operand: a graph value, or an integer tensor made of constants
    and sizes (an ``arange`` buffer) as an i64 constant."""
    value = ex.values[arg] if isinstance(arg, fx.Node) else arg
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.dtype == torch.bool:
            raise Unsupported(f"a {value.dtype} index")
        return ex.constant(value.to(torch.int64))
    if isinstance(value, SSAValue):
        element = hb.tensor_type(value).element_type
        if element != hb.INDEX:
            raise Unsupported(f"an index of element type {element} (i64 only)")
        return value
    raise Unsupported(f"index {arg!r}")


def _embedding(ex: Exporter, node: fx.Node):
    """The table's fake quant, then its rows at the flattened ids, viewed back."""
    mod = _module(ex, node)
    table = ex.fake_quant(ex.constant(mod.weight), mod.activation_post_process)
    ids = _index(ex, node.args[0])
    shape = hb.shape_of(ids)
    if len(shape) != 1:
        ids = ex.emit(hb.ReshapeOp(ids, [math.prod(shape)]))
    rows = ex.emit(hb.IndexSelectOp(table, ids, 0))
    return ex.emit(hb.ReshapeOp(rows, [*shape, hb.shape_of(table)[1]]))


def _index_copy(ex: Exporter, node: fx.Node):
    """``canvas[:, idx] = feats`` (prepare's ``selection.index_copy``)."""
    canvas, dim, index, source = node.args
    x, ids, src = ex.tensor(canvas), _index(ex, index), ex.tensor(source)
    written = shapes.index_select(hb.shape_of(x), hb.shape_of(ids), dim)
    if hb.shape_of(src) != written:
        raise Unsupported("a written value broadcast to the indexed slices")
    return ex.emit(hb.IndexCopyOp(x, ids, src, dim))


def _compare(ex: Exporter, node: fx.Node):
    """``a > b`` (any of eq, ne, gt, ge, lt, le): a number operand is a constant of
    the other's type, as torch compares it (a Python float in float32)."""
    kind = node.target if isinstance(node.target, str) else node.target.__name__
    a, b = (_value_or_number(ex, v) for v in node.args[:2])
    like = a if not _is_number_value(a) else b
    a, b = ex.tensor_of(a, like), ex.tensor_of(b, like)
    return ex.emit(hb.CompareOp(a, b, kind))


def _select_module(ex: Exporter, node: fx.Node):
    """``where`` with a computed mask: each value onto the output grid (a tensor
    by a one-input concat marked ``qnt.exact`` in VALIDATION: the integer
    pipeline's rescale; a number by the output's fake quant), then the selection,
    then the output's fake quant (which leaves the selected values as they are)."""
    mod = _module(ex, node)
    mask, *values = node.args
    fq = mod.activation_post_process
    branches = []
    for index, v in enumerate(values):
        if not mod.tensors[index]:
            branches.append(ex.fake_quant(ex.constant(np.float32(v)), fq))
            continue
        (x,) = _inputs(ex, mod, [ex.tensor(v)])
        grids = mod.branch_grids(index)
        if grids is not None:
            x = ex.emit(hb.ConcatOp([x], 0))
            qnt.set_exact(x.owner, grids)
        branches.append(x)
    y = ex.emit(hb.SelectOp(ex.tensor(mask), *branches))
    return ex.fake_quant(y, fq)


def _topk(ex: Exporter, node: fx.Node):
    x = ex.tensor(node.args[0])
    k = _arg(node, 1, "k")
    dim = _arg(node, 2, "dim", -1)
    op = ex.emit(hb.TopkOp(x, k, dim, bool(_arg(node, 3, "largest", True))))
    return op if isinstance(op, tuple) else (op,)


def _sort(ex: Exporter, node: fx.Node):
    """sort / argsort: a top-k of the whole dim (``descending``: the largest)."""
    x = ex.tensor(node.args[0])
    dim = _arg(node, 1, "dim", -1)
    descending = bool(_arg(node, 2, "descending", False))
    size = hb.shape_of(x)[dim]
    values, indices = ex.emit(hb.TopkOp(x, size, dim, descending))
    argsort = getattr(node.target, "__name__", node.target) == "argsort"
    return indices if argsort else (values, indices)


def _arg_extreme(op_cls):
    """argmax / argmin: over ``dim``, or (None) over the flattened tensor."""

    def build(ex: Exporter, node: fx.Node):
        x = ex.tensor(node.args[0])
        dim = _arg(node, 1, "dim", None)
        keepdim = bool(_arg(node, 2, "keepdim", False))
        if dim is None:
            if keepdim:
                raise Unsupported("keepdim=True without dim")
            x = ex.emit(hb.ReshapeOp(x, [math.prod(hb.shape_of(x))]))
            dim = 0
        return ex.emit(op_cls(x, dim, keepdim))

    return build


def _max_min(reduce_cls, arg_cls):
    """``max(x)``: the maximum; ``max(x, dim)``: (values, indices)."""

    def build(ex: Exporter, node: fx.Node):
        x = ex.tensor(node.args[0])
        dim = _arg(node, 1, "dim", None)
        if dim is None:
            return ex.emit(reduce_cls(x, list(range(len(hb.shape_of(x)))), False))
        keepdim = bool(_arg(node, 2, "keepdim", False))
        values = ex.emit(reduce_cls(x, [dim], keepdim))
        return values, ex.emit(arg_cls(x, dim, keepdim))

    return build


def _gather(ex: Exporter, node: fx.Node):
    if _arg(node, 3, "sparse_grad", False):
        raise Unsupported("sparse_grad=True")
    x = ex.tensor(node.args[0])
    return ex.emit(hb.GatherOp(x, _index(ex, _arg(node, 2, "index")), node.args[1]))


def _index_select(ex: Exporter, node: fx.Node):
    x = ex.tensor(node.args[0])
    dim = _arg(node, 1, "dim")
    return ex.emit(hb.IndexSelectOp(x, _index(ex, _arg(node, 2, "index")), dim))


def _max_unpool2d(ex: Exporter, node: fx.Node):
    """``F.max_unpool2d`` / ``nn.MaxUnpool2d``: the values at their indices in
    zeros of the traced output size (``output_size`` or torch's default)."""
    x = ex.tensor(node.args[0])
    indices = _index(ex, _arg(node, 1, "indices"))
    return ex.emit(hb.MaxUnpool2dOp(x, indices, ex.recorded_shape(node)[2:]))


def _roll(ex: Exporter, node: fx.Node):
    """``roll``: per rolled dim, the last ``shift`` entries then the rest (concat)."""
    x = ex.tensor(node.args[0])
    shifts = _arg(node, 1, "shifts")
    dims = _arg(node, 2, "dims", None)
    if dims is None:
        raise Unsupported("roll without dims (of the flattened tensor)")
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    y = x
    for shift, dim in zip(shifts, dims, strict=True):
        shape = hb.shape_of(y)
        dim %= len(shape)
        shift %= shape[dim]
        if shift == 0:
            continue
        begin, end = [0] * len(shape), list(shape)
        begin[dim] = shape[dim] - shift
        tail = ex.emit(hb.SliceOp(y, begin, end))
        begin[dim], end[dim] = 0, shape[dim] - shift
        head = ex.emit(hb.SliceOp(y, begin, end))
        y = ex.emit(hb.ConcatOp([tail, head], dim))
    return y


def _flip(ex: Exporter, node: fx.Node):
    x = ex.tensor(node.args[0])
    dims = _arg(node, 1, "dims")
    dims = [dims] if isinstance(dims, int) else list(dims)
    return ex.emit(hb.FlipOp(x, dims)) if dims else x


def _channel_shuffle(ex: Exporter, node: fx.Node):
    """``channel_shuffle(x, g)``: ``[N, g * c, *rest]`` as ``[N, g, c, *rest]``, the
    two group dims transposed, viewed back as ``[N, c * g, *rest]``."""
    x = ex.tensor(node.args[0])
    if node.op == "call_module":
        groups = _module(ex, node).groups
    else:
        groups = _arg(node, 1, "groups")
    n, channels, *rest = hb.shape_of(x)
    y = _reshaped(ex, x, (n, groups, channels // groups, *rest))
    perm = (0, 2, 1, *range(3, 3 + len(rest)))
    if groups > 1:
        y = ex.emit(hb.TransposeOp(y, perm))
    return _reshaped(ex, y, ex.recorded_shape(node))


def _repeat_interleave(ex: Exporter, node: fx.Node):
    """``repeat_interleave(r, dim)``: a dim of size 1 after ``dim``, ``r`` copies
    concatenated along it, viewed as the result."""
    x = ex.tensor(node.args[0])
    repeats = _arg(node, 1, "repeats")
    dim = _arg(node, 2, "dim", None)
    if not isinstance(repeats, int) or dim is None:
        raise Unsupported("repeat_interleave with a tensor of repeats or no dim")
    shape = hb.shape_of(x)
    dim %= len(shape)
    y = _reshaped(ex, x, (*shape[: dim + 1], 1, *shape[dim + 1 :]))
    if repeats > 1:
        y = ex.emit(hb.ConcatOp([y] * repeats, dim + 1))
    return _reshaped(ex, y, ex.recorded_shape(node))


def _pixel_shuffle(ex: Exporter, node: fx.Node):
    """pixel_shuffle / pixel_unshuffle by ``r``: ``[*, C*r*r, H, W]`` as ``[*, C, r,
    r, H, W]``, transposed to ``[*, C, H, r, W, r]``, viewed as ``[*, C, H*r, W*r]``
    (unshuffle: the inverse). The factor is read off the traced shapes."""
    x = ex.tensor(node.args[0])
    (*lead, c, h, w), out = hb.shape_of(x), ex.recorded_shape(node)
    k = len(lead)
    if out[-1] > w:  # shuffle
        r = out[-1] // w
        y = _reshaped(ex, x, (*lead, c // (r * r), r, r, h, w))
        perm = (*range(k), k, k + 3, k + 1, k + 4, k + 2)
    else:  # unshuffle
        r = w // out[-1]
        y = _reshaped(ex, x, (*lead, c, h // r, r, w // r, r))
        perm = (*range(k), k, k + 2, k + 4, k + 1, k + 3)
    if r > 1:
        y = ex.emit(hb.TransposeOp(y, perm))
    return _reshaped(ex, y, tuple(out))


def _repeat(ex: Exporter, node: fx.Node):
    """``repeat`` / ``expand`` / ``expand_as``: copies concatenated along each dim."""
    x = ex.tensor(node.args[0])
    out = ex.recorded_shape(node)
    shape = (1,) * (len(out) - len(hb.shape_of(x))) + hb.shape_of(x)
    y = _reshaped(ex, x, shape)
    for dim, (have, want) in enumerate(zip(shape, out, strict=True)):
        if want != have:
            y = ex.emit(hb.ConcatOp([y] * (want // have), dim))
    return y


def _pad(ex: Exporter, node: fx.Node):
    """A zero pad; reflect / replicate / circular: per padded dim, slices of the
    input concatenated around it (the values are the input's)."""
    x = ex.tensor(node.args[0])
    pads = list(_arg(node, 1, "pad"))
    mode = _arg(node, 2, "mode", "constant")
    if mode == "constant":
        low, high = _low_high(pads, len(hb.shape_of(x)))
        return ex.emit(hb.PadOp(x, low, high, 0.0))
    if mode not in _PAD_PIECES:
        raise Unsupported(f"pad mode {mode!r}")
    y = x
    for dim, before, after in _padded_dims(pads, len(hb.shape_of(x))):
        pieces = _PAD_PIECES[mode](ex, y, dim, before, after)
        y = ex.emit(hb.ConcatOp(pieces, dim))
    return y


def _low_high(pads: list[int], rank: int) -> tuple[list[int], list[int]]:
    """F.pad's ``(left of the last dim, right of it, left of the one before, ...)``
    as per-dim low / high amounts."""
    low, high = [0] * rank, [0] * rank
    for i in range(len(pads) // 2):
        low[rank - 1 - i], high[rank - 1 - i] = pads[2 * i], pads[2 * i + 1]
    return low, high


def _padded_dims(pads: list[int], rank: int):
    low, high = _low_high(pads, rank)
    return [
        (d, lo, hi)
        for d, (lo, hi) in enumerate(zip(low, high, strict=True))
        if lo or hi
    ]


def _cut(ex: Exporter, x, dim: int, start: int, stop: int):
    shape = hb.shape_of(x)
    begin, end = [0] * len(shape), list(shape)
    begin[dim], end[dim] = start, stop
    return ex.emit(hb.SliceOp(x, begin, end))


def _reflect_pieces(ex: Exporter, x, dim: int, before: int, after: int):
    """``x[before:0:-1], x, x[-2:-2-after:-1]`` along ``dim``."""
    n = hb.shape_of(x)[dim]
    pieces = [x]
    if before:
        pieces.insert(0, ex.emit(hb.FlipOp(_cut(ex, x, dim, 1, before + 1), [dim])))
    if after:
        pieces.append(ex.emit(hb.FlipOp(_cut(ex, x, dim, n - 1 - after, n - 1), [dim])))
    return pieces


def _replicate_pieces(ex: Exporter, x, dim: int, before: int, after: int):
    """The first entry ``before`` times, ``x``, the last ``after`` times."""
    n = hb.shape_of(x)[dim]
    first, last = _cut(ex, x, dim, 0, 1), _cut(ex, x, dim, n - 1, n)
    return [first] * before + [x] + [last] * after


def _circular_pieces(ex: Exporter, x, dim: int, before: int, after: int):
    """``x[-before:], x, x[:after]``."""
    n = hb.shape_of(x)[dim]
    pieces = [x]
    if before:
        pieces.insert(0, _cut(ex, x, dim, n - before, n))
    if after:
        pieces.append(_cut(ex, x, dim, 0, after))
    return pieces


def _unfold(ex: Exporter, node: fx.Node):
    """``F.unfold`` (im2col) of ``[N, C, H, W]``: zero padding, then for each
    kernel position ``(i, j)`` the strided slice of the window starts, viewed as
    ``[N, C, 1, L]``; concatenated along that dim and viewed as ``[N, C*kh*kw,
    L]`` (the channel index is ``c * kh * kw + i * kw + j``, as torch's)."""
    x = ex.tensor(node.args[0])
    kernel, dilation, padding, stride = (
        _pair(_arg(node, i, name, default))
        for i, name, default in (
            (1, "kernel_size", None),
            (2, "dilation", 1),
            (3, "padding", 0),
            (4, "stride", 1),
        )
    )
    if len(hb.shape_of(x)) != 4:
        raise Unsupported("unfold of a tensor that is not [N, C, H, W]")
    if any(padding):
        x = ex.emit(hb.PadOp(x, (0, 0, *padding), (0, 0, *padding), 0.0))
    n, c, h, w = hb.shape_of(x)
    out = [
        (size - d * (k - 1) - 1) // s + 1
        for size, k, d, s in zip((h, w), kernel, dilation, stride, strict=True)
    ]
    pieces = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            top, left = i * dilation[0], j * dilation[1]
            begin = (0, 0, top, left)
            end = (
                n,
                c,
                top + (out[0] - 1) * stride[0] + 1,
                left + (out[1] - 1) * stride[1] + 1,
            )
            window = ex.emit(hb.SliceOp(x, begin, end, (1, 1, *stride)))
            pieces.append(_reshaped(ex, window, (n, c, 1, out[0] * out[1])))
    y = pieces[0] if len(pieces) == 1 else ex.emit(hb.ConcatOp(pieces, 2))
    return _reshaped(ex, y, ex.recorded_shape(node))


_PAD_PIECES = {
    "reflect": _reflect_pieces,
    "replicate": _replicate_pieces,
    "circular": _circular_pieces,
}


def _constant_pad_module(ex: Exporter, node: fx.Node):
    """A nonzero pad value: the input on the output grid (as the VALIDATION forward
    rescales it: a concat of one, marked ``qnt.exact``, and the output fake quant),
    blocks of the value on that grid concatenated around it per padded dim (a
    concat of one grid), the output fake quant."""
    mod = _module(ex, node)
    (x,) = _inputs(ex, mod, [ex.tensor(node.args[0])])
    dtype = ex.dtype(x)
    y = _output(ex, mod, ex.emit(_exact_if(mod, hb.ConcatOp([x], 0))))
    np_dtype = np.float64 if ex.dtype(y) == torch.float64 else np.float32
    for dim, before, after in _padded_dims(list(mod.pad), len(hb.shape_of(x))):
        pieces = [y]
        for amount, at in ((before, 0), (after, 1)):
            if amount:
                shape = list(hb.shape_of(y))
                shape[dim] = amount
                block = ex.constant(np.full(shape, mod.value, np_dtype))
                block = _output(ex, mod, block)
                pieces.insert(len(pieces) if at else 0, block)
        y = ex.emit(hb.ConcatOp(pieces, dim))
    return _output(ex, mod, y, dtype)


def _interpolate(ex: Exporter, node: fx.Node):
    x = ex.tensor(node.args[0])
    mode = _arg(node, 3, "mode", "nearest")
    corners = _arg(node, 4, "align_corners", None)
    scale = _arg(node, 2, "scale_factor", None)
    if _arg(node, 5, "recompute_scale_factor", None):
        scale = None
    if mode not in hb.Resize2dOp.MODES:
        raise Unsupported(f"interpolate mode {mode!r}")
    size = ex.recorded_shape(node)[2:]
    scales = None if scale is None else [float(s) for s in _pair_float(scale)]
    return ex.emit(hb.Resize2dOp(x, size, mode, bool(corners), scales))


def _resize_module(ex: Exporter, node: fx.Node):
    """Bilinear / bicubic with the NPU's weights: marked ``qnt.exact`` on the
    float32 input when the module computes the integer pipeline's numbers, else
    in float64 on the exact input values, as the module computes it."""
    mod = _module(ex, node)
    (x,) = _inputs(ex, mod, [ex.tensor(node.args[0])])
    dtype = ex.dtype(x)
    grids = mod.fixed_point_grids()
    if grids is None:
        (x,) = _exact_values(ex, mod, [x])
    size = ex.recorded_shape(node)[2:]
    scales = None if mod.scale_factor is None else list(mod.scales())
    y = hb.Resize2dOp(
        x,
        size,
        mod.mode,
        bool(mod.align_corners),
        scales,
        weight_bits=numerics.BILINEAR_BITS,
    )
    return _output(ex, mod, ex.emit(_exact_if(mod, y)), dtype)


def _grid_sample_module(ex: Exporter, node: fx.Node):
    """Marked ``qnt.exact`` on the float32 operands when the module computes the
    integer pipeline's numbers, else in float64 on the exact values, as the
    module computes it."""
    mod = _module(ex, node)
    x, grid = _inputs(ex, mod, [ex.tensor(node.args[0]), ex.tensor(node.args[1])])
    dtype = ex.dtype(x)
    if mod.fixed_point_grids() is None:
        x, grid = _exact_values(ex, mod, [x, grid])
    y = hb.GridSampleOp(x, grid, mod.mode, mod.padding_mode, mod.align_corners)
    return _output(ex, mod, ex.emit(_exact_if(mod, y)), dtype)


def _pair_float(v):
    return (v, v) if isinstance(v, int | float) else tuple(v)


# ----------------------------------------------------------------- float functions


def _float_fn(op_cls, **fixed):
    def build(ex: Exporter, node: fx.Node):
        x = ex.tensor(node.args[0])
        return ex.emit(op_cls(x, **fixed))

    return build


def _float_binary(op_cls, reverse: bool = False):
    def build(ex: Exporter, node: fx.Node):
        a, b = (_value_or_number(ex, v) for v in node.args[:2])
        if _arg(node, 2, "alpha", 1) != 1:
            raise Unsupported("alpha")
        like = a if not _is_number_value(a) else b
        a, b = ex.tensor_of(a, like), ex.tensor_of(b, like)
        return ex.emit(op_cls(b, a) if reverse else op_cls(a, b))

    return build


# Importers of the op table's pass-through ops (what prepare leaves as torch calls),
# by op; by spelling where one op has spellings of different meaning.
_PASSTHROUGH_IMPORTERS: dict[str, Builder] = {
    "reshape": _reshape,
    "transpose": _transpose,
    "split": _split,
    "amax": _extreme(hb.ReduceMaxOp),
    "amin": _extreme(hb.ReduceMinOp),
    "cast": _to_same,
    "dropout": _identity,
    "pad": _pad,
    "unfold": _unfold,
    "interpolate": _interpolate,
    "roll": _roll,
    "flip": _flip,
    "repeat": _repeat,
    "pixel_shuffle": _pixel_shuffle,
    "repeat_interleave": _repeat_interleave,
    "channel_shuffle": _channel_shuffle,
    "topk": _topk,
    "compare": _compare,
    "sort": _sort,
    "argmax": _arg_extreme(hb.ArgmaxOp),
    "argmin": _arg_extreme(hb.ArgminOp),
    "max": _max_min(hb.ReduceMaxOp, hb.ArgmaxOp),
    "min": _max_min(hb.ReduceMinOp, hb.ArgminOp),
    "gather": _gather,
    "index_select": _index_select,
    "max_unpool2d": _max_unpool2d,
}
_SPELLING_IMPORTERS: dict[str, Builder] = {
    "operator.getitem": _getitem,
    "torch.narrow": _narrow,
    "Tensor.narrow": _narrow,
}

# Float models (not prepared): the float ops themselves.
FUNCTION_IMPORTERS: dict[object, Builder] = {
    operator.add: _float_binary(hb.AddOp),
    torch.add: _float_binary(hb.AddOp),
    operator.sub: _float_binary(hb.SubOp),
    torch.sub: _float_binary(hb.SubOp),
    operator.mul: _float_binary(hb.MulOp),
    torch.mul: _float_binary(hb.MulOp),
    operator.truediv: _float_binary(hb.DivOp),
    torch.div: _float_binary(hb.DivOp),
    operator.matmul: _float_binary(hb.MatmulOp),
    torch.matmul: _float_binary(hb.MatmulOp),
    torch.relu: _float_fn(hb.ReluOp),
    F.relu: _float_fn(hb.ReluOp),
    torch.sigmoid: _float_fn(hb.SigmoidOp),
    torch.tanh: _float_fn(hb.TanhOp),
    torch.exp: _float_fn(hb.ExpOp),
    F.sigmoid: _float_fn(hb.SigmoidOp),
    F.silu: _float_fn(hb.SiluOp),
}


def _float_softmax(ex: Exporter, node: fx.Node):
    if node.kwargs.get("dtype") not in (None, torch.float32):
        raise Unsupported("a softmax dtype other than float32")
    return ex.emit(hb.SoftmaxOp(ex.tensor(node.args[0]), _arg(node, 1, "dim")))


def _float_gelu(ex: Exporter, node: fx.Node):
    approximate = _arg(node, 1, "approximate", "none")
    return ex.emit(hb.GeluOp(ex.tensor(node.args[0]), approximate))


FUNCTION_IMPORTERS |= {
    torch.softmax: _float_softmax,
    F.softmax: _float_softmax,
    F.gelu: _float_gelu,
}

METHOD_IMPORTERS: dict[str, Builder] = {
    "add": _float_binary(hb.AddOp),
    "sub": _float_binary(hb.SubOp),
    "mul": _float_binary(hb.MulOp),
    "relu": _float_fn(hb.ReluOp),
    "sigmoid": _float_fn(hb.SigmoidOp),
    "tanh": _float_fn(hb.TanhOp),
    "exp": _float_fn(hb.ExpOp),
    "softmax": _float_softmax,
}


def _derive_passthrough() -> None:
    index_ops = {cls.name: cls for cls in (hb.FloorDivideOp, hb.RemainderOp)}
    for entry in op_table.OPS:
        if entry.quantized == op_table.INDEX:  # on index tensors: the op itself
            for spelling in entry.torch:
                kind, target = resolve(spelling)
                table = METHOD_IMPORTERS if kind == "method" else FUNCTION_IMPORTERS
                table[target] = _float_binary(index_ops[entry.hbir])
            continue
        if entry.quantized != op_table.PASSTHROUGH:
            continue
        for spelling in entry.torch:
            builder = _SPELLING_IMPORTERS.get(spelling)
            builder = builder or _PASSTHROUGH_IMPORTERS[entry.op]
            kind, target = resolve(spelling)
            if kind == "module":
                MODULE_IMPORTERS[target] = builder
            else:
                (METHOD_IMPORTERS if kind == "method" else FUNCTION_IMPORTERS)[
                    target
                ] = builder


_derive_passthrough()
MODULE_IMPORTERS[qat.Embedding] = _embedding
# builders that take integer constants as i64 operands (export does not fold them)
INDEX_READERS = frozenset(
    {_embedding, _gather, _index_select, _index_copy, _max_unpool2d}
)
# what prepare calls for torch's top-k and sort: the torch function's importer
FUNCTION_IMPORTERS |= {
    tied: FUNCTION_IMPORTERS[target]
    for target, tied in op_rules.TIE_RULED.items()
    if not isinstance(target, str)
}
FUNCTION_IMPORTERS[selection.index_copy] = _index_copy  # prepare's scatter


def find(node: fx.Node, modules: dict[str, nn.Module]) -> tuple[Builder | None, str]:
    """The builder for a call node (None if unsupported) and a name for messages."""
    if node.op == "call_module":
        mod = modules[node.target]
        for cls in type(mod).__mro__:
            if cls in MODULE_IMPORTERS:
                return MODULE_IMPORTERS[cls], _module_name(mod)
        return None, _module_name(mod)
    if node.op == "call_method":
        return METHOD_IMPORTERS.get(node.target), f"Tensor.{node.target}"
    name = getattr(node.target, "__name__", str(node.target))
    module = getattr(node.target, "__module__", None) or ""
    qualified = f"{module}.{name}" if module else name
    return FUNCTION_IMPORTERS.get(node.target), qualified


def _module_name(mod: nn.Module) -> str:
    cls = type(mod)
    return f"{cls.__module__}.{cls.__qualname__}"
