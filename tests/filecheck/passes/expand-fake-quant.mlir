// RUN: hbir-opt %s --split-input-file -p expand-fake-quant | filecheck %s
// RUN: not hbir-opt %s -p 'expand-fake-quant{bits=8}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not hbir-opt %S/Inputs/expand_fake_quant_refused.mlir -p expand-fake-quant 2>&1 | filecheck %s --check-prefix=REFUSED

// Positive: a constant's fake quantization folds to codes; an activation's splits.
// CHECK-LABEL: func.func @expand
// CHECK:         hbir.constant dense<[127, -64]> : tensor<2xsi8>
// CHECK:         qnt.dequantize %{{.*}} {scales = array<f32: 3.906250e-03>
// CHECK:         qnt.quantize %x {scales = array<f32: 7.812500e-03>
// CHECK-NEXT:    qnt.dequantize
func.func @expand(%x: tensor<2xf32>) -> tensor<2xf32> {
  %w = hbir.constant dense<[0.5, -0.25]> : tensor<2xf32>
  %wq = qnt.const_fake_quant %w {min = array<f64: -0.5>, max = array<f64: 0.49609375>, bits = 8 : i64} : tensor<2xf32>
  %a = qnt.const_fake_quant %x {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<2xf32>
  %s = hbir.add %a, %wq : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %s : tensor<2xf32>
}

// -----

// Does not apply: 4-bit fake quantization has no storage type and stays.
// CHECK-LABEL: func.func @four_bits
// CHECK-NEXT:    qnt.const_fake_quant
func.func @four_bits(%x: tensor<2xf32>) -> tensor<2xf32> {
  %a = qnt.const_fake_quant %x {min = array<f64: -8.0>, max = array<f64: 7.0>, bits = 4 : i64} : tensor<2xf32>
  func.return %a : tensor<2xf32>
}

// Invalid option: the pass has none.
// BADOPT: hbir-opt: error: Provided arguments ["bits"] not found in expected arguments []

// Refused input (Inputs/expand_fake_quant_refused.mlir): IR that verifies and reaches the pass, which
// must refuse it, located at the op's line in the text, nothing printed.
// REFUSED: expand_fake_quant_refused.mlir:4:3: error: 'qnt.const_fake_quant' op has no integer grid: its range gives the float32 scale 0.0
// REFUSED-NOT: builtin.module
// REFUSED-NOT: Traceback
