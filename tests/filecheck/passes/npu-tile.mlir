// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p 'npu-tile{sram_bytes=2048}' | filecheck %s

// Positive: a 3x3 conv whose input + output (16-channel aligned: 2 x 1024 bytes)
// and weight do not fit 2 KiB is split into two row tiles; each reads its four
// rows plus a one-row halo, with its own top / bottom padding; the tiles are joined.
// CHECK-LABEL: func.func @conv
// CHECK:         %[[S0:.*]] = npu.slice %x {begin = array<i64: 0, 0, 0, 0>, end = array<i64: 1, 5, 8, 4>, step = array<i64: 1, 1, 1, 1>} : tensor<1x8x8x4xsi8> -> tensor<1x5x8x4xsi8>
// CHECK-NEXT:    %[[T0:.*]] = npu.conv %[[S0]], %w {npu.tile = array<i64: 0, 2>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1, 0, 1>, {{.*}} -> tensor<1x4x8x4xsi8>
// CHECK-NEXT:    %[[S1:.*]] = npu.slice %x {begin = array<i64: 0, 3, 0, 0>, end = array<i64: 1, 8, 8, 4>
// CHECK-NEXT:    %[[T1:.*]] = npu.conv %[[S1]], %w {npu.tile = array<i64: 1, 2>, stride = array<i64: 1, 1>, padding = array<i64: 0, 1, 1, 1>,
// CHECK-NEXT:    %y = npu.concat %[[T0]], %[[T1]] {dim = 1 : i64} : (tensor<1x4x8x4xsi8>, tensor<1x4x8x4xsi8>) -> tensor<1x8x8x4xsi8>
builtin.module attributes {hbir.march = "nash-e", npu.channel_align = 16 : i64} {
  func.func @conv(%x: tensor<1x8x8x4xsi8>) -> tensor<1x8x8x4xsi8> {
    %w = npu.constant dense<1> : tensor<4x3x3x4xsi8>
    %y = npu.conv %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, multiplier = array<i64: 1073741824>, shift = array<i64: 34>} : (tensor<1x8x8x4xsi8>, tensor<4x3x3x4xsi8>) -> tensor<1x8x8x4xsi8>
    func.return %y : tensor<1x8x8x4xsi8>
  }
}

// -----

// Does not apply: an op that fits stays whole; the limit is recorded.
// CHECK:       builtin.module attributes {hbir.march = "nash-e", npu.sram_limit = 2048 : i64}
// CHECK-LABEL: func.func @small
// CHECK-NEXT:    %r = npu.rescale %x
// CHECK-NEXT:    func.return %r
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @small(%x: tensor<4xsi8>) -> tensor<4xsi8> {
    %r = npu.rescale %x {multiplier = array<i64: 1073741824>, shift = array<i64: 30>} : tensor<4xsi8> -> tensor<4xsi8>
    func.return %r : tensor<4xsi8>
  }
}

// -----

// Positive: a linear whose weight alone is larger than SRAM is split into
// output-channel tiles, each with its weight rows (new constants) and its
// channels' requantization; the tiles are joined along the channel axis.
// CHECK-LABEL: func.func @wide
// CHECK-NEXT:    %[[W0:.*]] = npu.constant dense<1> : tensor<22x64xsi8>
// CHECK-NEXT:    %[[T0:.*]] = npu.gemm %x, %[[W0]] {npu.tile = array<i64: 0, 3>, transpose_b = true, multiplier = array<i64: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22>, shift = array<i64: {{.*}}>} : (tensor<2x64xsi8>, tensor<22x64xsi8>) -> tensor<2x22xsi32>
// CHECK:         %[[W2:.*]] = npu.constant dense<1> : tensor<20x64xsi8>
// CHECK-NEXT:    %[[T2:.*]] = npu.gemm %x, %[[W2]] {npu.tile = array<i64: 2, 3>, transpose_b = true, multiplier = array<i64: 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64>, shift = array<i64: {{.*}}>} : (tensor<2x64xsi8>, tensor<20x64xsi8>) -> tensor<2x20xsi32>
// CHECK-NEXT:    %y = npu.concat %[[T0]], %{{.*}}, %[[T2]] {dim = 1 : i64} : (tensor<2x22xsi32>, tensor<2x22xsi32>, tensor<2x20xsi32>) -> tensor<2x64xsi32>
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @wide(%x: tensor<2x64xsi8>) -> tensor<2x64xsi32> {
    %w = npu.constant dense<1> : tensor<64x64xsi8>
    %y = npu.gemm %x, %w {transpose_b = true, multiplier = array<i64: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64>, shift = array<i64: 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30>} : (tensor<2x64xsi8>, tensor<64x64xsi8>) -> tensor<2x64xsi32>
    func.return %y : tensor<2x64xsi32>
  }
}

// -----

// Positive: a grouped conv whose weight alone is larger than SRAM (no row tile
// fits) is split into tiles of whole groups, each a conv of its groups (here
// one: groups = 1, the default, not printed) on its groups' input channels
// (an npu.slice along the channel axis), with its weight rows.
// CHECK-LABEL: func.func @grouped
// CHECK-NEXT:    %[[X0:.*]] = npu.slice %x {begin = array<i64: 0, 0, 0, 0>, end = array<i64: 1, 2, 2, 8>, step = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x16xsi8> -> tensor<1x2x2x8xsi8>
// CHECK-NEXT:    %[[W0:.*]] = npu.constant dense<1> : tensor<16x3x3x8xsi8>
// CHECK-NEXT:    %[[T0:.*]] = npu.conv %[[X0]], %[[W0]] {npu.tile = array<i64: 0, 2>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, multiplier = array<i64: 1073741824>, shift = array<i64: 34>} : (tensor<1x2x2x8xsi8>, tensor<16x3x3x8xsi8>) -> tensor<1x2x2x16xsi8>
// CHECK-NEXT:    %[[X1:.*]] = npu.slice %x {begin = array<i64: 0, 0, 0, 8>, end = array<i64: 1, 2, 2, 16>
// CHECK-NEXT:    %[[W1:.*]] = npu.constant dense<1> : tensor<16x3x3x8xsi8>
// CHECK-NEXT:    %[[T1:.*]] = npu.conv %[[X1]], %[[W1]] {npu.tile = array<i64: 1, 2>,
// CHECK-NEXT:    %y = npu.concat %[[T0]], %[[T1]] {dim = 3 : i64} : (tensor<1x2x2x16xsi8>, tensor<1x2x2x16xsi8>) -> tensor<1x2x2x32xsi8>
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @grouped(%x: tensor<1x2x2x16xsi8>) -> tensor<1x2x2x32xsi8> {
    %w = npu.constant dense<1> : tensor<32x3x3x8xsi8>
    %y = npu.conv %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 2 : i64, multiplier = array<i64: 1073741824>, shift = array<i64: 34>} : (tensor<1x2x2x16xsi8>, tensor<32x3x3x8xsi8>) -> tensor<1x2x2x32xsi8>
    func.return %y : tensor<1x2x2x32xsi8>
  }
}

// -----

// Invalid: a gemm whose weight for one output channel is larger than SRAM fits
// neither row nor channel tiles.
// CHECK: npu-tile: 'npu.gemm' needs {{[0-9]+}} bytes of SRAM at once, the march has 2048 (no row tiling makes it fit)
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @big(%x: tensor<2x4096xsi8>) -> tensor<2x2xsi32> {
    %w = npu.constant dense<1> : tensor<2x4096xsi8>
    %y = npu.gemm %x, %w {transpose_b = true} : (tensor<2x4096xsi8>, tensor<2x4096xsi8>) -> tensor<2x2xsi32>
    func.return %y : tensor<2x2xsi32>
  }
}
