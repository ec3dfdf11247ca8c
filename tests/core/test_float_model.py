"""A hand-written float model in asm, fed through Function.feed, equals torch bit
for bit (float32): conv + relu + max pool + resize + concat + transpose/reshape +
linear + layer_norm + sigmoid + softmax."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import hbir

RNG = np.random.default_rng(7)
W = {
    "conv_w": RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
    "conv_b": RNG.standard_normal(8).astype(np.float32) * 0.1,
    "fc1_w": RNG.standard_normal((32, 256)).astype(np.float32) * 0.05,
    "fc1_b": RNG.standard_normal(32).astype(np.float32) * 0.1,
    "ln_w": RNG.uniform(0.5, 1.5, 32).astype(np.float32),
    "ln_b": RNG.standard_normal(32).astype(np.float32) * 0.1,
    "fc2_w": RNG.standard_normal((10, 32)).astype(np.float32) * 0.2,
}


def dense(name: str) -> str:
    a = W[name]
    dims = "x".join(map(str, a.shape))
    return f'dense<"0x{a.tobytes().hex().upper()}"> : tensor<{dims}xf32>'


ASM = f"""
func.func @forward(%x: tensor<1x3x16x16xf32>) -> tensor<1x10xf32> {{
  %cw = hbir.constant {dense("conv_w")}
  %cb = hbir.constant {dense("conv_b")}
  %c = hbir.conv2d %x, %cw bias(%cb) {{stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>}} : (tensor<1x3x16x16xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<1x8x16x16xf32>
  %r = hbir.relu %c : tensor<1x8x16x16xf32>
  %p = hbir.max_pool2d %r {{kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>}} : tensor<1x8x16x16xf32> -> tensor<1x8x8x8xf32>
  %up = hbir.resize2d %p {{size = array<i64: 16, 16>, mode = "bilinear"}} : tensor<1x8x8x8xf32> -> tensor<1x8x16x16xf32>
  %cat = hbir.concat %up, %r {{dim = 1 : i64}} : (tensor<1x8x16x16xf32>, tensor<1x8x16x16xf32>) -> tensor<1x16x16x16xf32>
  %p2 = hbir.max_pool2d %cat {{kernel = array<i64: 4, 4>, stride = array<i64: 4, 4>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>}} : tensor<1x16x16x16xf32> -> tensor<1x16x4x4xf32>
  %t = hbir.transpose %p2 {{perm = array<i64: 0, 2, 3, 1>}} : tensor<1x16x4x4xf32> -> tensor<1x4x4x16xf32>
  %f = hbir.reshape %t : tensor<1x4x4x16xf32> -> tensor<1x256xf32>
  %w1 = hbir.constant {dense("fc1_w")}
  %b1 = hbir.constant {dense("fc1_b")}
  %h = hbir.linear %f, %w1 bias(%b1) : (tensor<1x256xf32>, tensor<32x256xf32>, tensor<32xf32>) -> tensor<1x32xf32>
  %g = hbir.constant {dense("ln_w")}
  %be = hbir.constant {dense("ln_b")}
  %ln = hbir.layer_norm %h weight(%g : tensor<32xf32>) bias(%be : tensor<32xf32>) {{normalized_shape = array<i64: 32>, eps = 1.0e-05 : f64}} : tensor<1x32xf32> -> tensor<1x32xf32>
  %s = hbir.sigmoid %ln : tensor<1x32xf32>
  %w2 = hbir.constant {dense("fc2_w")}
  %o = hbir.linear %s, %w2 : (tensor<1x32xf32>, tensor<10x32xf32>) -> tensor<1x10xf32>
  %sm = hbir.softmax %o {{dim = -1 : i64}} : tensor<1x10xf32> -> tensor<1x10xf32>
  func.return %sm : tensor<1x10xf32>
}}
"""


def torch_reference(x: torch.Tensor) -> torch.Tensor:
    w = {k: torch.from_numpy(v) for k, v in W.items()}
    r = torch.relu(F.conv2d(x, w["conv_w"], w["conv_b"], padding=1))
    p = F.max_pool2d(r, 2)
    up = F.interpolate(p, size=(16, 16), mode="bilinear", align_corners=False)
    cat = torch.cat([up, r], dim=1)
    f = F.max_pool2d(cat, 4).permute(0, 2, 3, 1).reshape(1, 256)
    h = F.linear(f, w["fc1_w"], w["fc1_b"])
    ln = F.layer_norm(h, (32,), w["ln_w"], w["ln_b"], eps=1e-5)
    o = F.linear(torch.sigmoid(ln), w["fc2_w"])
    return torch.softmax(o, dim=-1)


@pytest.fixture(scope="module")
def model():
    return hbir.Module.parse(ASM, "float_model.mlir")


@pytest.mark.parametrize("seed", range(5))
def test_feed_equals_torch_bit_for_bit(model, seed):
    x = torch.from_numpy(
        np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)
    )
    got = model["forward"].feed({"_input_0": x})["_output_0"]  # a tensor in: out
    want = torch_reference(x).numpy()
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    got = got.numpy()
    assert np.array_equal(got.view(np.int32), want.view(np.int32))


def test_saved_and_reloaded_model_gives_the_same_bits(model, tmp_path):
    hbir.save(model, tmp_path / "float.bc")
    again = hbir.load(tmp_path / "float.bc")
    x = np.random.default_rng(11).standard_normal((1, 3, 16, 16)).astype(np.float32)
    a = model["forward"](x)
    b = again["forward"](x)
    assert np.array_equal(a.view(np.int32), b.view(np.int32))
