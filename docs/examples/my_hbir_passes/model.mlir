func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = hbir.relu %x : tensor<4xf32>
  %b = hbir.relu %a : tensor<4xf32>
  func.return %b : tensor<4xf32>
}
