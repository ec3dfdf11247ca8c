// Input of convert-pool.mlir (REFUSED): a mean whose requantization factor
// s_in / (n * s_out) = 1e30 / (8 * 1e-30) no 31-bit multiplier and shift can hold.
func.func @degenerate(%xq: tensor<2x8xsi8>) -> tensor<2xsi8> {
  %x = qnt.dequantize %xq {scales = array<f32: 1.0e30>, zeros = array<i64: 0>} : tensor<2x8xsi8> -> tensor<2x8xf32>
  %m = hbir.reduce_mean %x {dims = array<i64: 1>} : tensor<2x8xf32> -> tensor<2xf32>
  %q = qnt.quantize %m {scales = array<f32: 1.0e-30>, zeros = array<i64: 0>} : tensor<2xf32> -> tensor<2xsi8>
  func.return %q : tensor<2xsi8>
}
