// RUN: hbir-opt %s --split-input-file -p fold-constants,cleanup | filecheck %s
// RUN: not hbir-opt %s -p 'fold-constants{limit=4}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not hbir-opt %S/Inputs/fold_constants_bad_reshape.mlir -p fold-constants 2>&1 | filecheck %s --check-prefix=INVALID
// RUN: not hbir-opt %S/Inputs/fold_constants_bad_table.mlir -p fold-constants 2>&1 | filecheck %s --check-prefix=HOSTILE

// Positive: gamma.reshape(1, -1, 1, 1) on a parameter becomes one constant of the
// final shape (the values in their reshaped order); a transpose, a slice, a float
// cast (f64 -> f32 rounds 0.1 to its nearest float, 0.100000001490116...), an
// integer cast and arithmetic on constants fold likewise.
// CHECK-LABEL: func.func @folds
// CHECK-NEXT:    %[[G:.*]] = hbir.constant dense<{{\[\[\[\[}}1.000000e+00]], {{\[\[}}2.000000e+00]]]]> : tensor<1x2x1x1xf32>
// CHECK-NEXT:    %[[M:.*]] = hbir.mul %x, %[[G]]
// CHECK-NEXT:    %[[T:.*]] = hbir.constant dense<{{\[\[}}1.000000e+00, 3.000000e+00], [2.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>
// CHECK-NEXT:    %[[S:.*]] = hbir.constant dense<[2.000000e+00, 4.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %[[C:.*]] = hbir.constant dense<1.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[I:.*]] = hbir.constant dense<[1, 2]> : tensor<2xsi8>
// CHECK-NEXT:    %[[A:.*]] = hbir.constant dense<[4.000000e+00, 8.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    func.return %[[M]], %[[T]], %[[S]], %[[C]], %[[I]], %[[A]]
func.func @folds(%x: tensor<1x2x3x3xf32>) -> (tensor<1x2x3x3xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<f32>, tensor<2xsi8>, tensor<2xf32>) {
  %g = hbir.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %r = hbir.reshape %g : tensor<2xf32> -> tensor<1x2x1x1xf32>
  %m = hbir.mul %x, %r : (tensor<1x2x3x3xf32>, tensor<1x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %w = hbir.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %t = hbir.transpose %w {perm = array<i64: 1, 0>} : tensor<2x2xf32> -> tensor<2x2xf32>
  %s = hbir.slice %w {begin = array<i64: 0, 1>, end = array<i64: 2, 2>, step = array<i64: 1, 1>} : tensor<2x2xf32> -> tensor<2x1xf32>
  %sr = hbir.reshape %s : tensor<2x1xf32> -> tensor<2xf32>
  %d = hbir.constant dense<0.1> : tensor<f64>
  %c = hbir.cast %d : tensor<f64> -> tensor<f32>
  %i = hbir.cast %g : tensor<2xf32> -> tensor<2xsi8>
  %a = hbir.add %sr, %sr : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %m, %t, %sr, %c, %i, %a : tensor<1x2x3x3xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<f32>, tensor<2xsi8>, tensor<2xf32>
}

// -----

// A split of a constant: one constant per result (RoPE's sin / cos tables).
// CHECK-LABEL: func.func @split
// CHECK-NEXT:    %[[A:.*]] = hbir.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %[[B:.*]] = hbir.constant dense<3.000000e+00> : tensor<1xf32>
// CHECK-NEXT:    func.return %[[A]], %[[B]]
func.func @split() -> (tensor<2xf32>, tensor<1xf32>) {
  %w = hbir.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %a, %b = hbir.split %w {sizes = array<i64: 2, 1>, dim = 0 : i64} : (tensor<3xf32>) -> (tensor<2xf32>, tensor<1xf32>)
  func.return %a, %b : tensor<2xf32>, tensor<1xf32>
}

// -----

// Does not apply: ops on a function argument or on a computed value, a weight's
// fake quantization (convert reads it), and a lookup table configured for the
// model's rounding mode stay.
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    hbir.reshape %x
// CHECK-NEXT:    hbir.relu
// CHECK-NEXT:    hbir.transpose
// CHECK-NEXT:    hbir.constant
// CHECK-NEXT:    qnt.const_fake_quant
// CHECK-NEXT:    hbir.sigmoid
func.func @kept(%x: tensor<2x2xf32>) -> (tensor<4xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %r = hbir.reshape %x : tensor<2x2xf32> -> tensor<4xf32>
  %y = hbir.relu %x : tensor<2x2xf32>
  %t = hbir.transpose %y {perm = array<i64: 1, 0>} : tensor<2x2xf32> -> tensor<2x2xf32>
  %c = hbir.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %w = qnt.const_fake_quant %c {min = array<f64: -2.0>, max = array<f64: 1.984375>, bits = 8 : i64} : tensor<2xf32>
  %s = hbir.sigmoid %c {num_tables = 162 : i64, in_scale = 6.25e-02 : f64, in_bits = 8 : i64, out_scale = 7.8125e-03 : f64, out_bits = 8 : i64} : tensor<2xf32>
  func.return %r, %t, %w, %s : tensor<4xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<2xf32>
}

// Invalid option: the pass has none.
// BADOPT: hbir-opt: error: Provided arguments ["limit"] not found in expected arguments []

// Invalid input: a reshape of a constant to a different element count is rejected,
// located, before the pass could fold it.
// INVALID: fold_constants_bad_reshape.mlir:4:3: error: 'hbir.reshape' op cannot reshape (2,) (2 elements) into [3]
// INVALID-NOT: Traceback

// Invalid input: a table on a constant whose fields fail validation is refused by
// hbir.lut's verifier (numerics.LutTable's checks), located, before any pass.
// HOSTILE: fold_constants_bad_table.mlir:5:3: error: 'hbir.lut' op segmented table: starts, offsets and slopes need 6 values each
// HOSTILE-NOT: Traceback
