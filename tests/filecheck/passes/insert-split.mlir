// RUN: hbir-opt %s -p 'insert-split{input=img dim=0 function=forward}' | filecheck %s
// RUN: not hbir-opt %s -p 'insert-split{input=img dim=5 function=forward}' 2>&1 | filecheck %s --check-prefix=INVALID
// RUN: not hbir-opt %S/Inputs/converted_io.mlir -p 'insert-split{input=_input_0 dim=0}' 2>&1 | filecheck %s --check-prefix=CONVERTED

// Positive: the batch of 2 becomes two inputs, concatenated back; every input
// keeps its name.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %[[A:[a-z_0-9]+]]: tensor<1x3xf32> {hbir.name = "img_0"}, %[[B:[a-z_0-9]+]]: tensor<1x3xf32> {hbir.name = "img_1"}, %other: tensor<2xf32> {hbir.name = "_input_1"}) -> tensor<2x3xf32> {
// CHECK-NEXT:    %[[C:.*]] = hbir.concat %[[A]], %[[B]] {dim = 0 : i64} : (tensor<1x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %0 = hbir.relu %[[C]] : tensor<2x3xf32>
func.func @forward(%img: tensor<2x3xf32> {hbir.name = "img"}, %other: tensor<2xf32>) -> tensor<2x3xf32> {
  %0 = hbir.relu %img : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// Does not apply: another function is left alone.
// CHECK-LABEL: func.func @head(%img: tensor<2x3xf32>) -> tensor<2x3xf32> {
// CHECK-NEXT:    func.return %img : tensor<2x3xf32>
func.func @head(%img: tensor<2x3xf32>) -> tensor<2x3xf32> {
  func.return %img : tensor<2x3xf32>
}

// INVALID: insert_split: function @forward, input 'img': dim 5 is not a dimension of the input (shape [2, 3])
// CONVERTED: insert_split: function @forward, input '_input_0': the model is already converted; insert input nodes into qat.bc, then convert
