// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p sink-dequantize | filecheck %s
// RUN: not hbir-opt %s --split-input-file -p sink-dequantize 2>&1 | filecheck %s --check-prefix=INVALID
// RUN: not hbir-opt %s -p 'sink-dequantize{through=concat}' 2>&1 | filecheck %s --check-prefix=BADOPT

// Positive: the reshape and max pool move onto the si8 codes; one dequantize, at
// the same scale, comes last.
// CHECK-LABEL: func.func @reshape_pool
// CHECK-NEXT:    %[[R:.*]] = hbir.reshape %q : tensor<1x1x4x4xsi8> -> tensor<1x1x2x8xsi8>
// CHECK-NEXT:    %[[P:.*]] = hbir.max_pool2d %[[R]] {{.*}} : tensor<1x1x2x8xsi8> -> tensor<1x1x1x4xsi8>
// CHECK-NEXT:    %[[D:.*]] = qnt.dequantize %[[P]] {scales = array<f32: 5.000000e-01>, zeros = array<i64: 0>} : tensor<1x1x1x4xsi8> -> tensor<1x1x1x4xf32>
// CHECK-NEXT:    func.return %[[D]]
func.func @reshape_pool(%q: tensor<1x1x4x4xsi8>) -> tensor<1x1x1x4xf32> {
  %d = qnt.dequantize %q {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<1x1x4x4xsi8> -> tensor<1x1x4x4xf32>
  %r = hbir.reshape %d : tensor<1x1x4x4xf32> -> tensor<1x1x2x8xf32>
  %p = hbir.max_pool2d %r {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : tensor<1x1x2x8xf32> -> tensor<1x1x1x4xf32>
  func.return %p : tensor<1x1x1x4xf32>
}

// -----

// Positive: a transpose of per-channel codes; the channel axis follows the
// permutation (axis 0 -> position 1 of perm [1, 0]).
// CHECK-LABEL: func.func @transpose_per_channel
// CHECK-NEXT:    %[[T:.*]] = hbir.transpose %q {perm = array<i64: 1, 0>} : tensor<2x3xsi8> -> tensor<3x2xsi8>
// CHECK-NEXT:    %{{.*}} = qnt.dequantize %[[T]] {scales = array<f32: 5.000000e-01, 2.500000e-01>, zeros = array<i64: 0, 0>, axis = 1 : i64} : tensor<3x2xsi8> -> tensor<3x2xf32>
func.func @transpose_per_channel(%q: tensor<2x3xsi8>) -> tensor<3x2xf32> {
  %d = qnt.dequantize %q {scales = array<f32: 0.5, 0.25>, zeros = array<i64: 0, 0>, axis = 0 : i64} : tensor<2x3xsi8> -> tensor<2x3xf32>
  %t = hbir.transpose %d {perm = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  func.return %t : tensor<3x2xf32>
}

// -----

// Positive: a concat of one grid becomes a concat of codes.
// CHECK-LABEL: func.func @concat
// CHECK-NEXT:    %[[C:.*]] = hbir.concat %a, %b {dim = 0 : i64} : (tensor<2xsi8>, tensor<3xsi8>) -> tensor<5xsi8>
// CHECK-NEXT:    %{{.*}} = qnt.dequantize %[[C]] {scales = array<f32: 2.500000e-01>
func.func @concat(%a: tensor<2xsi8>, %b: tensor<3xsi8>) -> tensor<5xf32> {
  %da = qnt.dequantize %a {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<2xsi8> -> tensor<2xf32>
  %db = qnt.dequantize %b {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<3xsi8> -> tensor<3xf32>
  %c = hbir.concat %da, %db {dim = 0 : i64} : (tensor<2xf32>, tensor<3xf32>) -> tensor<5xf32>
  func.return %c : tensor<5xf32>
}

// -----

// Does not apply: a concat of two grids, a per-channel reshape that changes the
// shape, and a reshape marked for the CPU stay float.
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %da = qnt.dequantize %a
// CHECK-NEXT:    %db = qnt.dequantize %b
// CHECK-NEXT:    %c = hbir.concat %da, %db {dim = 0 : i64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %dp = qnt.dequantize %p
// CHECK-NEXT:    %r = hbir.reshape %dp : tensor<2x3xf32> -> tensor<6xf32>
// CHECK-NEXT:    %s = hbir.reshape %da {hbir.device = "cpu"} : tensor<2xf32> -> tensor<1x2xf32>
// CHECK-NEXT:    func.return %c, %r, %s
func.func @kept(%a: tensor<2xsi8>, %b: tensor<2xsi8>, %p: tensor<2x3xsi8>) -> (tensor<4xf32>, tensor<6xf32>, tensor<1x2xf32>) {
  %da = qnt.dequantize %a {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<2xsi8> -> tensor<2xf32>
  %db = qnt.dequantize %b {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<2xsi8> -> tensor<2xf32>
  %c = hbir.concat %da, %db {dim = 0 : i64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  %dp = qnt.dequantize %p {scales = array<f32: 0.5, 0.25>, zeros = array<i64: 0, 0>, axis = 0 : i64} : tensor<2x3xsi8> -> tensor<2x3xf32>
  %r = hbir.reshape %dp : tensor<2x3xf32> -> tensor<6xf32>
  %s = hbir.reshape %da {hbir.device = "cpu"} : tensor<2xf32> -> tensor<1x2xf32>
  func.return %c, %r, %s : tensor<4xf32>, tensor<6xf32>, tensor<1x2xf32>
}

// -----

// Invalid input: a reshape that changes the element count is rejected, located,
// before the pass runs; nothing is printed.
// CHECK: sink-dequantize.mlir:77:3: error: 'hbir.reshape'
// INVALID: sink-dequantize.mlir:77:3: error: 'hbir.reshape'
// INVALID-NOT: builtin.module
// INVALID-NOT: Traceback
func.func @bad_reshape(%q: tensor<2x8xsi8>) -> tensor<15xf32> {
  %d = qnt.dequantize %q {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<2x8xsi8> -> tensor<2x8xf32>
  %r = hbir.reshape %d : tensor<2x8xf32> -> tensor<15xf32>
  func.return %r : tensor<15xf32>
}

// Invalid option: the pass has none.
// BADOPT: hbir-opt: error: Provided arguments ["through"] not found in expected arguments []

// No refused input: sink-dequantize accepts every module that verifies. Each
// rewrite moves a dequantize (zero point 0) past an op that only moves or selects
// codes, and is applied only where the numbers stay the same (the does-not-apply
// cases above: a per-channel grid through a reshape that mixes channels, a CPU
// op); what it cannot move it leaves as it is, which is still correct IR.

// -----

// Positive: selection runs on the codes (ordered as their values): the top-k's
// values and a gather get one dequantize each, the indices none.
// CHECK-LABEL: func.func @selection
// CHECK-NEXT:    %[[T:.*]], %i = hbir.topk %q {k = 3 : i64, dim = 1 : i64} : (tensor<2x8xsi8>) -> (tensor<2x3xsi8>, tensor<2x3xi64>)
// CHECK-NEXT:    %v = qnt.dequantize %[[T]] {scales = array<f32: 5.000000e-01>, zeros = array<i64: 0>} : tensor<2x3xsi8> -> tensor<2x3xf32>
// CHECK-NEXT:    %a = hbir.argmax %q {dim = 1 : i64} : tensor<2x8xsi8> -> tensor<2xi64>
// CHECK-NEXT:    %[[G:.*]] = hbir.gather %q, %i {dim = 1 : i64} : (tensor<2x8xsi8>, tensor<2x3xi64>) -> tensor<2x3xsi8>
// CHECK-NEXT:    %{{.*}} = qnt.dequantize %[[G]] {scales = array<f32: 5.000000e-01>, zeros = array<i64: 0>}
func.func @selection(%q: tensor<2x8xsi8>) -> (tensor<2x3xf32>, tensor<2xi64>, tensor<2x3xf32>) {
  %d = qnt.dequantize %q {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<2x8xsi8> -> tensor<2x8xf32>
  %v, %i = hbir.topk %d {k = 3 : i64, dim = 1 : i64} : (tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x3xi64>)
  %a = hbir.argmax %d {dim = 1 : i64} : tensor<2x8xf32> -> tensor<2xi64>
  %g = hbir.gather %d, %i {dim = 1 : i64} : (tensor<2x8xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  func.return %v, %a, %g : tensor<2x3xf32>, tensor<2xi64>, tensor<2x3xf32>
}

// -----

// Positive and does not apply: a cast of a dequantize to f64 becomes a dequantize
// to f64 (exact); a cast to f16 (an fp16 op's input, the float16 qconfig) rounds
// the float32 value and stays.
// CHECK-LABEL: func.func @cast_of_dequantize
// CHECK-NEXT:    %d = qnt.dequantize %q {{.*}} -> tensor<4xf32>
// CHECK-NEXT:    %w = qnt.dequantize %q {scales = array<f32: 5.000000e-01>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf64>
// CHECK-NEXT:    %h = hbir.cast %d : tensor<4xf32> -> tensor<4xf16>
func.func @cast_of_dequantize(%q: tensor<4xsi8>) -> (tensor<4xf64>, tensor<4xf16>) {
  %d = qnt.dequantize %q {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %w = hbir.cast %d : tensor<4xf32> -> tensor<4xf64>
  %h = hbir.cast %d : tensor<4xf32> -> tensor<4xf16>
  func.return %w, %h : tensor<4xf64>, tensor<4xf16>
}
