// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p convert-elementwise | filecheck %s
// RUN: not hbir-opt %s --split-input-file -p convert-elementwise 2>&1 | filecheck %s --check-prefix=INVALID
// RUN: not hbir-opt %s -p 'convert-elementwise{headroom=29}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not hbir-opt %S/Inputs/convert_elementwise_refused.mlir -p convert-elementwise 2>&1 | filecheck %s --check-prefix=REFUSED

// Multipliers below: (m, s) with m / 2**s = real, derived in Python with
// fractions.Fraction from the float32 scales (f32(x) = struct round trip):
// m = round-half-up of real * 2**(31 - e) for 2**(e-1) <= real < 2**e, s = 31 - e.

// Positive: add of codes at 0.25 and 0.125. The common grid is 2**-3 (the
// coarsest on which both scales are integer multiples): %a is rescaled by
// 0.25 / 2**-3 = 2 -> (1073741824, 29), %b is already on it (a widening cast);
// the si32 sum is requantized by 2**-3 * f32(1 / 0.5) = 0.25 -> (1073741824, 32).
// CHECK-LABEL: func.func @add
// CHECK:         %[[A:.*]] = qnt.requantize %aq {multiplier = array<i64: 1073741824>, shift = array<i64: 29>} : tensor<4xsi8> -> tensor<4xsi32>
// CHECK-NEXT:    %[[B:.*]] = hbir.cast %bq : tensor<4xsi8> -> tensor<4xsi32>
// CHECK-NEXT:    %[[S:.*]] = hbir.add %[[A]], %[[B]] : (tensor<4xsi32>, tensor<4xsi32>) -> tensor<4xsi32>
// CHECK-NEXT:    %q = qnt.requantize %[[S]] {multiplier = array<i64: 1073741824>, shift = array<i64: 32>} : tensor<4xsi32> -> tensor<4xsi8>
// CHECK-NEXT:    func.return %q
func.func @add(%aq: tensor<4xsi8>, %bq: tensor<4xsi8>) -> tensor<4xsi8> {
  %a = qnt.dequantize %aq {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %b = qnt.dequantize %bq {scales = array<f32: 0.125>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %z = hbir.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %q = qnt.quantize %z {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<4xf32> -> tensor<4xsi8>
  func.return %q : tensor<4xsi8>
}

// -----

// Positive: mul is the exact product of the widened codes, requantized once by
// f32(0.02) * f32(0.03) * f32(1 / f32(0.05)) -> (1649267368, 37); the relu is the clip.
// CHECK-LABEL: func.func @mul
// CHECK:         %[[A:.*]] = hbir.cast %aq : tensor<4xsi8> -> tensor<4xsi32>
// CHECK-NEXT:    %[[B:.*]] = hbir.cast %bq : tensor<4xsi8> -> tensor<4xsi32>
// CHECK-NEXT:    %[[P:.*]] = hbir.mul %[[A]], %[[B]] : (tensor<4xsi32>, tensor<4xsi32>) -> tensor<4xsi32>
// CHECK-NEXT:    %q = qnt.requantize %[[P]] {multiplier = array<i64: 1649267368>, shift = array<i64: 37>, clip = array<i64: 0, 127>} : tensor<4xsi32> -> tensor<4xsi8>
// CHECK-NEXT:    func.return %q
func.func @mul(%aq: tensor<4xsi8>, %bq: tensor<4xsi8>) -> tensor<4xsi8> {
  %a = qnt.dequantize %aq {scales = array<f32: 0.02>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %b = qnt.dequantize %bq {scales = array<f32: 0.03>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %z = hbir.mul %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %r = hbir.relu %z : tensor<4xf32>
  %q = qnt.quantize %r {scales = array<f32: 0.05>, zeros = array<i64: 0>} : tensor<4xf32> -> tensor<4xsi8>
  func.return %q : tensor<4xsi8>
}

// -----

// Does not apply: an operand that is neither codes nor a constant (%f), and a
// product of two per-channel operands, stay float.
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %a = qnt.dequantize %aq
// CHECK-NEXT:    %z = hbir.add %a, %f : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %q = qnt.quantize %z
// CHECK-NEXT:    %c = qnt.dequantize %cq
// CHECK-NEXT:    %m = hbir.mul %c, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %p = qnt.quantize %m
// CHECK-NEXT:    func.return %q, %p
func.func @kept(%aq: tensor<2xsi8>, %f: tensor<2xf32>, %cq: tensor<2xsi8>) -> (tensor<2xsi8>, tensor<2xsi8>) {
  %a = qnt.dequantize %aq {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<2xsi8> -> tensor<2xf32>
  %z = hbir.add %a, %f : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %q = qnt.quantize %z {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<2xf32> -> tensor<2xsi8>
  %c = qnt.dequantize %cq {scales = array<f32: 0.25, 0.5>, zeros = array<i64: 0, 0>, axis = 0 : i64} : tensor<2xsi8> -> tensor<2xf32>
  %m = hbir.mul %c, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %p = qnt.quantize %m {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<2xf32> -> tensor<2xsi8>
  func.return %q, %p : tensor<2xsi8>, tensor<2xsi8>
}

// -----

// Invalid input: an add of shapes that do not broadcast is rejected, located,
// before the pass runs; nothing is printed.
// CHECK: convert-elementwise.mlir:80:3: error: 'hbir.add' op shapes (4,) and (3,) are not broadcastable
// INVALID: convert-elementwise.mlir:80:3: error: 'hbir.add' op shapes (4,) and (3,) are not broadcastable
// INVALID-NOT: builtin.module
// INVALID-NOT: Traceback
func.func @bad_shapes(%aq: tensor<4xsi8>, %bq: tensor<3xsi8>) -> tensor<4xf32> {
  %a = qnt.dequantize %aq {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<4xsi8> -> tensor<4xf32>
  %b = qnt.dequantize %bq {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<3xsi8> -> tensor<3xf32>
  %z = hbir.add %a, %b : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
  func.return %z : tensor<4xf32>
}

// Invalid option: the pass has none.
// BADOPT: hbir-opt: error: Provided arguments ["headroom"] not found in expected arguments []

// Refused input (Inputs/convert_elementwise_refused.mlir): IR that verifies and reaches the pass, which
// must refuse it, located at the op's line in the text, nothing printed.
// REFUSED: convert_elementwise_refused.mlir:7:3: error: 'qnt.quantize' op needs a requantization by
// REFUSED-NOT: builtin.module
// REFUSED-NOT: Traceback
