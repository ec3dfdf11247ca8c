// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p npu-lower | filecheck %s

// Positive: an integer conv becomes an NHWC npu.conv between two transposes (its
// weight too); the requantization becomes npu.rescale; the input quantize (float)
// is a CPU island. Every new op records the quantized.bc op ID it computes
// (npu.origin) and, when its result is that op's whole value, npu.value_of (and
// npu.value_perm: the NHWC conv's result is op 2's value transposed back).
// CHECK-LABEL: func.func @conv
// CHECK-NEXT:    %[[W:.*]] = npu.constant {npu.origin = array<i64: 1>, npu.value_of = 1 : i64} dense<1> : tensor<2x3x1x1xsi8>
// CHECK-NEXT:    %[[X:.*]] = "npu.cpu_call"(%x) <{reason = "quantize"}>
// CHECK:           qnt.quantize
// CHECK:         }) {npu.origin = array<i64: 0>, npu.value_of = 0 : i64}
// CHECK-NEXT:    %[[XT:.*]] = npu.transpose %[[X]] {npu.origin = array<i64: 2>, perm = array<i64: 0, 2, 3, 1>} : tensor<1x3x4x4xsi8> -> tensor<1x4x4x3xsi8>
// CHECK-NEXT:    %[[WT:.*]] = npu.transpose %[[W]] {npu.origin = array<i64: 2>, perm = array<i64: 0, 2, 3, 1>} : tensor<2x3x1x1xsi8> -> tensor<2x1x1x3xsi8>
// CHECK-NEXT:    %[[C:.*]] = npu.conv %[[XT]], %[[WT]] {npu.origin = array<i64: 2>, npu.value_of = 2 : i64, npu.value_perm = array<i64: 0, 3, 1, 2>, {{.*}}} : (tensor<1x4x4x3xsi8>, tensor<2x1x1x3xsi8>) -> tensor<1x4x4x2xsi32>
// CHECK-NEXT:    %[[B:.*]] = npu.transpose %[[C]] {npu.origin = array<i64: 2>, npu.value_of = 2 : i64, perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x4x2xsi32> -> tensor<1x2x4x4xsi32>
// CHECK-NEXT:    %q = npu.rescale %[[B]] {npu.origin = array<i64: 3>, npu.value_of = 3 : i64, multiplier = array<i64: 1073741824>, shift = array<i64: 31>} : tensor<1x2x4x4xsi32> -> tensor<1x2x4x4xsi8>
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @conv(%x: tensor<1x3x4x4xf32>) -> tensor<1x2x4x4xsi8> {
    %xq = qnt.quantize %x {scales = array<f32: 0.05>, zeros = array<i64: 0>} : tensor<1x3x4x4xf32> -> tensor<1x3x4x4xsi8>
    %w = hbir.constant dense<1> : tensor<2x3x1x1xsi8>
    %c = hbir.conv2d %xq, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x3x4x4xsi8>, tensor<2x3x1x1xsi8>) -> tensor<1x2x4x4xsi32>
    %q = qnt.requantize %c {multiplier = array<i64: 1073741824>, shift = array<i64: 31>} : tensor<1x2x4x4xsi32> -> tensor<1x2x4x4xsi8>
    func.return %q : tensor<1x2x4x4xsi8>
  }
}

// -----

// Does not apply: a program already in the npu dialect is left as it is.
// CHECK-LABEL: func.func @done
// CHECK-NEXT:    %r = npu.rescale %x {multiplier = array<i64: 1073741824>, shift = array<i64: 30>} : tensor<4xsi8> -> tensor<4xsi8>
// CHECK-NEXT:    func.return %r
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @done(%x: tensor<4xsi8>) -> tensor<4xsi8> {
    %r = npu.rescale %x {multiplier = array<i64: 1073741824>, shift = array<i64: 30>} : tensor<4xsi8> -> tensor<4xsi8>
    func.return %r : tensor<4xsi8>
  }
}

// -----

// Invalid: qat.bc (fake quantization) reaches compile: convert it first.
// CHECK: compile takes a converted model (quantized.bc); this one still has fake quantization (qat.bc)
builtin.module {
  func.func @qat(%x: tensor<4xf32>) -> tensor<4xf32> {
    %q = qnt.const_fake_quant %x {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<4xf32>
    func.return %q : tensor<4xf32>
  }
}

// -----

// Selection: a top-k is its indices (npu.topk) and the values gathered at them;
// argmax is a top-1 viewed without its dim; index reads are copied as they are.
// CHECK-LABEL: func.func @selection
// CHECK-NEXT:    %i = npu.topk %x {npu.origin = array<i64: 0>, k = 3 : i64, dim = 1 : i64} : tensor<2x8xsi8> -> tensor<2x3xi64>
// CHECK-NEXT:    %v = npu.gather %x, %i {npu.origin = array<i64: 0>, npu.value_of = 0 : i64, dim = 1 : i64} : (tensor<2x8xsi8>, tensor<2x3xi64>) -> tensor<2x3xsi8>
// CHECK-NEXT:    %[[T:.*]] = npu.topk %x {npu.origin = array<i64: 1>, k = 1 : i64, dim = 1 : i64} : tensor<2x8xsi8> -> tensor<2x1xi64>
// CHECK-NEXT:    %a = npu.reshape %[[T]] {npu.origin = array<i64: 1>, npu.value_of = 1 : i64} : tensor<2x1xi64> -> tensor<2xi64>
// CHECK-NEXT:    %g = npu.index_select %x, %a {npu.origin = array<i64: 2>, npu.value_of = 2 : i64, dim = 0 : i64} : (tensor<2x8xsi8>, tensor<2xi64>) -> tensor<2x8xsi8>
// CHECK-NEXT:    %h = npu.gather %g, %i {npu.origin = array<i64: 3>, npu.value_of = 3 : i64, dim = 1 : i64} : (tensor<2x8xsi8>, tensor<2x3xi64>) -> tensor<2x3xsi8>
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @selection(%x: tensor<2x8xsi8>) -> (tensor<2x3xsi8>, tensor<2x3xi64>, tensor<2xi64>, tensor<2x3xsi8>) {
    %v, %i = hbir.topk %x {k = 3 : i64, dim = 1 : i64} : (tensor<2x8xsi8>) -> (tensor<2x3xsi8>, tensor<2x3xi64>)
    %a = hbir.argmax %x {dim = 1 : i64} : tensor<2x8xsi8> -> tensor<2xi64>
    %g = hbir.index_select %x, %a {dim = 0 : i64} : (tensor<2x8xsi8>, tensor<2xi64>) -> tensor<2x8xsi8>
    %h = hbir.gather %g, %i {dim = 1 : i64} : (tensor<2x8xsi8>, tensor<2x3xi64>) -> tensor<2x3xsi8>
    func.return %v, %i, %a, %h : tensor<2x3xsi8>, tensor<2x3xi64>, tensor<2xi64>, tensor<2x3xsi8>
  }
}

// -----

// Max pool indices and unpooling stay NCHW (the layout the indices count in);
// the pool itself is the NHWC npu.pool.
// CHECK-LABEL: func.func @max_unpool
// CHECK:         %i = npu.max_pool_indices %x {npu.origin = array<i64: 1>, npu.value_of = 1 : i64, kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : tensor<1x4x8x6xsi8> -> tensor<1x4x4x3xi64>
// CHECK-NEXT:    %u = npu.max_unpool %p, %i {npu.origin = array<i64: 2>, npu.value_of = 2 : i64, size = array<i64: 8, 6>} : (tensor<1x4x4x3xsi8>, tensor<1x4x4x3xi64>) -> tensor<1x4x8x6xsi8>
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @max_unpool(%x: tensor<1x4x8x6xsi8>) -> tensor<1x4x8x6xsi8> {
    %p = hbir.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : tensor<1x4x8x6xsi8> -> tensor<1x4x4x3xsi8>
    %i = hbir.max_pool2d_indices %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : tensor<1x4x8x6xsi8> -> tensor<1x4x4x3xi64>
    %u = hbir.max_unpool2d %p, %i {size = array<i64: 8, 6>} : (tensor<1x4x4x3xsi8>, tensor<1x4x4x3xi64>) -> tensor<1x4x8x6xsi8>
    func.return %u : tensor<1x4x8x6xsi8>
  }
}

// -----

// The camera resizer is one npu instruction on the frame planes and the roi.
// CHECK-LABEL: func.func @roi_resize
// CHECK:         %img = npu.roi_resize %y, %uv roi(%roi : tensor<1x4xsi32>) {npu.origin = array<i64: 0>, npu.value_of = 0 : i64, size = array<i64: 4, 6>, interpolate_mode = "nearest", pad_value = array<i64: 0, -128>} : tensor<1x8x10x1xui8>, tensor<1x4x5x2xui8> -> tensor<1x4x6x3xsi8>
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @roi_resize(%y: tensor<1x8x10x1xui8>, %uv: tensor<1x4x5x2xui8>, %roi: tensor<1x4xsi32>) -> tensor<1x4x6x3xsi8> {
    %img = hbir.roi_resize %y, %uv roi(%roi : tensor<1x4xsi32>) {size = array<i64: 4, 6>, interpolate_mode = "nearest", pad_value = array<i64: 0, -128>} : tensor<1x8x10x1xui8>, tensor<1x4x5x2xui8> -> tensor<1x4x6x3xsi8>
    func.return %img : tensor<1x4x6x3xsi8>
  }
}
