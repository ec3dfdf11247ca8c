"""The NPU's instruction set: the one table of opcodes.

The emitter (npu dialect -> instructions), the ``.hbm`` writer and loader, the
text form and the simulator all read this table; no other file numbers opcodes.
The npu dialect's verifier is the same rule (:func:`check_values`, on the op's
values), so an npu op verifies exactly when its instruction loads.

Each opcode has a number (stable across versions of the format), a mnemonic,
operand and result counts (``None``: variadic, the exact rule is in ``check``),
the unit that runs it, its immediate fields, each with a kind, and a shape rule:

====== ==========================================================
kind   value in ``Instruction.fields``
====== ==========================================================
i64    ``int`` (signed 64-bit)
i64[]  ``tuple[int, ...]``
f64    ``float``
f64[]  ``tuple[float, ...]``
str    ``str`` (UTF-8)
bool   ``bool``
buffer ``int``: the id of a ``const`` Buffer of the function, or ``-1``: none
====== ==========================================================

Every field is present in every instruction (the emitter resolves the npu
dialect's defaults), so the simulator reads fields without a fallback. "None"
is spelled in the field's own kind: ``-1`` for a ``buffer`` or an optional
``i64`` (``pre_shift``, ``weight_bits``), ``()`` for an optional array.

**Post-process** (``POST``, on conv, conv_transpose, gemm, eltwise, rescale,
reduce, pool; ``dialects/npu.py``'s ``PostProcessOp``): the op's exact value is
saturated to ``acc_bits``; then ``pre_shift`` (a left shift, saturated to si32;
-1: none), the bias operand (added inside the accumulator without a pre_shift,
after it with one), the requantization ``multiplier`` / ``shift`` (const int32
buffers of 1 or C values along channel ``axis``; -1: none) with ``rounding``,
and the result range ``clip = (lo, hi)`` (always given: the result type's range,
narrowed by a fused relu / clip).

**Shape rules.** ``check(instruction, code)`` (``code`` is the instruction's
``FunctionCode``) returns ``None`` or a message saying what is wrong: operand and
result counts, dtypes, shapes, field lengths and ranges, the constants a field
names. The loader calls it for every instruction after the generic checks (the
opcode exists, fixed counts match, every buffer id exists, every field has its
kind, every ``buffer`` field names a ``const`` Buffer whose constant is present
with the Buffer's shape and dtype); after that the simulator runs without
re-checking.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from hbir.runtime import numerics, selection

if TYPE_CHECKING:
    from hbir.runtime.hbm_program import Buffer, FunctionCode, Instruction

KINDS = ("i64", "i64[]", "f64", "f64[]", "str", "bool", "buffer")
# The units that compute, in SRAM; "view", "dma" and "cpu" instructions do not.
COMPUTE_UNITS = ("tae", "vae", "aae", "dte")
NONE = -1  # an absent ``buffer`` or optional ``i64`` field

Check = Callable[["Instruction", "FunctionCode"], "str | None"]


@dataclass(frozen=True)
class Opcode:
    number: int
    name: str  # mnemonic, e.g. "conv", "dma_load"
    operands: int | None
    results: int | None
    unit: str  # "tae" | "vae" | "aae" | "dte" | "dma" | "cpu" | "view" (no time)
    fields: tuple[tuple[str, str], ...]  # (field name, kind)
    check: Check | None = None  # the shape rule (see the module docstring)


POST = (
    ("acc_bits", "i64"),
    ("pre_shift", "i64"),
    ("multiplier", "buffer"),
    ("shift", "buffer"),
    ("rounding", "str"),
    ("clip", "i64[]"),
    ("axis", "i64"),
)
LUT_SEGMENTED = (
    ("function", "str"),
    ("kind", "str"),
    ("rounding", "str"),
    ("in_scale", "f64"),
    ("out_scale", "f64"),
    ("in_bits", "i64"),
    ("out_bits", "i64"),
    ("num_tables", "i64"),
    ("frac_bits", "i64"),
    ("phase_mult", "i64"),
    ("phase_shift", "i64"),
    ("phase_bits", "i64"),
    ("octave_step", "i64"),
    ("starts", "buffer"),
    ("offsets", "buffer"),
    ("slopes", "buffer"),
)
ELTWISE_KINDS = ("add", "sub", "mul", "maximum", "minimum")
ELTWISE_KINDS += ("floor_divide", "remainder")  # of index tensors (int64)
REDUCE_KINDS = ("sum", "max", "mean", "min")
POOL_KINDS = ("max", "avg")
RESIZE_MODES = ("nearest", "bilinear", "bicubic")
_SIGNED = ("int8", "int16", "int32", "int64")
_INTEGER = (*_SIGNED, "uint8", "uint16", "uint32")


class _Bad(Exception):
    """A shape rule failed (turned into the message ``check`` returns)."""


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise _Bad(message)


def _bits(dtype: str) -> int:
    return np.dtype(dtype).itemsize * 8


def _signed(b: Buffer, what: str) -> int:
    _need(b.dtype in _SIGNED, f"{what} must be a signed integer, got {b.dtype}")
    return _bits(b.dtype)


def _rank(b: Buffer, n: int, what: str) -> tuple[int, ...]:
    _need(len(b.shape) == n, f"{what} must be {n}-d, got shape {list(b.shape)}")
    return b.shape


def _ints(fields: Mapping, name: str, n: int | None = None, lo: int = 0) -> tuple:
    v = fields[name]
    _need(n is None or len(v) == n, f"{name} needs {n} values, got {len(v)}")
    _need(all(x >= lo for x in v), f"{name} values must be at least {lo}")
    return v


def _const(code: FunctionCode, buffer_id: int, what: str) -> np.ndarray:
    _need(buffer_id != NONE, f"{what} is missing")
    v = code.constants[buffer_id]
    _need(v.dtype.kind == "i", f"{what} must be integers, got {v.dtype}")
    return v


def _post(ins: Instruction, code: FunctionCode, out: Buffer) -> None:
    f = ins.fields
    width = _signed(out, "result")
    _need(2 <= f["acc_bits"] <= 64, f"acc_bits {f['acc_bits']} not in [2, 64]")
    _need(
        f["pre_shift"] == NONE or 0 <= f["pre_shift"] <= 31,
        f"pre_shift {f['pre_shift']} not in [0, 31] (or -1)",
    )
    _need(f["rounding"] in numerics.ROUNDING_MODES, f"rounding {f['rounding']!r}")
    _need(0 <= f["axis"] < max(1, len(out.shape)), f"axis {f['axis']} out of range")
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1  # (int64: index arithmetic)
    clip = f["clip"]
    _need(
        len(clip) == 2 and lo <= clip[0] <= clip[1] <= hi,
        f"clip {list(clip)} must be [lo, hi] within [{lo}, {hi}]",
    )
    m, s = f["multiplier"], f["shift"]
    _need((m == NONE) == (s == NONE), "multiplier and shift go together")
    if m == NONE:
        return
    channels = out.shape[f["axis"]] if out.shape else 1
    m, s = _const(code, m, "multiplier"), _const(code, s, "shift")
    _need(
        m.shape == s.shape and m.ndim == 1 and m.size in (1, channels),
        f"{m.size} multipliers and {s.size} shifts for {channels} channels",
    )
    _need(bool(np.all((m >= 0) & (m < 1 << 31))), "multipliers must be in [0, 2**31)")
    lo, hi = numerics.SHIFT_RANGE
    _need(bool(np.all((s >= lo) & (s <= hi))), f"shifts must be in [{lo}, {hi}]")


def _bias(ins: Instruction, code: FunctionCode, channels: int, n_fixed: int) -> None:
    _need(
        len(ins.operands) in (n_fixed, n_fixed + 1),
        f"needs {n_fixed} operands, or {n_fixed + 1} with a bias; got "
        f"{len(ins.operands)}",
    )
    if len(ins.operands) > n_fixed:
        b = code.buffers[ins.operands[n_fixed]]
        _need(
            b.dtype == "int32" and b.shape == (channels,),
            f"bias must be int32 [{channels}], got {b.dtype} {list(b.shape)}",
        )


def _same_shape(ins: Instruction, code: FunctionCode) -> None:
    x, y = code.buffers[ins.operands[0]], code.buffers[ins.results[0]]
    _need(x.shape == y.shape, f"result shape {list(y.shape)} != {list(x.shape)}")


def _ops(ins: Instruction, code: FunctionCode) -> tuple[list, list]:
    return (
        [code.buffers[i] for i in ins.operands],
        [code.buffers[i] for i in ins.results],
    )


def _windowed(size: int, pad: int, kernel: int, stride: int, dilation: int) -> int:
    return (size + pad - dilation * (kernel - 1) - 1) // stride + 1


def _pooled(size, before, after, kernel, stride, dilation, fields) -> int:
    """torch's pooled size: with ceil_mode a last partial window counts if it
    starts inside the input or its leading padding."""
    if not fields["ceil_mode"]:
        return _windowed(size, before + after, kernel, stride, dilation)
    out = -(-(size + before + after - dilation * (kernel - 1) - 1) // stride) + 1
    return out - 1 if (out - 1) * stride >= size + before else out


# ------------------------------------------------------------------ rules


def _check_conv(ins, code):
    (x, w, *_), (y,) = _ops(ins, code)
    f = ins.fields
    n, h, wd, c = _rank(x, 4, "input")
    o, kh, kw, ci = _rank(w, 4, "weight")
    _signed(x, "input"), _signed(w, "weight")
    sh, sw = _ints(f, "stride", 2, 1)
    t, lf, b, r = _ints(f, "padding", 4)
    dh, dw = _ints(f, "dilation", 2, 1)
    g = f["groups"]
    _need(
        g >= 1 and c == ci * g and o % g == 0,
        f"weight {list(w.shape)} does not fit {c} input channels in {g} groups",
    )
    want = (n, _windowed(h, t + b, kh, sh, dh), _windowed(wd, lf + r, kw, sw, dw), o)
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _bias(ins, code, o, 2)
    _post(ins, code, y)


def _check_conv_transpose(ins, code):
    (x, w, *_), (y,) = _ops(ins, code)
    f = ins.fields
    n, h, wd, c = _rank(x, 4, "input")
    ci, kh, kw, og = _rank(w, 4, "weight")
    _signed(x, "input"), _signed(w, "weight")
    sh, sw = _ints(f, "stride", 2, 1)
    ph, pw = _ints(f, "padding", 2)
    oph, opw = _ints(f, "output_padding", 2)
    dh, dw = _ints(f, "dilation", 2, 1)
    g = f["groups"]
    _need(ci == c and g >= 1 and c % g == 0, f"weight does not fit {g} groups")
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    want = (n, oh, ow, og * g)
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _bias(ins, code, og * g, 2)
    _post(ins, code, y)


def _check_gemm(ins, code):
    (a, b, *_), (y,) = _ops(ins, code)
    _signed(a, "input"), _signed(b, "weight")
    _need(len(a.shape) >= 1 and len(b.shape) >= 2, "gemm operands need dims")
    if ins.fields["transpose_b"]:
        _need(len(b.shape) == 2, "a linear weight is [N, K]")
        want = (*a.shape[:-1], b.shape[0])
        _need(a.shape[-1] == b.shape[1], "reduction sizes differ")
    else:
        try:
            lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise _Bad("batch dims do not broadcast") from None
        _need(len(a.shape) >= 2 and a.shape[-1] == b.shape[-2], "reduction sizes")
        want = (*lead, a.shape[-2], b.shape[-1])
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _bias(ins, code, y.shape[-1], 2)
    _post(ins, code, y)


def _check_eltwise(ins, code):
    (a, b), (y,) = _ops(ins, code)
    f = ins.fields
    _need(f["kind"] in ELTWISE_KINDS, f"kind {f['kind']!r}")
    _signed(a, "lhs"), _signed(b, "rhs")
    try:
        want = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise _Bad("operand shapes do not broadcast") from None
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    m, s = f["in_multiplier"], f["in_shift"]
    _need(len(m) == len(s) and len(m) in (0, 2), "in_multiplier / in_shift: 0 or 2")
    _need(all(0 <= v < 1 << 31 for v in m), "in_multipliers must be in [0, 2**31)")
    lo, hi = numerics.SHIFT_RANGE
    _need(all(lo <= v <= hi for v in s), f"in_shifts must be in [{lo}, {hi}]")
    _post(ins, code, y)


def _check_rescale(ins, code):
    (x,), (y,) = _ops(ins, code)
    _need(_signed(x, "input") <= 32, "input must be at most 32 bits wide")
    _same_shape(ins, code)
    _need(ins.fields["multiplier"] != NONE, "a rescale needs a multiplier")
    _post(ins, code, y)


def _check_reduce(ins, code):
    (x,), (y,) = _ops(ins, code)
    f = ins.fields
    _need(f["kind"] in REDUCE_KINDS, f"kind {f['kind']!r}")
    _signed(x, "input")
    dims = f["dims"]
    _need(
        len(set(dims)) == len(dims) and all(0 <= d < len(x.shape) for d in dims),
        f"dims {list(dims)} out of range",
    )
    keep = f["keepdim"]
    want = tuple(
        1 if i in dims else n for i, n in enumerate(x.shape) if keep or i not in dims
    )
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _post(ins, code, y)


def _check_cast(ins, code):
    (x,), (y,) = _ops(ins, code)
    _need(
        x.dtype in (*_INTEGER, "bool") and y.dtype in _INTEGER,
        "cast is integer (or a mask) to integer",
    )
    _same_shape(ins, code)


# fp16_map's functions: an fp16 op (the float16 qconfig) of one operand, by the
# hbir op it computes (npu-lower's rule; the interpreter's f16 kernel); a gelu
# with ``approximate = "tanh"`` is ``gelu_tanh``
FP16_MAP_OPS = {
    "hbir.sigmoid": "sigmoid",
    "hbir.tanh": "tanh",
    "hbir.exp": "exp",
    "hbir.silu": "silu",
    "hbir.gelu": "gelu",
}
FP16_FUNCTIONS = (*FP16_MAP_OPS.values(), "gelu_tanh")


def fp16_function(hbir_op: str, approximate=None) -> str | None:
    """The fp16_map function computing ``hbir_op`` (its gelu ``approximate``
    attribute, if any), or None."""
    function = FP16_MAP_OPS.get(hbir_op)
    if function == "gelu" and getattr(approximate, "data", approximate) == "tanh":
        return "gelu_tanh"
    return function


def _check_fp16_map(ins, code):
    (x,), (y,) = _ops(ins, code)
    _need(
        x.dtype == "float16" and y.dtype == "float16",
        f"fp16_map takes and gives float16, got {x.dtype} -> {y.dtype}",
    )
    _need(
        ins.fields["function"] in FP16_FUNCTIONS,
        f"fp16_map function {ins.fields['function']!r} is not one of "
        f"{', '.join(FP16_FUNCTIONS)}",
    )
    _same_shape(ins, code)


def _check_lut(ins, code):
    (x,), (y,) = _ops(ins, code)
    _need(x.dtype == "int8", f"a direct table takes int8, got {x.dtype}")
    _signed(y, "result")
    _same_shape(ins, code)
    table = _const(code, ins.fields["table"], "table")
    _need(table.shape == (256,), "a direct table has 256 entries")
    lo, hi = numerics.qrange(_bits(y.dtype))
    _need(bool(np.all((table >= lo) & (table <= hi))), "table entries out of range")


def lut_table(fields: Mapping) -> numerics.LutTable:
    """The segmented table of ``lut_segmented`` fields, with ``starts`` /
    ``offsets`` / ``slopes`` as arrays (``LutTable`` validates it: no int64
    intermediate of ``numerics.apply_lut`` can overflow)."""
    f = fields
    return numerics.LutTable(
        op=f["function"],
        kind=f["kind"],
        in_scale=f["in_scale"],
        out_scale=f["out_scale"],
        in_bits=f["in_bits"],
        out_bits=f["out_bits"],
        num_tables=f["num_tables"],
        rounding=f["rounding"],
        frac_bits=f["frac_bits"],
        starts=f["starts"],
        offsets=f["offsets"],
        slopes=f["slopes"],
        phase_mult=f["phase_mult"],
        phase_shift=f["phase_shift"],
        phase_bits=f["phase_bits"],
        octave_step=f["octave_step"],
    )


def _check_lut_segmented(ins, code):
    (x,), (y,) = _ops(ins, code)
    _need(x.dtype == "int16", f"a segmented table takes int16, got {x.dtype}")
    _signed(y, "result")
    _same_shape(ins, code)
    arrays = {
        n: _const(code, ins.fields[n], n) for n in ("starts", "offsets", "slopes")
    }
    try:
        table = lut_table({**ins.fields, **arrays})
    except (ValueError, TypeError) as e:
        raise _Bad(f"bad table: {e}") from None
    _need(table.out_bits == _bits(y.dtype), "out_bits differs from the result")


def _check_pool(ins, code):
    (x,), (y,) = _ops(ins, code)
    f = ins.fields
    _need(f["kind"] in POOL_KINDS, f"kind {f['kind']!r}")
    n, h, w, c = _rank(x, 4, "input")
    _signed(x, "input")
    kh, kw = _ints(f, "kernel", 2, 1)
    sh, sw = _ints(f, "stride", 2, 1)
    t, lf, b, r = _ints(f, "padding", 4)
    dh, dw = _ints(f, "dilation", 2, 1)
    _need(max(t, b) <= kh // 2 and max(lf, r) <= kw // 2, "padding above half a kernel")
    if f["kind"] == "avg":
        _need((dh, dw) == (1, 1), "average pools are not dilated")
    want = (n, _pooled(h, t, b, kh, sh, dh, f), _pooled(w, lf, r, kw, sw, dw, f), c)
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _post(ins, code, y)


def _check_resize(ins, code):
    (x,), (y,) = _ops(ins, code)
    f = ins.fields
    n, h, w, c = _rank(x, 4, "input")
    _need(f["mode"] in RESIZE_MODES, f"mode {f['mode']!r}")
    _need(
        not f["align_corners"] or f["mode"] != "nearest",
        "align_corners does not apply to nearest mode",
    )
    oh, ow = _ints(f, "size", 2, 1)
    _need(y.shape == (n, oh, ow, c), f"result shape {list(y.shape)}")
    if f["weight_bits"] == NONE:
        _need(f["mode"] != "bicubic", "bicubic takes the NPU's weights (weight_bits)")
        _need(x.dtype == y.dtype, "resize keeps the dtype (without weight_bits)")
    else:  # the NPU's bilinear / bicubic: integer weights, exact si32 sums
        _need(
            f["mode"] in numerics.RESIZE_WEIGHTED_MODES,
            "weight_bits is for the bilinear / bicubic NPU resize",
        )
        _need(
            f["weight_bits"] == numerics.BILINEAR_BITS,
            f"weight_bits must be {numerics.BILINEAR_BITS}, got {f['weight_bits']}",
        )
        _signed(x, "input")
        _need(y.dtype == "int32", f"the weighted sums are int32, got {y.dtype}")
    _need(len(f["scale"]) in (0, 2), "scale: 0 or 2 values")


def _check_grid_sample(ins, code):
    (x, grid), (y,) = _ops(ins, code)
    f = ins.fields
    n, h, w, c = _rank(x, 4, "input")
    _rank(grid, 4, "grid")
    _need(_signed(x, "input") <= 16 and _signed(grid, "grid") <= 16, "16-bit codes")
    _need(grid.shape[0] == n and grid.shape[3] == 2, f"grid {list(grid.shape)}")
    want = (n, grid.shape[1], grid.shape[2], c)
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _need(y.dtype == "int32", f"the weighted sums are int32, got {y.dtype}")
    _need(f["mode"] in numerics.GRID_SAMPLE_MODES, f"mode {f['mode']!r}")
    _need(f["padding_mode"] in numerics.GRID_SAMPLE_PADDINGS, "padding_mode")
    _need(f["grid_scale"] > 0, f"grid_scale {f['grid_scale']} must be positive")
    _need(
        f["weight_bits"] == numerics.BILINEAR_BITS,
        f"weight_bits must be {numerics.BILINEAR_BITS}, got {f['weight_bits']}",
    )


def _check_transpose(ins, code):
    (x,), (y,) = _ops(ins, code)
    perm = ins.fields["perm"]
    _need(sorted(perm) == list(range(len(x.shape))), f"{list(perm)}: no permutation")
    want = tuple(x.shape[p] for p in perm)
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _need(x.dtype == y.dtype, "a transpose keeps the dtype")


def _check_reshape(ins, code):
    (x,), (y,) = _ops(ins, code)
    _need(
        int(np.prod(x.shape)) == int(np.prod(y.shape)) and x.dtype == y.dtype,
        f"cannot view {x.dtype} {list(x.shape)} as {y.dtype} {list(y.shape)}",
    )


def _check_slice(ins, code):
    (x,), (y,) = _ops(ins, code)
    f = ins.fields
    b, e, s = f["begin"], f["end"], f["step"]
    _need(len(b) == len(e) == len(s) == len(x.shape), "one begin / end / step a dim")
    _need(all(v != 0 for v in s), "steps must not be 0")
    want = tuple(
        len(range(*slice(bi, ei, si).indices(n)))
        for bi, ei, si, n in zip(b, e, s, x.shape, strict=True)
    )
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _need(x.dtype == y.dtype, "a slice keeps the dtype")


def _check_concat(ins, code):
    xs, (y,) = _ops(ins, code)
    _need(len(xs) >= 1, "needs at least one input")
    rank, d = len(y.shape), ins.fields["dim"]
    _need(0 <= d < rank, f"dim {d} out of range")
    for x in xs:
        _need(
            len(x.shape) == rank
            and all(x.shape[i] == y.shape[i] for i in range(rank) if i != d)
            and x.dtype == y.dtype,
            f"input {x.dtype} {list(x.shape)} does not fit {list(y.shape)}",
        )
    _need(sum(x.shape[d] for x in xs) == y.shape[d], "inputs do not fill the result")


def _check_topk(ins, code):
    (x,), (y,) = _ops(ins, code)
    f = ins.fields
    _need(x.dtype in _INTEGER, f"input must be integers, got {x.dtype}")
    _need(y.dtype == "int64", f"indices are int64, got {y.dtype}")
    rank, d, k = len(x.shape), f["dim"], f["k"]
    _need(0 <= d < rank, f"dim {d} out of range")
    _need(1 <= k <= x.shape[d], f"k {k} not in [1, {x.shape[d]}]")
    want = x.shape[:d] + (k,) + x.shape[d + 1 :]
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")


def _index_read(ins, code) -> tuple:
    (x, index), (y,) = _ops(ins, code)
    d = ins.fields["dim"]
    _need(x.dtype in _INTEGER, f"input must be integers, got {x.dtype}")
    _need(index.dtype == "int64", f"index must be int64, got {index.dtype}")
    _need(y.dtype == x.dtype, "the result has the input's dtype")
    _need(0 <= d < len(x.shape), f"dim {d} out of range")
    return x, index, y, d


def _check_gather(ins, code):
    x, index, y, d = _index_read(ins, code)
    fits = len(index.shape) == len(x.shape) and all(
        index.shape[a] <= x.shape[a] for a in range(len(x.shape)) if a != d
    )
    _need(fits, f"index {list(index.shape)} does not fit input {list(x.shape)}")
    _need(y.shape == index.shape, f"result shape {list(y.shape)} != the index's")


def _check_index_select(ins, code):
    x, index, y, d = _index_read(ins, code)
    _need(len(index.shape) == 1, f"index must be 1-d, got {list(index.shape)}")
    want = x.shape[:d] + index.shape + x.shape[d + 1 :]
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")


def _check_index_copy(ins, code):
    (x, index, src), (y,) = _ops(ins, code)
    d = ins.fields["dim"]
    _need(x.dtype in _INTEGER, f"input must be integers, got {x.dtype}")
    _need(index.dtype == "int64", f"index must be int64, got {index.dtype}")
    _need(len(index.shape) == 1, f"index must be 1-d, got {list(index.shape)}")
    _need(0 <= d < len(x.shape), f"dim {d} out of range")
    want = x.shape[:d] + index.shape + x.shape[d + 1 :]
    _need(
        src.shape == want and src.dtype == x.dtype,
        f"source {src.dtype} {list(src.shape)}, expected {x.dtype} {list(want)}",
    )
    _need(y.shape == x.shape and y.dtype == x.dtype, "the result is the input's")


def _check_max_pool_indices(ins, code):
    (x,), (y,) = _ops(ins, code)
    f = ins.fields
    n, c, h, w = _rank(x, 4, "input")  # NCHW: the indices are h * W + w
    _signed(x, "input")
    _need(y.dtype == "int64", f"indices are int64, got {y.dtype}")
    kh, kw = _ints(f, "kernel", 2, 1)
    sh, sw = _ints(f, "stride", 2, 1)
    ph, pw = _ints(f, "padding", 2)
    dh, dw = _ints(f, "dilation", 2, 1)
    _need(ph <= kh // 2 and pw <= kw // 2, "padding above half a kernel")
    want = (n, c, _pooled(h, ph, ph, kh, sh, dh, f), _pooled(w, pw, pw, kw, sw, dw, f))
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")


def _check_max_unpool(ins, code):
    (x, index), (y,) = _ops(ins, code)
    n, c, _, _ = _rank(x, 4, "input")  # NCHW, as the indices count
    _need(x.dtype in _INTEGER, f"input must be integers, got {x.dtype}")
    _need(index.dtype == "int64", f"indices must be int64, got {index.dtype}")
    _need(index.shape == x.shape, f"indices {list(index.shape)} != the input's")
    h, w = _ints(ins.fields, "size", 2, 1)
    want = (n, c, h, w)
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _need(y.dtype == x.dtype, "the result has the input's dtype")


def _check_roi_resize(ins, code):
    planes, (y,) = _ops(ins, code)
    f = ins.fields
    _need(len(planes) in (2, 3), f"needs y[, uv], roi: got {len(planes)} operands")
    *planes, roi = planes
    _need(all(p.dtype == "uint8" for p in planes), "the planes must be uint8")
    n, h, w, _ = _rank(planes[0], 4, "y")
    _need(planes[0].shape[3] == 1, "y must be N x H x W x 1")
    channels = 1
    if len(planes) == 2:
        _need(h % 2 == 0 and w % 2 == 0, "nv12 needs an even frame")
        want = (n, h // 2, w // 2, 2)
        _need(planes[1].shape == want, f"uv {list(planes[1].shape)} != {list(want)}")
        channels = 3
    _need(f["interpolate_mode"] in numerics.ROI_INTERPOLATIONS, "interpolate_mode")
    _need(f["expansion_mode"] in numerics.ROI_EXPANSIONS, "expansion_mode")
    pad = f["pad_value"]
    _need(len(pad) == len(planes), f"pad_value needs {len(planes)} values")
    _need(all(-128 <= v <= 255 for v in pad), "pad_value must be bytes")
    _need(roi.dtype == "int32" and roi.shape == (n, 4), f"roi must be int32 [{n}, 4]")
    oh, ow = _ints(f, "size", 2, 1)
    _need(y.dtype == "int8", f"the result is centred int8, got {y.dtype}")
    want = (n, oh, ow, channels)
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")


def _check_compare(ins, code):
    (a, b), (y,) = _ops(ins, code)
    f = ins.fields
    _need(f["kind"] in selection.COMPARE_KINDS, f"kind {f['kind']!r}")
    _need(a.dtype in _INTEGER and b.dtype in _INTEGER, "operands must be integers")
    _need(y.dtype == "bool", f"the result is a bool mask, got {y.dtype}")
    try:
        want = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise _Bad("operand shapes do not broadcast") from None
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")
    _need(len(f["scales"]) in (0, 2), "scales: none or one per operand")
    _need(all(s > 0 for s in f["scales"]), "scales must be positive")


def _check_select(ins, code):
    (mask, a, b), (y,) = _ops(ins, code)
    _need(mask.dtype == "bool", f"the mask must be bool, got {mask.dtype}")
    _need(a.dtype in _INTEGER and a.dtype == b.dtype == y.dtype, "one integer dtype")
    try:
        want = np.broadcast_shapes(mask.shape, a.shape, b.shape)
    except ValueError:
        raise _Bad("operand shapes do not broadcast") from None
    _need(y.shape == want, f"result shape {list(y.shape)}, expected {list(want)}")


def _check_move(ins, code):
    (x,), (y,) = _ops(ins, code)
    _need(x.shape == y.shape and x.dtype == y.dtype, "a copy keeps shape and dtype")


def _check_cpu_call(ins, code):
    _need(
        0 <= ins.fields["island"] < len(code.islands),
        f"island {ins.fields['island']} of {len(code.islands)}",
    )


def check(ins: Instruction, code: FunctionCode) -> str | None:
    """The opcode's shape rule for ``ins`` (None: it holds), as a message."""
    op = BY_NUMBER[ins.opcode]
    if any(code.buffers[r].space == "const" for r in ins.results):
        return f"{op.name}: writes a const buffer (constants are read-only)"
    return _rule(op, ins, code)


def _rule(op: Opcode, ins, code) -> str | None:
    if op.check is None:
        return None
    try:
        op.check(ins, code)
    except _Bad as e:
        return f"{op.name}: {e}"
    except (KeyError, IndexError, TypeError, ValueError) as e:
        return f"{op.name}: malformed instruction ({type(e).__name__}: {e})"
    return None


class _Value(NamedTuple):
    """What a rule reads of a Buffer, for a value of the npu dialect."""

    shape: tuple[int, ...]
    dtype: str
    space: str = "sram"


class _Values:
    """One instruction on values, as the rules read an instruction and its
    function (``ins.operands``, ``code.buffers[...]``, ``code.constants``)."""

    __slots__ = ("operands", "results", "fields", "buffers", "constants", "islands")


def check_values(
    name: str,
    operands: Sequence[tuple[tuple[int, ...], str]],
    results: Sequence[tuple[tuple[int, ...], str]],
    fields: Mapping[str, object],
) -> str | None:
    """Opcode ``name``'s rule on values rather than a program's buffers: the
    operands and results as (shape, dtype name), every field of the opcode with
    ``buffer`` fields as integer arrays (None: none). The npu dialect's
    verifier is this call, so an op verifies exactly when its instruction
    would load (``tests/runtime/test_hbm_opcodes.py`` checks it per opcode)."""
    op = BY_NAME[name]
    for what, values, want in (
        ("operands", operands, op.operands),
        ("results", results, op.results),
    ):
        if want is not None and len(values) != want:
            return f"{name}: takes {want} {what}, got {len(values)}"
    v = _Values()
    v.buffers = [_Value(*value) for value in (*operands, *results)]
    v.operands = range(len(operands))
    v.results = range(len(operands), len(v.buffers))
    v.constants, v.islands, v.fields = {}, (), {}
    for field, kind in op.fields:
        value = fields[field]
        if kind == "buffer":
            if value is None:
                value = NONE
            else:
                array = np.asarray(value)
                v.buffers.append(_Value(array.shape, array.dtype.name, "const"))
                value = len(v.buffers) - 1
                v.constants[value] = array
        v.fields[field] = value
    return _rule(op, v, v)


# ------------------------------------------------------------------ the table

_CONV = (
    ("stride", "i64[]"),
    ("padding", "i64[]"),  # [top, left, bottom, right]
    ("dilation", "i64[]"),
    ("groups", "i64"),
)
_POOL = (
    ("kind", "str"),
    ("kernel", "i64[]"),
    ("stride", "i64[]"),
    ("padding", "i64[]"),  # [top, left, bottom, right]
    ("dilation", "i64[]"),
    ("ceil_mode", "bool"),
    ("count_include_pad", "bool"),
)

OPCODES: tuple[Opcode, ...] = (
    Opcode(1, "conv", None, 1, "tae", _CONV + POST, _check_conv),
    Opcode(
        2,
        "conv_transpose",
        None,
        1,
        "tae",
        (
            ("stride", "i64[]"),
            ("padding", "i64[]"),  # [h, w], symmetric
            ("output_padding", "i64[]"),
            ("dilation", "i64[]"),
            ("groups", "i64"),
            *POST,
        ),
        _check_conv_transpose,
    ),
    Opcode(3, "gemm", None, 1, "tae", (("transpose_b", "bool"), *POST), _check_gemm),
    Opcode(
        4,
        "eltwise",
        2,
        1,
        "vae",
        (("kind", "str"), ("in_multiplier", "i64[]"), ("in_shift", "i64[]"), *POST),
        _check_eltwise,
    ),
    Opcode(5, "rescale", 1, 1, "vae", POST, _check_rescale),
    Opcode(
        6,
        "reduce",
        1,
        1,
        "vae",
        (("kind", "str"), ("dims", "i64[]"), ("keepdim", "bool"), *POST),
        _check_reduce,
    ),
    Opcode(7, "cast", 1, 1, "vae", (), _check_cast),
    Opcode(8, "lut", 1, 1, "vae", (("table", "buffer"),), _check_lut),
    Opcode(9, "lut_segmented", 1, 1, "vae", LUT_SEGMENTED, _check_lut_segmented),
    Opcode(10, "pool", 1, 1, "aae", _POOL + POST, _check_pool),
    Opcode(
        11,
        "resize",
        1,
        1,
        "aae",
        (
            ("size", "i64[]"),
            ("mode", "str"),
            ("align_corners", "bool"),
            ("scale", "f64[]"),  # (): by size
            ("weight_bits", "i64"),  # -1: torch's interpolation, rounded
        ),
        _check_resize,
    ),
    Opcode(12, "transpose", 1, 1, "dte", (("perm", "i64[]"),), _check_transpose),
    Opcode(13, "reshape", 1, 1, "view", (), _check_reshape),
    Opcode(
        14,
        "slice",
        1,
        1,
        "view",
        (("begin", "i64[]"), ("end", "i64[]"), ("step", "i64[]")),
        _check_slice,
    ),
    Opcode(15, "concat", None, 1, "view", (("dim", "i64"),), _check_concat),
    Opcode(16, "dma_load", 1, 1, "dma", (), _check_move),
    Opcode(17, "dma_store", 1, 1, "dma", (), _check_move),
    Opcode(18, "cpu_call", None, None, "cpu", (("island", "i64"),), _check_cpu_call),
    # selection (runtime/selection.py): the indices of the top k, ties by index
    Opcode(
        19,
        "topk",
        1,
        1,
        "vae",
        (("k", "i64"), ("dim", "i64"), ("largest", "bool")),
        _check_topk,
    ),
    Opcode(20, "gather", 2, 1, "dte", (("dim", "i64"),), _check_gather),
    Opcode(21, "index_select", 2, 1, "dte", (("dim", "i64"),), _check_index_select),
    Opcode(22, "index_copy", 3, 1, "dte", (("dim", "i64"),), _check_index_copy),
    Opcode(
        24,
        "compare",
        2,
        1,
        "vae",
        (("kind", "str"), ("scales", "f64[]")),
        _check_compare,
    ),
    Opcode(25, "select", 3, 1, "vae", (), _check_select),
    # NCHW (the indices count h * W + w): the first maximum of each window
    Opcode(
        26,
        "max_pool_indices",
        1,
        1,
        "aae",
        (
            ("kernel", "i64[]"),
            ("stride", "i64[]"),
            ("padding", "i64[]"),
            ("dilation", "i64[]"),
            ("ceil_mode", "bool"),
        ),
        _check_max_pool_indices,
    ),
    Opcode(27, "max_unpool", 2, 1, "dte", (("size", "i64[]"),), _check_max_unpool),
    # the camera resizer: NV12 (y, uv) or gray (y) frame planes and an int32 roi
    # per image -> the centred int8 NHWC image (numerics.roi_resize). It reads the
    # frame where it lies, in DDR (a frame is up to 8192 x 8192, far beyond
    # SRAM), only the pixels its taps need, as the DMA engines do: not a compute
    # unit's SRAM working set
    Opcode(
        28,
        "roi_resize",
        None,
        1,
        "dma",
        (
            ("size", "i64[]"),
            ("interpolate_mode", "str"),
            ("expansion_mode", "str"),
            ("pad_value", "i64[]"),
        ),
        _check_roi_resize,
    ),
    # an fp16 op of one operand: float32 kernel, rounded once to binary16
    Opcode(29, "fp16_map", 1, 1, "vae", (("function", "str"),), _check_fp16_map),
    # NHWC input, N x Ho x Wo x 2 grid codes; the exact int32 weighted sums
    Opcode(
        23,
        "grid_sample",
        2,
        1,
        "aae",
        (
            ("mode", "str"),
            ("padding_mode", "str"),
            ("align_corners", "bool"),
            ("grid_scale", "f64"),
            ("weight_bits", "i64"),
        ),
        _check_grid_sample,
    ),
)

BY_NUMBER = {op.number: op for op in OPCODES}
BY_NAME = {op.name: op for op in OPCODES}
