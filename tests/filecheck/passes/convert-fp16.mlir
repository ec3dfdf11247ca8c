// RUN: hbir-opt %s --split-input-file -p convert-fp16 | filecheck %s
// RUN: not hbir-opt %s -p 'convert-fp16{march=nash-p}' 2>&1 | filecheck %s --check-prefix=BADOPT

// Positive: an fp16 sigmoid on a dequantized value's f16 rounding, a transpose of
// its result and a layer norm with float32 weights become ops on f16 values; the
// cast back to float32 before the quantize stays.
// CHECK-LABEL: func.func @fp16_chain
// CHECK-NEXT:    %x = qnt.dequantize %q {{.*}} -> tensor<2x4xf32>
// CHECK-NEXT:    %h = hbir.cast %x : tensor<2x4xf32> -> tensor<2x4xf16>
// CHECK-NEXT:    %[[S:.*]] = hbir.sigmoid %h : tensor<2x4xf16>
// CHECK-NEXT:    %[[T:.*]] = hbir.transpose %[[S]] {perm = array<i64: 1, 0>} : tensor<2x4xf16> -> tensor<4x2xf16>
// CHECK-NEXT:    %w = hbir.constant dense<1.500000e+00> : tensor<2xf32>
// CHECK-NEXT:    %[[N:.*]] = hbir.layer_norm %[[T]] weight(%w : tensor<2xf32>) {{.*}} : tensor<4x2xf16> -> tensor<4x2xf16>
// CHECK-NEXT:    %[[W:.*]] = hbir.cast %[[N]] : tensor<4x2xf16> -> tensor<4x2xf32>
// CHECK-NEXT:    %{{.*}} = qnt.quantize %[[W]]
func.func @fp16_chain(%q: tensor<2x4xsi8>) -> tensor<4x2xsi8> {
  %x = qnt.dequantize %q {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<2x4xsi8> -> tensor<2x4xf32>
  %h = hbir.cast %x : tensor<2x4xf32> -> tensor<2x4xf16>
  %x16 = hbir.cast %h : tensor<2x4xf16> -> tensor<2x4xf32>
  %s = hbir.sigmoid %x16 : tensor<2x4xf32>
  %sh = hbir.cast %s : tensor<2x4xf32> -> tensor<2x4xf16>
  %s32 = hbir.cast %sh : tensor<2x4xf16> -> tensor<2x4xf32>
  %t = hbir.transpose %s32 {perm = array<i64: 1, 0>} : tensor<2x4xf32> -> tensor<4x2xf32>
  %w = hbir.constant dense<1.5> : tensor<2xf32>
  %n = hbir.layer_norm %t weight(%w : tensor<2xf32>) {normalized_shape = array<i64: 2>, eps = 1.0e-05 : f64} : tensor<4x2xf32> -> tensor<4x2xf32>
  %nh = hbir.cast %n : tensor<4x2xf32> -> tensor<4x2xf16>
  %n32 = hbir.cast %nh : tensor<4x2xf16> -> tensor<4x2xf32>
  %y = qnt.quantize %n32 {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<4x2xf32> -> tensor<4x2xsi8>
  func.return %y : tensor<4x2xsi8>
}

// -----

// Does not apply: a sigmoid whose result is not rounded to f16 (a float island),
// and one whose input is not an f16 value, stay float32.
// CHECK-LABEL: func.func @not_fp16
// CHECK:         %s = hbir.sigmoid %x16 : tensor<4xf32>
// CHECK:         %t = hbir.sigmoid %x : tensor<4xf32>
func.func @not_fp16(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf16>) {
  %h = hbir.cast %x : tensor<4xf32> -> tensor<4xf16>
  %x16 = hbir.cast %h : tensor<4xf16> -> tensor<4xf32>
  %s = hbir.sigmoid %x16 : tensor<4xf32>
  %t = hbir.sigmoid %x : tensor<4xf32>
  %th = hbir.cast %t : tensor<4xf32> -> tensor<4xf16>
  func.return %s, %th : tensor<4xf32>, tensor<4xf16>
}

// Invalid option: the pass has none. (No refused input: convert-fp16 accepts
// every module that verifies; what is not an fp16 op it leaves as it is.)
// BADOPT: hbir-opt: error: Provided arguments ["march"] not found in expected arguments []
