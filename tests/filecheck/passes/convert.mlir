// RUN: hbir-opt %s --split-input-file -p 'convert{march=nash-e}' | filecheck %s
// RUN: not hbir-opt %s -p 'convert{march=nash-x}' 2>&1 | filecheck %s --check-prefix=BADMARCH

// Positive: relu between two fake quantizations becomes one requantize with a clip.
// CHECK-LABEL: func.func @relu
// CHECK-NEXT:    %{{.*}} = qnt.quantize %x {scales = array<f32: 7.812500e-03>
// CHECK-NEXT:    %{{.*}} = qnt.requantize %{{.*}} {multiplier = array<i64: 1073741824>, shift = array<i64: 31>, clip = array<i64: 0, 127>}
// CHECK-NEXT:    %{{.*}} = qnt.dequantize
// CHECK-NEXT:    func.return
func.func @relu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = qnt.const_fake_quant %x {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<4xf32>
  %r = hbir.relu %a : tensor<4xf32>
  %b = qnt.const_fake_quant %r {min = array<f64: -2.0>, max = array<f64: 1.984375>, bits = 8 : i64} : tensor<4xf32>
  func.return %b : tensor<4xf32>
}

// -----

// Does not apply: a float op with no fake quantization stays float.
// CHECK-LABEL: func.func @float
// CHECK-NEXT:    %r = hbir.relu %x : tensor<4xf32>
// CHECK-NEXT:    func.return %r
func.func @float(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = hbir.relu %x : tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// Invalid: an unknown march.
// BADMARCH: unknown march 'nash-x'
