// RUN: hbir-opt %S/Inputs/converted_io.mlir -p 'remove-io-op{op_types=Quantize,Dequantize}' | filecheck %s
// RUN: hbir-opt %S/Inputs/converted_io.mlir -p 'remove-io-op{op_names=_output_0_Dequantize_0}' | filecheck %s --check-prefix=NAMED
// RUN: hbir-opt %s -p 'remove-io-op{op_types=Transpose,Reshape}' | filecheck %s --check-prefix=LAYOUT
// RUN: not hbir-opt %s -p 'remove-io-op{op_types=Quantize}' 2>&1 | filecheck %s --check-prefix=EARLY
// RUN: not hbir-opt %s -p 'remove-io-op{op_types=Softmax}' 2>&1 | filecheck %s --check-prefix=NONE
// RUN: not hbir-opt %s -p 'remove-io-op{op_types=Quantise}' 2>&1 | filecheck %s --check-prefix=TYPE

// Positive (after convert): the integer boundary, with each grid on its argument.
// CHECK:       func.func @forward(%x: tensor<4xsi8> {hbir.name = "_input_0", hbir.scales = array<f32: 5.000000e-01>, hbir.zeros = array<i64: 0>, hbir.rounding = "half_even"}) -> (tensor<4xsi8> {hbir.name = "_output_0", hbir.scales = array<f32: 5.000000e-01>, hbir.zeros = array<i64: 0>}) {
// CHECK-NEXT:    %r = hbir.relu %x : tensor<4xsi8>
// CHECK-NEXT:    func.return %r : tensor<4xsi8>

// By name: only the output's dequantize goes.
// NAMED:       func.func @forward(%x: tensor<4xf32>{{.*}}) -> (tensor<4xsi8> {hbir.name = "_output_0", hbir.scales
// NAMED-NEXT:    qnt.quantize %x

// Layout ops go from the boundary inwards, repeatedly, up to the softmax;
// the reshape between them and the output's transpose go too.
// LAYOUT:       func.func @layout(%x: tensor<6xf32> {hbir.name = "_input_0"}) -> tensor<6xf32> {
// LAYOUT-NEXT:    %s = hbir.softmax %x {dim = 0 : i64} : tensor<6xf32> -> tensor<6xf32>
// LAYOUT-NEXT:    func.return %s : tensor<6xf32>
func.func @layout(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %t = hbir.transpose %x {perm = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  %r = hbir.reshape %t : tensor<3x2xf32> -> tensor<6xf32>
  %s = hbir.softmax %r {dim = 0 : i64} : tensor<6xf32> -> tensor<6xf32>
  %u = hbir.reshape %s : tensor<6xf32> -> tensor<3x2xf32>
  func.return %u : tensor<3x2xf32>
}

// EARLY: remove_io_op: function @layout: ['Quantize'] can only be removed after convert (qat.bc has no integer boundary); convert first, then remove_io_op
// Does not apply: the softmax is not next to an input or output (it is the
// output's second op).
// NONE: remove_io_op: function @layout: no ['Softmax'] op is removable at an input or output (candidates: ['_input_0_Reshape_1', '_input_0_Transpose_0', '_output_0_Reshape_0', '_output_0_Softmax_1'])
// TYPE: remove_io_op: function @layout: unknown op types ['Quantise']; supported: ['Quantize', 'Dequantize', 'Transpose', 'Cast', 'Reshape', 'Softmax']
