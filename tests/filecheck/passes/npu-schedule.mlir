// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p npu-schedule | filecheck %s
// RUN: not hbir-opt %s --split-input-file -p 'npu-schedule{march=nash-h cores=4}' 2>&1 | filecheck %s --check-prefix=CORES

// Invalid option: more cores than the march has (nash-h: 3).
// CORES: npu-schedule: cores=4: nash-h has 3 BPU cores
// CORES-NOT: builtin.module

// Positive: operands are loaded into SRAM and results stored back; the second
// op's loads are issued behind the first compute op, before its store (double
// buffering), and every op gets its unit and estimated start / end cycle.
// CHECK:       builtin.module attributes {hbir.march = "nash-e", npu.estimated_cycles = 10 : i64}
// CHECK-LABEL: func.func @two
// CHECK-NEXT:    %[[W:.*]] = npu.constant
// CHECK-NEXT:    %[[LX:.*]] = npu.dma_load %x {npu.unit = "dma", npu.start = 0 : i64, npu.end = {{[0-9]+}} : i64}
// CHECK-NEXT:    %[[LW:.*]] = npu.dma_load %[[W]] {npu.unit = "dma"
// CHECK-NEXT:    %[[G:.*]] = npu.gemm %[[LX]], %[[LW]] {{{.*}}npu.unit = "tae"
// CHECK-NEXT:    %[[LY:.*]] = npu.dma_load %y {npu.unit = "dma"
// CHECK-NEXT:    %[[SG:.*]] = npu.dma_store %[[G]] {npu.unit = "dma"
// CHECK-NEXT:    %[[R:.*]] = npu.rescale %[[LY]] {{{.*}}npu.unit = "vae"
// CHECK-NEXT:    %[[SR:.*]] = npu.dma_store %[[R]]
// CHECK-NEXT:    func.return %[[SG]], %[[SR]]
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @two(%x: tensor<2x16xsi8>, %y: tensor<64xsi8>) -> (tensor<2x8xsi32>, tensor<64xsi8>) {
    %w = npu.constant dense<1> : tensor<8x16xsi8>
    %g = npu.gemm %x, %w {transpose_b = true} : (tensor<2x16xsi8>, tensor<8x16xsi8>) -> tensor<2x8xsi32>
    %r = npu.rescale %y {multiplier = array<i64: 1073741824>, shift = array<i64: 31>} : tensor<64xsi8> -> tensor<64xsi8>
    func.return %g, %r : tensor<2x8xsi32>, tensor<64xsi8>
  }
}

// -----

// Does not apply: a program with no compute op (a reshape is a view) gets no DMA.
// CHECK-LABEL: func.func @view
// CHECK-NEXT:    %r = npu.reshape %x {npu.unit = "view", npu.start = 0 : i64, npu.end = 0 : i64}
// CHECK-NEXT:    func.return %r
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @view(%x: tensor<2x8xsi8>) -> tensor<16xsi8> {
    %r = npu.reshape %x : tensor<2x8xsi8> -> tensor<16xsi8>
    func.return %r : tensor<16xsi8>
  }
}

// -----

// Invalid: a module that is already scheduled.
// CHECK: npu-schedule: the module is already scheduled
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @again(%x: tensor<4xsi8>) -> tensor<4xsi8> {
    %l = npu.dma_load %x : tensor<4xsi8>
    func.return %l : tensor<4xsi8>
  }
}
