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

// Invalid: a gemm whose weight alone is larger than SRAM cannot be tiled by rows.
// CHECK: npu-tile: 'npu.gemm' needs {{[0-9]+}} bytes of SRAM at once, the march has 2048 (no row tiling makes it fit)
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @big(%x: tensor<2x64xsi8>) -> tensor<2x64xsi32> {
    %w = npu.constant dense<1> : tensor<64x64xsi8>
    %y = npu.gemm %x, %w {transpose_b = true} : (tensor<2x64xsi8>, tensor<64x64xsi8>) -> tensor<2x64xsi32>
    func.return %y : tensor<2x64xsi32>
  }
}
