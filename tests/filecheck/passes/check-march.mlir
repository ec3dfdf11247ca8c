// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p check-march | filecheck %s
// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p 'check-march{march=nash-m}' | filecheck %s --check-prefix=NASHM
// RUN: not hbir-opt %s --split-input-file -p check-march 2>&1 | filecheck %s --check-prefix=INVALID
// RUN: not hbir-opt %s --split-input-file -p 'check-march{march=nash-x}' 2>&1 | filecheck %s --check-prefix=BADMARCH
// RUN: not hbir-opt %S/Inputs/check_march_refused.mlir -p check-march 2>&1 | filecheck %s --check-prefix=REFUSED
// RUN: hbir-opt %s --split-input-file --verify-diagnostics -p 'check-march{march=nash-p}' | filecheck %s --check-prefix=NASHP
// RUN: not hbir-opt %S/Inputs/check_march_lacks.mlir -p 'check-march{march=nash-b}' 2>&1 | filecheck %s --check-prefix=LACKS-B
// RUN: not hbir-opt %S/Inputs/check_march_lacks.mlir -p 'check-march{march=nash-b-lite}' 2>&1 | filecheck %s --check-prefix=LACKS-BLITE
// RUN: not hbir-opt %S/Inputs/check_march_lacks.mlir -p 'check-march{march=nash-e}' 2>&1 | filecheck %s --check-prefix=LACKS-E
// RUN: not hbir-opt %S/Inputs/check_march_lacks.mlir -p 'check-march{march=nash-h}' 2>&1 | filecheck %s --check-prefix=LACKS-H

// Positive: a conv whose input and weight are both si16 codes is marked for the
// CPU with the reason (march.py: gemm_both_int16 is False on nash-e and nash-m).
// CHECK-LABEL: func.func @both_int16
// CHECK:         hbir.conv2d %x, %w {hbir.device = "cpu", hbir.cpu_reason = "input and weight cannot both be int16 on nash-e",
// NASHM-LABEL: func.func @both_int16
// NASHM:         hbir.conv2d %x, %w {hbir.device = "cpu", hbir.cpu_reason = "input and weight cannot both be int16 on nash-m",
// Does not apply on nash-p, whose gemms take both operands int16.
// NASHP-LABEL: func.func @both_int16
// NASHP-NOT:     hbir.device
// NASHP:         func.return
func.func @both_int16(%xq: tensor<1x4x8x8xsi16>, %wq: tensor<4x4x3x3xsi16>) -> tensor<1x4x6x6xf32> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<1x4x8x8xsi16> -> tensor<1x4x8x8xf32>
  %w = qnt.dequantize %wq {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<4x4x3x3xsi16> -> tensor<4x4x3x3xf32>
  %y = hbir.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  func.return %y : tensor<1x4x6x6xf32>
}

// -----

// Positive: an op reading int32 codes that are not a constant bias, and a conv
// with a 32-wide kernel (limit 31).
// CHECK-LABEL: func.func @int32_and_kernel
// CHECK:         hbir.relu %a {hbir.device = "cpu", hbir.cpu_reason = "int32 operands are not supported on nash-e"}
// CHECK:         hbir.conv2d %x, %w {hbir.device = "cpu", hbir.cpu_reason = "kernel [1, 32] exceeds 31 on nash-e",
func.func @int32_and_kernel(%aq: tensor<4xsi32>, %xq: tensor<1x1x1x32xsi8>, %wq: tensor<1x1x1x32xsi8>) -> (tensor<4xf32>, tensor<1x1x1x1xf32>) {
  %a = qnt.dequantize %aq {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<4xsi32> -> tensor<4xf32>
  %r = hbir.relu %a : tensor<4xf32>
  %x = qnt.dequantize %xq {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<1x1x1x32xsi8> -> tensor<1x1x1x32xf32>
  %w = qnt.dequantize %wq {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<1x1x1x32xsi8> -> tensor<1x1x1x32xf32>
  %y = hbir.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x1x32xf32>, tensor<1x1x1x32xf32>) -> tensor<1x1x1x1xf32>
  func.return %r, %y : tensor<4xf32>, tensor<1x1x1x1xf32>
}

// -----

// Does not apply: si8 input with si16 weight and a 31-wide kernel are within the
// limits; an int32 constant added as a bias is allowed; nothing is marked.
// CHECK-LABEL: func.func @within_limits
// CHECK-NOT:     hbir.device
// CHECK:         func.return
func.func @within_limits(%xq: tensor<1x1x1x31xsi8>, %wq: tensor<1x1x1x31xsi16>) -> tensor<1x1x1x1xf32> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<1x1x1x31xsi8> -> tensor<1x1x1x31xf32>
  %w = qnt.dequantize %wq {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<1x1x1x31xsi16> -> tensor<1x1x1x31xf32>
  %y = hbir.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x1x31xf32>, tensor<1x1x1x31xf32>) -> tensor<1x1x1x1xf32>
  %bq = hbir.constant dense<7> : tensor<1x1x1x1xsi32>
  %b = qnt.dequantize %bq {scales = array<f32: 0.125>, zeros = array<i64: 0>} : tensor<1x1x1x1xsi32> -> tensor<1x1x1x1xf32>
  %s = hbir.add %y, %b : (tensor<1x1x1x1xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x1x1xf32>
  func.return %s : tensor<1x1x1x1xf32>
}

// -----

// Invalid input: a conv whose result shape is wrong is rejected, located, before
// the pass runs; nothing is printed.
// CHECK: check-march.mlir:73:3: error: 'hbir.conv2d' op expected result shape (1, 4, 6, 6), got (1, 4, 8, 8)
// INVALID: check-march.mlir:73:3: error: 'hbir.conv2d' op expected result shape (1, 4, 6, 6), got (1, 4, 8, 8)
// INVALID-NOT: builtin.module
// INVALID-NOT: Traceback
func.func @bad_shape(%xq: tensor<1x4x8x8xsi8>, %wq: tensor<4x4x3x3xsi8>) -> tensor<1x4x8x8xf32> {
  %x = qnt.dequantize %xq {scales = array<f32: 0.5>, zeros = array<i64: 0>} : tensor<1x4x8x8xsi8> -> tensor<1x4x8x8xf32>
  %w = qnt.dequantize %wq {scales = array<f32: 0.25>, zeros = array<i64: 0>} : tensor<4x4x3x3xsi8> -> tensor<4x4x3x3xf32>
  %y = hbir.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>
  func.return %y : tensor<1x4x8x8xf32>
}

// Invalid option: a march the table does not know.
// BADMARCH: hbir-opt: error: unknown march 'nash-x': expected one of nash-e, nash-m
// BADMARCH-NOT: builtin.module

// Refused input (Inputs/check_march_refused.mlir): IR that verifies and reaches the pass, which
// must refuse it, located at the op's line in the text, nothing printed.
// REFUSED: check_march_refused.mlir:5:3: error: 'hbir.conv2d' op is already integer and kernel [33, 33] exceeds 31 on nash-e
// REFUSED-NOT: builtin.module
// REFUSED-NOT: Traceback

// Refused ops and dtypes (Inputs/check_march_lacks.mlir), each naming op and march:
// nash-b (and its variants) has no SPU, the unit of TopK; nash-e has no fp16;
// nash-h has fp16 but no bf16.
// LACKS-B: check_march_lacks.mlir:4:3: error: 'hbir.topk' op is not supported on nash-b: it runs on the SPU, which nash-b lacks (Horizon's J6B deployment guide)
// LACKS-B-NOT: builtin.module
// LACKS-BLITE: check_march_lacks.mlir:4:3: error: 'hbir.topk' op is not supported on nash-b-lite: it runs on the SPU
// LACKS-E: check_march_lacks.mlir:8:3: error: 'hbir.relu' op reads or makes f16, which nash-e lacks: it computes in int8/int16 only
// LACKS-E-NOT: builtin.module
// LACKS-H: check_march_lacks.mlir:12:3: error: 'hbir.relu' op reads or makes bf16, which nash-h lacks: it computes in int8/int16 and fp16 only (Horizon's J6H/P deployment guide)
// LACKS-H-NOT: Traceback
// RUN: not hbir-opt %S/Inputs/check_march_fp16.mlir -p check-march 2>&1 | filecheck %s --check-prefix=FP16
// RUN: hbir-opt %S/Inputs/check_march_fp16.mlir -p 'check-march{march=nash-p}' | filecheck %s --check-prefix=FP16P
// Invalid: an fp16 op on a march without fp16 names the op, its line and the march.
// FP16: check_march_fp16.mlir:8:3: error: 'hbir.sigmoid' op runs in fp16 (the float16 qconfig) but nash-e has no fp16
// FP16-NOT: Traceback
// Positive: on nash-p (fp16) the op and its f16 roundings are kept, unmarked.
// FP16P-LABEL: func.func @fp16_sigmoid
// FP16P:         hbir.cast %x : tensor<4xf32> -> tensor<4xf16>
// FP16P-NOT:     hbir.device
// FP16P:         hbir.sigmoid %x16 : tensor<4xf32>
