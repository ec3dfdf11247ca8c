// Input of fold-requantize.mlir (REFUSED): quantize(relu(dequantize)) from grid
// 1e30 to grid 1e-30: a factor of 1e60, beyond any 31-bit multiplier and shift.
func.func @degenerate(%q: tensor<4xsi8>) -> tensor<4xsi8> {
  %d = qnt.dequantize %q {scales = array<f32: 1.0e30>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %r = hbir.relu %d : tensor<4xf32>
  %y = qnt.quantize %r {scales = array<f32: 1.0e-30>, zeros = array<i64: 0>} : tensor<4xf32> -> tensor<4xsi8>
  func.return %y : tensor<4xsi8>
}
