"""The reference interpreter, one op at a time, against independent torch / numpy.

Float ops must equal the torch call a model makes, bit for bit; integer ops must
equal explicit int64 numpy math (or exact rationals) with saturation.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from xdsl.dialects import func
from xdsl.parser import Parser

from hbir.dialects import make_context
from hbir.runtime import numerics, op_table
from hbir.runtime.interpreter import InterpreterError, run_function

HALF = Fraction(1, 2)
I8_MIN, I8_MAX = -128, 127
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def parse_func(text: str) -> func.FuncOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return next(op for op in module.ops if isinstance(op, func.FuncOp))


def run(text: str, *inputs: np.ndarray, **kwargs) -> list[np.ndarray]:
    return run_function(parse_func(text), list(inputs), **kwargs)


def one_op(params: str, op: str, result: str) -> str:
    """A function whose body is ``%y = <op>`` and which returns ``%y``."""
    return (
        f"func.func @forward({params}) -> {result} {{\n"
        f"  %y = {op}\n"
        f"  func.return %y : {result}\n"
        "}\n"
    )


def run_one(params: str, op: str, result: str, *inputs: np.ndarray, **kw):
    (y,) = run(one_op(params, op, result), *inputs, **kw)
    return y


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(x)


def assert_bits(got: np.ndarray, ref) -> None:
    """Equal bit for bit, same dtype and shape."""
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert got.dtype == ref.dtype, (got.dtype, ref.dtype)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    as_bytes = [np.ascontiguousarray(a).view(np.uint8) for a in (got, ref)]
    np.testing.assert_array_equal(*as_bytes)


def randn(*shape, seed=0, scale=3.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(
        np.float32
    )


def randint(lo, hi, shape, dtype, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(lo, hi + 1, shape).astype(dtype)


def set_params(module: nn.Module, **arrays: np.ndarray) -> nn.Module:
    with torch.no_grad():
        for name, value in arrays.items():
            getattr(module, name).copy_(t(value))
    return module


# ------------------------------------------------------------------ constant


@pytest.mark.parametrize(
    "literal, ty, expect",
    [
        (
            "dense<[[1.5, -2.0], [0.25, 3.0]]>",
            "2x2xf32",
            np.array([[1.5, -2], [0.25, 3]]),
        ),
        ("dense<7.0>", "2x3xf32", np.full((2, 3), 7.0, np.float32)),
        ("dense<[-128, 0, 127]>", "3xsi8", np.array([-128, 0, 127], np.int8)),
        ("dense<[200, 3]>", "2xui8", np.array([200, 3], np.uint8)),
        ("dense<[-70000, 5]>", "2xsi32", np.array([-70000, 5], np.int32)),
        ("dense<-5>", "4xi16", np.full(4, -5, np.int16)),
        ("dense<[0.5, -1.25]>", "2xf16", np.array([0.5, -1.25], np.float16)),
        ("dense<[1.0, 3.0e+38]>", "2xbf16", np.array([1.0, 2.9908e38], np.float32)),
    ],
)
def test_constant(literal, ty, expect):
    text = one_op("", f"hbir.constant {literal} : tensor<{ty}>", f"tensor<{ty}>")
    (y,) = run(text)
    if ty.endswith("bf16"):  # carried as float32 holding the bf16 value
        expect = t(np.array([1.0, 3.0e38], np.float32)).bfloat16().float().numpy()
    assert_bits(y, np.asarray(expect, dtype=y.dtype))
    assert y.flags.writeable


# ------------------------------------------------------------------ float unary

UNARY = [
    ("hbir.neg", "", lambda x: -x),
    ("hbir.abs", "", torch.abs),
    ("hbir.relu", "", nn.ReLU()),
    ("hbir.clip", "{min = 0.0 : f64, max = 6.0 : f64}", F.relu6),
    (
        "hbir.clip",
        "{min = -1.5 : f64, max = 2.5 : f64}",
        lambda x: F.hardtanh(x, -1.5, 2.5),
    ),
    ("hbir.leaky_relu", "{slope = 0.1 : f64}", nn.LeakyReLU(0.1)),
    ("hbir.sigmoid", "", torch.sigmoid),
    ("hbir.tanh", "", nn.Tanh()),
    ("hbir.exp", "", torch.exp),
    ("hbir.log", "", torch.log),
    ("hbir.sqrt", "", torch.sqrt),
    ("hbir.rsqrt", "", torch.rsqrt),
    ("hbir.reciprocal", "", lambda x: 1 / x),
    ("hbir.sin", "", torch.sin),
    ("hbir.cos", "", torch.cos),
    ("hbir.gelu", '{approximate = "none"}', nn.GELU()),
    ("hbir.gelu", '{approximate = "tanh"}', nn.GELU(approximate="tanh")),
    ("hbir.silu", "", nn.SiLU()),
    ("hbir.hardsigmoid", "", nn.Hardsigmoid()),
    ("hbir.hardswish", "", nn.Hardswish()),
]


@pytest.mark.parametrize(
    "name, attrs, ref", UNARY, ids=[u[0] + u[1][:12] for u in UNARY]
)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_float_unary(name, attrs, ref, dtype):
    x = randn(2, 3, 4, 5)
    if name in ("hbir.log", "hbir.sqrt", "hbir.rsqrt"):
        x = np.abs(x) + np.float32(0.01)
    x = x.astype(np.float16 if dtype == "f16" else np.float32)
    ty = f"tensor<2x3x4x5x{dtype}>"
    y = run_one(f"%x: {ty}", f"{name} %x {attrs} : {ty}", ty, x)
    assert_bits(y, _f16_reference(name, ref, t(x)))


# the hbir names of the ops with an fp16 form
FP16_HBIR = {op_table.BY_OP[op].hbir for op in op_table.FP16_OPS}


def _f16_reference(name: str, ref, *xs: torch.Tensor) -> torch.Tensor:
    """An fp16 op on f16 values: its float32 kernel on the widened values,
    rounded once to binary16 (docs/quantization.md, fp16); any other op: torch's
    own kernel for the dtype."""
    if name in FP16_HBIR and xs[0].dtype == torch.float16:
        return ref(*(x.float() for x in xs)).half()
    return ref(*xs)


# ------------------------------------------------------------------ float binary

BINARY = [
    ("hbir.add", lambda a, b: a + b),
    ("hbir.sub", lambda a, b: a - b),
    ("hbir.mul", lambda a, b: a * b),
    ("hbir.div", lambda a, b: a / b),
    ("hbir.maximum", torch.maximum),
    ("hbir.minimum", torch.minimum),
]


@pytest.mark.parametrize("name, ref", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("dtype", ["f32", "f16", "f64"])
def test_float_binary_broadcast(name, ref, dtype):
    np_dtype = {"f32": np.float32, "f16": np.float16, "f64": np.float64}[dtype]
    a, b = randn(2, 3, 4, seed=1).astype(np_dtype), randn(3, 1, seed=2).astype(np_dtype)
    ta, tb, ty = (
        f"tensor<2x3x4x{dtype}>",
        f"tensor<3x1x{dtype}>",
        f"tensor<2x3x4x{dtype}>",
    )
    y = run_one(
        f"%a: {ta}, %b: {tb}", f"{name} %a, %b : ({ta}, {tb}) -> {ty}", ty, a, b
    )
    assert_bits(y, _f16_reference(name, ref, t(a), t(b)))


def test_bf16_add_matches_torch_bfloat16():
    a, b = randn(64, seed=1), randn(64, seed=2)
    ta, tb = t(a).bfloat16(), t(b).bfloat16()
    ty = "tensor<64xbf16>"
    y = run_one(
        f"%a: {ty}, %b: {ty}", f"hbir.add %a, %b : ({ty}, {ty}) -> {ty}", ty, a, b
    )
    assert_bits(y, (ta + tb).float())


# ------------------------------------------------------------------ integer elementwise


def all_si8_pairs():
    codes = np.arange(I8_MIN, I8_MAX + 1, dtype=np.int8)
    return codes.reshape(256, 1), codes.reshape(1, 256)


INT_BINARY = [
    ("hbir.add", lambda a, b: a + b),
    ("hbir.sub", lambda a, b: a - b),
    ("hbir.mul", lambda a, b: a * b),
    ("hbir.maximum", np.maximum),
    ("hbir.minimum", np.minimum),
]


@pytest.mark.parametrize("name, ref", INT_BINARY, ids=[b[0] for b in INT_BINARY])
def test_int_binary_all_si8_pairs_saturate(name, ref):
    a, b = all_si8_pairs()
    ta, tb, ty = "tensor<256x1xsi8>", "tensor<1x256xsi8>", "tensor<256x256xsi8>"
    y = run_one(
        f"%a: {ta}, %b: {tb}", f"{name} %a, %b : ({ta}, {tb}) -> {ty}", ty, a, b
    )
    expect = np.clip(ref(a.astype(np.int64), b.astype(np.int64)), I8_MIN, I8_MAX)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, expect)


def test_int_add_si32_saturation_edges():
    a = np.array([I32_MAX, I32_MIN, 5, I32_MAX, -(2**30)], np.int32)
    b = np.array([1, -1, -7, I32_MIN, -(2**30) - 1], np.int32)
    ty = "tensor<5xsi32>"
    y = run_one(
        f"%a: {ty}, %b: {ty}", f"hbir.add %a, %b : ({ty}, {ty}) -> {ty}", ty, a, b
    )
    expect = [
        min(max(int(p) + int(q), I32_MIN), I32_MAX) for p, q in zip(a, b, strict=True)
    ]
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expect)


@pytest.mark.parametrize(
    "name, attrs, ref",
    [
        ("hbir.neg", "", lambda v: -v),
        ("hbir.abs", "", abs),
        ("hbir.relu", "", lambda v: max(v, 0)),
        # integer clip bounds round half-to-even: -3.5 -> -4, 2.5 -> 2
        (
            "hbir.clip",
            "{min = -3.5 : f64, max = 2.5 : f64}",
            lambda v: min(max(v, -4), 2),
        ),
        ("hbir.clip", "{min = -1000.0 : f64, max = 1000.0 : f64}", lambda v: v),
    ],
)
def test_int_unary_all_si8_codes(name, attrs, ref):
    x = np.arange(I8_MIN, I8_MAX + 1, dtype=np.int8)
    ty = "tensor<256xsi8>"
    y = run_one(f"%x: {ty}", f"{name} %x {attrs} : {ty}", ty, x)
    expect = [min(max(ref(int(v)), I8_MIN), I8_MAX) for v in x]
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, expect)


# ------------------------------------------------------------------ normalisation


@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_softmax(dim):
    x = randn(3, 5, 7)
    ty = "tensor<3x5x7xf32>"
    y = run_one(
        f"%x: {ty}", f"hbir.softmax %x {{dim = {dim} : i64}} : {ty} -> {ty}", ty, x
    )
    assert_bits(y, nn.Softmax(dim=dim)(t(x)))


@pytest.mark.parametrize("affine", ["both", "none", "bias"])
def test_layer_norm(affine):
    x, g, b = randn(2, 3, 8), randn(3, 8, seed=1), randn(3, 8, seed=2)
    ty, tp = "tensor<2x3x8xf32>", "tensor<3x8xf32>"
    params, operands, inputs = f"%x: {ty}", "", [x]
    if affine in ("both",):
        params += f", %g: {tp}"
        operands += f" weight(%g : {tp})"
        inputs.append(g)
    if affine in ("both", "bias"):
        params += f", %b: {tp}"
        operands += f" bias(%b : {tp})"
        inputs.append(b)
    attrs = "{normalized_shape = array<i64: 3, 8>, eps = 1.0e-03 : f64}"
    y = run_one(
        params, f"hbir.layer_norm %x{operands} {attrs} : {ty} -> {ty}", ty, *inputs
    )
    if affine == "both":
        ref = set_params(nn.LayerNorm([3, 8], eps=1e-3), weight=g, bias=b)(t(x))
    elif affine == "none":
        ref = nn.LayerNorm([3, 8], eps=1e-3, elementwise_affine=False)(t(x))
    else:
        ref = F.layer_norm(t(x), [3, 8], None, t(b), 1e-3)
    assert_bits(y, ref)


# ------------------------------------------------------------------ reductions


@pytest.mark.parametrize(
    "name, dims, keepdim, out, ref",
    [
        ("hbir.reduce_sum", "1, 2", "false", "2x5", lambda x: x.sum(dim=(1, 2))),
        ("hbir.reduce_sum", "-1", "true", "2x3x4x1", lambda x: x.sum(-1, keepdim=True)),
        (
            "hbir.reduce_mean",
            "-1",
            "true",
            "2x3x4x1",
            lambda x: x.mean(-1, keepdim=True),
        ),
        ("hbir.reduce_mean", "2, 3", "false", "2x3", lambda x: torch.mean(x, (2, 3))),
        ("hbir.reduce_max", "0", "false", "3x4x5", lambda x: x.amax(0)),
        ("hbir.reduce_max", "1, 3", "true", "2x1x4x1", lambda x: x.amax((1, 3), True)),
    ],
)
def test_float_reduce(name, dims, keepdim, out, ref):
    x = randn(2, 3, 4, 5)
    ti, to = "tensor<2x3x4x5xf32>", f"tensor<{out}xf32>"
    attrs = f"{{dims = array<i64: {dims}>, keepdim = {keepdim}}}"
    y = run_one(f"%x: {ti}", f"{name} %x {attrs} : {ti} -> {to}", to, x)
    assert_bits(y, ref(t(x)))


def test_reduce_sum_si32_saturates():
    x = np.full((2, 4), 2**30, np.int32)
    x[1] = [-(2**30), -(2**30), -(2**30), 5]
    ti, to = "tensor<2x4xsi32>", "tensor<2xsi32>"
    y = run_one(
        f"%x: {ti}",
        f"hbir.reduce_sum %x {{dims = array<i64: 1>}} : {ti} -> {to}",
        to,
        x,
    )
    expect = [min(max(sum(map(int, row)), I32_MIN), I32_MAX) for row in x]
    np.testing.assert_array_equal(y, expect)
    assert y[0] == I32_MAX and y.dtype == np.int32


def test_reduce_mean_si8_rounds_half_to_even_once():
    x = randint(-128, 127, (6, 4), np.int8, seed=3)
    x[0] = [1, 2, 0, 0]  # 3 / 4 = 0.75 -> 1
    x[1] = [1, 1, 0, 0]  # 2 / 4 = 0.5 -> 0 (tie to even)
    x[2] = [3, 3, 0, 0]  # 6 / 4 = 1.5 -> 2 (tie to even)
    x[3] = [-3, -3, 0, 0]  # -1.5 -> -2
    ti, to = "tensor<6x4xsi8>", "tensor<6xsi8>"
    y = run_one(
        f"%x: {ti}",
        f"hbir.reduce_mean %x {{dims = array<i64: 1>}} : {ti} -> {to}",
        to,
        x,
    )
    expect = [round(Fraction(sum(map(int, row)), 4)) for row in x]
    np.testing.assert_array_equal(y, expect)
    assert list(y[:4]) == [1, 0, 2, -2]


def test_reduce_max_si8():
    x = randint(-128, 127, (3, 5), np.int8, seed=4)
    ti, to = "tensor<3x5xsi8>", "tensor<1x5xsi8>"
    attrs = "{dims = array<i64: 0>, keepdim = true}"
    y = run_one(f"%x: {ti}", f"hbir.reduce_max %x {attrs} : {ti} -> {to}", to, x)
    expect = [[max(int(v) for v in col) for col in x.T]]
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, expect)


# ------------------------------------------------------------------ conv / gemm


def shape_str(shape) -> str:
    return "x".join(map(str, shape))


def conv2d_text(x_shape, w_shape, out_shape, attrs, bias, el="f32", out_el=None):
    out_el = out_el or el
    tx, tw = f"tensor<{shape_str(x_shape)}x{el}>", f"tensor<{shape_str(w_shape)}x{el}>"
    to = f"tensor<{shape_str(out_shape)}x{out_el}>"
    params, types = f"%x: {tx}, %w: {tw}", f"{tx}, {tw}"
    operand = ""
    if bias:
        channels = out_shape[1]
        tb = f"tensor<{channels}x{out_el}>"
        params += f", %b: {tb}"
        types += f", {tb}"
        operand = " bias(%b)"
    name = "conv_transpose2d" if "output_padding" in attrs else "conv2d"
    return one_op(
        params, f"hbir.{name} %x, %w{operand} {attrs} : ({types}) -> {to}", to
    )


def conv_attrs(stride, padding, dilation, groups) -> str:
    return (
        f"{{stride = array<i64: {stride[0]}, {stride[1]}>, "
        f"padding = array<i64: {padding[0]}, {padding[1]}>, "
        f"dilation = array<i64: {dilation[0]}, {dilation[1]}>, groups = {groups} : i64}}"
    )


CONV_CASES = [
    # x shape, out channels, kernel, stride, padding, dilation, groups, bias
    ((1, 3, 8, 8), 4, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
    ((2, 4, 9, 7), 6, (3, 2), (2, 1), (1, 0), (1, 1), 2, False),
    ((1, 4, 10, 10), 4, (3, 3), (1, 2), (2, 1), (2, 1), 4, True),
    ((1, 8, 5, 5), 16, (1, 1), (1, 1), (0, 0), (1, 1), 1, True),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_float_conv2d(case):
    x_shape, out_c, k, stride, padding, dilation, groups, bias = case
    conv = nn.Conv2d(x_shape[1], out_c, k, stride, padding, dilation, groups, bias)
    x = randn(*x_shape)
    w, b = randn(*conv.weight.shape, seed=1), randn(out_c, seed=2)
    set_params(conv, weight=w, **({"bias": b} if bias else {}))
    ref = conv(t(x))
    attrs = conv_attrs(stride, padding, dilation, groups)
    text = conv2d_text(x_shape, w.shape, ref.shape, attrs, bias)
    (y,) = run(text, x, w, *([b] if bias else []))
    assert_bits(y, ref)


def conv2d_int64(x, w, b, stride, padding, dilation, groups):
    """Direct convolution in int64: one shifted slice per kernel tap."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    w = w.astype(np.int64)
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    y = np.zeros((n, o, oh, ow), np.int64)
    for g in range(groups):
        xs, ws = x[:, g * cg : (g + 1) * cg], w[g * og : (g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[
                    :,
                    :,
                    i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                    j * dw : j * dw + sw * (ow - 1) + 1 : sw,
                ]
                y[:, g * og : (g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, ws[..., i, j]
                )
    return y if b is None else y + b.astype(np.int64).reshape(1, -1, 1, 1)


@pytest.mark.parametrize("case", CONV_CASES)
def test_int_conv2d_si8_matches_int64(case):
    x_shape, out_c, k, stride, padding, dilation, groups, bias = case
    x = randint(-128, 127, x_shape, np.int8, seed=1)
    w = randint(-128, 127, (out_c, x_shape[1] // groups, *k), np.int8, seed=2)
    b = randint(-(2**20), 2**20, (out_c,), np.int32, seed=3)
    expect = conv2d_int64(x, w, b if bias else None, stride, padding, dilation, groups)
    text = conv2d_text(
        x_shape,
        w.shape,
        expect.shape,
        conv_attrs(stride, padding, dilation, groups),
        bias,
        "si8",
        "si32",
    )
    (y,) = run(text, x, w, *([b] if bias else []))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.clip(expect, I32_MIN, I32_MAX))


def test_int_conv2d_si16_saturates_to_si32():
    x = np.full((1, 3, 4, 4), 32767, np.int16)
    x[0, :, 2:] = -32768
    w = np.full((2, 3, 3, 3), 32767, np.int16)
    w[1] = -32768
    b = np.array([I32_MAX, 7], np.int32)
    expect = conv2d_int64(x, w, b, (1, 1), (1, 1), (1, 1), 1)
    assert expect.max() > I32_MAX and expect.min() < I32_MIN  # both edges are hit
    attrs = conv_attrs((1, 1), (1, 1), (1, 1), 1)
    (y,) = run(
        conv2d_text(x.shape, w.shape, expect.shape, attrs, True, "si16", "si32"),
        x,
        w,
        b,
    )
    np.testing.assert_array_equal(y, np.clip(expect, I32_MIN, I32_MAX))


def conv_t_attrs(stride, padding, output_padding, dilation, groups) -> str:
    return (
        f"{{stride = array<i64: {stride[0]}, {stride[1]}>, "
        f"padding = array<i64: {padding[0]}, {padding[1]}>, "
        f"output_padding = array<i64: {output_padding[0]}, {output_padding[1]}>, "
        f"dilation = array<i64: {dilation[0]}, {dilation[1]}>, groups = {groups} : i64}}"
    )


CONV_T_CASES = [
    # x shape, out channels, kernel, stride, padding, output_padding, dilation, groups, bias
    ((1, 4, 4, 4), 2, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 1, False),
    ((2, 4, 5, 3), 6, (3, 3), (2, 1), (1, 1), (1, 0), (1, 1), 2, True),
    ((1, 3, 4, 4), 2, (3, 2), (2, 2), (1, 0), (0, 1), (2, 1), 1, True),
]


@pytest.mark.parametrize("case", CONV_T_CASES)
def test_float_conv_transpose2d(case):
    x_shape, out_c, k, stride, padding, out_pad, dilation, groups, bias = case
    conv = nn.ConvTranspose2d(
        x_shape[1], out_c, k, stride, padding, out_pad, groups, bias, dilation
    )
    x = randn(*x_shape)
    w, b = randn(*conv.weight.shape, seed=1), randn(out_c, seed=2)
    set_params(conv, weight=w, **({"bias": b} if bias else {}))
    ref = conv(t(x))
    attrs = conv_t_attrs(stride, padding, out_pad, dilation, groups)
    (y,) = run(
        conv2d_text(x_shape, w.shape, ref.shape, attrs, bias),
        x,
        w,
        *([b] if bias else []),
    )
    assert_bits(y, ref)


def conv_transpose2d_int64(x, w, stride, padding, output_padding, dilation):
    """Transposed convolution (groups = 1) as a scatter of every input tap, int64."""
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    n, _, h, wd = x.shape
    _, o, kh, kw = w.shape
    full = np.zeros(
        (
            n,
            o,
            (h - 1) * sh + dh * (kh - 1) + 1 + oph,
            (wd - 1) * sw + dw * (kw - 1) + 1 + opw,
        ),
        np.int64,
    )
    for i in range(kh):
        for j in range(kw):
            tap = np.einsum(
                "nchw,co->nohw", x.astype(np.int64), w[:, :, i, j].astype(np.int64)
            )
            full[
                :,
                :,
                i * dh : i * dh + sh * (h - 1) + 1 : sh,
                j * dw : j * dw + sw * (wd - 1) + 1 : sw,
            ] += tap
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    return full[:, :, ph : ph + oh, pw : pw + ow]


@pytest.mark.parametrize("case", [c for c in CONV_T_CASES if c[7] == 1])
def test_int_conv_transpose2d_matches_int64(case):
    x_shape, out_c, k, stride, padding, out_pad, dilation, groups, bias = case
    x = randint(-128, 127, x_shape, np.int8, seed=1)
    w = randint(-128, 127, (x_shape[1], out_c, *k), np.int8, seed=2)
    b = randint(-1000, 1000, (out_c,), np.int32, seed=3)
    expect = conv_transpose2d_int64(x, w, stride, padding, out_pad, dilation)
    if bias:
        expect = expect + b.astype(np.int64).reshape(1, -1, 1, 1)
    attrs = conv_t_attrs(stride, padding, out_pad, dilation, groups)
    text = conv2d_text(x_shape, w.shape, expect.shape, attrs, bias, "si8", "si32")
    (y,) = run(text, x, w, *([b] if bias else []))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expect)


@pytest.mark.parametrize("bias", [True, False])
def test_float_linear(bias):
    x, w, b = randn(2, 3, 16), randn(5, 16, seed=1), randn(5, seed=2)
    linear = set_params(
        nn.Linear(16, 5, bias), weight=w, **({"bias": b} if bias else {})
    )
    tx, tw, tb, to = (
        "tensor<2x3x16xf32>",
        "tensor<5x16xf32>",
        "tensor<5xf32>",
        "tensor<2x3x5xf32>",
    )
    if bias:
        op = f"hbir.linear %x, %w bias(%b) : ({tx}, {tw}, {tb}) -> {to}"
        y = run_one(f"%x: {tx}, %w: {tw}, %b: {tb}", op, to, x, w, b)
    else:
        y = run_one(
            f"%x: {tx}, %w: {tw}",
            f"hbir.linear %x, %w : ({tx}, {tw}) -> {to}",
            to,
            x,
            w,
        )
    assert_bits(y, linear(t(x)))


def test_int_linear_matches_int64_and_saturates():
    x = randint(-128, 127, (4, 64), np.int8, seed=1)
    w = randint(-128, 127, (6, 64), np.int8, seed=2)
    b = randint(-(2**24), 2**24, (6,), np.int32, seed=3)
    x[0], w[0], w[1] = 127, 127, -128  # row 0: large positive, then negative sums
    b[0], b[1] = I32_MAX, I32_MIN
    expect = x.astype(np.int64) @ w.astype(np.int64).T + b.astype(np.int64)
    assert expect.max() > I32_MAX and expect.min() < I32_MIN
    tx, tw, tb, to = (
        "tensor<4x64xsi8>",
        "tensor<6x64xsi8>",
        "tensor<6xsi32>",
        "tensor<4x6xsi32>",
    )
    op = f"hbir.linear %x, %w bias(%b) : ({tx}, {tw}, {tb}) -> {to}"
    y = run_one(f"%x: {tx}, %w: {tw}, %b: {tb}", op, to, x, w, b)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.clip(expect, I32_MIN, I32_MAX))


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((2, 4, 8), (8, 3)), ((2, 1, 4, 8), (3, 8, 5)), ((5, 7), (7, 2))],
)
def test_matmul_float_and_int(a_shape, b_shape):
    out = torch.matmul(torch.zeros(a_shape), torch.zeros(b_shape)).shape
    a, b = randn(*a_shape, seed=1), randn(*b_shape, seed=2)
    ta, tb = f"tensor<{shape_str(a_shape)}xf32>", f"tensor<{shape_str(b_shape)}xf32>"
    to = f"tensor<{shape_str(out)}xf32>"
    text = one_op(
        f"%a: {ta}, %b: {tb}", f"hbir.matmul %a, %b : ({ta}, {tb}) -> {to}", to
    )
    assert_bits(run(text, a, b)[0], torch.matmul(t(a), t(b)))
    qa = randint(-128, 127, a_shape, np.int8, seed=3)
    qb = randint(-128, 127, b_shape, np.int8, seed=4)
    (y,) = run(
        text.replace("xf32>", "xsi8>").replace(
            f"{shape_str(out)}xsi8", f"{shape_str(out)}xsi32"
        ),
        qa,
        qb,
    )
    assert y.dtype == np.int32
    np.testing.assert_array_equal(
        y, np.matmul(qa.astype(np.int64), qb.astype(np.int64))
    )


# ------------------------------------------------------------------ pooling


def pool_text(name, x_shape, out_shape, attrs, el="f32"):
    ti = f"tensor<{shape_str(x_shape)}x{el}>"
    to = f"tensor<{shape_str(out_shape)}x{el}>"
    return one_op(f"%x: {ti}", f"hbir.{name} %x {attrs} : {ti} -> {to}", to)


MAX_POOL_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    ((2, 2), (2, 2), (0, 0), (1, 1), False),
    ((3, 3), (2, 2), (1, 1), (1, 1), True),
    ((3, 2), (2, 1), (1, 0), (2, 1), False),
]


def pool_attrs(kernel, stride, padding, ceil_mode, extra=""):
    return (
        f"{{kernel = array<i64: {kernel[0]}, {kernel[1]}>, "
        f"stride = array<i64: {stride[0]}, {stride[1]}>, "
        f"padding = array<i64: {padding[0]}, {padding[1]}>, "
        f"ceil_mode = {'true' if ceil_mode else 'false'}{extra}}}"
    )


@pytest.mark.parametrize("case", MAX_POOL_CASES)
def test_max_pool2d_float_and_int(case):
    kernel, stride, padding, dilation, ceil = case
    pool = nn.MaxPool2d(kernel, stride, padding, dilation, ceil_mode=ceil)
    x = randn(2, 3, 9, 8)
    ref = pool(t(x))
    extra = f", dilation = array<i64: {dilation[0]}, {dilation[1]}>"
    attrs = pool_attrs(kernel, stride, padding, ceil, extra)
    assert_bits(run(pool_text("max_pool2d", x.shape, ref.shape, attrs), x)[0], ref)
    q = randint(-128, 127, x.shape, np.int8)
    (y,) = run(pool_text("max_pool2d", x.shape, ref.shape, attrs, "si8"), q)
    expect = pool(t(q.astype(np.float32))).numpy()  # max is exact in float32
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, expect)


AVG_POOL_CASES = [
    # kernel, stride, padding, ceil_mode, count_include_pad
    ((2, 2), (2, 2), (0, 0), False, True),
    ((3, 3), (2, 2), (1, 1), True, True),
    ((3, 3), (2, 2), (1, 1), True, False),
    ((3, 2), (2, 1), (1, 1), False, False),
]


@pytest.mark.parametrize("case", AVG_POOL_CASES)
def test_avg_pool2d_float(case):
    kernel, stride, padding, ceil, include = case
    pool = nn.AvgPool2d(kernel, stride, padding, ceil, include)
    x = randn(2, 3, 9, 8)
    ref = pool(t(x))
    attrs = pool_attrs(
        kernel, stride, padding, ceil, f", count_include_pad = {str(include).lower()}"
    )
    assert_bits(run(pool_text("avg_pool2d", x.shape, ref.shape, attrs), x)[0], ref)


@pytest.mark.parametrize("case", AVG_POOL_CASES)
def test_avg_pool2d_int_one_half_even_division(case):
    """Reference: torch's float64 average (exact sum / count, correctly rounded, so a
    tie k + 1/2 is represented exactly) rounded half-to-even by np.rint."""
    kernel, stride, padding, ceil, include = case
    pool = nn.AvgPool2d(kernel, stride, padding, ceil, include)
    q = randint(-128, 127, (2, 3, 9, 8), np.int8, seed=5)
    q[0, 0] = np.arange(72).reshape(9, 8) % 4 - 2  # small values: many exact ties
    mean = pool(t(q.astype(np.float64))).numpy()
    assert np.any(mean - np.floor(mean) == 0.5)
    attrs = pool_attrs(
        kernel, stride, padding, ceil, f", count_include_pad = {str(include).lower()}"
    )
    (y,) = run(pool_text("avg_pool2d", q.shape, mean.shape, attrs, "si8"), q)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, np.rint(mean))


def test_global_avg_pool2d():
    x = randn(2, 5, 7, 6)
    ti, to = "tensor<2x5x7x6xf32>", "tensor<2x5x1x1xf32>"
    text = one_op(f"%x: {ti}", f"hbir.global_avg_pool2d %x : {ti} -> {to}", to)
    (y,) = run(text, x)
    assert_bits(y, nn.AdaptiveAvgPool2d(1)(t(x)))
    assert_bits(y, t(x).mean((2, 3), keepdim=True))  # the other common spelling
    q = randint(-128, 127, (2, 5, 7, 6), np.int8, seed=6)
    (yq,) = run(text.replace("xf32>", "xsi8>"), q)
    expect = [
        [round(Fraction(int(q[n, c].astype(np.int64).sum()), 42)) for c in range(5)]
        for n in range(2)
    ]
    np.testing.assert_array_equal(yq.reshape(2, 5), expect)


# ------------------------------------------------------------------ resize


RESIZE_CASES = [
    ((8, 8), "nearest", False),
    ((5, 11), "nearest", False),
    ((16, 16), "bilinear", False),
    ((7, 13), "bilinear", True),
    ((3, 5), "bilinear", False),
]


@pytest.mark.parametrize("size, mode, corners", RESIZE_CASES)
def test_resize2d_float(size, mode, corners):
    x = randn(1, 3, 4, 6)
    attrs = f'{{size = array<i64: {size[0]}, {size[1]}>, mode = "{mode}"'
    attrs += ", align_corners = true}" if corners else "}"
    ti, to = "tensor<1x3x4x6xf32>", f"tensor<1x3x{size[0]}x{size[1]}xf32>"
    y = run_one(f"%x: {ti}", f"hbir.resize2d %x {attrs} : {ti} -> {to}", to, x)
    ac = corners if mode == "bilinear" else None
    assert_bits(y, F.interpolate(t(x), size=size, mode=mode, align_corners=ac))


def test_resize2d_upsample_scale_factor_2_matches_nn_upsample():
    x = randn(1, 2, 5, 3)
    ti, to = "tensor<1x2x5x3xf32>", "tensor<1x2x10x6xf32>"
    attrs = '{size = array<i64: 10, 6>, mode = "bilinear"}'
    y = run_one(f"%x: {ti}", f"hbir.resize2d %x {attrs} : {ti} -> {to}", to, x)
    assert_bits(y, nn.Upsample(scale_factor=2, mode="bilinear")(t(x)))


def test_resize2d_int_nearest_gathers():
    q = randint(-128, 127, (1, 2, 3, 4), np.int8)
    ti, to = "tensor<1x2x3x4xsi8>", "tensor<1x2x7x9xsi8>"
    y = run_one(
        f"%x: {ti}",
        f"hbir.resize2d %x {{size = array<i64: 7, 9>}} : {ti} -> {to}",
        to,
        q,
    )
    rows, cols = np.arange(7) * 3 // 7, np.arange(9) * 4 // 9  # floor(dst * in / out)
    np.testing.assert_array_equal(y, q[:, :, rows][:, :, :, cols])


def bilinear_exact(q, out_h, out_w):
    """Half-pixel bilinear (align_corners=False) in exact rationals."""
    n, c, h, w = q.shape
    y = np.zeros((n, c, out_h, out_w), object)

    def taps(dst, size, out):
        src = max(Fraction(2 * dst + 1, 2) * size / out - HALF, 0)
        i0 = int(src)
        return i0, min(i0 + 1, size - 1), src - i0

    for i in range(out_h):
        r0, r1, fy = taps(i, h, out_h)
        for j in range(out_w):
            c0, c1, fx = taps(j, w, out_w)
            for a in range(n):
                for b in range(c):
                    p = q[a, b].astype(np.int64)
                    top = p[r0, c0] * (1 - fx) + p[r0, c1] * fx
                    bottom = p[r1, c0] * (1 - fx) + p[r1, c1] * fx
                    y[a, b, i, j] = top * (1 - fy) + bottom * fy
    return y


def test_resize2d_int_bilinear_rounds_half_even():
    q = randint(-128, 127, (1, 2, 3, 4), np.int8, seed=7)
    exact = bilinear_exact(q, 6, 8)
    assert any(v.denominator == 2 for v in exact.flat)  # there are exact ties
    ti, to = "tensor<1x2x3x4xsi8>", "tensor<1x2x6x8xsi8>"
    attrs = '{size = array<i64: 6, 8>, mode = "bilinear"}'
    y = run_one(f"%x: {ti}", f"hbir.resize2d %x {attrs} : {ti} -> {to}", to, q)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, np.vectorize(round)(exact).astype(np.int64))


# ------------------------------------------------------------------ data movement


@pytest.mark.parametrize("el, dtype", [("f32", np.float32), ("si8", np.int8)])
def test_concat(el, dtype):
    a, b = randn(1, 2, 3).astype(dtype), randn(1, 4, 3, seed=1).astype(dtype)
    ta, tb, to = f"tensor<1x2x3x{el}>", f"tensor<1x4x3x{el}>", f"tensor<1x6x3x{el}>"
    op = f"hbir.concat %a, %b {{dim = 1 : i64}} : ({ta}, {tb}) -> {to}"
    y = run_one(f"%a: {ta}, %b: {tb}", op, to, a, b)
    assert_bits(y, torch.cat([t(a), t(b)], dim=1))


def test_slice():
    x = randn(4, 9)
    ti, to = "tensor<4x9xf32>", "tensor<2x3xf32>"
    attrs = (
        "{begin = array<i64: -3, 1>, end = array<i64: 3, 100>, step = array<i64: 1, 3>}"
    )
    y = run_one(f"%x: {ti}", f"hbir.slice %x {attrs} : {ti} -> {to}", to, x)
    assert_bits(y, t(x)[-3:3, 1:100:3])


def test_split():
    x = randint(-128, 127, (2, 8), np.int8)
    ti = "tensor<2x8xsi8>"
    text = (
        f"func.func @f(%x: {ti}) -> (tensor<2x3xsi8>, tensor<2x5xsi8>) {{\n"
        f"  %a, %b = hbir.split %x {{sizes = array<i64: 3, 5>, dim = 1 : i64}} : "
        f"({ti}) -> (tensor<2x3xsi8>, tensor<2x5xsi8>)\n"
        "  func.return %a, %b : tensor<2x3xsi8>, tensor<2x5xsi8>\n}\n"
    )
    a, b = run(text, x)
    ra, rb = torch.split(t(x), [3, 5], dim=1)
    assert_bits(a, ra)
    assert_bits(b, rb)


def test_transpose_keeps_torch_strides_for_a_following_reduction():
    """torch sums a permuted view in memory order; a contiguous copy sums differently."""
    x = randn(2, 300, 6, 5)
    ti, tt, tr = "tensor<2x300x6x5xf32>", "tensor<2x6x5x300xf32>", "tensor<60x300xf32>"
    text = (
        f"func.func @f(%x: {ti}) -> ({tr}, tensor<2x6x5xf32>) {{\n"
        f"  %t = hbir.transpose %x {{perm = array<i64: 0, 2, 3, 1>}} : {ti} -> {tt}\n"
        f"  %r = hbir.reshape %t : {tt} -> {tr}\n"
        f"  %s = hbir.reduce_sum %t {{dims = array<i64: 3>}} : {tt} -> tensor<2x6x5xf32>\n"
        f"  func.return %r, %s : {tr}, tensor<2x6x5xf32>\n}}\n"
    )
    r, s = run(text, x)
    permuted = t(x).permute(0, 2, 3, 1)
    assert_bits(r, permuted.reshape(60, 300))
    assert_bits(s, permuted.sum(3))
    assert not torch.equal(permuted.contiguous().sum(3), permuted.sum(3))


def test_pad_float_with_value_and_negative_crop():
    x = randn(2, 3, 4)
    ti, to = "tensor<2x3x4xf32>", "tensor<2x5x3xf32>"
    attrs = (
        "{low = array<i64: 0, 1, -2>, high = array<i64: 0, 1, 1>, value = 0.3 : f64}"
    )
    y = run_one(f"%x: {ti}", f"hbir.pad %x {attrs} : {ti} -> {to}", to, x)
    assert_bits(y, F.pad(t(x), (-2, 1, 1, 1), value=0.3))


def test_pad_int_value():
    q = randint(-128, 127, (2, 3), np.int8)
    ti, to = "tensor<2x3xsi8>", "tensor<3x5xsi8>"
    attrs = "{low = array<i64: 1, 0>, high = array<i64: 0, 2>, value = -5.0 : f64}"
    y = run_one(f"%x: {ti}", f"hbir.pad %x {attrs} : {ti} -> {to}", to, q)
    expect = np.full((3, 5), -5, np.int8)
    expect[1:, :3] = q
    assert_bits(y, expect)


# ------------------------------------------------------------------ cast


def trunc_sat(v: float, lo: int, hi: int) -> int:
    return 0 if v != v else min(max(int(v), lo), hi)  # int() truncates toward zero


@pytest.mark.parametrize(
    "src, dst, x, ref",
    [
        (
            "f32",
            "si8",
            np.array(
                [-1e9, -128.9, -2.7, -0.5, 0.5, 2.7, 127.9, 300.0, np.nan], np.float32
            ),
            lambda x: [trunc_sat(float(v), -128, 127) for v in x],
        ),
        (
            "f32",
            "si32",
            np.array([-3e9, -2.5, 2**31, 1e20, -np.inf, np.inf], np.float32),
            lambda x: [
                trunc_sat(float(v), I32_MIN, I32_MAX)
                if np.isfinite(v)
                else (I32_MIN if v < 0 else I32_MAX)
                for v in x
            ],
        ),
        (
            "f32",
            "si64",
            np.array([-1e30, -(2.0**62), 3.9, 2.0**63, 1e30], np.float32),
            lambda x: [trunc_sat(float(v), -(2**63), 2**63 - 1) for v in x],
        ),
        (
            "si32",
            "si8",
            np.array([I32_MIN, -129, -128, 0, 127, 128, I32_MAX], np.int32),
            lambda x: [min(max(int(v), -128), 127) for v in x],
        ),
        (
            "ui8",
            "si8",
            np.array([0, 127, 128, 255], np.uint8),
            lambda x: [0, 127, 127, 127],
        ),
        ("si8", "f32", np.arange(-128, 128, dtype=np.int8), lambda x: t(x).float()),
        (
            "si32",
            "f32",
            np.array([2**24 + 1, -(2**31)], np.int32),
            lambda x: t(x).float(),
        ),
        ("f32", "f16", randn(100) * 1000, lambda x: t(x).half()),
        ("f32", "bf16", randn(100), lambda x: t(x).bfloat16().float()),
        ("f16", "f32", randn(50).astype(np.float16), lambda x: t(x).float()),
    ],
)
def test_cast(src, dst, x, ref):
    n = x.shape[0]
    ti, to = f"tensor<{n}x{src}>", f"tensor<{n}x{dst}>"
    y = run_one(f"%x: {ti}", f"hbir.cast %x : {ti} -> {to}", to, x)
    expected = ref(x)
    if isinstance(expected, list):
        expected = np.array(expected, dtype=y.dtype)
        assert y.dtype == np.dtype(
            {"si8": np.int8, "si32": np.int32, "si64": np.int64}[dst]
        )
    assert_bits(y, expected)


# ------------------------------------------------------------------ lut


@pytest.mark.parametrize("table_el, dtype", [("si8", np.int8), ("si16", np.int16)])
def test_lut_indexes_table_by_code_plus_128(table_el, dtype):
    info = np.iinfo(dtype)
    table = randint(info.min, info.max, 256, dtype, seed=8)
    literal = "[" + ", ".join(map(str, table)) + "]"
    x = np.arange(-128, 128, dtype=np.int8)[::-1].copy()  # every code, descending
    ti, to = "tensor<256xsi8>", f"tensor<256x{table_el}>"
    attrs = f"{{table = dense<{literal}> : tensor<256x{table_el}>}}"
    y = run_one(f"%x: {ti}", f"hbir.lut %x {attrs} : {ti} -> {to}", to, x)
    assert y.dtype == dtype
    assert y[-1] == table[0] and y[0] == table[255]  # code -128 -> entry 0
    np.testing.assert_array_equal(y, table[::-1])


# ------------------------------------------------------------------ qnt


def test_const_fake_quant_per_tensor_matches_torch():
    x = randn(2, 3, 8, 8, scale=6.0)
    ty = "tensor<2x3x8x8xf32>"
    attrs = "{min = array<f64: -12.8>, max = array<f64: 12.7>, bits = 8 : i64}"
    y = run_one(f"%x: {ty}", f"qnt.const_fake_quant %x {attrs} : {ty}", ty, x)
    scale = np.float32(25.5 / 255)
    assert_bits(
        y, torch.fake_quantize_per_tensor_affine(t(x), float(scale), 0, -128, 127)
    )


def test_const_fake_quant_per_channel_narrow_matches_torch():
    x = randn(2, 3, 4, 4, scale=2.0)
    scales = np.array([0.01, 0.02, 0.005], np.float32)
    lo = ", ".join(str(float(s) * -127) for s in scales.astype(np.float64))
    hi = ", ".join(str(float(s) * 127) for s in scales.astype(np.float64))
    attrs = f"{{min = array<f64: {lo}>, max = array<f64: {hi}>, bits = 8 : i64, narrowRange = true, axis = 1 : i64}}"
    ty = "tensor<2x3x4x4xf32>"
    y = run_one(f"%x: {ty}", f"qnt.const_fake_quant %x {attrs} : {ty}", ty, x)
    ref = torch.fake_quantize_per_channel_affine(
        t(x), t(scales), torch.zeros(3, dtype=torch.int32), 1, -127, 127
    )
    assert_bits(y, ref)
    assert y[:, 0].min() == np.float32(-127) * scales[0]  # narrow: -128 is not used


def test_const_fake_quant_uses_the_model_rounding():
    s = 2.0**-4  # x * (1/s) is exact: the inputs are exact ties
    x = ((np.arange(-6, 6) + 0.5) * s).astype(np.float32)
    ty = "tensor<12xf32>"
    attrs = (
        f"{{min = array<f64: {-128 * s}>, max = array<f64: {127 * s}>, bits = 8 : i64}}"
    )
    text = one_op(f"%x: {ty}", f"qnt.const_fake_quant %x {attrs} : {ty}", ty)
    even = run(text, x)[0]
    up = run(text, x, rounding="half_up")[0]
    k = np.arange(-6, 6)
    np.testing.assert_array_equal(even / s, [round(Fraction(2 * v + 1, 2)) for v in k])
    np.testing.assert_array_equal(up / s, k + 1)  # floor(k + 1/2 + 1/2)
    with pytest.raises(ValueError, match="rounding"):
        run(text, x, rounding="stochastic")


@pytest.mark.parametrize(
    "el, narrow, qmin, qmax",
    [
        ("si8", False, -128, 127),
        ("si8", True, -127, 127),
        ("ui8", False, 0, 255),
        ("si16", False, -32768, 32767),
    ],
)
def test_quantize_dequantize_match_torch_fake_quant(el, narrow, qmin, qmax):
    x = randn(4, 64, scale=20.0)
    x[0, :2] = [-1e6, 1e6]
    zp = 0 if qmin < 0 else 128
    ti, tq = "tensor<4x64xf32>", f"tensor<4x64x{el}>"
    text = (
        f"func.func @f(%x: {ti}) -> ({tq}, {ti}) {{\n"
        f"  %q = qnt.quantize %x {{scales = array<f32: 0.125>, zeros = array<i64: {zp}>, "
        f"narrowRange = {str(narrow).lower()}}} : {ti} -> {tq}\n"
        f"  %y = qnt.dequantize %q {{scales = array<f32: 0.125>, zeros = array<i64: {zp}>}} : {tq} -> {ti}\n"
        f"  func.return %q, %y : {tq}, {ti}\n}}\n"
    )
    q, y = run(text, x)
    assert q.dtype == {"si8": np.int8, "ui8": np.uint8, "si16": np.int16}[el]
    assert q.min() == qmin and q.max() == qmax  # the range is the type's (narrowed)
    assert_bits(y, torch.fake_quantize_per_tensor_affine(t(x), 0.125, zp, qmin, qmax))


def test_quantize_per_channel_and_half_up():
    s = np.array([0.5, 0.25], np.float32)
    x = np.array([[0.25, 0.75, -0.25], [0.125, 0.375, -0.125]], np.float32)  # all ties
    ti, tq = "tensor<2x3xf32>", "tensor<2x3xsi8>"
    base = "scales = array<f32: 0.5, 0.25>, zeros = array<i64: 0, 1>, axis = 0 : i64"
    even = run_one(f"%x: {ti}", f"qnt.quantize %x {{{base}}} : {ti} -> {tq}", tq, x)
    up = run_one(
        f"%x: {ti}",
        f'qnt.quantize %x {{{base}, rounding = "half_up"}} : {ti} -> {tq}',
        tq,
        x,
    )
    exact = [
        [Fraction(float(v)) / Fraction(float(s[c])) for v in x[c]] for c in range(2)
    ]
    np.testing.assert_array_equal(
        even, [[round(v) + c for v in exact[c]] for c in range(2)]
    )
    np.testing.assert_array_equal(
        up, [[math.floor(v + HALF) + c for v in exact[c]] for c in range(2)]
    )


def test_requantize_per_channel_with_clip_matches_fraction():
    acc = randint(-(2**20), 2**20, (2, 3, 4), np.int32, seed=9)
    acc[0, 0, :2] = [I32_MAX, I32_MIN]
    mult = [1616928864, 2**30, 1234567890]
    shift = [38, 31, 36]
    ti, to = "tensor<2x3x4xsi32>", "tensor<2x3x4xsi8>"
    attrs = (
        f"{{multiplier = array<i64: {', '.join(map(str, mult))}>, "
        f"shift = array<i64: {', '.join(map(str, shift))}>, zero = -3 : i64, "
        "axis = 1 : i64, clip = array<i64: -100, 90>}"
    )
    y = run_one(f"%x: {ti}", f"qnt.requantize %x {attrs} : {ti} -> {to}", to, acc)
    expect = np.empty(acc.shape, np.int64)
    for idx in np.ndindex(acc.shape):
        c = idx[1]
        v = round(Fraction(int(acc[idx]) * mult[c], 2 ** shift[c])) - 3
        expect[idx] = min(max(v, -100), 90)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, expect)
    assert y.min() == -100 and y.max() == 90


def test_requantize_to_si16_saturates_to_type():
    acc = np.array([I32_MAX, I32_MIN, 12345, -7], np.int32)
    ti, to = "tensor<4xsi32>", "tensor<4xsi16>"
    attrs = '{multiplier = array<i64: 1073741824>, shift = array<i64: 30>, rounding = "half_up"}'
    y = run_one(f"%x: {ti}", f"qnt.requantize %x {attrs} : {ti} -> {to}", to, acc)
    np.testing.assert_array_equal(y, [32767, -32768, 12345, -7])
    assert y.dtype == np.int16


def test_barrier_is_identity():
    x = randn(3, 4)
    ty = "tensor<3x4xf32>"
    y = run_one(f"%x: {ty}", f"qnt.barrier %x : {ty}", ty, x)
    assert_bits(y, x)


# ------------------------------------------------------------------ image input


def nv12(n=1, h=4, w=6, seed=10):
    y = randint(0, 255, (n, h, w, 1), np.uint8, seed=seed)
    uv = randint(0, 255, (n, h // 2, w // 2, 2), np.uint8, seed=seed + 1)
    return y, uv


def test_image_convert_centres_and_upsamples_chroma():
    y, uv = nv12(2, 4, 6)
    ty, tuv, to = "tensor<2x4x6x1xui8>", "tensor<2x2x3x2xui8>", "tensor<2x4x6x3xsi8>"
    op = f'hbir.image_convert %luma, %uv {{mode = "nv12"}} : ({ty}, {tuv}) -> {to}'
    out = run_one(f"%luma: {ty}, %uv: {tuv}", op, to, y, uv)
    assert out.dtype == np.int8
    for n in range(2):
        for i in range(4):
            for j in range(6):
                assert out[n, i, j, 0] == int(y[n, i, j, 0]) - 128
                assert out[n, i, j, 1] == int(uv[n, i // 2, j // 2, 0]) - 128
                assert out[n, i, j, 2] == int(uv[n, i // 2, j // 2, 1]) - 128


def test_image_convert_gray_centres_luma():
    y, _ = nv12(1, 3, 5)  # gray needs no even size
    ty, to = "tensor<1x3x5x1xui8>", "tensor<1x3x5x1xsi8>"
    op = f'hbir.image_convert %luma {{mode = "gray"}} : ({ty}) -> {to}'
    out = run_one(f"%luma: {ty}", op, to, y)
    assert_bits(out, (y.astype(np.int16) - 128).astype(np.int8))


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CSCS = [
    ("none", None),
    ("yuv_bt601_full_to_rgb", numerics.yuv_to_rgb_bt601_full),
    ("yuv_bt601_video_to_rgb", numerics.yuv_to_rgb_bt601_video),
    ("yuv_bt601_full_to_bgr", numerics.yuv_to_rgb_bt601_full),
    ("yuv_bt601_video_to_bgr", numerics.yuv_to_rgb_bt601_video),
    ("bgr_to_rgb", None),
    ("rgb_to_bgr", None),
]


def _planes(x: np.ndarray, csc: str, convert) -> np.ndarray:
    """The independent per-csc reference: NCHW int64 planes in [0, 255]."""
    planes = np.moveaxis(x.astype(np.int64) + 128, -1, 1)
    if convert is not None:
        planes = np.stack(convert(*planes[0]))[None]
    if csc.endswith("bgr") or csc == "bgr_to_rgb":
        planes = planes[:, ::-1]
    return planes


@pytest.mark.parametrize("csc, convert", CSCS)
def test_image_preprocess(csc, convert):
    x = randint(-128, 127, (1, 4, 6, 3), np.int8, seed=11)
    ti, to = "tensor<1x4x6x3xsi8>", "tensor<1x4x6x3xf32>"
    attrs = (
        f'{{csc = "{csc}", divisor = 255 : i64, mean = array<f64: 0.485, 0.456, 0.406>, '
        "std = array<f64: 0.229, 0.224, 0.225>}"
    )
    y = run_one(f"%x: {ti}", f"hbir.image_preprocess %x {attrs} : {ti} -> {to}", to, x)
    planes = _planes(x, csc, convert)
    # torchvision: ToTensor (float / 255) then Normalize
    img = t(np.ascontiguousarray(planes).astype(np.float32)).div(255)
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    assert_bits(y, ((img - mean) / std).permute(0, 2, 3, 1).contiguous())
    if csc == "yuv_bt601_full_to_rgb":  # and the RGB is the real-valued BT.601 one
        yy, cb, cr = np.moveaxis(x[0].astype(np.float64), -1, 0)
        yy = yy + 128.0
        rgb = np.stack(
            [yy + 1.402 * cr, yy - 0.344136 * cb - 0.714136 * cr, yy + 1.772 * cb]
        )
        back = np.moveaxis(y[0], -1, 0) * np.array(STD)[:, None, None]
        back += np.array(MEAN)[:, None, None]
        assert np.abs(back * 255 - np.clip(rgb, 0, 255)).max() < 0.51
    if csc == "yuv_bt601_video_to_rgb":  # the real-valued BT.601 video-range one
        # Y in [16, 235] and chroma in [16, 240] scaled to full range, then the
        # full-range matrix; the integer conversion is within 0.76 of it over the
        # whole code cube (measured), so 0.8 plus float32 noise.
        planes64 = np.moveaxis(x[0].astype(np.float64), -1, 0) + 128
        yy = (planes64[0] - 16) * 255 / 219
        cb, cr = (planes64[1:] - 128) * 255 / 224
        rgb = np.stack(
            [yy + 1.402 * cr, yy - 0.344136 * cb - 0.714136 * cr, yy + 1.772 * cb]
        )
        back = np.moveaxis(y[0], -1, 0) * np.array(STD)[:, None, None]
        back += np.array(MEAN)[:, None, None]
        assert np.abs(back * 255 - np.clip(rgb, 0, 255)).max() < 0.8


def test_image_preprocess_unsigned_gray_input():
    x = randint(0, 255, (1, 3, 5, 1), np.uint8, seed=12)
    ti, to = "tensor<1x3x5x1xui8>", "tensor<1x3x5x1xf32>"
    attrs = "{divisor = 16 : i64, mean = array<f64: 0.5>, std = array<f64: 2.0>}"
    y = run_one(f"%x: {ti}", f"hbir.image_preprocess %x {attrs} : {ti} -> {to}", to, x)
    ref = (t(x.astype(np.float32)) / 16 - 0.5) / 2.0
    assert_bits(y, ref)


@pytest.mark.parametrize("csc, convert", CSCS[:3])
def test_image_preprocess_integer_form_is_a_table(csc, convert):
    x = randint(-128, 127, (1, 4, 6, 3), np.int8, seed=13)
    table = randint(-128, 127, (3, 256), np.int8, seed=14)
    ti, to = "tensor<1x4x6x3xsi8>", "tensor<1x4x6x3xsi8>"
    hexed = "0x" + table.tobytes().hex().upper()
    attrs = (
        f'{{csc = "{csc}", mean = array<f64: 0.0, 0.0, 0.0>, std = array<f64: 1.0, '
        f'1.0, 1.0>, table = dense<"{hexed}"> : tensor<3x256xsi8>}}'
    )
    y = run_one(f"%x: {ti}", f"hbir.image_preprocess %x {attrs} : {ti} -> {to}", to, x)
    planes = _planes(x, csc, convert)[0]
    assert y.dtype == np.int8
    for c in range(3):
        for i in range(4):
            for j in range(6):
                assert y[0, i, j, c] == table[c, planes[c, i, j]]


# ------------------------------------------------------------------ the loop


def test_small_model_matches_torch_module():
    """conv + relu + max pool + linear + sigmoid + softmax + layer_norm + concat."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(64, 10)
            self.norm = nn.LayerNorm(20)

        def forward(self, x):
            h = self.pool(torch.relu(self.conv(x))).reshape(1, 64)
            z = self.fc(h)
            return self.norm(torch.cat([torch.sigmoid(z), torch.softmax(z, -1)], -1))

    net = Net().eval()
    p = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    text = """
func.func @forward(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>,
    %fw: tensor<10x64xf32>, %fb: tensor<10xf32>, %g: tensor<20xf32>, %nb: tensor<20xf32>)
    -> tensor<1x20xf32> {
  %c = hbir.conv2d %x, %w bias(%b) {stride = array<i64: 1, 1>, padding = array<i64: 1, 1>,
    dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>,
    tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %r = hbir.relu %c : tensor<1x4x8x8xf32>
  %p = hbir.max_pool2d %r {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>,
    padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : tensor<1x4x8x8xf32>
    -> tensor<1x4x4x4xf32>
  %h = hbir.reshape %p : tensor<1x4x4x4xf32> -> tensor<1x64xf32>
  %z = hbir.linear %h, %fw bias(%fb) : (tensor<1x64xf32>, tensor<10x64xf32>,
    tensor<10xf32>) -> tensor<1x10xf32>
  %s = hbir.sigmoid %z : tensor<1x10xf32>
  %m = hbir.softmax %z {dim = -1 : i64} : tensor<1x10xf32> -> tensor<1x10xf32>
  %k = hbir.concat %s, %m {dim = -1 : i64} : (tensor<1x10xf32>, tensor<1x10xf32>)
    -> tensor<1x20xf32>
  %y = hbir.layer_norm %k weight(%g : tensor<20xf32>) bias(%nb : tensor<20xf32>)
    {normalized_shape = array<i64: 20>} : tensor<1x20xf32> -> tensor<1x20xf32>
  func.return %y : tensor<1x20xf32>
}
"""
    fn = parse_func(text)
    for seed in range(3):
        x = randn(1, 3, 8, 8, seed=seed)
        weights = [p["conv.weight"], p["conv.bias"], p["fc.weight"], p["fc.bias"]]
        weights += [p["norm.weight"], p["norm.bias"]]
        (y,) = run_function(fn, [x, *weights])
        with torch.no_grad():
            assert_bits(y, net(t(x)))


def test_on_op_sees_every_result_in_order():
    ty = "tensor<4xf32>"
    text = (
        f"func.func @f(%x: {ty}) -> {ty} {{\n"
        f"  %c = hbir.constant dense<[1.0, 2.0, 3.0, 4.0]> : {ty}\n"
        f"  %a = hbir.add %x, %c : ({ty}, {ty}) -> {ty}\n"
        f"  %r = hbir.relu %a : {ty}\n"
        f"  func.return %r : {ty}\n}}\n"
    )
    seen = []
    x = np.array([-5.0, -1.0, 0.0, 1.0], np.float32)
    (y,) = run(text, x, on_op=lambda op, results: seen.append((op.name, results)))
    assert [name for name, _ in seen] == ["hbir.constant", "hbir.add", "hbir.relu"]
    np.testing.assert_array_equal(seen[1][1][0], x + np.float32([1, 2, 3, 4]))
    assert seen[-1][1][0] is y


def test_op_without_kernel_is_a_located_error():
    ty = "tensor<4xf32>"
    text = (
        f"func.func @g(%x: {ty}) -> {ty} {{\n  func.return %x : {ty}\n}}\n"
        f"func.func @f(%x: {ty}) -> {ty} {{\n"
        f'  %y = func.call @g(%x) : ({ty}) -> {ty} loc("model.mlir":7:3)\n'
        f"  func.return %y : {ty}\n}}\n"
    )
    module = Parser(make_context(), text).parse_module()
    f = [op for op in module.ops if isinstance(op, func.FuncOp)][1]
    with pytest.raises(InterpreterError) as info:
        run_function(f, [np.zeros(4, np.float32)])
    assert str(info.value) == (
        "model.mlir:7:3: error: 'func.call' op has no interpreter kernel"
    )


def test_kernel_failure_names_the_op():
    # 2**24 terms of si16 x si16 products may exceed 2**53: refused, not wrong
    ti, tw, to = (
        "tensor<1x16777216xsi16>",
        "tensor<1x16777216xsi16>",
        "tensor<1x1xsi32>",
    )
    text = one_op(
        f"%x: {ti}, %w: {tw}", f"hbir.linear %x, %w : ({ti}, {tw}) -> {to}", to
    )
    z = np.zeros((1, 2**24), np.int16)
    with pytest.raises(InterpreterError, match=r"'hbir.linear' op .*2\*\*53"):
        run(text, z, z)


@pytest.mark.parametrize(
    "inputs, message",
    [
        ([], "takes 1 inputs, got 0"),
        (
            [np.zeros(3, np.float32)],
            r"input 0 \(%x\) has shape \(3,\), expected \(4,\)",
        ),
        ([np.zeros(4, np.float64)], "has dtype float64, expected float32"),
    ],
)
def test_bad_inputs_are_named(inputs, message):
    text = one_op("%x: tensor<4xf32>", "hbir.relu %x : tensor<4xf32>", "tensor<4xf32>")
    with pytest.raises(ValueError, match=message):
        run(text, *inputs)


# ---------------------------------------------------------------- review follow-ups


def test_resize_with_scale_factor_matches_torch():
    # 1 / 1.5 != 5 / 7: sampling by scale differs from sampling by size.
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 5)).astype(np.float32)
    for mode, corners in (("nearest", ""), ("bilinear", ", align_corners = false")):
        text = f"""
func.func @forward(%x: tensor<1x2x5x5xf32>) -> tensor<1x2x7x7xf32> {{
  %y = hbir.resize2d %x {{size = array<i64: 7, 7>, mode = "{mode}"{corners}, scale = array<f64: 1.5, 1.5>}} : tensor<1x2x5x5xf32> -> tensor<1x2x7x7xf32>
  func.return %y : tensor<1x2x7x7xf32>
}}"""
        (got,) = run_function(parse_func(text), [x])
        kw = {"align_corners": False} if mode == "bilinear" else {}
        want = F.interpolate(torch.from_numpy(x), scale_factor=1.5, mode=mode, **kw)
        assert np.array_equal(got, want.numpy())


def test_integer_reduce_sum_widens_without_saturating():
    x = np.full((2, 300), 100, np.int8)
    text = """
func.func @forward(%x: tensor<2x300xsi8>) -> tensor<2xsi32> {
  %y = hbir.reduce_sum %x {dims = array<i64: 1>} : tensor<2x300xsi8> -> tensor<2xsi32>
  func.return %y : tensor<2xsi32>
}"""
    (got,) = run_function(parse_func(text), [x])
    assert got.dtype == np.int32
    assert got.tolist() == [30000, 30000]
