// RUN: hbir-opt %s -p 'insert-transpose{input=img permutes=0,3,1,2 function=forward}' | filecheck %s
// RUN: not hbir-opt %s -p 'insert-transpose{input=img permutes=0,3,1 function=forward}' 2>&1 | filecheck %s --check-prefix=INVALID
// RUN: not hbir-opt %s -p 'insert-transpose{input=img permutes=0,3,1,2}' 2>&1 | filecheck %s --check-prefix=NOFUNC
// RUN: not hbir-opt %S/Inputs/converted_io.mlir -p 'insert-transpose{input=_input_0 permutes=0}' 2>&1 | filecheck %s --check-prefix=CONVERTED

// Positive: NCHW `img` is fed NHWC (dim 1 moves to position 3, the reference's
// convention); the transpose brings it back; every input keeps its name.
// CHECK-LABEL: func.func @forward(%img: tensor<1x4x6x3xf32> {hbir.name = "img"}, %other: tensor<2xf32> {hbir.name = "_input_1"}) -> tensor<1x3x4x6xf32> {
// CHECK-NEXT:    %[[T:.*]] = hbir.transpose %img {perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x6x3xf32> -> tensor<1x3x4x6xf32>
// CHECK-NEXT:    %0 = hbir.relu %[[T]] : tensor<1x3x4x6xf32>
func.func @forward(%img: tensor<1x3x4x6xf32> {hbir.name = "img"}, %other: tensor<2xf32>) -> tensor<1x3x4x6xf32> {
  %0 = hbir.relu %img : tensor<1x3x4x6xf32>
  func.return %0 : tensor<1x3x4x6xf32>
}

// Does not apply: another function is left alone.
// CHECK-LABEL: func.func @head(%img: tensor<1x3x4x6xf32>) -> tensor<1x3x4x6xf32> {
// CHECK-NEXT:    func.return %img : tensor<1x3x4x6xf32>
func.func @head(%img: tensor<1x3x4x6xf32>) -> tensor<1x3x4x6xf32> {
  func.return %img : tensor<1x3x4x6xf32>
}

// INVALID: insert_transpose: function @forward, input 'img': permutes [0, 3, 1] is not a permutation of the input's 4 dimensions (shape [1, 3, 4, 6])
// NOFUNC: insert_transpose: the module has functions ['forward', 'head']; name one with function=<name>
// CONVERTED: insert_transpose: function @forward, input '_input_0': the model is already converted; insert input nodes into qat.bc, then convert
