"""Op builders infer result types from the same rules the verifiers check."""

import pytest
from xdsl.dialects.builtin import TensorType, f32
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.test_value import create_ssa_value

from hbir.dialects import hbir, qnt
from hbir.dialects.hbir import si


def t(*shape, el=f32):
    return create_ssa_value(TensorType(el, list(shape)))


def test_builders_infer_and_verify():
    x = t(1, 3, 8, 8)
    w = t(4, 3, 3, 3)
    conv = hbir.Conv2dOp(x, w, padding=(1, 1), stride=(2, 2))
    conv.verify()
    assert hbir.shape_of(conv.output) == (1, 4, 4, 4)
    pool = hbir.MaxPool2dOp(conv, (2, 2))
    pool.verify()
    assert hbir.shape_of(pool.output) == (1, 4, 2, 2)
    flat = hbir.ReshapeOp(pool, (1, -1))
    lin = hbir.LinearOp(flat, t(10, 16))
    lin.verify()
    assert hbir.shape_of(lin.output) == (1, 10)
    a, b = hbir.SplitOp(lin, (4, 6), 1).outputs
    cat = hbir.ConcatOp([b, a], 1)
    cat.verify()
    assert hbir.shape_of(cat.output) == (1, 10)
    mean = hbir.ReduceMeanOp(x, (2, 3), keepdim=True)
    assert hbir.shape_of(mean.output) == (1, 3, 1, 1)


def test_integer_gemm_result_is_si32():
    conv = hbir.Conv2dOp(t(1, 3, 4, 4, el=si(8)), t(2, 3, 1, 1, el=si(8)))
    conv.verify()
    assert conv.output.type.element_type == si(32)
    bad_bias = hbir.Conv2dOp(
        t(1, 3, 4, 4, el=si(8)), t(2, 3, 1, 1, el=si(8)), t(2, el=si(8))
    )
    with pytest.raises(VerifyException, match="integer bias must be si32, got si8"):
        bad_bias.verify()


def test_qnt_builders():
    x = t(2, 4)
    fq = qnt.ConstFakeQuantOp(x, [-1.0] * 4, [1.0] * 4, bits=8, axis=1)
    fq.verify()
    q = qnt.QuantizeOp(fq, si(8), [0.1])
    q.verify()
    rq = qnt.RequantizeOp(q, si(8), [1 << 30], [31], clip=(0, 127))
    rq.verify()
    dq = qnt.DequantizeOp(rq, [0.05])
    dq.verify()
    assert dq.output.type == x.type
    with pytest.raises(VerifyException, match="per-tensor parameters need 1 value"):
        qnt.ConstFakeQuantOp(x, [-1.0, -1.0], [1.0, 1.0]).verify()
    with pytest.raises(VerifyException, match="scales must be positive"):
        qnt.QuantizeOp(x, si(8), [0.0]).verify()


def test_integer_attributes_are_shared_per_value_and_equal_xdsls_own():
    """``i64_attr`` and short ``ints`` hand out one attribute per value (xDSL
    verifies each attribute it makes); each equals the attribute xDSL's own
    constructors make, and long or out-of-range arrays are made as before."""
    from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, i64

    assert hbir.i64_attr(7) is hbir.i64_attr(7)
    assert hbir.i64_attr(-(2**63)) == IntegerAttr(-(2**63), i64)
    short = [3, -1, 2**62]
    assert hbir.ints(short) is hbir.ints(tuple(short))
    assert hbir.ints(short) == DenseArrayBase.from_list(i64, short)
    long = list(range(40))
    assert hbir.ints(long) == DenseArrayBase.from_list(i64, long)
    assert hbir.ints(long).get_values() == tuple(long)
    past = [2**63]  # beyond int64: xDSL's own conversion, as before
    assert hbir.ints(past) == DenseArrayBase.from_list(i64, past)
