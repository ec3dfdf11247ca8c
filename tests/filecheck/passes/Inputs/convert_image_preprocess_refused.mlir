// Input of convert-image-preprocess.mlir (REFUSED): a std of 1e-300 verifies (an
// f64 that is not 0) but is 0 in the float32 arithmetic the preprocessing runs
// in: the table would be made of infinities.
func.func @nv12(%y: tensor<1x4x6x1xui8>, %uv: tensor<1x2x3x2xui8>) -> tensor<1x3x4x6xsi8> {
  %0 = hbir.image_convert %y, %uv {mode = "nv12"} : (tensor<1x4x6x1xui8>, tensor<1x2x3x2xui8>) -> tensor<1x4x6x3xsi8>
  %1 = hbir.image_preprocess %0 {csc = "yuv_bt601_full_to_rgb", mean = array<f64: 128.0, 128.0, 128.0>, std = array<f64: 1.0e-300, 128.0, 128.0>} : tensor<1x4x6x3xsi8> -> tensor<1x4x6x3xf32>
  %2 = hbir.transpose %1 {perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x6x3xf32> -> tensor<1x3x4x6xf32>
  %3 = qnt.quantize %2 {scales = array<f32: 0.0078125>, zeros = array<i64: 0>} : tensor<1x3x4x6xf32> -> tensor<1x3x4x6xsi8>
  func.return %3 : tensor<1x3x4x6xsi8>
}
