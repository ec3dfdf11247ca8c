// RUN: hbir-opt %s --split-input-file -p fold-constants,cleanup | filecheck %s
// RUN: not hbir-opt %s -p 'fold-constants{limit=4}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not hbir-opt %S/Inputs/fold_constants_bad_reshape.mlir -p fold-constants 2>&1 | filecheck %s --check-prefix=INVALID

// Positive: gamma.reshape(1, -1, 1, 1) on a parameter becomes one constant of the
// final shape (the values in their reshaped order); a transpose, a slice and a
// float cast of constants fold likewise (f64 -> f32 rounds 0.1 to its nearest
// float, 0.100000001490116...).
// CHECK-LABEL: func.func @folds
// CHECK-NEXT:    %[[G:.*]] = hbir.constant dense<{{\[\[\[\[}}1.000000e+00]], {{\[\[}}2.000000e+00]]]]> : tensor<1x2x1x1xf32>
// CHECK-NEXT:    %[[M:.*]] = hbir.mul %x, %[[G]]
// CHECK-NEXT:    %[[T:.*]] = hbir.constant dense<{{\[\[}}1.000000e+00, 3.000000e+00], [2.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>
// CHECK-NEXT:    %[[S:.*]] = hbir.constant dense<[2.000000e+00, 4.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %[[C:.*]] = hbir.constant dense<1.000000e-01> : tensor<f32>
// CHECK-NEXT:    func.return %[[M]], %[[T]], %[[S]], %[[C]]
func.func @folds(%x: tensor<1x2x3x3xf32>) -> (tensor<1x2x3x3xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<f32>) {
  %g = hbir.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %r = hbir.reshape %g : tensor<2xf32> -> tensor<1x2x1x1xf32>
  %m = hbir.mul %x, %r : (tensor<1x2x3x3xf32>, tensor<1x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %w = hbir.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %t = hbir.transpose %w {perm = array<i64: 1, 0>} : tensor<2x2xf32> -> tensor<2x2xf32>
  %s = hbir.slice %w {begin = array<i64: 0, 1>, end = array<i64: 2, 2>, step = array<i64: 1, 1>} : tensor<2x2xf32> -> tensor<2x1xf32>
  %sr = hbir.reshape %s : tensor<2x1xf32> -> tensor<2xf32>
  %d = hbir.constant dense<0.1> : tensor<f64>
  %c = hbir.cast %d : tensor<f64> -> tensor<f32>
  func.return %m, %t, %sr, %c : tensor<1x2x3x3xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<f32>
}

// -----

// Does not apply: moves of a function argument or of a computed value, and a cast
// of a constant to an integer type (that is quantization, not a move), stay.
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    hbir.reshape %x
// CHECK-NEXT:    hbir.relu
// CHECK-NEXT:    hbir.transpose
// CHECK-NEXT:    hbir.constant
// CHECK-NEXT:    hbir.cast
func.func @kept(%x: tensor<2x2xf32>) -> (tensor<4xf32>, tensor<2x2xf32>, tensor<2xsi8>) {
  %r = hbir.reshape %x : tensor<2x2xf32> -> tensor<4xf32>
  %y = hbir.relu %x : tensor<2x2xf32>
  %t = hbir.transpose %y {perm = array<i64: 1, 0>} : tensor<2x2xf32> -> tensor<2x2xf32>
  %c = hbir.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %i = hbir.cast %c : tensor<2xf32> -> tensor<2xsi8>
  func.return %r, %t, %i : tensor<4xf32>, tensor<2x2xf32>, tensor<2xsi8>
}

// Invalid option: the pass has none.
// BADOPT: hbir-opt: error: Provided arguments ["limit"] not found in expected arguments []

// Invalid input: a reshape of a constant to a different element count is rejected,
// located, before the pass could fold it.
// INVALID: fold_constants_bad_reshape.mlir:4:3: error: 'hbir.reshape' op cannot reshape (2,) (2 elements) into [3]
// INVALID-NOT: Traceback
