// Input of configure-lut.mlir: a 12-bit grid before a LUT op that asks for a table.
func.func @twelve_bits(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = qnt.const_fake_quant %x {min = array<f64: -8.0>, max = array<f64: 7.99609375>, bits = 12 : i64} : tensor<4xf32>
  %y = hbir.sigmoid %a {num_tables = 162 : i64} : tensor<4xf32> loc("model.py":7:9)
  %z = qnt.const_fake_quant %y {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<4xf32>
  func.return %z : tensor<4xf32>
}
