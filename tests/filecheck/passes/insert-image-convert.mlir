// RUN: hbir-opt %s -p 'insert-image-convert{input=img mode=nv12 function=forward}' | filecheck %s
// RUN: hbir-opt %s -p 'insert-image-convert{input=img mode=gray function=gray}' | filecheck %s --check-prefix=GRAY
// RUN: not hbir-opt %s -p 'insert-image-convert{input=img function=float}' 2>&1 | filecheck %s --check-prefix=FLOAT
// RUN: not hbir-opt %s -p 'insert-image-convert{input=img function=odd}' 2>&1 | filecheck %s --check-prefix=ODD
// RUN: not hbir-opt %s -p 'insert-image-convert{input=img mode=nv21 function=forward}' 2>&1 | filecheck %s --check-prefix=MODE

// Positive: the centred image becomes NV12 planes <name>_y, <name>_uv.
// CHECK-LABEL: func.func @forward(%img_y: tensor<1x4x6x1xui8> {hbir.name = "img_y"}, %img_uv: tensor<1x2x3x2xui8> {hbir.name = "img_uv"}, %k: tensor<2xf32> {hbir.name = "_input_1"}) -> tensor<1x4x6x3xf32> {
// CHECK-NEXT:    %[[C:.*]] = hbir.image_convert %img_y, %img_uv : (tensor<1x4x6x1xui8>, tensor<1x2x3x2xui8>) -> tensor<1x4x6x3xsi8>
// CHECK-NEXT:    hbir.image_preprocess %[[C]]
func.func @forward(%img: tensor<1x4x6x3xsi8> {hbir.name = "img"}, %k: tensor<2xf32>) -> tensor<1x4x6x3xf32> {
  %0 = hbir.image_preprocess %img {csc = "yuv_bt601_full_to_rgb", mean = array<f64: 128.0, 128.0, 128.0>, std = array<f64: 128.0, 128.0, 128.0>} : tensor<1x4x6x3xsi8> -> tensor<1x4x6x3xf32>
  func.return %0 : tensor<1x4x6x3xf32>
}

// GRAY-LABEL: func.func @gray(%img_y: tensor<1x5x3x1xui8> {hbir.name = "img_y"}) -> tensor<1x5x3x1xsi8> {
// GRAY-NEXT:    %[[C:.*]] = hbir.image_convert %img_y {mode = "gray"} : (tensor<1x5x3x1xui8>) -> tensor<1x5x3x1xsi8>
// GRAY-NEXT:    func.return %[[C]]
func.func @gray(%img: tensor<1x5x3x1xsi8> {hbir.name = "img"}) -> tensor<1x5x3x1xsi8> {
  func.return %img : tensor<1x5x3x1xsi8>
}

// Does not apply to the other functions; invalid inputs reaching the pass.
// CHECK-LABEL: func.func @float(%img: tensor<1x4x6x3xf32> {hbir.name = "img"})
// FLOAT: insert_image_convert: function @float, input 'img': the input is tensor<1x4x6x3xf32>; the camera input gives centred si8 codes, so call insert_image_preprocess(..., is_signed=True) on it first
func.func @float(%img: tensor<1x4x6x3xf32> {hbir.name = "img"}) -> tensor<1x4x6x3xf32> {
  func.return %img : tensor<1x4x6x3xf32>
}
// ODD: insert_image_convert: function @odd, input 'img': nv12 needs an even height and width (one chroma pair per 2 x 2 pixels), the frame is 5 x 6
// MODE: insert_image_convert: function @forward, input 'img': unknown mode 'nv21'; one of ('nv12', 'gray')
func.func @odd(%img: tensor<1x5x6x3xsi8> {hbir.name = "img"}) -> tensor<1x5x6x3xsi8> {
  func.return %img : tensor<1x5x6x3xsi8>
}
