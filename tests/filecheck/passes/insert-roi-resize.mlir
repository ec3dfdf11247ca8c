// RUN: hbir-opt %s -p 'insert-roi-resize{input=img mode=nv12 frame=8,10 function=forward}' | filecheck %s
// RUN: hbir-opt %s -p 'insert-roi-resize{input=img mode=gray interp_mode=nearest pad_mode=border pad_value=7 frame=5,3 function=gray}' | filecheck %s --check-prefix=GRAY
// RUN: not hbir-opt %s -p 'insert-roi-resize{input=img frame=8,10 function=float}' 2>&1 | filecheck %s --check-prefix=FLOAT
// RUN: not hbir-opt %s -p 'insert-roi-resize{input=img frame=7,10 function=forward}' 2>&1 | filecheck %s --check-prefix=ODD
// RUN: not hbir-opt %s -p 'insert-roi-resize{input=img interp_mode=bicubic frame=8,10 function=forward}' 2>&1 | filecheck %s --check-prefix=INTERP

// Positive: the centred image comes from the resizer: frame planes and a roi.
// CHECK-LABEL: func.func @forward(%img_y: tensor<1x8x10x1xui8> {hbir.name = "img_y"}, %img_uv: tensor<1x4x5x2xui8> {hbir.name = "img_uv"}, %img_roi: tensor<1x4xsi32> {hbir.name = "img_roi"}, %k: tensor<2xf32> {hbir.name = "_input_1"}) -> tensor<1x4x6x3xf32> {
// CHECK-NEXT:    %[[C:.*]] = hbir.roi_resize %img_y, %img_uv roi(%img_roi : tensor<1x4xsi32>) {size = array<i64: 4, 6>, pad_value = array<i64: 0, -128>} : tensor<1x8x10x1xui8>, tensor<1x4x5x2xui8> -> tensor<1x4x6x3xsi8>
// CHECK-NEXT:    hbir.image_preprocess %[[C]]
func.func @forward(%img: tensor<1x4x6x3xsi8> {hbir.name = "img"}, %k: tensor<2xf32>) -> tensor<1x4x6x3xf32> {
  %0 = hbir.image_preprocess %img {csc = "yuv_bt601_full_to_rgb", mean = array<f64: 128.0, 128.0, 128.0>, std = array<f64: 128.0, 128.0, 128.0>} : tensor<1x4x6x3xsi8> -> tensor<1x4x6x3xf32>
  func.return %0 : tensor<1x4x6x3xf32>
}

// GRAY-LABEL: func.func @gray(%img_y: tensor<1x5x3x1xui8> {hbir.name = "img_y"}, %img_roi: tensor<1x4xsi32> {hbir.name = "img_roi"}) -> tensor<1x2x3x1xsi8> {
// GRAY-NEXT:    %[[C:.*]] = hbir.roi_resize %img_y roi(%img_roi : tensor<1x4xsi32>) {size = array<i64: 2, 3>, mode = "gray", interpolate_mode = "nearest", expansion_mode = "border", pad_value = array<i64: 7>} : tensor<1x5x3x1xui8> -> tensor<1x2x3x1xsi8>
// GRAY-NEXT:    func.return %[[C]]
func.func @gray(%img: tensor<1x2x3x1xsi8> {hbir.name = "img"}) -> tensor<1x2x3x1xsi8> {
  func.return %img : tensor<1x2x3x1xsi8>
}

// Does not apply to the other functions; invalid inputs reaching the pass.
// CHECK-LABEL: func.func @float(%img: tensor<1x4x6x3xf32> {hbir.name = "img"})
// FLOAT: insert_roi_resize: function @float, input 'img': the input is tensor<1x4x6x3xf32>; the camera input gives centred si8 codes, so call insert_image_preprocess(..., is_signed=True) on it first
func.func @float(%img: tensor<1x4x6x3xf32> {hbir.name = "img"}) -> tensor<1x4x6x3xf32> {
  func.return %img : tensor<1x4x6x3xf32>
}
// ODD: insert_roi_resize: function @forward, input 'img': nv12 needs an even height and width (one chroma pair per 2 x 2 pixels), the frame is 7 x 10
// INTERP: insert_roi_resize: function @forward, input 'img': unknown interp_mode 'bicubic'; one of ('bilinear', 'nearest')
