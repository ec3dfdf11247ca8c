// Input of fold-constants.mlir: a segmented table whose fields fail validation
// (num_tables disagrees with the three segment arrays), on a constant.
func.func @bad(%x: tensor<2xf32>) -> tensor<2xsi8> {
  %c = hbir.constant dense<[1, 2]> : tensor<2xsi16>
  %y = hbir.lut %c {function = "sigmoid", kind = "segments", rounding = "half_even", in_scale = 6.25e-02 : f32, out_scale = 7.8125e-03 : f32, in_bits = 16 : i64, out_bits = 8 : i64, num_tables = 6 : i64, frac_bits = 0 : i64, phase_mult = 0 : i64, phase_shift = 0 : i64, phase_bits = 0 : i64, octave_step = 0 : i64, starts = array<i64: 0>, offsets = array<i64: 0>, slopes = array<i64: 0>} : tensor<2xsi16> -> tensor<2xsi8> loc("model.py":9:5)
  func.return %y : tensor<2xsi8>
}
