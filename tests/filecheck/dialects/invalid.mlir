// Each chunk breaks one op rule; the diagnostic names the file, line, op and numbers.
// RUN: hbir-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @f(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %y = hbir.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  func.return %y : tensor<1x4x8x8xf32>
}
// CHECK: invalid.mlir:5:3: error: 'hbir.conv2d' op expected result shape (1, 4, 6, 6), got (1, 4, 8, 8)
// CHECK-NEXT: %y = hbir.conv2d

// -----

func.func @f(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %y = hbir.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3xf32>) -> tensor<1x4x8x8xf32>
  func.return %y : tensor<1x4x8x8xf32>
}
// CHECK: invalid.mlir:14:3: error: 'hbir.conv2d' op weight has 3 dims, expected 4

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<4xf32>) -> tensor<4x8xf32> {
  %s = hbir.add %a, %b : (tensor<4x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  func.return %s : tensor<4x8xf32>
}
// CHECK: invalid.mlir:22:3: error: 'hbir.add' op shapes (4, 8) and (4,) are not broadcastable

// -----

func.func @f(%x: tensor<4xsi8>) -> tensor<4xsi8> {
  %s = hbir.sigmoid %x : tensor<4xsi8>
  func.return %s : tensor<4xsi8>
}
// CHECK: error: 'hbir.sigmoid' op input must be float, got si8; integer forms go through hbir.lut

// -----

func.func @f(%x: tensor<4xsi8>, %w: tensor<2x4xsi16>) -> tensor<4x2xsi16> {
  %y = hbir.linear %x, %w : (tensor<4xsi8>, tensor<2x4xsi16>) -> tensor<2xsi16>
  func.return %y : tensor<2xsi16>
}
// CHECK: error: 'hbir.linear' op integer accumulation result must be si32, got si16

// -----

func.func @f(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %y = qnt.const_fake_quant %x {min = array<f64: -1.0>, max = array<f64: 1.0>, bits = 40 : i64} : tensor<1x4xf32>
  func.return %y : tensor<1x4xf32>
}
// CHECK: error: 'qnt.const_fake_quant' op bits must be in [2, 32], got 40

// -----

func.func @f(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %y = qnt.const_fake_quant %x {min = array<f64: -1.0, -1.0>, max = array<f64: 1.0, 1.0>, bits = 8 : i64, axis = 1 : i64} : tensor<1x4xf32>
  func.return %y : tensor<1x4xf32>
}
// CHECK: error: 'qnt.const_fake_quant' op per-channel parameters have 2 values, dim 1 has 4

// -----

func.func @f(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %y = qnt.const_fake_quant %x {min = array<f64: 0.5>, max = array<f64: 1.0>, bits = 8 : i64} : tensor<1x4xf32>
  func.return %y : tensor<1x4xf32>
}
// CHECK: error: 'qnt.const_fake_quant' op range [0.5, 1.0] (channel 0) must contain 0 and be non-empty

// -----

func.func @f(%x: tensor<4xsi32>) -> tensor<4xsi8> {
  %y = qnt.requantize %x {multiplier = array<i64: 1073741824>, shift = array<i64: 31>, clip = array<i64: 0, 300>} : tensor<4xsi32> -> tensor<4xsi8>
  func.return %y : tensor<4xsi8>
}
// CHECK: error: 'qnt.requantize' op clip [0, 300] must be [lo, hi] within [-128, 127]

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xsi8> {
  %y = qnt.quantize %x {scales = array<f32: 0.1>, zeros = array<i64: 0>, rounding = "up"} : tensor<4xf32> -> tensor<4xsi8>
  func.return %y : tensor<4xsi8>
}
// CHECK: error: 'qnt.quantize' op rounding must be one of ('half_even', 'half_up'), got 'up'

// -----

func.func @f(%x: tensor<1x4x4x4xf32>) -> tensor<1x4x8x8xf32> {
  %y = hbir.resize2d %x {size = array<i64: 8, 8>, mode = "area"} : tensor<1x4x4x4xf32> -> tensor<1x4x8x8xf32>
  func.return %y : tensor<1x4x8x8xf32>
}
// CHECK: error: 'hbir.resize2d' op mode must be one of ('nearest', 'bilinear', 'bicubic'), got 'area'

// -----

func.func @f(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %y = hbir.reshape %x : tensor<2x8xf32> -> tensor<3x5xf32>
  func.return %y : tensor<3x5xf32>
}
// CHECK: error: 'hbir.reshape' op cannot reshape (2, 8) (16 elements) into [3, 5]

// -----

func.func @f(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %y = hbir.transpose %x {perm = array<i64: 0, 0>} : tensor<2x8xf32> -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK: error: 'hbir.transpose' op perm [0, 0] is not a permutation of rank 2

// -----

func.func @f(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %y = hbir.flip %x {dims = array<i64: 1, -1>} : tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK: error: 'hbir.flip' op dims [1, -1] repeat a dim

// -----

func.func @f(%x: tensor<1x1x2x2xsi8>) -> tensor<1x1x4x4xsi8> {
  %y = hbir.resize2d %x {size = array<i64: 4, 4>, mode = "bilinear", weight_bits = 7 : i64} : tensor<1x1x2x2xsi8> -> tensor<1x1x4x4xsi8>
  func.return %y : tensor<1x1x4x4xsi8>
}
// CHECK: error: 'hbir.resize2d' op integer weighted sums are si32

// -----

func.func @f(%x: tensor<4xsi8>) -> tensor<4xsi8> {
  %y = hbir.lut %x {table = dense<0> : tensor<128xsi8>} : tensor<4xsi8> -> tensor<4xsi8>
  func.return %y : tensor<4xsi8>
}
// CHECK: error: 'hbir.lut' op table has shape (128,), expected (256,)

// -----

func.func @f(%x: tensor<4xsi64>) -> tensor<4xsi8> {
  %y = qnt.requantize %x {multiplier = array<i64: 1073741824>, shift = array<i64: 31>} : tensor<4xsi64> -> tensor<4xsi8>
  func.return %y : tensor<4xsi8>
}
// CHECK: error: 'qnt.requantize' op input must be at most 32 bits wide

// -----

func.func @f(%x: tensor<1x2x5x5xf32>) -> tensor<1x2x8x8xf32> {
  %y = hbir.resize2d %x {size = array<i64: 8, 8>, scale = array<f64: 1.5, 1.5>} : tensor<1x2x5x5xf32> -> tensor<1x2x8x8xf32>
  func.return %y : tensor<1x2x8x8xf32>
}
// CHECK: error: 'hbir.resize2d' op scale [1.5, 1.5] implies size [7, 7], got [8, 8]

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %s = hbir.elu %x {alpha = -1.0 : f64} : tensor<4xf32>
  func.return %s : tensor<4xf32>
}
// CHECK: invalid.mlir:150:3: error: 'hbir.elu' op alpha: LUT table 'elu:-1.0': parameter out of range

// -----

func.func @f(%x: tensor<2x8xsi8>) -> tensor<2x9xsi8> {
  %v, %i = hbir.topk %x {k = 9 : i64, dim = 1 : i64} : (tensor<2x8xsi8>) -> (tensor<2x9xsi8>, tensor<2x9xi64>)
  func.return %v : tensor<2x9xsi8>
}
// CHECK: invalid.mlir:158:3: error: 'hbir.topk' op k 9 is out of range for dim 1 of size 8

// -----

func.func @f(%x: tensor<2x8xsi8>) -> tensor<2xsi8> {
  %a = hbir.argmax %x {dim = 1 : i64} : tensor<2x8xsi8> -> tensor<2xsi8>
  func.return %a : tensor<2xsi8>
}
// CHECK: invalid.mlir:166:3: error: 'hbir.argmax' op the result must be an i64 tensor, got si8

// -----

func.func @f(%x: tensor<2x8xsi8>, %i: tensor<2x3xsi32>) -> tensor<2x3xsi8> {
  %g = hbir.gather %x, %i {dim = 1 : i64} : (tensor<2x8xsi8>, tensor<2x3xsi32>) -> tensor<2x3xsi8>
  func.return %g : tensor<2x3xsi8>
}
// CHECK: invalid.mlir:174:3: error: 'hbir.gather' op index must be an i64 tensor, got si32

// -----

func.func @f(%x: tensor<2x8xsi8>, %i: tensor<3x3xi64>) -> tensor<3x3xsi8> {
  %g = hbir.gather %x, %i {dim = 1 : i64} : (tensor<2x8xsi8>, tensor<3x3xi64>) -> tensor<3x3xsi8>
  func.return %g : tensor<3x3xsi8>
}
// CHECK: invalid.mlir:182:3: error: 'hbir.gather' op index shape [3, 3] exceeds input [2, 8]

// -----

func.func @f(%x: tensor<8x4xsi8>, %i: tensor<2x2xi64>) -> tensor<4x4xsi8> {
  %s = hbir.index_select %x, %i {dim = 0 : i64} : (tensor<8x4xsi8>, tensor<2x2xi64>) -> tensor<4x4xsi8>
  func.return %s : tensor<4x4xsi8>
}
// CHECK: invalid.mlir:190:3: error: 'hbir.index_select' op index must be 1-d, got 2 dims

// -----

func.func @f(%q: tensor<1x4x8x8xsi8>, %g: tensor<1x5x6x2xsi8>) -> tensor<1x4x5x6xsi32> {
  %s = hbir.grid_sample %q, %g : (tensor<1x4x8x8xsi8>, tensor<1x5x6x2xsi8>) -> tensor<1x4x5x6xsi32>
  func.return %s : tensor<1x4x5x6xsi32>
}
// CHECK: invalid.mlir:198:3: error: 'hbir.grid_sample' op integer grid codes need a positive grid_scale

// -----

func.func @f(%x: tensor<1x4x8x8xf32>, %g: tensor<1x5x6x3xf32>) -> tensor<1x4x5x6xf32> {
  %s = hbir.grid_sample %x, %g {padding_mode = "reflection"} : (tensor<1x4x8x8xf32>, tensor<1x5x6x3xf32>) -> tensor<1x4x5x6xf32>
  func.return %s : tensor<1x4x5x6xf32>
}
// CHECK: invalid.mlir:206:3: error: 'hbir.grid_sample' op padding_mode must be one of ('zeros', 'border'), got 'reflection'

// -----

func.func @f(%x: tensor<1x4x4x3xsi8>, %i: tensor<1x4x4x2xi64>) -> tensor<1x4x8x6xsi8> {
  %u = hbir.max_unpool2d %x, %i {size = array<i64: 8, 6>} : (tensor<1x4x4x3xsi8>, tensor<1x4x4x2xi64>) -> tensor<1x4x8x6xsi8>
  func.return %u : tensor<1x4x8x6xsi8>
}
// CHECK: invalid.mlir:214:3: error: 'hbir.max_unpool2d' op indices shape [1, 4, 4, 2], expected [1, 4, 4, 3]

// -----

func.func @f(%x: tensor<1x4x8x6xsi8>) -> tensor<1x4x4x3xsi8> {
  %i = hbir.max_pool2d_indices %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : tensor<1x4x8x6xsi8> -> tensor<1x4x4x3xsi8>
  func.return %i : tensor<1x4x4x3xsi8>
}
// CHECK: invalid.mlir:222:3: error: 'hbir.max_pool2d_indices' op the result must be an i64 tensor, got si8

// -----

func.func @f(%y: tensor<1x8x10x1xui8>, %uv: tensor<1x4x5x2xui8>, %roi: tensor<1x4xsi64>) -> tensor<1x4x6x3xsi8> {
  %a = hbir.roi_resize %y, %uv roi(%roi : tensor<1x4xsi64>) {size = array<i64: 4, 6>, pad_value = array<i64: 0, -128>} : tensor<1x8x10x1xui8>, tensor<1x4x5x2xui8> -> tensor<1x4x6x3xsi8>
  func.return %a : tensor<1x4x6x3xsi8>
}
// CHECK: invalid.mlir:230:3: error: 'hbir.roi_resize' op roi must be tensor<1x4xsi32> (left, top, right, bottom per image), got tensor<1x4xsi64>

// -----

func.func @f(%y: tensor<1x8x10x1xui8>, %roi: tensor<1x4xsi32>) -> tensor<1x4x6x1xsi8> {
  %a = hbir.roi_resize %y roi(%roi : tensor<1x4xsi32>) {size = array<i64: 4, 6>, mode = "gray", pad_value = array<i64: 0, -128>} : tensor<1x8x10x1xui8> -> tensor<1x4x6x1xsi8>
  func.return %a : tensor<1x4x6x1xsi8>
}
// CHECK: invalid.mlir:238:3: error: 'hbir.roi_resize' op pad_value must be (Y,) bytes in [-128, 255], got (0, -128)
