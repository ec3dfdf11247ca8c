// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p convert-gemm | filecheck %s
// RUN: not hbir-opt %s --split-input-file -p convert-gemm 2>&1 | filecheck %s --check-prefix=INVALID
// RUN: not hbir-opt %s -p 'convert-gemm{march=nash-e}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not hbir-opt %S/Inputs/convert_gemm_refused.mlir -p convert-gemm 2>&1 | filecheck %s --check-prefix=REFUSED

// Positive: linear on si8 codes (per-channel weight) + relu + quantize becomes an
// si8 x si8 -> si32 linear and one per-channel requantize with the relu as clip.
// Multipliers derived in Python: real_c = F(f32(0.02)) * F(f32(s_w[c])) *
// F(f32(1 / f32(0.05))) with fractions.Fraction, then multiplier = round-half-up
// of real_c * 2**(31 - e) for 2**(e-1) <= real_c < 2**e, shift = 31 - e:
// s_w = 0.01 -> (1099511579, 38); s_w = 0.003 -> (1319413935, 40).
// relu -> clip [round(0 / 0.05), 127] = [0, 127].
// CHECK-LABEL: func.func @linear
// CHECK-NOT:     hbir.relu
// CHECK:         %0 = hbir.linear %xq, %wq : (tensor<1x4xsi8>, tensor<2x4xsi8>) -> tensor<1x2xsi32>
// CHECK-NEXT:    %q = qnt.requantize %0 {multiplier = array<i64: 1099511579, 1319413935>, shift = array<i64: 38, 40>, axis = 1 : i64, clip = array<i64: 0, 127>} : tensor<1x2xsi32> -> tensor<1x2xsi8>
// CHECK-NEXT:    func.return %q : tensor<1x2xsi8>
func.func @linear(%xq: tensor<1x4xsi8>, %wq: tensor<2x4xsi8>) -> tensor<1x2xsi8> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.02>, zeros = array<i64: 0>} : tensor<1x4xsi8> -> tensor<1x4xf32>
  %w = qnt.dequantize %wq {scales = array<f32: 0.01, 0.003>, zeros = array<i64: 0, 0>, axis = 0 : i64} : tensor<2x4xsi8> -> tensor<2x4xf32>
  %y = hbir.linear %x, %w : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<1x2xf32>
  %r = hbir.relu %y : tensor<1x2xf32>
  %q = qnt.quantize %r {scales = array<f32: 0.05>, zeros = array<i64: 0>} : tensor<1x2xf32> -> tensor<1x2xsi8>
  func.return %q : tensor<1x2xsi8>
}

// -----

// Does not apply: the gemm's result is not quantized (a float output), and a gemm
// that check-march marked for the CPU stays float even though it is quantized.
// CHECK-LABEL: func.func @float_result
// CHECK-NEXT:    %x = qnt.dequantize %xq
// CHECK-NEXT:    %w = qnt.dequantize %wq
// CHECK-NEXT:    %y = hbir.linear %x, %w : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<1x2xf32>
// CHECK-NEXT:    %c = hbir.linear %x, %w {hbir.device = "cpu"{{.*}}} : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<1x2xf32>
// CHECK-NEXT:    %q = qnt.quantize %c
// CHECK-NEXT:    func.return %y, %q
// CHECK-NOT:     qnt.requantize
func.func @float_result(%xq: tensor<1x4xsi8>, %wq: tensor<2x4xsi8>) -> (tensor<1x2xf32>, tensor<1x2xsi8>) {
  %x = qnt.dequantize %xq {scales = array<f32: 0.02>, zeros = array<i64: 0>} : tensor<1x4xsi8> -> tensor<1x4xf32>
  %w = qnt.dequantize %wq {scales = array<f32: 0.01>, zeros = array<i64: 0>} : tensor<2x4xsi8> -> tensor<2x4xf32>
  %y = hbir.linear %x, %w : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<1x2xf32>
  %c = hbir.linear %x, %w {hbir.device = "cpu", hbir.cpu_reason = "test"} : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<1x2xf32>
  %q = qnt.quantize %c {scales = array<f32: 0.05>, zeros = array<i64: 0>} : tensor<1x2xf32> -> tensor<1x2xsi8>
  func.return %y, %q : tensor<1x2xf32>, tensor<1x2xsi8>
}

// -----

// Positive, at the accumulator's limit: 512 products of si16 x si8 codes can reach
// 512 * 2**15 * 2**7 = 2**31, beyond si32, so the input codes are first divided by 2
// (numerics.gemm_operand_shifts: multiplier 1, shift 1, the model's rounding) and
// the accumulator's grid is twice as coarse.
// CHECK-LABEL: func.func @wide_int16
// CHECK:         %[[S:.*]] = qnt.requantize %xq {multiplier = array<i64: 1>, shift = array<i64: 1>} : tensor<1x512xsi16> -> tensor<1x512xsi16>
// CHECK-NEXT:    %[[A:.*]] = hbir.linear %[[S]], %wq : (tensor<1x512xsi16>, tensor<2x512xsi8>) -> tensor<1x2xsi32>
// CHECK-NEXT:    qnt.requantize %[[A]]
func.func @wide_int16(%xq: tensor<1x512xsi16>, %wq: tensor<2x512xsi8>) -> tensor<1x2xsi8> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.001>, zeros = array<i64: 0>} : tensor<1x512xsi16> -> tensor<1x512xf32>
  %w = qnt.dequantize %wq {scales = array<f32: 0.01>, zeros = array<i64: 0>} : tensor<2x512xsi8> -> tensor<2x512xf32>
  %y = hbir.linear %x, %w : (tensor<1x512xf32>, tensor<2x512xf32>) -> tensor<1x2xf32>
  %q = qnt.quantize %y {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<1x2xf32> -> tensor<1x2xsi8>
  func.return %q : tensor<1x2xsi8>
}

// -----

// Invalid input: a per-channel weight dequantize with 3 scales for 2 channels is
// rejected, located, before the pass runs; nothing is printed.
func.func @bad_weight(%xq: tensor<1x4xsi8>, %wq: tensor<2x4xsi8>) -> tensor<1x2xsi8> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.02>, zeros = array<i64: 0>} : tensor<1x4xsi8> -> tensor<1x4xf32>
  %w = qnt.dequantize %wq {scales = array<f32: 0.01, 0.02, 0.03>, zeros = array<i64: 0, 0, 0>, axis = 0 : i64} : tensor<2x4xsi8> -> tensor<2x4xf32>
  %y = hbir.linear %x, %w : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<1x2xf32>
  %q = qnt.quantize %y {scales = array<f32: 0.05>, zeros = array<i64: 0>} : tensor<1x2xf32> -> tensor<1x2xsi8>
  func.return %q : tensor<1x2xsi8>
}
// CHECK: convert-gemm.mlir:72:3: error: 'qnt.dequantize' op per-channel parameters have 3 values, dim 0 has 2
// INVALID: convert-gemm.mlir:72:3: error: 'qnt.dequantize' op per-channel parameters have 3 values, dim 0 has 2
// INVALID-NOT: builtin.module
// INVALID-NOT: Traceback

// Invalid option: the pass has none.
// BADOPT: hbir-opt: error: Provided arguments ["march"] not found in expected arguments []

// Refused input (Inputs/convert_gemm_refused.mlir): IR that verifies and reaches the pass, which
// must refuse it, located at the op's line in the text, nothing printed.
// REFUSED: convert_gemm_refused.mlir:7:3: error: 'qnt.quantize' op needs a requantization by 1e+90
// REFUSED-NOT: builtin.module
// REFUSED-NOT: Traceback
