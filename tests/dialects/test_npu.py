"""The npu dialect: verifiers reject malformed ops with a clear message."""

import pytest
from xdsl.dialects.builtin import TensorType
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.test_value import create_ssa_value

from hbir.dialects import npu
from hbir.dialects.hbir import i64_attr, ints, si


def _t(*shape, bits=8):
    return create_ssa_value(TensorType(si(bits), list(shape)))


def _conv(x, w, out, **props):
    p = {
        "stride": ints([1, 1]),
        "padding": ints([1, 1]),
        "dilation": ints([1, 1]),
        "groups": i64_attr(1),
    }
    p.update(props)
    return npu.ConvOp.create(
        operands=[x, w], result_types=[TensorType(si(8), list(out))], properties=p
    )


def test_conv_checks_its_nhwc_shapes():
    _conv(_t(1, 4, 4, 3), _t(8, 3, 3, 3), (1, 4, 4, 8)).verify()
    with pytest.raises(
        VerifyException, match=r"result shape \[1, 4, 4, 9\], expected \[1, 4, 4, 8\]"
    ):
        _conv(_t(1, 4, 4, 3), _t(8, 3, 3, 3), (1, 4, 4, 9)).verify()
    with pytest.raises(VerifyException, match="does not fit 4 input channels"):
        _conv(_t(1, 4, 4, 4), _t(8, 3, 3, 3), (1, 4, 4, 8)).verify()


def test_post_process_is_checked():
    ok = npu.post_properties([1 << 30], [30], [0, 127])
    _conv(_t(1, 4, 4, 3), _t(8, 3, 3, 3), (1, 4, 4, 8), **ok).verify()
    bad_clip = npu.post_properties([1 << 30], [30], [0, 300])
    with pytest.raises(VerifyException, match="clip"):
        _conv(_t(1, 4, 4, 3), _t(8, 3, 3, 3), (1, 4, 4, 8), **bad_clip).verify()
    three = npu.post_properties([1, 1, 1], [0, 0, 0])
    with pytest.raises(VerifyException, match="3 multipliers and 3 shifts for 8"):
        _conv(_t(1, 4, 4, 3), _t(8, 3, 3, 3), (1, 4, 4, 8), **three).verify()


def test_a_rescale_needs_its_multiplier():
    r = npu.RescaleOp.create(operands=[_t(4)], result_types=[TensorType(si(8), [4])])
    with pytest.raises(VerifyException, match="needs a multiplier"):
        r.verify()


def test_working_sets_use_the_channel_alignment():
    t = TensorType(si(8), [1, 2, 2, 3])
    assert npu.aligned_bytes(t) == 12
    assert npu.aligned_bytes(t, 16) == 64
