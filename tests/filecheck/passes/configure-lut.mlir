// RUN: hbir-opt %s --split-input-file -p configure-lut | filecheck %s
// RUN: not hbir-opt %S/Inputs/configure_lut_12_bits.mlir -p configure-lut 2>&1 | filecheck %s --check-prefix=INVALID

// Positive: the input grid is the fake quantization before the reshape (8 bits,
// max 7.9375 = 127 * 2**-4, so scale 2**-4); the output grid is the fake
// quantization of the result (0.9921875 = 127 * 2**-7). int16 grids work alike.
// CHECK-LABEL: func.func @configured
// CHECK:         %y = hbir.sigmoid %r {num_tables = 162 : i64, in_scale = 6.250000e-02 : f64, in_bits = 8 : i64, out_scale = 7.812500e-03 : f64, out_bits = 8 : i64} : tensor<4xf32>
// CHECK:         %t = hbir.tanh %b {num_tables = 450 : i64, in_scale = 0.000244140625 : f64, in_bits = 16 : i64, out_scale = 3.0517578125e-05 : f64, out_bits = 16 : i64} : tensor<4xf32>
func.func @configured(%x: tensor<2x2xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = qnt.const_fake_quant %x {min = array<f64: -8.0>, max = array<f64: 7.9375>, bits = 8 : i64} : tensor<2x2xf32>
  %r = hbir.reshape %a : tensor<2x2xf32> -> tensor<4xf32>
  %y = hbir.sigmoid %r {num_tables = 162 : i64} : tensor<4xf32>
  %z = qnt.const_fake_quant %y {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<4xf32>
  %b = qnt.const_fake_quant %r {min = array<f64: -8.0>, max = array<f64: 7.999755859375>, bits = 16 : i64} : tensor<4xf32>
  %t = hbir.tanh %b {num_tables = 450 : i64} : tensor<4xf32>
  %u = qnt.const_fake_quant %t {min = array<f64: -1.0>, max = array<f64: 0.999969482421875>, bits = 16 : i64} : tensor<4xf32>
  func.return %z, %u : tensor<4xf32>, tensor<4xf32>
}

// -----

// Does not apply: a per-channel input grid, a nonzero zero point (min is not
// -128 * scale), no fake quantization after the op, an op that asks for no table,
// and an input behind a bilinear resize (its values are off the grid) keep their
// float functions, as pre_export's modules do.
// CHECK-LABEL: func.func @kept
// CHECK:         hbir.sigmoid %a {num_tables = 162 : i64} : tensor<2x2xf32>
// CHECK:         hbir.sigmoid %c {num_tables = 162 : i64} : tensor<2x2xf32>
// CHECK:         hbir.sigmoid %b {num_tables = 162 : i64} : tensor<2x2xf32>
// CHECK:         hbir.sigmoid %b : tensor<2x2xf32>
// CHECK:         hbir.sigmoid %rs {num_tables = 162 : i64} : tensor<1x1x4x4xf32>
func.func @kept(%x: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<1x1x4x4xf32>) {
  %a = qnt.const_fake_quant %x {min = array<f64: -1.0, -2.0>, max = array<f64: 0.9921875, 1.984375>, bits = 8 : i64, axis = 0 : i64} : tensor<2x2xf32>
  %y = hbir.sigmoid %a {num_tables = 162 : i64} : tensor<2x2xf32>
  %yq = qnt.const_fake_quant %y {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<2x2xf32>
  %c = qnt.const_fake_quant %x {min = array<f64: -0.5>, max = array<f64: 1.4921875>, bits = 8 : i64} : tensor<2x2xf32>
  %z = hbir.sigmoid %c {num_tables = 162 : i64} : tensor<2x2xf32>
  %zq = qnt.const_fake_quant %z {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<2x2xf32>
  %b = qnt.const_fake_quant %x {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<2x2xf32>
  %w = hbir.sigmoid %b {num_tables = 162 : i64} : tensor<2x2xf32>
  %v = hbir.sigmoid %b : tensor<2x2xf32>
  %vq = qnt.const_fake_quant %v {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<2x2xf32>
  %r4 = hbir.reshape %b : tensor<2x2xf32> -> tensor<1x1x2x2xf32>
  %rs = hbir.resize2d %r4 {size = array<i64: 4, 4>, mode = "bilinear"} : tensor<1x1x2x2xf32> -> tensor<1x1x4x4xf32>
  %u = hbir.sigmoid %rs {num_tables = 162 : i64} : tensor<1x1x4x4xf32>
  %uq = qnt.const_fake_quant %u {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<1x1x4x4xf32>
  func.return %yq, %zq, %w, %vq, %uq : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<1x1x4x4xf32>
}

// Invalid input that reaches the pass: a 12-bit input grid has no table; the error
// names the op's location and nothing is printed.
// INVALID: model.py:7:9: error: 'hbir.sigmoid' op input grid has 12 bits; lookup tables take 8 or 16
// INVALID-NOT: func.func
// INVALID-NOT: Traceback
