// Input of check-march.mlir (REFUSED): an integer conv (convert already lowered
// it) with a 33x33 kernel, beyond nash-e's 31: it has no float form left to run
// on the CPU.
func.func @wide(%x: tensor<1x4x40x40xsi8>, %w: tensor<4x4x33x33xsi8>) -> tensor<1x4x8x8xsi32> {
  %y = hbir.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x40x40xsi8>, tensor<4x4x33x33xsi8>) -> tensor<1x4x8x8xsi32>
  func.return %y : tensor<1x4x8x8xsi32>
}
