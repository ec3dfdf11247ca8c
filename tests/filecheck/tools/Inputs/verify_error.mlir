func.func @forward(%a: tensor<2x8xf32>, %b: tensor<4x3xf32>) -> tensor<2x3xf32> {
  // inner dims disagree
  %y = hbir.matmul %a, %b : (tensor<2x8xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
