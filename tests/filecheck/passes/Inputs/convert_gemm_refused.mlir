// Input of convert-gemm.mlir (REFUSED): a linear whose requantization factor
// s_x * s_w / s_y = 1e30 * 1e30 / 1e-30 no 31-bit multiplier and shift can hold.
func.func @degenerate(%xq: tensor<1x4xsi8>, %wq: tensor<2x4xsi8>) -> tensor<1x2xsi8> {
  %x = qnt.dequantize %xq {scales = array<f32: 1.0e30>, zeros = array<i64: 0>} : tensor<1x4xsi8> -> tensor<1x4xf32>
  %w = qnt.dequantize %wq {scales = array<f32: 1.0e30>, zeros = array<i64: 0>} : tensor<2x4xsi8> -> tensor<2x4xf32>
  %y = hbir.linear %x, %w : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<1x2xf32>
  %q = qnt.quantize %y {scales = array<f32: 1.0e-30>, zeros = array<i64: 0>} : tensor<1x2xf32> -> tensor<1x2xsi8>
  func.return %q : tensor<1x2xsi8>
}
