// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p npu-plan-memory | filecheck %s

// Positive: a chain of four 1 KiB values needs two DDR buffers, not four: each
// value's bytes are reused once it is dead; the reshape aliases its input.
// CHECK:       builtin.module attributes {hbir.march = "nash-e", npu.ddr_peak_bytes = 2048 : i64, npu.ddr_total_bytes = 4096 : i64, npu.sram_peak_bytes = 0 : i64, npu.const_bytes = 0 : i64}
// CHECK-LABEL: func.func @chain
// CHECK-SAME:    npu.arg_buffers = [{space = "ddr", offset = 0 : i64, size = 1024 : i64}]
// CHECK-NEXT:    %a = npu.concat %x {npu.buffer = {space = "ddr", offset = 1024 : i64, size = 1024 : i64}, dim = 0 : i64}
// CHECK-NEXT:    %b = npu.concat %a {npu.buffer = {space = "ddr", offset = 0 : i64, size = 1024 : i64}, dim = 0 : i64}
// CHECK-NEXT:    %c = npu.reshape %b {npu.buffer = {space = "ddr", offset = 0 : i64, size = 1024 : i64}}
// CHECK-NEXT:    %d = npu.concat %c {npu.buffer = {space = "ddr", offset = 1024 : i64, size = 1024 : i64}, dim = 0 : i64}
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @chain(%x: tensor<1024xsi8>) -> tensor<1024xsi8> {
    %a = npu.concat %x {dim = 0 : i64} : (tensor<1024xsi8>) -> tensor<1024xsi8>
    %b = npu.concat %a {dim = 0 : i64} : (tensor<1024xsi8>) -> tensor<1024xsi8>
    %c = npu.reshape %b : tensor<1024xsi8> -> tensor<1024xsi8>
    %d = npu.concat %c {dim = 0 : i64} : (tensor<1024xsi8>) -> tensor<1024xsi8>
    func.return %d : tensor<1024xsi8>
  }
}

// -----

// Does not apply: values that are all live at once (every one is a result)
// share nothing.
// CHECK:       npu.ddr_peak_bytes = 192 : i64, npu.ddr_total_bytes = 192 : i64
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @live(%x: tensor<4xsi8>) -> (tensor<4xsi8>, tensor<4xsi8>, tensor<4xsi8>) {
    %a = npu.concat %x {dim = 0 : i64} : (tensor<4xsi8>) -> tensor<4xsi8>
    %b = npu.concat %a {dim = 0 : i64} : (tensor<4xsi8>) -> tensor<4xsi8>
    func.return %x, %a, %b : tensor<4xsi8>, tensor<4xsi8>, tensor<4xsi8>
  }
}

// -----

// Invalid: SRAM values that do not fit the recorded limit.
// CHECK: npu-plan-memory: the SRAM plan needs 2048 bytes, the march has 1024
builtin.module attributes {hbir.march = "nash-e", npu.sram_limit = 1024 : i64} {
  func.func @sram(%x: tensor<1024xsi8>) -> tensor<1024xsi8> {
    %l = npu.dma_load %x : tensor<1024xsi8>
    %r = npu.rescale %l {multiplier = array<i64: 1073741824>, shift = array<i64: 30>} : tensor<1024xsi8> -> tensor<1024xsi8>
    %s = npu.dma_store %r : tensor<1024xsi8>
    func.return %s : tensor<1024xsi8>
  }
}
