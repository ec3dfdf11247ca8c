// Input of check-march.mlir (FP16, FP16P): a sigmoid in fp16 (the float16
// qconfig: its input and output rounded to f16 by casts) on si8 codes. nash-e has
// no fp16 and refuses it, naming the sigmoid; nash-p keeps it as it is.
func.func @fp16_sigmoid(%xq: tensor<4xsi8>) -> tensor<4xf32> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %h = hbir.cast %x : tensor<4xf32> -> tensor<4xf16>
  %x16 = hbir.cast %h : tensor<4xf16> -> tensor<4xf32>
  %s = hbir.sigmoid %x16 : tensor<4xf32>
  %sh = hbir.cast %s : tensor<4xf32> -> tensor<4xf16>
  %y = hbir.cast %sh : tensor<4xf16> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
