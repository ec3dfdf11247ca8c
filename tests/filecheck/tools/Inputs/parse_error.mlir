func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  // a typo in the op name
  %y = hbir.nope %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
