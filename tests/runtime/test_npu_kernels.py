"""runtime/npu_kernels.py: an instruction bound to its buffers (``bind``, the
simulator's fast form) computes what the kernel computes, run after run, as
the buffers' values change, and falls back to the exact path where oneDNN's
float32 sums may have rounded."""

import numpy as np
import pytest
import torch

from hbir.runtime import integer_ops, kernels, npu_kernels, numerics, requantizer

torch.set_num_threads(1)

RNG = np.random.default_rng(11)


def _conv_fields(padding, multiplier):
    return {
        "stride": (1, 1),
        "padding": padding,
        "dilation": (1, 1),
        "groups": 1,
        "acc_bits": 32,
        "pre_shift": -1,
        "multiplier": multiplier,
        "shift": np.full(multiplier.size, 40, np.int64),
        "rounding": numerics.HALF_EVEN,
        "clip": (-128, 127),
        "axis": 3,
    }


@pytest.mark.parametrize("padding", [(1, 1, 1, 1), (1, 1, 0, 1)])
def test_a_bound_conv_equals_the_kernel_run_after_run(padding):
    # 128 input channels of 3x3: the sums of extreme codes pass 2**24, where
    # oneDNN's float32 may round and the exact path must take over.
    c, o, h = 128, 32, 20  # above oneDNN's 8M multiply-adds
    w = RNG.integers(-128, 128, (o, 3, 3, c)).astype(np.int8)
    w[0] = 127  # with inputs of 127: sums of 127 * 127 * 1152 > 2**24
    bias = RNG.integers(-1000, 1000, o).astype(np.int32)
    multiplier = RNG.integers(2**29, 2**30, o).astype(np.int64)
    t, lf, b, r = padding
    out = ((1, h + t + b - 2, h + lf + r - 2, o), np.dtype(np.int8))
    f = npu_kernels.prepare(
        "conv",
        _conv_fields(padding, multiplier),
        out,
        [
            ((1, h, h, c), np.dtype(np.int8), None),
            (w.shape, w.dtype, w),
            (o, bias.dtype, bias),
        ],
    )
    assert "_fused" in f
    x = np.zeros((1, h, h, c), np.int8)  # the simulator's buffers
    into = np.zeros(out[0], np.int8)
    run = npu_kernels.bind("conv", f, out, [x, w, bias], into)
    if run is None:  # no exact oneDNN int8 conv on this CPU: the kernel itself
        assert not kernels._onednn_exact()
        run = lambda: npu_kernels.conv(f, out, x, w, bias, into=into)  # noqa: E731
    for value in [RNG.integers(-128, 128, x.shape), 127, -128]:
        x[...] = value
        run()
        acc = integer_ops.numpy_conv2d(
            x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), (1, 1), padding, (1, 1), 1
        )
        acc = acc + bias.reshape(1, -1, 1, 1)
        want = numerics.requantize(
            acc, multiplier, f["shift"], 0, -128, 127, 1, numerics.HALF_EVEN
        ).transpose(0, 2, 3, 1)
        np.testing.assert_array_equal(into, want)
        kernel = npu_kernels.conv(f, out, x, w, bias)
        np.testing.assert_array_equal(kernel, want)
    assert np.abs(acc).max() >= 2**24  # the exact path ran


def test_a_bound_eltwise_equals_the_kernel_run_after_run():
    shape = (1, 5, 6, 8)
    out = (shape, np.dtype(np.int8))
    f = {
        "kind": "add",
        "in_multiplier": (1 << 30, 3 << 28),
        "in_shift": (20, 21),
        "acc_bits": 32,
        "pre_shift": -1,
        "multiplier": np.array([1 << 30]),
        "shift": np.array([32]),
        "rounding": numerics.HALF_EVEN,
        "clip": (0, 127),
        "axis": 3,
    }
    operand = (shape, np.dtype(np.int8), None)
    f = npu_kernels.prepare("eltwise", f, out, [operand, operand])
    a, b, into = (np.zeros(shape, np.int8) for _ in range(3))
    run = npu_kernels.bind("eltwise", f, out, [a, b], into)
    if requantizer.loops() is None:  # HBIR_JIT=0: the kernel runs as it is
        assert run is None
        return
    plain = {k: v for k, v in f.items() if not k.startswith("_")}
    for _ in range(3):
        a[...] = RNG.integers(-128, 128, shape)
        b[...] = RNG.integers(-128, 128, shape)
        run()
        np.testing.assert_array_equal(into, npu_kernels.eltwise(plain, out, a, b))
    # strided buffers are not bound (the kernel handles them as it did)
    wide = np.zeros(shape[:3] + (16,), np.int8)[..., ::2]
    assert npu_kernels.bind("eltwise", f, out, [wide, b], into) is None


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_a_bound_max_pool_equals_the_kernel_run_after_run(ceil_mode):
    shape, clip = (1, 9, 10, 16), (-128, 127)
    f = {
        "kind": "max",
        "kernel": (3, 3),
        "stride": (2, 2),
        "padding": (1, 1, 1, 1),
        "dilation": (1, 1),
        "ceil_mode": ceil_mode,
        "count_include_pad": True,
        "acc_bits": 8,
        "pre_shift": -1,
        "multiplier": None,
        "shift": None,
        "rounding": numerics.HALF_EVEN,
        "clip": clip,
        "axis": 3,
    }
    oh, ow = integer_ops.pool_sizes(
        shape[1:3], (3, 3), (2, 2), (1,) * 4, (1, 1), ceil_mode
    )
    out = ((1, oh, ow, 16), np.dtype(np.int8))
    f = npu_kernels.prepare("pool", f, out, [(shape, np.dtype(np.int8), None)])
    x, into = np.zeros(shape, np.int8), np.zeros(out[0], np.int8)
    run = npu_kernels.bind("pool", f, out, [x], into)
    if requantizer.loops() is None:  # HBIR_JIT=0: the kernel runs as it is
        assert run is None
        return
    for _ in range(3):
        x[...] = RNG.integers(-128, 128, shape)
        run()
        np.testing.assert_array_equal(into, npu_kernels.pool(f, out, x))
    relu = dict(f, clip=(0, 127))  # a clamp that changes codes: not bound
    assert npu_kernels.bind("pool", relu, out, [x], into) is None
