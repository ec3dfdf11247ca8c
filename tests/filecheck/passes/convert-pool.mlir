// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p convert-pool | filecheck %s
// RUN: not hbir-opt %s --split-input-file -p convert-pool 2>&1 | filecheck %s --check-prefix=INVALID
// RUN: not hbir-opt %s -p 'convert-pool{fine_bits=22}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not hbir-opt %S/Inputs/convert_pool_refused.mlir -p convert-pool 2>&1 | filecheck %s --check-prefix=REFUSED

// Multipliers below: (m, s) with m / 2**s = real, derived in Python with
// fractions.Fraction from the float32 scales (f32(x) = struct round trip):
// m = round-half-up of real * 2**(31 - e) for 2**(e-1) <= real < 2**e, s = 31 - e.

// Positive: a mean over 12 elements is an exact si32 sum and one requantize by
// f32(0.02) / 12 * f32(1 / f32(0.05)) -> (1145324587, 35).
// CHECK-LABEL: func.func @mean
// CHECK:         %[[S:.*]] = hbir.reduce_sum %xq {dims = array<i64: 1>} : tensor<2x12xsi8> -> tensor<2xsi32>
// CHECK-NEXT:    %q = qnt.requantize %[[S]] {multiplier = array<i64: 1145324587>, shift = array<i64: 35>} : tensor<2xsi32> -> tensor<2xsi8>
// CHECK-NEXT:    func.return %q
func.func @mean(%xq: tensor<2x12xsi8>) -> tensor<2xsi8> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.02>, zeros = array<i64: 0>} : tensor<2x12xsi8> -> tensor<2x12xf32>
  %m = hbir.reduce_mean %x {dims = array<i64: 1>} : tensor<2x12xf32> -> tensor<2xf32>
  %q = qnt.quantize %m {scales = array<f32: 0.05>, zeros = array<i64: 0>} : tensor<2xf32> -> tensor<2xsi8>
  func.return %q : tensor<2xsi8>
}

// -----

// Positive: average pooling of si8 codes shifts them onto a 2**-22 grid
// (multiplier 1, shift -22, exact), pools in si32 and requantizes once by
// f32(0.02) * 2**-22 * f32(1 / f32(0.05)) -> (1717986880, 54); relu is the clip.
// CHECK-LABEL: func.func @avg_pool
// CHECK:         %[[F:.*]] = qnt.requantize %xq {multiplier = array<i64: 1>, shift = array<i64: -22>} : tensor<1x1x4x4xsi8> -> tensor<1x1x4x4xsi32>
// CHECK-NEXT:    %[[P:.*]] = hbir.avg_pool2d %[[F]] {{.*}} : tensor<1x1x4x4xsi32> -> tensor<1x1x2x2xsi32>
// CHECK-NEXT:    %q = qnt.requantize %[[P]] {multiplier = array<i64: 1717986880>, shift = array<i64: 54>, clip = array<i64: 0, 127>} : tensor<1x1x2x2xsi32> -> tensor<1x1x2x2xsi8>
// CHECK-NEXT:    func.return %q
func.func @avg_pool(%xq: tensor<1x1x4x4xsi8>) -> tensor<1x1x2x2xsi8> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.02>, zeros = array<i64: 0>} : tensor<1x1x4x4xsi8> -> tensor<1x1x4x4xf32>
  %p = hbir.avg_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>} : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
  %r = hbir.relu %p : tensor<1x1x2x2xf32>
  %q = qnt.quantize %r {scales = array<f32: 0.05>, zeros = array<i64: 0>} : tensor<1x1x2x2xf32> -> tensor<1x1x2x2xsi8>
  func.return %q : tensor<1x1x2x2xsi8>
}

// -----

// Does not apply: a mean whose result is not quantized, and a mean of
// per-channel codes, stay float.
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %x = qnt.dequantize %xq
// CHECK-NEXT:    %m = hbir.reduce_mean %x {dims = array<i64: 1>} : tensor<2x12xf32> -> tensor<2xf32>
// CHECK-NEXT:    %c = qnt.dequantize %xq
// CHECK-NEXT:    %n = hbir.reduce_mean %c {dims = array<i64: 1>} : tensor<2x12xf32> -> tensor<2xf32>
// CHECK-NEXT:    %q = qnt.quantize %n
// CHECK-NEXT:    func.return %m, %q
func.func @kept(%xq: tensor<2x12xsi8>) -> (tensor<2xf32>, tensor<2xsi8>) {
  %x = qnt.dequantize %xq {scales = array<f32: 0.02>, zeros = array<i64: 0>} : tensor<2x12xsi8> -> tensor<2x12xf32>
  %m = hbir.reduce_mean %x {dims = array<i64: 1>} : tensor<2x12xf32> -> tensor<2xf32>
  %c = qnt.dequantize %xq {scales = array<f32: 0.02, 0.04>, zeros = array<i64: 0, 0>, axis = 0 : i64} : tensor<2x12xsi8> -> tensor<2x12xf32>
  %n = hbir.reduce_mean %c {dims = array<i64: 1>} : tensor<2x12xf32> -> tensor<2xf32>
  %q = qnt.quantize %n {scales = array<f32: 0.05>, zeros = array<i64: 0>} : tensor<2xf32> -> tensor<2xsi8>
  func.return %m, %q : tensor<2xf32>, tensor<2xsi8>
}

// -----

// Invalid input: a mean over a dim the tensor does not have is rejected,
// located, before the pass runs; nothing is printed.
// CHECK: convert-pool.mlir:71:3: error: 'hbir.reduce_mean' op dim 2 is out of range for rank 2
// INVALID: convert-pool.mlir:71:3: error: 'hbir.reduce_mean' op dim 2 is out of range for rank 2
// INVALID-NOT: builtin.module
// INVALID-NOT: Traceback
func.func @bad_dim(%xq: tensor<2x12xsi8>) -> tensor<2xsi8> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.02>, zeros = array<i64: 0>} : tensor<2x12xsi8> -> tensor<2x12xf32>
  %m = hbir.reduce_mean %x {dims = array<i64: 2>} : tensor<2x12xf32> -> tensor<2xf32>
  %q = qnt.quantize %m {scales = array<f32: 0.05>, zeros = array<i64: 0>} : tensor<2xf32> -> tensor<2xsi8>
  func.return %q : tensor<2xsi8>
}

// Invalid option: the pass has none.
// BADOPT: hbir-opt: error: Provided arguments ["fine_bits"] not found in expected arguments []

// Refused input (Inputs/convert_pool_refused.mlir): IR that verifies and reaches the pass, which
// must refuse it, located at the op's line in the text, nothing printed.
// REFUSED: convert_pool_refused.mlir:6:3: error: 'qnt.quantize' op needs a requantization by 1.25e+59
// REFUSED-NOT: builtin.module
// REFUSED-NOT: Traceback
