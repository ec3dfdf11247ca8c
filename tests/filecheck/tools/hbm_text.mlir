// The text form of a compiled model (.hbms) and the .hbm file: hbir-opt
// assembles one into the other and prints either; errors are located.
// RUN: hbir-opt %S/Inputs/tiny.hbms | filecheck %s
// RUN: hbir-opt %S/Inputs/tiny.hbms -o %t.hbm && hbir-opt %t.hbm | filecheck %s
// RUN: hbir-opt %t.hbm -o %t.hbms && diff %S/Inputs/tiny.hbms %t.hbms
// RUN: hbir-opt %t.hbms -o %t2.hbm && hbir-opt %t2.hbm -o %t2.hbms && diff %t.hbms %t2.hbms
// RUN: not hbir-opt %S/Inputs/syntax_error.hbms 2>&1 | filecheck %s --check-prefix=SYNTAX
// RUN: not hbir-opt %S/Inputs/bad_field.hbms 2>&1 | filecheck %s --check-prefix=FIELD
// RUN: not hbir-opt %S/Inputs/outside_arena.hbms 2>&1 | filecheck %s --check-prefix=ARENA
// RUN: not hbir-opt %t.hbm -p canonicalize 2>&1 | filecheck %s --check-prefix=PASSES
// RUN: not hbir-opt %S/Inputs/not_a_model.txt -o %t.hbm 2>&1 | filecheck %s --check-prefix=OUT
// RUN: not hbir-opt %S/Inputs/tiny.hbms -o %t.bc 2>&1 | filecheck %s --check-prefix=OUTHBM

// CHECK: hbm version 1 march "nash-e"
// CHECK: func "forward" ddr_peak 192 sram_peak 128 {
// CHECK-NEXT: input "_input_0" %0 int8[1, 8] scales [0.0625] zeros [0]
// CHECK-NEXT: output "_output_0" %7 float32[1, 8] layout "NCHW"
// CHECK-NEXT: buffer %0 ddr offset 0 size 64 int8[1, 8]
// CHECK-NEXT: buffer %1 const offset 0 size 64 int8[8] = [-4, -3, -2, -1, 0, 1, 2, 3]
// CHECK: island 0 "func.func @island(%x: tensor<1x8xsi8>)
// CHECK-NEXT: %2 = dma_load(%0) unit "dma" cycles 0 4
// CHECK-NEXT: %3 = eltwise(%2, %1) {kind = "add", {{.*}}, multiplier = %5, shift = %6, rounding = "half_even", clip = [-128, 127], axis = 1} unit "vae" cycles 4 8 debug ops [3, 4] op "qnt.requantize" loc "net.py:12:5" value_of 4 perm [0, 1]
// CHECK-NEXT: %4 = dma_store(%3)
// CHECK-NEXT: %7 = cpu_call(%4) {island = 0}
// CHECK-NEXT: }
// CHECK: func "identity"

// SYNTAX: syntax_error.hbms:17:21: error: unexpected '%2', expected one of ')' ',' '='
// FIELD: bad_field.hbms:16:74: error: field 'acc_bits' takes kind i64
// ARENA: outside_arena.hbms:9:3: error: bytes 100..164 are outside the sram arena of 128 bytes
// PASSES: hbir-opt: error: {{.*}}.hbm: a compiled model takes no passes
// OUT: hbir-opt: error: {{.*}}.hbm: hbir-opt writes .bc or .mlir (IR); a model.hbm is compiled from quantized.bc by 'hbir compile quantized.bc -o
// OUTHBM: hbir-opt: error: {{.*}}.bc: a compiled model is written as .hbm (binary) or .hbms (text)
