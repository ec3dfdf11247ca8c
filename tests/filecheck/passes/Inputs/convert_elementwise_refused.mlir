// Input of convert-elementwise.mlir (REFUSED): an add whose requantization factor
// (operand grid / output grid, about 1e60) no 31-bit multiplier and shift can hold.
func.func @degenerate(%aq: tensor<4xsi8>, %bq: tensor<4xsi8>) -> tensor<4xsi8> {
  %a = qnt.dequantize %aq {scales = array<f32: 1.0e30>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %b = qnt.dequantize %bq {scales = array<f32: 1.0e30>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %s = hbir.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %q = qnt.quantize %s {scales = array<f32: 1.0e-30>, zeros = array<i64: 0>} : tensor<4xf32> -> tensor<4xsi8>
  func.return %q : tensor<4xsi8>
}
