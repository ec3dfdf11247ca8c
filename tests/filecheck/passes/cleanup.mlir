// RUN: hbir-opt %s --split-input-file -p cleanup | filecheck %s
// RUN: not hbir-opt %s -p 'cleanup{aggressive=true}' 2>&1 | filecheck %s --check-prefix=BADOPT

// Positive: a reshape chain folds, two transposes cancel, a same-type cast and a
// dead op disappear.
// CHECK-LABEL: func.func @folds
// CHECK-NEXT:    %b = hbir.reshape %x : tensor<2x8xf32> -> tensor<4x4xf32>
// CHECK-NEXT:    func.return %b : tensor<4x4xf32>
func.func @folds(%x: tensor<2x8xf32>) -> tensor<4x4xf32> {
  %a = hbir.reshape %x : tensor<2x8xf32> -> tensor<16xf32>
  %b = hbir.reshape %a : tensor<16xf32> -> tensor<4x4xf32>
  %c = hbir.transpose %b {perm = array<i64: 1, 0>} : tensor<4x4xf32> -> tensor<4x4xf32>
  %d = hbir.transpose %c {perm = array<i64: 1, 0>} : tensor<4x4xf32> -> tensor<4x4xf32>
  %e = hbir.cast %d : tensor<4x4xf32> -> tensor<4x4xf32>
  %unused = hbir.relu %x : tensor<2x8xf32>
  func.return %e : tensor<4x4xf32>
}

// -----

// Two different transposes compose into one.
// CHECK-LABEL: func.func @composes
// CHECK-NEXT:    %{{.*}} = hbir.transpose %x {perm = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT:    func.return
func.func @composes(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %a = hbir.transpose %x {perm = array<i64: 1, 0, 2>} : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  %b = hbir.transpose %a {perm = array<i64: 2, 1, 0>} : tensor<3x2x4xf32> -> tensor<4x2x3xf32>
  func.return %b : tensor<4x2x3xf32>
}

// -----

// Does not apply: real reshapes/transposes/casts that are used stay as they are.
// CHECK-LABEL: func.func @keeps
// CHECK-NEXT:    %a = hbir.reshape %x : tensor<2x8xf32> -> tensor<16xf32>
// CHECK-NEXT:    %b = hbir.relu %a : tensor<16xf32>
// CHECK-NEXT:    %c = hbir.cast %b : tensor<16xf32> -> tensor<16xsi32>
// CHECK-NEXT:    func.return %c : tensor<16xsi32>
func.func @keeps(%x: tensor<2x8xf32>) -> tensor<16xsi32> {
  %a = hbir.reshape %x : tensor<2x8xf32> -> tensor<16xf32>
  %b = hbir.relu %a : tensor<16xf32>
  %c = hbir.cast %b : tensor<16xf32> -> tensor<16xsi32>
  func.return %c : tensor<16xsi32>
}

// Invalid option: the pass has none.
// BADOPT: hbir-opt: error: Provided arguments ["aggressive"] not found in expected arguments []

// A malformed option value is a located message too, not a traceback.
// RUN: not hbir-opt %s -p 'cleanup{x=1..3}' 2>&1 | filecheck %s --check-prefix=BADSPEC
// BADSPEC: hbir-opt: error: Error parsing pass pipeline specification:
// BADSPEC: Unknown token
// BADSPEC-NOT: Traceback

// No refused input: cleanup accepts every module that verifies. Each of its
// rewrites (a reshape chain folded, transposes cancelled or composed, a same-type
// cast or a dead op dropped) is an identity on any verified IR, so there is no IR
// that reaches it and must be refused; its refusals are its options (BADOPT,
// BADSPEC above).
