"""Prepared execution: a function compiled once into a flat plan of kernel calls.

``run_function`` without ``on_op`` runs a ``Plan``. Building one does, once per
function, what the op-by-op loop does on every call:

* constants are decoded, and every op whose operands are all constants is folded
  (``qnt.const_fake_quant`` of weights in ``qat.bc``, constant reshapes, ...);
* integer convs / linears / matmuls get their weights packed for
  ``runtime/kernels.py`` (``torch._int_mm`` for int8);
* a ``qat.bc`` conv / linear marked ``qnt.exact`` gets its weight codes, its
  requantization (``numerics.gemm_requantization``) and its fused output step;
* requantizations and fake quantizations of activations get their parameters as
  ready arrays;
* SSA values become slots of a list, and each slot is released after its last use.

Every other op runs its interpreter kernel unchanged, and no ops are fused:
fusions are npu-fuse's IR rewrites, which ``quantized.bc``'s fast feed runs as
its compiled program (``hbir/fast_feed.py``). The plan runs ``qat.bc``, the CPU
islands of a compiled program and models without a march. The results are the
interpreter's bit for bit: the prepared steps call kernels tested against the
numerics reference, and ``tests/runtime/test_plan.py`` compares whole functions.

Plans are cached on the ``func.func`` object per rounding mode with a snapshot
of the IR they were built from (the block's arguments and ops, each op's operands,
properties and attributes), so an edit of the IR in place builds a new plan.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import numpy_dtype
from hbir.runtime import integer_ops, interpreter, kernels, numerics
from hbir.runtime.requantizer import Requantizer, fused_gemm_output

Run = Callable[..., tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class Step:
    """One op of the plan: ``run(*env[args])`` fills ``env[outs]``."""

    op: Operation
    run: Run
    args: tuple[int, ...]
    outs: tuple[int, ...]
    # the IR's (dtype, shape) of each result, checked after a generic kernel
    check: tuple[tuple[np.dtype, tuple[int, ...]], ...] | None
    free: tuple[int, ...] = ()  # slots whose last use is this step


class Plan:
    """``func_op`` prepared for ``rounding``; ``run(inputs)`` executes it."""

    def __init__(self, func_op: func.FuncOp, rounding: str):
        self.name = func_op.sym_name.data
        if len(func_op.body.blocks) != 1:
            raise interpreter.InterpreterError(
                f"@{self.name} must have exactly one block"
            )
        block = func_op.body.block
        self.args = tuple(block.args)
        self.arg_types = tuple(interpreter.input_type(a) for a in self.args)
        table = interpreter.kernel_table(rounding)
        slots: dict[SSAValue, int] = {a: i for i, a in enumerate(self.args)}
        constants: dict[int, np.ndarray] = {}
        steps: list[Step] = []
        returns: list[int] | None = None
        for op in block.ops:
            if isinstance(op, func.ReturnOp):
                returns = [slots[v] for v in op.arguments]
                break
            kernel = table.get(type(op))
            if kernel is None:
                raise interpreter.op_error(op, "has no interpreter kernel")
            args = [slots[v] for v in op.operands]
            outs = []
            for value in op.results:
                slots[value] = len(slots)
                outs.append(slots[value])
            if all(a in constants for a in args):  # fold: run once, now
                operands = [op, *(constants[a] for a in args)]
                results = _call(op, kernel, operands, _result_types(op))
                constants.update(zip(outs, results, strict=True))
                continue
            known = [constants.get(a) for a in args]
            run = _prepare(op, known, rounding)
            check = _result_types(op) if run is None else None
            run = functools.partial(kernel, op) if run is None else run
            steps.append(Step(op, run, tuple(args), tuple(outs), check))
        if returns is None:
            raise interpreter.InterpreterError(f"@{self.name} has no func.return")
        self.returns = tuple(returns)
        self.constant_returns = frozenset(r for r in returns if r in constants)
        self.env = [None] * len(slots)
        for slot, value in constants.items():
            self.env[slot] = value
        keep = set(returns) | set(constants)
        self.steps = _with_liveness(steps, keep)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self.args):
            raise ValueError(
                f"@{self.name} takes {len(self.args)} inputs, got {len(inputs)}"
            )
        env = self.env.copy()
        bound = zip(self.args, self.arg_types, inputs, strict=True)
        for i, (arg, expected, x) in enumerate(bound):
            env[i] = interpreter.bind_input(i, arg, x, expected)
        # _call, inlined, and one result stored without a zip: this loop is the
        # interpreter's per-op overhead
        for step in self.steps:
            try:
                results = step.run(*[env[a] for a in step.args])
            except Exception as e:
                raise _located(step.op, e) from e
            if (
                results and type(results[0]) is not np.ndarray
            ):  # numpy's 0-d results: scalars
                results = [np.asarray(y) for y in results]
            if step.check is not None:
                _check(step.op, results, step.check)
            outs = step.outs
            if len(outs) == 1 == len(results):
                env[outs[0]] = results[0]
            else:
                for slot, y in zip(outs, results, strict=True):
                    env[slot] = y
            for slot in step.free:
                env[slot] = None
        # A constant result is shared by every call: the caller gets a copy.
        return [
            env[r].copy() if r in self.constant_returns else env[r]
            for r in self.returns
        ]


def _call(op: Operation, run: Run, operands: list, check):
    try:
        results = run(*operands)
    except Exception as e:
        raise _located(op, e) from e
    if check is not None:
        _check(op, results, check)
    return results


def _located(op: Operation, e: Exception) -> interpreter.InterpreterError:
    """A kernel's exception as the error of ``op``, saying where it is."""
    if isinstance(e, interpreter.InterpreterError):
        return interpreter.op_error(op, str(e))
    return interpreter.op_error(op, f"failed: {type(e).__name__}: {e}")


def _check(op: Operation, results, check) -> None:
    """Catch a generic kernel whose results disagree with the IR's types
    (``check``: ``_result_types(op)``)."""
    if len(results) == len(check):
        for y, (dtype, shape) in zip(results, check, strict=True):
            if not isinstance(y, np.ndarray) or y.dtype != dtype or y.shape != shape:
                break
        else:
            return
    for value, y in zip(op.results, results, strict=True):
        interpreter.check_result(op, value, y)  # raises, saying what


def _result_types(op: Operation) -> tuple[tuple[np.dtype, tuple[int, ...]], ...]:
    return tuple(
        (numpy_dtype(r.type.element_type), tuple(r.type.get_shape()))
        for r in op.results
    )


def _with_liveness(steps: list[Step], keep: set[int]) -> tuple[Step, ...]:
    """Steps that release each slot after its last reader (inputs included)."""
    last: dict[int, int] = {}
    for i, step in enumerate(steps):
        for slot in (*step.args, *step.outs):
            last[slot] = i
    free: dict[int, list[int]] = {}
    for slot, i in last.items():
        if slot not in keep:
            free.setdefault(i, []).append(slot)
    return tuple(
        dataclasses.replace(step, free=tuple(free.get(i, ())))
        for i, step in enumerate(steps)
    )


# ------------------------------------------------------------------ fusion
# Without ``on_op`` nobody sees the values inside a chain whose intermediate
# results each have one reader, so such a chain may run as one step when that
# provably computes the same numbers.


# ------------------------------------------------------------------ the cache


# What a step depends on, read in C: the op's successor in the block (an op
# inserted, moved or erased changes some op's), its operand tuple (replaced by
# every operand edit), its properties and its attributes.
_OP_STATE = operator.attrgetter("_next_op", "_operands", "properties", "attributes")


def _head(func_op: func.FuncOp) -> tuple:
    """The body region, its first and last block (a block added or removed), the
    block's argument tuple (replaced when an argument is inserted or erased;
    argument types are immutable) and its first op."""
    region = func_op.body
    block = region.first_block
    if block is None:
        return (region,)
    return region, block, region.last_block, block.args, block.first_op


@dataclass(frozen=True)
class Snapshot:
    """The IR a plan was built from: the head, the ops, and each op's
    ``_OP_STATE`` with copies of its property and attribute dicts.

    When the head is the same and every op has the same state, walking the block
    from its first op through each ``_next_op`` gives the same ops, with the same
    operands, properties and attributes (equal attributes mean equal semantics):
    the plan still holds. The test is one C-level ``==`` per op (no walk of the
    block's linked list), so that a cache hit costs far less than a step.
    """

    head: tuple
    ops: tuple[Operation, ...]
    state: list[tuple]

    @staticmethod
    def of(func_op: func.FuncOp) -> Snapshot:
        ops = tuple(func_op.body.block.ops)
        state = [(n, o, dict(p), dict(a)) for n, o, p, a in map(_OP_STATE, ops)]
        return Snapshot(_head(func_op), ops, state)

    def matches(self, func_op: func.FuncOp) -> bool:
        return _head(func_op) == self.head and (
            list(map(_OP_STATE, self.ops)) == self.state
        )


def prepared(func_op: func.FuncOp, rounding: str) -> Plan:
    """The cached plan of ``func_op`` for ``rounding``, rebuilt after an IR edit."""
    cache = func_op.__dict__.setdefault("_hbir_plans", {})
    hit = cache.get(rounding)
    if hit is not None and hit[0].matches(func_op):
        return hit[1]
    plan = Plan(func_op, rounding)
    cache[rounding] = (Snapshot.of(func_op), plan)
    return plan


# ------------------------------------------------------------------ prepared steps


def _result_dtype(op: Operation) -> np.dtype:
    return numpy_dtype(op.results[0].type.element_type)


def _operand_dtype(value: SSAValue) -> np.dtype:
    return numpy_dtype(value.type.element_type)


def _integer(dtype: np.dtype) -> bool:
    return dtype.kind in "iu"


def _saturated(y: np.ndarray, dtype: np.dtype, exact_bound: int) -> np.ndarray:
    """``y`` (exact sums, |y| <= exact_bound) saturated to ``dtype``."""
    lo, hi = _limits(dtype)
    if exact_bound <= hi:
        return y.astype(dtype, copy=False)
    return np.clip(y, lo, hi).astype(dtype)


@functools.cache
def _limits(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _gemm_bound(x_dtype, w: np.ndarray, out_axis: int) -> int:
    others = tuple(a for a in range(w.ndim) if a != out_axis % w.ndim)
    w_sum = np.sum(np.abs(w.astype(np.int64)), axis=others)
    return kernels.magnitude(x_dtype) * int(np.max(w_sum, initial=0))


@dataclass(frozen=True)
class GemmStep:
    """An integer conv / linear with constant weights: exact sums (``sums``,
    ``|sums| <= bound``) plus the constant bias, saturated to ``bits``."""

    sums: Callable[[np.ndarray], np.ndarray]
    bound: int
    bias: np.ndarray | None
    axis: int
    bits: int
    out: np.dtype

    def __call__(self, x, *_constant_operands):
        y = self.sums(x)
        if self.bias is None:
            return (_saturated(y, self.out, self.bound),)
        return (
            integer_ops.finish(y, self.bias, self.axis, self.bits).astype(self.out),
        )


@dataclass(frozen=True)
class RequantizeStep:
    """A prepared ``qnt.requantize`` (also a fused gemm epilogue's last step)."""

    requantizer: Requantizer
    out: np.dtype

    def __call__(self, x, *_constant_operands):
        return (self.requantizer(x, self.out),)


def _integer_gemm(op, known, *, terms: int, axis: int, sums) -> GemmStep | None:
    x_dtype = _operand_dtype(op.input)
    w, bias = known[1], (known[2] if len(known) > 2 else None)
    if w is None or (len(known) > 2 and bias is None) or not _integer(x_dtype):
        return None
    if interpreter.f64_inexact(x_dtype, w.dtype, terms):
        return None  # the interpreter refuses it: keep its error
    bound = _gemm_bound(x_dtype, w, 0)
    bits = interpreter.result_bits(op)
    return GemmStep(sums(x_dtype, w), bound, bias, axis, bits, _result_dtype(op))


def _conv_sums(op: hbir.Conv2dOp):
    stride, dilation = op.stride.get_values(), op.dilation.get_values()
    pads = integer_ops.pads4(op.padding.get_values())

    def sums(x_dtype, w):
        packed = kernels.pack_conv2d(w, x_dtype, op.groups.value.data, reused=True)
        return lambda x: kernels.conv2d_sums(x, packed, stride, pads, dilation)

    return sums


def _linear_sums(x_dtype, w):
    packed = kernels.pack_linear(w, x_dtype)
    return lambda x: kernels.linear_sums(x, packed)


def _requantize(op: qnt.RequantizeOp, known, rounding) -> Run | None:
    x_dtype, out = _operand_dtype(op.input), _result_dtype(op)
    if not _integer(x_dtype) or x_dtype.itemsize > 4:
        return None
    lo, hi = interpreter.code_range(op.output.type.element_type)
    if op.clip is not None:
        clip_lo, clip_hi = op.clip.get_values()
        lo, hi = max(lo, clip_lo), min(hi, clip_hi)
    requantizer = Requantizer(
        op.multiplier.get_values(),
        op.shift.get_values(),
        op.zero.value.data,
        lo,
        hi,
        ndim=len(op.input.type.get_shape()),
        axis=interpreter.op_axis(op),
        mode=op.rounding.data,
        acc_bound=kernels.magnitude(x_dtype),
    )
    return RequantizeStep(requantizer, out)


@dataclass(frozen=True)
class IntegerAddStep:
    """An integer ``hbir.add`` (not ``qnt.exact``): one int64 add, saturated to
    ``out``; ``bound`` is the largest |sum| the operand dtypes allow."""

    out: np.dtype
    bound: int

    def __call__(self, a, b):
        return (_saturated(np.add(a, b, dtype=np.int64), self.out, self.bound),)


def _integer_add(op: hbir.AddOp, known, rounding) -> Run | None:
    dtypes = [_operand_dtype(v) for v in op.operands]
    if qnt.EXACT in op.attributes or not all(_integer(d) for d in dtypes):
        return None
    bound = sum(kernels.magnitude(d) for d in dtypes)
    return IntegerAddStep(_result_dtype(op), bound)


def _max_pool2d(op: hbir.MaxPool2dOp, known, rounding) -> Run | None:
    x_dtype = _operand_dtype(op.input)
    if not _integer(x_dtype) or _result_dtype(op) != x_dtype:
        return None
    window = (
        tuple(op.kernel.get_values()),
        tuple(op.stride.get_values()),
        tuple(op.padding.get_values()),
        tuple(op.dilation.get_values()),
        bool(op.ceil_mode.value.data),
    )
    return lambda x: (kernels.max_pool2d(x, *window),)


def _lut(op: hbir.LutOp, known, rounding) -> Run | None:
    """An int16 table op as the list of every code's result, built once (the
    interpreter's kernel rebuilds and re-validates the table on every call)."""
    if op.table is not None:
        return None
    table = op.lut_table()
    codes = kernels.CodeTable.of(table, _operand_dtype(op.input), _result_dtype(op))
    return None if codes is None else (lambda x: (codes(x),))


def _const_fake_quant(op: qnt.ConstFakeQuantOp, known, rounding) -> Run | None:
    if _operand_dtype(op.input) != np.float32 or _result_dtype(op) != np.float32:
        return None
    bits, narrow = op.bits.value.data, bool(op.narrowRange.value.data)
    if bits > 16:
        return None
    scale, zero = numerics.scale_from_min_max(
        np.asarray(op.min.get_values()), np.asarray(op.max.get_values()), bits, narrow
    )
    qmin, qmax = numerics.qrange(bits, narrow)
    ndim = len(op.input.type.get_shape())
    axis = interpreter.op_axis(op)
    quantizer = kernels.FakeQuantizer(scale, zero, qmin, qmax, axis, ndim, rounding)
    return lambda x: (quantizer(x),)


# ---- qat.bc: a conv / linear marked qnt.exact (numerics.fixed_point_gemm)


def _exact_gemm(op, known, rounding, *, terms: int, axis: int) -> Run | None:
    """The prepared ``fixed_point_gemm`` of an exact conv (``axis`` 1) or linear
    (``axis`` -1) with constant weights (and bias)."""
    grids = interpreter.exact_grids(op)
    w, bias = known[1], (known[2] if len(known) > 2 else None)
    if w is None or (len(known) > 2 and bias is None):
        return None
    if _operand_dtype(op.input) != np.float32 or _result_dtype(op) != np.float32:
        return None
    x_bits, w_bits = grids.x_bits, grids.w_bits
    if max(x_bits, w_bits) > 16 or terms << (x_bits - 1) << (w_bits - 1) > 2**53:
        return None  # the reference refuses (or never sees) it
    if _operand_shifts(terms, x_bits, w_bits) != (0, 0):
        return None  # operands pre-shifted for the accumulator: the reference's
    w_scales = np.asarray(grids.w_scales, np.float32)
    w_axis = 0 if w_scales.size > 1 else None
    qw = numerics.codes_on_grid(w, w_scales, w_bits, w_axis)
    qw = qw.astype(np.int8 if w_bits <= 8 else np.int16)
    x_dtype = np.dtype(np.int8 if x_bits <= 8 else np.int16)
    channels = w.shape[0]
    req = numerics.gemm_requantization(
        grids.x_scale,
        np.resize(w_scales, channels) if w_scales.size > 1 else w_scales,
        grids.out_scale,
        terms=terms,
        x_bits=x_bits,
        w_bits=w_bits,
        bias=None if bias is None else np.asarray(bias, np.float64),
        channels=channels,
        mode=rounding,
    )
    ndim = len(op.results[0].type.get_shape())
    qmin, qmax = numerics.qrange(grids.out_bits)
    bound = _gemm_bound(x_dtype, qw, 0)
    output = fused_gemm_output(
        req, bound, qmin, qmax, ndim=ndim, axis=axis % ndim, mode=rounding
    )
    x_inv = np.float32(1.0) / np.float32(grids.x_scale)
    x_lo, x_hi = numerics.qrange(x_bits)
    out_scale = np.float32(grids.out_scale)
    sums = (_conv_sums(op) if isinstance(op, hbir.Conv2dOp) else _linear_sums)(
        x_dtype, qw
    )
    fallback = interpreter.KERNELS[type(op)]

    def run(x, w_values, b=None):
        v = np.multiply(x, x_inv, dtype=np.float32)
        np.rint(v, out=v)
        if v.size and np.isnan(np.min(v)):  # the reference's own (NaN) numbers
            args = (op, x, w_values) if b is None else (op, x, w_values, b)
            return fallback(*args, rounding=rounding)
        np.clip(v, x_lo, x_hi, out=v)
        acc = sums(v.astype(x_dtype))
        if output is None:
            codes = numerics.gemm_output(acc, req, qmin, qmax, axis, rounding)
            y = codes.astype(np.float32)
        else:
            y = output(acc, np.float32)
        y *= out_scale
        return (y,)

    return run


def _operand_shifts(terms: int, x_bits: int, w_bits: int) -> tuple[int, int] | None:
    try:
        return numerics.gemm_operand_shifts(terms, x_bits, w_bits)
    except ValueError:
        return None  # the reference raises it, located, at run time


def _conv2d(op: hbir.Conv2dOp, known, rounding) -> Run | None:
    w = known[1]
    if w is None:
        return None
    if qnt.EXACT in op.attributes:
        return _exact_gemm(op, known, rounding, terms=w[0].size, axis=1)
    return _integer_gemm(op, known, terms=w[0].size, axis=1, sums=_conv_sums(op))


def _linear(op: hbir.LinearOp, known, rounding) -> Run | None:
    w = known[1]
    if w is None:
        return None
    if qnt.EXACT in op.attributes:
        return _exact_gemm(op, known, rounding, terms=w.shape[1], axis=-1)
    return _integer_gemm(op, known, terms=w.shape[1], axis=-1, sums=_linear_sums)


def _matmul(op: hbir.MatmulOp, known, rounding) -> Run | None:
    if qnt.EXACT in op.attributes or not _integer(_operand_dtype(op.lhs)):
        return None
    a_dtype, b_dtype = _operand_dtype(op.lhs), _operand_dtype(op.rhs)
    if interpreter.f64_inexact(a_dtype, b_dtype, op.lhs.type.get_shape()[-1]):
        return None
    out, bits = _result_dtype(op), interpreter.result_bits(op)

    def run(a, b):
        return (
            integer_ops.finish(kernels.matmul_sums(a, b), None, -1, bits).astype(out),
        )

    return run


# Prepared forms by op type: (op, constant operands or None, rounding) -> the
# step's run function, or None for the interpreter's kernel.
_PREPARE: dict[type[Operation], Callable[..., Run | None]] = {
    hbir.Conv2dOp: _conv2d,
    hbir.LinearOp: _linear,
    hbir.MatmulOp: _matmul,
    hbir.AddOp: _integer_add,
    hbir.MaxPool2dOp: _max_pool2d,
    hbir.LutOp: _lut,
    qnt.RequantizeOp: _requantize,
    qnt.ConstFakeQuantOp: _const_fake_quant,
    qnt.QuantizeOp: lambda op, known, rounding: interpreter.quantizer(op),
    qnt.DequantizeOp: lambda op, known, rounding: interpreter.dequantizer(op),
}


def _prepare(op: Operation, known: list, rounding: str) -> Run | None:
    prepare = _PREPARE.get(type(op))
    return None if prepare is None else prepare(op, known, rounding)
