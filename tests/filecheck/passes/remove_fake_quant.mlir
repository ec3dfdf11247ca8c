// RUN: hbir-opt %s -p 'remove-fake-quant{ids=2 function=chain}' | filecheck %s
// RUN: hbir-opt %s -p 'remove-fake-quant{ids=0-3,6 function=chain}' | filecheck %s --check-prefix=RANGE
// RUN: hbir-opt %s -p 'remove-fake-quant{ids="%2 - %3" function=split}' | filecheck %s --check-prefix=SPLIT
// RUN: not hbir-opt %s -p 'remove-fake-quant{ids=1,9,4-1,5-5 function=chain}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: not hbir-opt %s -p 'remove-fake-quant{ids=3}' 2>&1 | filecheck %s --check-prefix=NOFUNC
// RUN: not hbir-opt %s -p 'remove-fake-quant{ids=3,x,1-}' 2>&1 | filecheck %s --check-prefix=SYNTAX

// IDs are the %N numbers get_asm prints: one per op with a result, counted per
// function from 0. hbir-opt prints xDSL's own numbers, which count the arguments
// too, so in @chain an ID is one less than the number in the CHECK lines.

// Positive: ID 2 (printed %3) goes, the relu reads the float sigmoid; IDs 0 and 4
// (printed %1 and %5) stay.
// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %1 = qnt.const_fake_quant %0 {min = array<f64: -4.000000e+00>
// CHECK-NEXT:    %2 = hbir.sigmoid %1 : tensor<4xf32>
// CHECK-NEXT:    %3 = hbir.relu %2 : tensor<4xf32>
// CHECK-NEXT:    %4 = qnt.const_fake_quant %3 {min = array<f64: -2.000000e+00>
// CHECK-NEXT:    %5 = hbir.add %4, %4
// CHECK-NEXT:    %6 = qnt.const_fake_quant %5
// CHECK-NEXT:    func.return %6 : tensor<4xf32>

// A range takes every fake quant inside it, both ends included, and leaves the
// other ops alone; 6 is the output fake quant.
// RANGE-LABEL: func.func @chain
// RANGE-NEXT:    %1 = hbir.sigmoid %0 : tensor<4xf32>
// RANGE-NEXT:    %2 = hbir.relu %1 : tensor<4xf32>
// RANGE-NEXT:    %3 = qnt.const_fake_quant %2 {min = array<f64: -2.000000e+00>
// RANGE-NEXT:    %4 = hbir.add %3, %3
// RANGE-NEXT:    func.return %4 : tensor<4xf32>
func.func @chain(%0: tensor<4xf32>) -> tensor<4xf32> {
  %1 = qnt.const_fake_quant %0 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<4xf32>
  %2 = hbir.sigmoid %1 : tensor<4xf32>
  %3 = qnt.const_fake_quant %2 {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<4xf32>
  %4 = hbir.relu %3 : tensor<4xf32>
  %5 = qnt.const_fake_quant %4 {min = array<f64: -2.0>, max = array<f64: 1.984375>, bits = 8 : i64} : tensor<4xf32>
  %6 = hbir.add %5, %5 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %7 = qnt.const_fake_quant %6 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<4xf32>
  func.return %7 : tensor<4xf32>
}

// Does not apply: the IDs of one function never touch another.
// CHECK-LABEL: func.func @split
// CHECK-NEXT:    %1 = qnt.const_fake_quant %0
// CHECK-NEXT:    %x = hbir.relu %1
// CHECK-NEXT:    %2, %3 = hbir.split %x
// CHECK-NEXT:    %4 = qnt.const_fake_quant %2
// CHECK-NEXT:    %5 = qnt.const_fake_quant %3
// CHECK-NEXT:    func.return %4, %5

// Names are not kept by get_asm: the relu is ID 1, the split ID 2 (its results
// print as %2#0 and %2#1), and the range %2-%3 holds one fake quant: ID 3, the
// one on the split's first result.
// SPLIT-LABEL: func.func @split
// SPLIT-NEXT:    %1 = qnt.const_fake_quant %0
// SPLIT-NEXT:    %x = hbir.relu %1
// SPLIT-NEXT:    %2, %3 = hbir.split %x
// SPLIT-NEXT:    %4 = qnt.const_fake_quant %3
// SPLIT-NEXT:    func.return %2, %4
func.func @split(%0: tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>) {
  %1 = qnt.const_fake_quant %0 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<2x8xf32>
  %x = hbir.relu %1 : tensor<2x8xf32>
  %2, %3 = hbir.split %x {sizes = array<i64: 3, 5>, dim = 1 : i64} : (tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>)
  %4 = qnt.const_fake_quant %2 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<2x3xf32>
  %5 = qnt.const_fake_quant %3 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<2x5xf32>
  func.return %4, %5 : tensor<2x3xf32>, tensor<2x5xf32>
}

// Invalid input: every bad entry in one error, and no output.
// BAD:      remove-fake-quant: 4 bad entries for @chain:
// BAD-NEXT:   1: %1 is 'hbir.sigmoid', not a qnt.const_fake_quant
// BAD-NEXT:   9: @chain has no %9 (its IDs end at %6)
// BAD-NEXT:   4-1: reversed range: 4 > 1
// BAD-NEXT:   5-5: no qnt.const_fake_quant from %5 to %5
// BAD-NOT:  builtin.module

// NOFUNC: remove-fake-quant: IDs are numbered per function and the module has 2 (@chain, @split): choose one with `function`

// SYNTAX:      remove-fake-quant: malformed ids:
// SYNTAX-NEXT:   'x': not an ID (7, %7) or a range (1-100)
// SYNTAX-NEXT:   '1-': not an ID (7, %7) or a range (1-100)
