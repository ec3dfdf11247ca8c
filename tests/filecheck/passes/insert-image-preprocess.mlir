// RUN: hbir-opt %s -p 'insert-image-preprocess{input=img mode=yuvbt601video2bgr divisor=255 mean=0.485,0.456,0.406 std=0.229,0.224,0.225 function=forward}' | filecheck %s
// RUN: hbir-opt %s -p 'insert-image-preprocess{input=gray mean=16 std=4 is_signed=false function=gray}' | filecheck %s --check-prefix=GRAY
// RUN: not hbir-opt %s -p 'insert-image-preprocess{input=img mode=yuvbt601full2rgb mean=128,128,128 std=128,128,128 function=nchw}' 2>&1 | filecheck %s --check-prefix=NCHW
// RUN: not hbir-opt %s -p 'insert-image-preprocess{input=img mode=yuv2rgb mean=0 std=1 function=forward}' 2>&1 | filecheck %s --check-prefix=MODE
// RUN: not hbir-opt %s -p 'insert-image-preprocess{input=img mean=0,0 std=1,1,1 function=forward}' 2>&1 | filecheck %s --check-prefix=MEAN

// Positive: the NHWC float image is fed as centred si8 codes, converted from video
// range YUV to BGR and normalised.
// CHECK-LABEL: func.func @forward(%img: tensor<1x4x6x3xsi8> {hbir.name = "img"}) -> tensor<1x4x6x3xf32> {
// CHECK-NEXT:    %[[P:.*]] = hbir.image_preprocess %img {csc = "yuv_bt601_video_to_bgr", divisor = 255 : i64, mean = array<f64: 4.850000e-01, 4.560000e-01, 4.060000e-01>, std = array<f64: 2.290000e-01, 2.240000e-01, 2.250000e-01>} : tensor<1x4x6x3xsi8> -> tensor<1x4x6x3xf32>
// CHECK-NEXT:    %0 = hbir.relu %[[P]] : tensor<1x4x6x3xf32>
func.func @forward(%img: tensor<1x4x6x3xf32> {hbir.name = "img"}) -> tensor<1x4x6x3xf32> {
  %0 = hbir.relu %img : tensor<1x4x6x3xf32>
  func.return %0 : tensor<1x4x6x3xf32>
}

// A 1-channel image with mode skip, fed as unsigned codes.
// GRAY-LABEL: func.func @gray(%gray: tensor<1x4x6x1xui8> {hbir.name = "gray"})
// GRAY-NEXT:    hbir.image_preprocess %gray {mean = array<f64: 1.600000e+01>, std = array<f64: 4.000000e+00>} : tensor<1x4x6x1xui8> -> tensor<1x4x6x1xf32>
func.func @gray(%gray: tensor<1x4x6x1xf32> {hbir.name = "gray"}) -> tensor<1x4x6x1xf32> {
  func.return %gray : tensor<1x4x6x1xf32>
}

// Does not apply to @nchw and @gray when @forward is named (CHECK), and an NCHW
// input reaching the pass is refused with the fix.
// CHECK-LABEL: func.func @nchw(%img: tensor<1x3x4x6xf32> {hbir.name = "img"})
// NCHW: insert_image_preprocess: function @nchw, input 'img': mode 'yuvbt601full2rgb' needs an NHWC image (N x H x W x 3), the input has shape [1, 3, 4, 6]; call insert_transpose(permutes=[0, 3, 1, 2]) first
// MODE: insert_image_preprocess: function @forward, input 'img': unknown mode 'yuv2rgb'; one of [None, 'skip', 'yuvbt601full2rgb', 'yuvbt601full2bgr', 'yuvbt601video2rgb', 'yuvbt601video2bgr', 'bgr2rgb', 'rgb2bgr']
// MEAN: insert_image_preprocess: function @forward, input 'img': mean has 2 values, the image has 3 channels
func.func @nchw(%img: tensor<1x3x4x6xf32> {hbir.name = "img"}) -> tensor<1x3x4x6xf32> {
  func.return %img : tensor<1x3x4x6xf32>
}
