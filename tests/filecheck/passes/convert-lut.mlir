// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p convert-lut | filecheck %s
// RUN: not hbir-opt %s --split-input-file -p convert-lut 2>&1 | filecheck %s --check-prefix=INVALID
// RUN: not hbir-opt %s -p 'convert-lut{num_tables=24}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not hbir-opt %S/Inputs/convert_lut_refused.mlir -p convert-lut 2>&1 | filecheck %s --check-prefix=REFUSED

// Positive: an int8 sigmoid with a table configuration becomes hbir.lut on the
// codes (256 direct entries) and a dequantize at the output scale 2**-7.
// Expected table, derived in Python with math.exp and round (half to even):
//   t[q + 128] = min(127, max(-128, round(128 / (1 + exp(-q * 0.0625)))))
//   for q in -128..127, printed as hex bytes (4 lines of 64 entries below).
// CHECK-LABEL: func.func @sigmoid
// CHECK:         %[[L:.*]] = hbir.lut %xq {table = dense<"0x
// CHECK-SAME:    00000000000000000000000000000000000000000000000000000000000000000000000000000000010101010101010101010101010101010101020202020202
// CHECK-SAME:    0202030303030304040404040505050606060707080809090A0A0B0C0C0D0E0E0F1011121314151617191A1B1D1E1F2122242627292B2D2E30323436383A3C3E
// CHECK-SAME:    40424446484A4C4E5052535557595A5C5E5F616263656667696A6B6C6D6E6F707172727374747576767777787879797A7A7A7B7B7B7C7C7C7C7C7D7D7D7D7D7E
// CHECK-SAME:    7E7E7E7E7E7E7E7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F7F
// CHECK-SAME:    "> : tensor<256xsi8>} : tensor<4xsi8> -> tensor<4xsi8>
// CHECK-NEXT:    %[[D:.*]] = qnt.dequantize %[[L]] {scales = array<f32: 7.812500e-03>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
// CHECK-NEXT:    func.return %[[D]]
func.func @sigmoid(%xq: tensor<4xsi8>) -> tensor<4xf32> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.0625>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %y = hbir.sigmoid %x {num_tables = 24 : i64, in_scale = 6.25e-02 : f64, in_bits = 8 : i64, out_scale = 7.8125e-03 : f64, out_bits = 8 : i64} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}

// -----

// Does not apply: the input grid (0.125) differs from the configuration's
// in_scale (0.0625), and a sigmoid without a table configuration stays float.
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %x = qnt.dequantize %xq
// CHECK-NEXT:    %y = hbir.sigmoid %x {num_tables = 24 : i64, {{.*}}} : tensor<4xf32>
// CHECK-NEXT:    %z = hbir.sigmoid %x : tensor<4xf32>
// CHECK-NEXT:    func.return %y, %z
func.func @kept(%xq: tensor<4xsi8>) -> (tensor<4xf32>, tensor<4xf32>) {
  %x = qnt.dequantize %xq {scales = array<f32: 0.125>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %y = hbir.sigmoid %x {num_tables = 24 : i64, in_scale = 6.25e-02 : f64, in_bits = 8 : i64, out_scale = 7.8125e-03 : f64, out_bits = 8 : i64} : tensor<4xf32>
  %z = hbir.sigmoid %x : tensor<4xf32>
  func.return %y, %z : tensor<4xf32>, tensor<4xf32>
}

// -----

// Invalid input: a table configuration with num_tables not a multiple of 6 is
// rejected, located, before the pass runs; nothing is printed.
// CHECK: convert-lut.mlir:52:3: error: 'hbir.sigmoid' op num_tables must be a positive multiple of 6 up to 65536 (a table per 16-bit input code), got 25
// INVALID: convert-lut.mlir:52:3: error: 'hbir.sigmoid' op num_tables must be a positive multiple of 6 up to 65536 (a table per 16-bit input code), got 25
// INVALID-NOT: builtin.module
// INVALID-NOT: Traceback
func.func @bad_tables(%xq: tensor<4xsi8>) -> tensor<4xf32> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.0625>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %y = hbir.sigmoid %x {num_tables = 25 : i64, in_scale = 6.25e-02 : f64, in_bits = 8 : i64, out_scale = 7.8125e-03 : f64, out_bits = 8 : i64} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}

// Invalid option: the pass has none.
// BADOPT: hbir-opt: error: Provided arguments ["num_tables"] not found in expected arguments []

// Refused input (Inputs/convert_lut_refused.mlir): IR that verifies and reaches the pass, which
// must refuse it, located at the op's line in the text, nothing printed.
// REFUSED: convert_lut_refused.mlir:5:3: error: 'hbir.exp' op has no lookup table: LUT scales must be positive and finite
// REFUSED-NOT: builtin.module
// REFUSED-NOT: Traceback
