// Input of convert-lut.mlir (REFUSED): a table configuration that verifies (an f64
// out_scale) but whose output scale is 0 in float32: no table can be built.
func.func @no_table(%xq: tensor<4xsi16>) -> tensor<4xf32> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.001>, zeros = array<i64: 0>} : tensor<4xsi16> -> tensor<4xf32>
  %y = hbir.exp %x {num_tables = 24 : i64, in_scale = 0.001 : f64, in_bits = 16 : i64, out_scale = 1.0e-50 : f64, out_bits = 16 : i64} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
