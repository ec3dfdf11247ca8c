// RUN: hbir-opt %s --split-input-file -p convert-image-preprocess | filecheck %s
// RUN: not hbir-opt %s -p 'convert-image-preprocess{march=nash-e}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not hbir-opt %S/Inputs/convert_image_preprocess_refused.mlir -p convert-image-preprocess 2>&1 | filecheck %s --check-prefix=REFUSED

// Positive: normalisation (v / 1 - 128) / 128 then a quantize with scale 1/128 is
// the table v - 128 per channel: 0x80 (-128) for v = 0, ..., 0x7F (127) for 255.
// CHECK-LABEL: func.func @nv12
// CHECK-NEXT:    %0 = hbir.image_convert %y, %uv
// CHECK-NEXT:    %1 = hbir.image_preprocess %0 {csc = "yuv_bt601_full_to_rgb", mean = array<f64: 1.280000e+02, 1.280000e+02, 1.280000e+02>, std = array<f64: 1.280000e+02, 1.280000e+02, 1.280000e+02>, table = dense<"0x808182{{.*}}7D7E7F{{.*}}"> : tensor<3x256xsi8>} : tensor<1x4x6x3xsi8> -> tensor<1x4x6x3xsi8>
// CHECK-NEXT:    %2 = hbir.transpose %1 {perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x6x3xsi8> -> tensor<1x3x4x6xsi8>
// CHECK-NEXT:    %3 = hbir.relu %2 : tensor<1x3x4x6xsi8>
// CHECK-NEXT:    func.return %3
func.func @nv12(%y: tensor<1x4x6x1xui8>, %uv: tensor<1x2x3x2xui8>) -> tensor<1x3x4x6xsi8> {
  %0 = hbir.image_convert %y, %uv {mode = "nv12"} : (tensor<1x4x6x1xui8>, tensor<1x2x3x2xui8>) -> tensor<1x4x6x3xsi8>
  %1 = hbir.image_preprocess %0 {csc = "yuv_bt601_full_to_rgb", mean = array<f64: 128.0, 128.0, 128.0>, std = array<f64: 128.0, 128.0, 128.0>} : tensor<1x4x6x3xsi8> -> tensor<1x4x6x3xf32>
  %2 = hbir.transpose %1 {perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x6x3xf32> -> tensor<1x3x4x6xf32>
  %3 = qnt.quantize %2 {scales = array<f32: 0.0078125>, zeros = array<i64: 0>} : tensor<1x3x4x6xf32> -> tensor<1x3x4x6xsi8>
  %4 = hbir.relu %3 : tensor<1x3x4x6xsi8>
  func.return %4 : tensor<1x3x4x6xsi8>
}

// -----

// Does not apply: a float model (no quantize) and a per-channel quantization.
// CHECK-LABEL: func.func @float
// CHECK-NEXT:    hbir.image_preprocess {{.*}} -> tensor<1x2x2x3xf32>
// CHECK-NEXT:    qnt.quantize {{.*}} axis = 3
func.func @float(%x: tensor<1x2x2x3xsi8>) -> (tensor<1x2x2x3xf32>, tensor<1x2x2x3xsi8>) {
  %0 = hbir.image_preprocess %x {mean = array<f64: 0.0, 0.0, 0.0>, std = array<f64: 1.0, 1.0, 1.0>} : tensor<1x2x2x3xsi8> -> tensor<1x2x2x3xf32>
  %1 = qnt.quantize %0 {scales = array<f32: 1.0, 2.0, 4.0>, zeros = array<i64: 0, 0, 0>, axis = 3 : i64} : tensor<1x2x2x3xf32> -> tensor<1x2x2x3xsi8>
  func.return %0, %1 : tensor<1x2x2x3xf32>, tensor<1x2x2x3xsi8>
}

// BADOPT: march

// Refused input (Inputs/convert_image_preprocess_refused.mlir): IR that verifies
// and reaches the pass, which must refuse it, located, nothing printed.
// REFUSED: convert_image_preprocess_refused.mlir:6:3: error: 'hbir.image_preprocess' op has no integer table: channel 0's mean 128.0 / std 1e-300 is 128.0 / 0.0
// REFUSED-NOT: builtin.module
// REFUSED-NOT: Traceback
