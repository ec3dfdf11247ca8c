// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p npu-fuse | filecheck %s

// Positive: the accumulator shift, the bias add and the output requantization
// (with its relu clip) fold into the conv; the two input rescales of the residual
// add fold into the eltwise.
// CHECK-LABEL: func.func @conv_block
// CHECK:         %[[B:.*]] = npu.constant dense<[5, -7]> : tensor<2xsi32>
// CHECK-NEXT:    %[[C:.*]] = npu.conv %x, %w bias(%[[B]]) {{{.*}}pre_shift = 3 : i64, acc_bits = 32 : i64, multiplier = array<i64: 1073741824>, shift = array<i64: 34>, clip = array<i64: 0, 127>} : (tensor<1x4x4x2xsi8>, tensor<2x1x1x2xsi8>, tensor<2xsi32>) -> tensor<1x4x4x2xsi8>
// CHECK-NEXT:    %[[E:.*]] = npu.eltwise %[[C]], %x {kind = "add", in_multiplier = array<i64: 1073741824, 1073741824>, in_shift = array<i64: 29, 29>, acc_bits = 32 : i64, multiplier = array<i64: 1073741824>, shift = array<i64: 33>} : (tensor<1x4x4x2xsi8>, tensor<1x4x4x2xsi8>) -> tensor<1x4x4x2xsi8>
// CHECK-NEXT:    func.return %[[E]]
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @conv_block(%x: tensor<1x4x4x2xsi8>) -> tensor<1x4x4x2xsi8> {
    %w = npu.constant dense<1> : tensor<2x1x1x2xsi8>
    %b = npu.constant dense<[[[[5, -7]]]]> : tensor<1x1x1x2xsi32>
    %c = npu.conv %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x4x2xsi8>, tensor<2x1x1x2xsi8>) -> tensor<1x4x4x2xsi32>
    %s = npu.rescale %c {multiplier = array<i64: 1>, shift = array<i64: -3>} : tensor<1x4x4x2xsi32> -> tensor<1x4x4x2xsi32>
    %a = npu.eltwise %s, %b {kind = "add"} : (tensor<1x4x4x2xsi32>, tensor<1x1x1x2xsi32>) -> tensor<1x4x4x2xsi32>
    %q = npu.rescale %a {multiplier = array<i64: 1073741824>, shift = array<i64: 34>} : tensor<1x4x4x2xsi32> -> tensor<1x4x4x2xsi8>
    %r = npu.rescale %q {multiplier = array<i64: 1073741824>, shift = array<i64: 30>, clip = array<i64: 0, 127>} : tensor<1x4x4x2xsi8> -> tensor<1x4x4x2xsi8>
    %l = npu.rescale %r {multiplier = array<i64: 1073741824>, shift = array<i64: 29>} : tensor<1x4x4x2xsi8> -> tensor<1x4x4x2xsi32>
    %k = npu.rescale %x {multiplier = array<i64: 1073741824>, shift = array<i64: 29>} : tensor<1x4x4x2xsi8> -> tensor<1x4x4x2xsi32>
    %e = npu.eltwise %l, %k {kind = "add"} : (tensor<1x4x4x2xsi32>, tensor<1x4x4x2xsi32>) -> tensor<1x4x4x2xsi32>
    %y = npu.rescale %e {multiplier = array<i64: 1073741824>, shift = array<i64: 33>} : tensor<1x4x4x2xsi32> -> tensor<1x4x4x2xsi8>
    func.return %y : tensor<1x4x4x2xsi8>
  }
}

// -----

// Does not apply: the conv result has two uses (fusing would change the other),
// and a rescale that is not an identity does not fold into the next one.
// CHECK-LABEL: func.func @shared
// CHECK:         %c = npu.conv %x, %w {{.*}} -> tensor<1x4x4x2xsi32>
// CHECK-NEXT:    %q = npu.rescale %c
// CHECK-NEXT:    %p = npu.rescale %q
// CHECK-NEXT:    func.return %q, %p, %c
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @shared(%x: tensor<1x4x4x2xsi8>) -> (tensor<1x4x4x2xsi8>, tensor<1x4x4x2xsi8>, tensor<1x4x4x2xsi32>) {
    %w = npu.constant dense<1> : tensor<2x1x1x2xsi8>
    %c = npu.conv %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x4x2xsi8>, tensor<2x1x1x2xsi8>) -> tensor<1x4x4x2xsi32>
    %q = npu.rescale %c {multiplier = array<i64: 1073741824>, shift = array<i64: 34>} : tensor<1x4x4x2xsi32> -> tensor<1x4x4x2xsi8>
    %p = npu.rescale %q {multiplier = array<i64: 1073741824>, shift = array<i64: 31>} : tensor<1x4x4x2xsi8> -> tensor<1x4x4x2xsi8>
    func.return %q, %p, %c : tensor<1x4x4x2xsi8>, tensor<1x4x4x2xsi8>, tensor<1x4x4x2xsi32>
  }
}

// -----

// Invalid: hbir ops that npu-lower has not lowered.
// CHECK: npu-fuse: 'hbir.constant' at loc(unknown) is not lowered to the npu dialect
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @raw() -> tensor<4xsi8> {
    %c = hbir.constant dense<1> : tensor<4xsi8>
    func.return %c : tensor<4xsi8>
  }
}

// -----

// Debug origin: the fused op computes both quantized.bc ops (npu.origin is the
// union) and gives the requantization's value (npu.value_of of the last).
// CHECK-LABEL: func.func @origin
// CHECK-NEXT:    %[[C:.*]] = npu.conv %x, %w {npu.origin = array<i64: 2, 3>, npu.value_of = 3 : i64, {{.*}}multiplier = array<i64: 1073741824>, shift = array<i64: 34>}
// CHECK-NEXT:    func.return %[[C]]
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @origin(%x: tensor<1x4x4x2xsi8>, %w: tensor<2x1x1x2xsi8>) -> tensor<1x4x4x2xsi8> {
    %c = npu.conv %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, npu.origin = array<i64: 2>, npu.value_of = 2 : i64, npu.value_perm = array<i64: 0, 3, 1, 2>} : (tensor<1x4x4x2xsi8>, tensor<2x1x1x2xsi8>) -> tensor<1x4x4x2xsi32>
    %q = npu.rescale %c {multiplier = array<i64: 1073741824>, shift = array<i64: 34>, npu.origin = array<i64: 3>, npu.value_of = 3 : i64} : tensor<1x4x4x2xsi32> -> tensor<1x4x4x2xsi8>
    func.return %q : tensor<1x4x4x2xsi8>
  }
}
