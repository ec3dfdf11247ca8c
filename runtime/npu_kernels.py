"""The npu ops' integer semantics, once: for the interpreter and the simulated NPU.

Each npu op is described by its opcode's fields (``runtime/hbm_opcodes.py``):
``fields_of(op)`` reads them off an xDSL op (the npu dialect's defaults
resolved), and ``COMPUTE[opcode name](fields, out, *operands)`` computes the
result from plain values — the interpreter's kernels (``KERNELS``, part of
``runtime/interpreter.py``'s one table) call it with the op's fields, the simulator
(``runtime/npu_sim.py``) with an instruction's, so the program after every
compile pass, the interpreter and the ``.hbm`` program compute the same numbers
by the same code. In ``fields``, a ``buffer``-kind field is an int64 array (or
None for "none"); ``out`` is the result's (shape, numpy dtype). The kernels of
``WRITES_INTO`` also take the result's buffer (``into=``) and, where the layout
allows, write it themselves and return it (the simulator's SRAM: no copy).

``prepare(name, fields, out, operands)`` adds what a kernel would otherwise
derive on every call, under keys starting with ``_``: the post-process's
requantizers (``runtime/requantizer.py``'s ``Requantizer``), a constant weight
packed for the exact fast GEMMs, a conv's post-process fused into one
requantization where nothing can saturate (``_fused``), an eltwise op of two
8-bit operands as a table of every pair (``_pair``), a segmented lookup table.
The simulator prepares each
instruction once; the interpreter's kernels prepare on the call. Either way the
same functions compute, so the numbers cannot differ. ``bind(name, fields, out,
ins, into)`` goes one step further for the simulator, whose buffers are the same
arrays on every run: a conv, a pair-table eltwise op or a max pool as ``run()``,
every argument made once.

The arithmetic is that of the hbir / qnt ops the npu op was lowered from, through
the same specified functions (``runtime/integer_ops.py``, ``runtime/numerics.py``)
and the same exact-sum engines. Spatial ops view their NHWC operands as NCHW (a
transposed view, no copy of the semantics) and give their results back as NHWC.

The post-process of a fused op (``dialects/npu.py``, ``PostProcessOp``) runs step
by step, each step saturating to the width the unfused op had: the raw result to
``acc_bits`` (the width of the op's own result before fusion), the left shift and
the bias to si32, the requantization to the result range ``clip``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from xdsl.ir import Operation

from hbir.dialects import npu
from hbir.dialects.hbir import dense_array, numpy_dtype
from hbir.runtime import integer_ops, kernels, numerics, requantizer, selection, yuv
from hbir.runtime.hbm_opcodes import NONE, lut_table

_NCHW = (0, 3, 1, 2)
_NHWC = (0, 2, 3, 1)

Fields = Mapping[str, object]
Out = tuple[tuple[int, ...], np.dtype]


# ------------------------------------------------------------------ fields of an op


def fields_of(op: Operation) -> tuple[str, dict]:
    """(opcode name, fields) of an npu op (``OpcodeOp.opcode_fields``: the one
    reading of an op as its instruction, which its verifier checks); not
    ``npu.constant`` / ``npu.cpu_call``, which the emitter turns into constants
    and islands."""
    return op.opcode_fields()


# ------------------------------------------------------------------ post-process


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = v.size
    return np.asarray(v, np.int64).reshape(shape)


def _requantizers(f: Fields, ndim: int) -> tuple:
    """(the pre-shift, the output requantization) as prepared ``Requantizer``s
    (None: no such step), for an exact value of ``ndim`` dims saturated to
    ``acc_bits``: ``numerics.requantize``'s numbers, computed fast."""
    mode, lo32, hi32 = f["rounding"], *numerics.qrange(32)
    bound = 1 << (f["acc_bits"] - 1)
    pre = None
    if f["pre_shift"] != NONE:
        pre = requantizer.Requantizer(
            [1], [-f["pre_shift"]], 0, lo32, hi32,
            ndim=ndim, axis=None, mode=mode, acc_bound=bound,
        )  # fmt: skip
        bound = 1 << 31
    m, s = f["multiplier"], f["shift"]
    if m is None:
        return pre, None
    lo, hi = f["clip"]
    out = requantizer.Requantizer(
        m, s, 0, lo, hi,
        ndim=ndim, axis=f["axis"] if m.size > 1 else None, mode=mode,
        acc_bound=bound,
    )  # fmt: skip
    return pre, out


def post_process(f: Fields, acc: np.ndarray, dtype, bias=None, into=None):
    """The fused steps after the exact value ``acc`` (int64, already saturated to
    ``acc_bits``); ``bias`` only when it is added after a ``pre_shift``; the
    result written into ``into`` (of ``acc``'s shape) where given."""
    pre, out = f.get("_post") or _requantizers(f, acc.ndim)
    if pre is None and out is not None:  # any integer codes: no int64 copy
        return out(acc, dtype, into)
    if pre is None and acc.dtype.kind in "iu":  # a clamp only, in acc's dtype
        info, (lo, hi) = np.iinfo(acc.dtype), f["clip"]
        if lo > info.min or hi < info.max:
            acc = np.clip(acc, max(lo, int(info.min)), min(hi, int(info.max)))
        if into is None:
            return acc.astype(dtype)
        into[...] = acc
        return into
    y = np.asarray(acc, np.int64)
    if pre is not None:
        y = pre(y, np.int64)
        if bias is not None:
            lo32, hi32 = numerics.qrange(32)
            y = np.clip(y + _along(bias, y.ndim, f["axis"]), lo32, hi32)
    if out is None:
        lo, hi = f["clip"]
        return np.clip(y, lo, hi).astype(dtype)
    return out(y, dtype)


def _split_bias(f: Fields, bias):
    """(bias inside the accumulator, bias after the pre-shift)."""
    if bias is None:
        return None, None
    return (None, bias) if f["pre_shift"] != NONE else (bias, None)


# ------------------------------------------------------------------ TAE


def _conv_engine(f: Fields):
    """``integer_ops``'s conv engine: the prepared packed weight, if any."""
    packed = f.get("_packed")
    if packed is None:
        return interp._conv2d_engine
    return lambda x, w, stride, pads, dilation, groups: kernels.conv2d_sums(
        x, packed, stride, pads, dilation
    )


# The requantization paths that compute in float64 from the sums (their
# compiled loops take integer-valued float sums as they are, exactly).
_READS_FLOATS = frozenset({"nearest", "float"})


def conv(f: Fields, out: Out, x, w, bias=None, *, into=None) -> np.ndarray:
    """(``into``: the result's buffer, which a prepared conv writes directly.)"""
    fused = f.get("_fused")
    if fused is not None:  # prepared: packed weight, one fused requantization
        pads = f["padding"]
        x = np.transpose(x, _NCHW)
        raw = fused.path in _READS_FLOATS
        acc = kernels.conv2d_sums(
            x, f["_packed"], f["stride"], pads, f["dilation"], raw
        )
        if into is not None:  # (a Requantizer given into= writes it)
            fused(acc, out[1], np.transpose(into, _NCHW))
            return into
        return np.transpose(fused(acc, out[1]), _NHWC)
    inner, after = _split_bias(f, bias)
    integer_ops.check_f64_exact(x, w, w.shape[1] * w.shape[2] * w.shape[3])
    acc = integer_ops.conv2d(
        np.transpose(x, _NCHW),
        np.transpose(w, _NCHW),
        inner,
        f["stride"],
        f["padding"],
        f["dilation"],
        f["groups"],
        bits=f["acc_bits"],
        engine=_conv_engine(f),
    )
    return post_process(f, np.transpose(acc, _NHWC), out[1], after)


def conv_transpose(f: Fields, out: Out, x, w, bias=None) -> np.ndarray:
    inner, after = _split_bias(f, bias)
    groups = f["groups"]
    integer_ops.check_f64_exact(x, w, (w.shape[0] // groups) * w.shape[1] * w.shape[2])
    acc = integer_ops.conv_transpose2d(
        np.transpose(x, _NCHW),
        np.transpose(w, _NCHW),
        inner,
        f["stride"],
        f["padding"],
        f["output_padding"],
        groups,
        f["dilation"],
        bits=f["acc_bits"],
        engine=interp._conv_transpose2d_engine,
    )
    return post_process(f, np.transpose(acc, _NHWC), out[1], after)


def gemm(f: Fields, out: Out, a, b, bias=None) -> np.ndarray:
    fused = f.get("_fused")
    if fused is not None:  # prepared: packed weight, one fused requantization
        raw = fused.path in _READS_FLOATS  # (float sums read as they are)
        return fused(kernels.linear_sums(a, f["_packed"], raw), out[1])
    inner, after = _split_bias(f, bias)
    bits = f["acc_bits"]
    if f["transpose_b"]:
        integer_ops.check_f64_exact(a, b, b.shape[-1])
        packed = f.get("_packed")
        engine = (
            interp._linear_engine
            if packed is None
            else lambda x, w: kernels.linear_sums(x, packed)
        )
        acc = integer_ops.linear(a, b, inner, bits=bits, engine=engine)
    else:
        integer_ops.check_f64_exact(a, b, a.shape[-1])
        bound = a.shape[-1] * kernels.magnitude(a.dtype) * kernels.magnitude(b.dtype)
        if bound < 1 << (bits - 1):  # no sum can saturate: the sums as they are
            acc = kernels.matmul_sums(a, b)
        else:
            acc = integer_ops.matmul(a, b, bits=bits, engine=kernels.matmul_sums)
    return post_process(f, acc, out[1], after)


# ------------------------------------------------------------------ VAE

_ELTWISE = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "floor_divide": selection.floor_divide,
    "remainder": selection.remainder,
}


def eltwise(f: Fields, out: Out, a, b, *, into=None) -> np.ndarray:
    pair = f.get("_pair")
    if pair is not None:  # prepared: the table of every pair of 8-bit codes
        return pair(a, b, into)
    args = [np.asarray(a), np.asarray(b)]
    if f["in_multiplier"]:
        prepared = f.get("_in")
        if prepared is not None:
            args = [r(v, np.int64) for r, v in zip(prepared, args, strict=True)]
        else:
            lo32, hi32 = numerics.qrange(32)
            mode = f["rounding"]
            pairs = zip(args, f["in_multiplier"], f["in_shift"], strict=True)
            args = [
                requantizer.requantize(v, [m], [s], 0, lo32, hi32, None, mode)
                for v, m, s in pairs
            ]
    y = _ELTWISE[f["kind"]](*(np.asarray(v, np.int64) for v in args))
    if not f.get("_fits"):  # (prepared: no value can reach the accumulator's bound)
        y = integer_ops.saturate(y, f["acc_bits"])
    return post_process(f, y, out[1], into=into)


def rescale(f: Fields, out: Out, x, *, into=None) -> np.ndarray:
    return post_process(f, x, out[1], into=into)


def reduce(f: Fields, out: Out, x) -> np.ndarray:
    dims, keep, kind = tuple(f["dims"]), f["keepdim"], f["kind"]
    if kind in ("max", "min"):
        extreme = np.max if kind == "max" else np.min
        y = extreme(x, axis=dims, keepdims=keep).astype(np.int64)
    else:
        y = np.sum(x, axis=dims, dtype=np.int64, keepdims=keep)
        if kind == "mean":
            count = int(np.prod([x.shape[d] for d in dims]))
            y = numerics.divide_round(y, count, f["rounding"])
    return post_process(f, integer_ops.saturate(y, f["acc_bits"]), out[1])


def cast(f: Fields, out: Out, x) -> np.ndarray:
    info = np.iinfo(out[1])
    return np.clip(x.astype(np.int64), int(info.min), int(info.max)).astype(out[1])


def fp16_map(f: Fields, out: Out, x) -> np.ndarray:
    return kernels.fp16_unary(f["function"], x)


def lut(f: Fields, out: Out, x) -> np.ndarray:
    table = f.get("_entries")
    if table is not None:  # prepared: int8 codes as unsigned indices, no int64
        return np.take(table, x.view(np.uint8) ^ np.uint8(128))
    return np.asarray(f["table"])[x.astype(np.int64) + 128].astype(out[1])


def lut_segmented(f: Fields, out: Out, x) -> np.ndarray:
    codes = f.get("_codes")
    if codes is not None:  # prepared: every code's result, one lookup
        return codes(x)
    table = f.get("_table") or lut_table(f)
    return numerics.apply_lut(table, x.astype(np.int64)).astype(out[1])


# ------------------------------------------------------------------ AAE


def pool(f: Fields, out: Out, x, *, into=None) -> np.ndarray:
    xt = np.transpose(x, _NCHW)
    kernel, stride, padding = f["kernel"], f["stride"], f["padding"]
    if f["kind"] == "max":
        y = kernels.max_pool2d(  # codes: exact, within acc_bits
            xt, kernel, stride, padding, f["dilation"], f["ceil_mode"]
        )
    else:
        window = (kernel, stride, tuple(padding))  # (a row tile's four sides)
        include, out_hw = f["count_include_pad"], tuple(out[0][1:3])
        y = numerics.average_pool(xt, *window, include, out_hw)
        y = integer_ops.saturate(y, f["acc_bits"])
    return post_process(f, np.transpose(y, _NHWC), out[1], into=into)


def resize(f: Fields, out: Out, x) -> np.ndarray:
    xt = np.transpose(x, _NCHW)
    mode, size, scale = f["mode"], tuple(f["size"]), f["scale"]
    corners = f["align_corners"] if mode != "nearest" else None
    bits = np.dtype(out[1]).itemsize * 8
    if f["weight_bits"] != NONE:
        y = integer_ops.resize_npu(
            xt, mode, size, corners, list(scale) if scale else None, bits
        )
    else:
        how = {"scale_factor": tuple(scale)} if scale else {"size": size}
        t = torch.from_numpy(np.ascontiguousarray(xt).astype(np.float64))
        y = integer_ops.resize_rint(
            F.interpolate(t, mode=mode, align_corners=corners, **how).numpy(), bits
        )
    return np.ascontiguousarray(np.transpose(y, _NHWC)).astype(out[1])


def grid_sample(f: Fields, out: Out, x, grid) -> np.ndarray:
    xt = np.transpose(x, _NCHW).astype(np.int64)
    g = grid.astype(np.float64) * np.float64(np.float32(f["grid_scale"]))
    how = (f["align_corners"], f["padding_mode"], f["mode"])
    y = integer_ops.saturate(numerics.grid_sample_sum(xt, g, *how), 32)
    return np.ascontiguousarray(np.transpose(y, _NHWC)).astype(out[1])


# ------------------------------------------------------------------ data movement


def transpose(f: Fields, out: Out, x, into=None) -> np.ndarray:
    y = np.transpose(x, tuple(f["perm"]))
    return np.ascontiguousarray(y) if into is None else kernels.copy_into(y, into)


def reshape(f: Fields, out: Out, x) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(out[0])


def concat(f: Fields, out: Out, *xs, into=None) -> np.ndarray:
    if into is None:
        return np.concatenate(xs, axis=f["dim"])
    start, dim = 0, f["dim"]
    for x in xs:
        part = (slice(None),) * dim + (slice(start, start + x.shape[dim]),)
        kernels.copy_into(x, into[part])
        start += x.shape[dim]
    return into


def slice_(f: Fields, out: Out, x, into=None) -> np.ndarray:
    bounds = zip(f["begin"], f["end"], f["step"], strict=True)
    y = x[tuple(slice(b, e, s) for b, e, s in bounds)]
    return np.ascontiguousarray(y) if into is None else kernels.copy_into(y, into)


def topk(f: Fields, out: Out, x) -> np.ndarray:
    return selection.topk_indices(x, f["k"], f["dim"], f["largest"])


def gather(f: Fields, out: Out, x, index) -> np.ndarray:
    return selection.gather(x, index, f["dim"])


def index_select(f: Fields, out: Out, x, index) -> np.ndarray:
    return selection.index_select(x, index, f["dim"])


def compare(f: Fields, out: Out, a, b) -> np.ndarray:
    return np.asarray(selection.compare(f["kind"], a, b, f["scales"] or None))


def select(f: Fields, out: Out, mask, a, b) -> np.ndarray:
    return np.where(mask, a, b).astype(out[1])


def index_copy(f: Fields, out: Out, x, index, source) -> np.ndarray:
    return selection.index_copy_codes(x, index, source, f["dim"])


def max_pool_indices(f: Fields, out: Out, x) -> np.ndarray:
    how = (f["kernel"], f["stride"], f["padding"], f["dilation"])
    return selection.max_pool_indices(x, *how, out[0][2:])


def max_unpool(f: Fields, out: Out, x, indices) -> np.ndarray:
    return selection.max_unpool(x, indices, tuple(f["size"]))


def roi_resize(f: Fields, out: Out, y, *planes) -> np.ndarray:
    *uv, roi = planes
    return yuv.roi_resize(
        y,
        uv[0] if uv else None,
        roi,
        f["size"],
        f["interpolate_mode"],
        f["expansion_mode"],
        f["pad_value"],
    )


def move(f: Fields, out: Out, x) -> np.ndarray:
    return x


# The kernels that take the result's buffer (``into=``) and may write it
# themselves (returning that very array), saving the copy of their result.
WRITES_INTO = frozenset(
    {"conv", "eltwise", "rescale", "pool", "transpose", "concat", "slice"}
)

COMPUTE: dict[str, Callable[..., np.ndarray]] = {
    "conv": conv,
    "conv_transpose": conv_transpose,
    "gemm": gemm,
    "eltwise": eltwise,
    "rescale": rescale,
    "reduce": reduce,
    "cast": cast,
    "fp16_map": fp16_map,
    "lut": lut,
    "lut_segmented": lut_segmented,
    "pool": pool,
    "resize": resize,
    "grid_sample": grid_sample,
    "transpose": transpose,
    "reshape": reshape,
    "slice": slice_,
    "concat": concat,
    "topk": topk,
    "gather": gather,
    "index_select": index_select,
    "index_copy": index_copy,
    "max_pool_indices": max_pool_indices,
    "max_unpool": max_unpool,
    "roi_resize": roi_resize,
    "compare": compare,
    "select": select,
    "dma_load": move,
    "dma_store": move,
}


# ------------------------------------------------------------------ preparation


def prepare(name: str, f: Fields, out: Out, operands: list) -> dict:
    """``f`` with what its kernel derives, computed once (see the module):
    ``operands`` are the operands' (shape, dtype, constant value or None)."""
    f = dict(f)
    if "rounding" in f and "acc_bits" in f:
        f["_post"] = _requantizers(f, len(out[0]))
    if name == "lut_segmented":
        f["_table"] = lut_table(f)
        f["_codes"] = kernels.CodeTable.of(f["_table"], operands[0][1], out[1])
    if name == "lut" and operands[0][1] == np.int8:
        f["_entries"] = np.asarray(f["table"]).astype(out[1])
    if name == "eltwise":
        f["_fits"] = _eltwise_bound(f, operands) < 1 << (f["acc_bits"] - 1)
    if name == "eltwise" and f["in_multiplier"]:  # each operand's rescale
        lo32, hi32 = numerics.qrange(32)
        f["_in"] = tuple(
            requantizer.Requantizer(
                [m],
                [s],
                0,
                lo32,
                hi32,
                ndim=len(shape),
                axis=None,
                mode=f["rounding"],
                acc_bound=requantizer.magnitude(dtype),
            )  # fmt: skip
            for (shape, dtype, _), m, s in zip(
                operands, f["in_multiplier"], f["in_shift"], strict=True
            )
        )
    if name in ("conv", "gemm") and len(operands) > 1:
        (_, x_dtype, _), (_, _, w) = operands[0], operands[1]
        if w is not None and name == "conv":
            f["_packed"] = kernels.pack_conv2d(
                np.transpose(w, _NCHW), x_dtype, f["groups"], reused=True
            )
            bias = operands[2][2] if len(operands) > 2 else None
            if len(operands) == 2 or bias is not None:
                channel_sum = f["_packed"].channel_sum
                fused = _fused_post(f, channel_sum, x_dtype, bias, 4, 1)
                if fused is not None:
                    f["_fused"] = fused
        elif w is not None and f["transpose_b"]:
            f["_packed"] = kernels.pack_linear(w, x_dtype)
            bias = operands[2][2] if len(operands) > 2 else None
            ndim, axis = len(out[0]), f["axis"]
            per_channel = f["multiplier"] is not None and f["multiplier"].size > 1
            if (len(operands) == 2 or bias is not None) and (
                not per_channel or axis % ndim == ndim - 1
            ):  # (the requantization along the bias's axis: the last)
                channel_sum = int(np.max(np.abs(w.astype(np.int64)).sum(1), initial=0))
                fused = _fused_post(f, channel_sum, x_dtype, bias, ndim, ndim - 1)
                if fused is not None:
                    f["_fused"] = fused
    if name == "eltwise" and _pairwise(f, operands):
        plain = dict(f)
        f["_pair"] = kernels.PairTable(
            lambda a, b: eltwise(plain, out, a, b), [d for _, d, _ in operands]
        )
    return f


def bind(name: str, f: Fields, out: Out, ins: list, into: np.ndarray):
    """A prepared instruction bound to its buffers (the simulator's: the same
    arrays on every run), as ``run()`` computing ``COMPUTE[name](f, out,
    *ins, into=into)`` with every argument made once; None where it is not
    worth it. A conv whose epilogue is fused (``_bound_conv``); an eltwise op
    by a pair table."""
    if name == "conv" and "_fused" in f:
        return _bound_conv(f, out, ins[0], into)
    if name == "eltwise" and "_pair" in f:
        return f["_pair"].bind(ins[0], ins[1], into)
    if name == "pool" and f["kind"] == "max":
        return _bound_max_pool(f, ins[0], into)
    return None


def _bound_max_pool(f: Fields, x: np.ndarray, into: np.ndarray):
    """A max pool of channels-last codes straight into ``into`` where its
    post-process is only a clamp that changes nothing (the codes' range)."""
    jit, info = kernels.loops(), np.iinfo(x.dtype) if x.dtype.kind in "iu" else None
    pads, (lo, hi) = integer_ops.pads4(f["padding"]), f["clip"]
    window = (f["kernel"], f["stride"], pads, f["dilation"], f["ceil_mode"])
    if (
        jit is None
        or info is None
        or f.get("_post") != (None, None)
        or lo > info.min  # a clamp that would change codes
        or hi < info.max
        or x.dtype != into.dtype
        or x.ndim != 4
        or not (x.flags.c_contiguous and into.flags.c_contiguous)
        or into.shape
        != (x.shape[0], *integer_ops.pool_sizes(x.shape[1:3], *window), x.shape[3])
    ):
        return None
    taps = (*f["kernel"], *f["stride"], *f["dilation"], *pads[:2], int(info.min))
    return lambda: jit.max_pool(x, *taps, into)


def _bound_conv(f: Fields, out: Out, x: np.ndarray, into: np.ndarray):
    """A conv with a fused epilogue bound to its buffers: oneDNN's prepared
    int8 conv where it takes it, else the exact sums bound to ``x``
    (``kernels.bound_sums``), and the epilogue bound to the layout of the
    first result."""
    fused, pads = f["_fused"], integer_ops.pads4(f["padding"])
    x_nchw, geometry = np.transpose(x, _NCHW), (f["_packed"], f["stride"], pads)
    call = kernels.OnednnConv.of(x_nchw, *geometry, f["dilation"])
    if call is None:
        raw = fused.path in _READS_FLOATS
        call = kernels.bound_sums(x_nchw, *geometry, f["dilation"], raw)
    into_nchw = np.transpose(into, _NCHW)
    epilogue = None

    def run() -> None:
        nonlocal epilogue
        acc = call()
        if acc is None:  # a sum reached 2**24: the exact path
            conv(f, out, x, None, into=into)
            return
        if epilogue is None:  # (the layout of oneDNN's result, on its first)
            epilogue = fused.bind(acc, into_nchw) or (
                lambda a: fused(a, out[1], into_nchw)
            )
        epilogue(acc)

    return run


def operands_read(name: str, f: Fields, count: int) -> tuple[bool, ...]:
    """Which of its ``count`` operands a prepared instruction reads: a conv with
    a fused epilogue takes its weight and bias from their prepared forms."""
    if name == "conv" and "_fused" in f:
        return (True,) + (False,) * (count - 1)
    return (True,) * count


def _fused_post(
    f: Fields, channel_sum: int, x_dtype, bias, ndim: int, axis: int
) -> requantizer.Requantizer | None:
    """A conv's or linear gemm's exact sums (bounded by its weight codes: the
    largest ``sum|w|`` of an output channel) and post-process as one
    requantization along the output channels' ``axis``
    (``requantizer.fused_epilogue``), or None where a step of the post-process
    may saturate or there is no requantization."""
    if f["multiplier"] is None:
        return None
    bound = kernels.magnitude(x_dtype) * channel_sum
    inner, after = _split_bias(f, bias)
    widest = bound + (0 if inner is None else int(np.max(np.abs(inner))))
    if widest >= 1 << (f["acc_bits"] - 1):
        return None  # the raw sums would saturate to acc_bits
    factor = 1 if f["pre_shift"] == NONE else 1 << f["pre_shift"]
    lo, hi = f["clip"]
    return requantizer.fused_epilogue(
        f["multiplier"], f["shift"], lo, hi, factor=factor,
        bias=inner if after is None else after, acc_bound=bound,
        ndim=ndim, axis=axis, mode=f["rounding"],
    )  # fmt: skip


def _eltwise_bound(f: Fields, operands) -> int:
    """A bound on |kind(a, b)| of an eltwise op's (rescaled) operands."""
    bounds = [requantizer.magnitude(d) for _, d, _ in operands]
    if f["in_multiplier"]:  # |round(x * m / 2**s)| <= ceil(|x| * m / 2**s)
        bounds = [
            -(-b * m // 2**s) if s >= 0 else b * m * 2**-s
            for b, m, s in zip(bounds, f["in_multiplier"], f["in_shift"], strict=True)
        ]
    a, b = bounds
    return {"add": a + b, "sub": a + b, "mul": a * b}.get(f["kind"], max(a, b))


def _pairwise(f: Fields, operands) -> bool:
    """Whether an eltwise op is one function of each pair of 8-bit codes: one
    multiplier (or none) for every element."""
    multiplier = f["multiplier"]
    return all(d.itemsize == 1 and d.kind in "iu" for _, d, _ in operands) and (
        multiplier is None or multiplier.size == 1
    )


# ------------------------------------------------------------------ the interpreter


def _kernel(op: Operation, *args: np.ndarray) -> tuple[np.ndarray, ...]:
    """An npu op in the interpreter: its fields, then the shared computation."""
    name, f = fields_of(op)
    t = op.results[0].type
    out = (tuple(t.get_shape()), numpy_dtype(t.element_type))
    return (COMPUTE[name](f, out, *args),)


def _constant(op: npu.ConstantOp):
    return (dense_array(op.value),)


def _cpu_call(op: npu.CpuCallOp, *args, rounding: str = numerics.HALF_EVEN):
    """Run the island's hbir / qnt ops with the interpreter's own kernels."""
    kernels = interp.kernel_table(rounding)
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
            interp.check_result(inner, value, y)
            env[value] = y
    raise interp.InterpreterError("npu.cpu_call region has no npu.yield")


KERNELS = {
    cls: _kernel for cls in npu.NPU.operations if issubclass(cls, npu.OpcodeOp)
} | {
    npu.ConstantOp: _constant,
    npu.CpuCallOp: _cpu_call,
}

# Last: the interpreter imports this module at its end for its table of KERNELS,
# so either module may be imported first (its engines are used at call time).
from hbir.runtime import interpreter as interp  # noqa: E402
