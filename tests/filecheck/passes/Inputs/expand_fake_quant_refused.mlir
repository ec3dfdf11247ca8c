// Input of expand-fake-quant.mlir (REFUSED): a fake quantization whose range
// [-1e-45, 1e-45] gives a float32 scale of 0: there is no integer grid.
func.func @no_grid(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = qnt.const_fake_quant %x {min = array<f64: -1.0e-45>, max = array<f64: 1.0e-45>, bits = 8 : i64} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
