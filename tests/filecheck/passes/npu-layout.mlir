// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p npu-layout | filecheck %s

// Positive: the weight transpose folds into an OHWI constant; the transpose back
// to NCHW sinks below the per-channel rescale (axis 1 -> 3) and cancels against the
// next conv's transpose to NHWC.
// CHECK-LABEL: func.func @two_convs
// CHECK-NEXT:    %[[X:.*]] = npu.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<1x3x4x4xsi8> -> tensor<1x4x4x3xsi8>
// CHECK-NEXT:    %[[W:.*]] = npu.constant dense<1> : tensor<2x1x1x3xsi8>
// CHECK-NEXT:    %[[C:.*]] = npu.conv %[[X]], %[[W]]
// CHECK-NEXT:    %[[R:.*]] = npu.rescale %[[C]] {multiplier = array<i64: 1073741824, 1073741824>, shift = array<i64: 31, 31>, axis = 3 : i64} : tensor<1x4x4x2xsi32> -> tensor<1x4x4x2xsi8>
// CHECK-NEXT:    %[[V:.*]] = npu.constant dense<1> : tensor<2x1x1x2xsi8>
// CHECK-NEXT:    %[[D:.*]] = npu.conv %[[R]], %[[V]]
// CHECK-NEXT:    %{{.*}} = npu.transpose %[[D]] {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:    func.return
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @two_convs(%x: tensor<1x3x4x4xsi8>) -> tensor<1x2x4x4xsi32> {
    %w = npu.constant dense<1> : tensor<2x3x1x1xsi8>
    %0 = npu.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<1x3x4x4xsi8> -> tensor<1x4x4x3xsi8>
    %1 = npu.transpose %w {perm = array<i64: 0, 2, 3, 1>} : tensor<2x3x1x1xsi8> -> tensor<2x1x1x3xsi8>
    %2 = npu.conv %0, %1 {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x4x3xsi8>, tensor<2x1x1x3xsi8>) -> tensor<1x4x4x2xsi32>
    %c = npu.transpose %2 {perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x4x2xsi32> -> tensor<1x2x4x4xsi32>
    %q = npu.rescale %c {multiplier = array<i64: 1073741824, 1073741824>, shift = array<i64: 31, 31>, axis = 1 : i64} : tensor<1x2x4x4xsi32> -> tensor<1x2x4x4xsi8>
    %v = npu.constant dense<1> : tensor<2x2x1x1xsi8>
    %3 = npu.transpose %q {perm = array<i64: 0, 2, 3, 1>} : tensor<1x2x4x4xsi8> -> tensor<1x4x4x2xsi8>
    %4 = npu.transpose %v {perm = array<i64: 0, 2, 3, 1>} : tensor<2x2x1x1xsi8> -> tensor<2x1x1x2xsi8>
    %5 = npu.conv %3, %4 {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x4x2xsi8>, tensor<2x1x1x2xsi8>) -> tensor<1x4x4x2xsi32>
    %y = npu.transpose %5 {perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x4x2xsi32> -> tensor<1x2x4x4xsi32>
    func.return %y : tensor<1x2x4x4xsi32>
  }
}

// -----

// Does not apply: no transposes (a vector model): only the layout is recorded.
// CHECK:       builtin.module attributes {hbir.march = "nash-e", npu.layout = "nhwc", npu.channel_align = 16 : i64}
// CHECK-LABEL: func.func @vector
// CHECK-NEXT:    %r = npu.rescale %x
// CHECK-NEXT:    func.return %r
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @vector(%x: tensor<4xsi8>) -> tensor<4xsi8> {
    %r = npu.rescale %x {multiplier = array<i64: 1073741824>, shift = array<i64: 30>} : tensor<4xsi8> -> tensor<4xsi8>
    func.return %r : tensor<4xsi8>
  }
}

// -----

// Invalid: hbir ops that npu-lower has not lowered.
// CHECK: npu-layout: 'hbir.relu' at loc(unknown) is not lowered to the npu dialect: run npu-lower first
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @raw(%x: tensor<4xsi8>) -> tensor<4xsi8> {
    %r = hbir.relu %x : tensor<4xsi8>
    func.return %r : tensor<4xsi8>
  }
}
