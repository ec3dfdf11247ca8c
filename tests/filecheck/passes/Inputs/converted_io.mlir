// A converted model (hbir.march set) with a quantize at its input and a
// dequantize at its output: what remove-io-op removes and insert-* refuse.
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    %q = qnt.quantize %x {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<4xf32> -> tensor<4xsi8>
    %r = hbir.relu %q : tensor<4xsi8>
    %d = qnt.dequantize %r {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
    func.return %d : tensor<4xf32>
  }
}
