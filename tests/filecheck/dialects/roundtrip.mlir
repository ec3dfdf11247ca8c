// Every hbir and qnt op, parsed, printed generic, re-parsed and printed pretty.
// RUN: HBIR_ROUNDTRIP
// RUN: HBIR_GENERIC_ROUNDTRIP

// GENERIC-LABEL: "func.func"() <{sym_name = "float_ops"
// GENERIC: "hbir.conv2d"(%x, %w, %b) <{stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64}>
// GENERIC: "hbir.layer_norm"(%sm, %c1, %c1) <{normalized_shape = array<i64: 8>, eps = 1.000000e-06 : f64, operandSegmentSizes = array<i32: 1, 1, 1>}>
// GENERIC: "hbir.split"(%sl) <{sizes = array<i64: 3, 5>, dim = 1 : i64}> : (tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>)
// CHECK-LABEL: func.func @float_ops(%x: tensor<1x4x8x8xf32>, %v: tensor<2x8xf32>) -> tensor<2x8xf32> {
// CHECK-NEXT: %w = hbir.constant dense<5.000000e-01> : tensor<4x4x3x3xf32>
// CHECK-NEXT: %b = hbir.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>
// CHECK-NEXT: %conv = hbir.conv2d %x, %w bias(%b) {stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT: %tw = hbir.constant dense<2.500000e-01> : tensor<4x2x2x2xf32>
// CHECK-NEXT: %deconv = hbir.conv_transpose2d %conv, %tw {stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, output_padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x2x2x2xf32>) -> tensor<1x2x16x16xf32>
// CHECK-NEXT: %mp = hbir.max_pool2d %conv {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, ceil_mode = true} : tensor<1x4x8x8xf32> -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %ap = hbir.avg_pool2d %conv {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, count_include_pad = false} : tensor<1x4x8x8xf32> -> tensor<1x4x8x8xf32>
// CHECK-NEXT: %gp = hbir.global_avg_pool2d %ap : tensor<1x4x8x8xf32> -> tensor<1x4x1x1xf32>
// CHECK-NEXT: %rs = hbir.resize2d %mp {size = array<i64: 8, 8>, mode = "bilinear", align_corners = true} : tensor<1x4x4x4xf32> -> tensor<1x4x8x8xf32>
// CHECK-NEXT: %rn = hbir.resize2d %mp {size = array<i64: 8, 8>, mode = "bilinear", weight_bits = 7 : i64} : tensor<1x4x4x4xf32> -> tensor<1x4x8x8xf32>
// CHECK-NEXT: %neg = hbir.neg %v : tensor<2x8xf32>
// CHECK-NEXT: %abs = hbir.abs %neg : tensor<2x8xf32>
// CHECK-NEXT: %relu = hbir.relu %abs : tensor<2x8xf32>
// CHECK-NEXT: %clip = hbir.clip %relu {min = 0.000000e+00 : f64, max = 6.000000e+00 : f64} : tensor<2x8xf32>
// CHECK-NEXT: %lrelu = hbir.leaky_relu %clip {slope = 1.000000e-01 : f64} : tensor<2x8xf32>
// CHECK-NEXT: %elu = hbir.elu %lrelu {alpha = 5.000000e-01 : f64} : tensor<2x8xf32>
// CHECK-NEXT: %splus = hbir.softplus %elu {beta = 2.000000e+00 : f64} : tensor<2x8xf32>
// CHECK-NEXT: %erf = hbir.erf %splus : tensor<2x8xf32>
// CHECK-NEXT: %mish = hbir.mish %erf : tensor<2x8xf32>
// CHECK-NEXT: %sig = hbir.sigmoid %lrelu : tensor<2x8xf32>
// CHECK-NEXT: %tanh = hbir.tanh %sig : tensor<2x8xf32>
// CHECK-NEXT: %exp = hbir.exp %tanh : tensor<2x8xf32>
// CHECK-NEXT: %log = hbir.log %exp : tensor<2x8xf32>
// CHECK-NEXT: %sqrt = hbir.sqrt %log : tensor<2x8xf32>
// CHECK-NEXT: %rsqrt = hbir.rsqrt %sqrt : tensor<2x8xf32>
// CHECK-NEXT: %rcp = hbir.reciprocal %rsqrt : tensor<2x8xf32>
// CHECK-NEXT: %sin = hbir.sin %rcp : tensor<2x8xf32>
// CHECK-NEXT: %cos = hbir.cos %sin : tensor<2x8xf32>
// CHECK-NEXT: %gelu = hbir.gelu %cos {approximate = "tanh"} : tensor<2x8xf32>
// CHECK-NEXT: %silu = hbir.silu %gelu : tensor<2x8xf32>
// CHECK-NEXT: %hsig = hbir.hardsigmoid %silu : tensor<2x8xf32>
// CHECK-NEXT: %hsw = hbir.hardswish %hsig : tensor<2x8xf32>
// CHECK-NEXT: %add = hbir.add %hsw, %v : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %c1 = hbir.constant dense<2.000000e+00> : tensor<8xf32>
// CHECK-NEXT: %sub = hbir.sub %add, %c1 : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %mul = hbir.mul %sub, %c1 : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %div = hbir.div %mul, %c1 : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %max = hbir.maximum %div, %v : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %min = hbir.minimum %max, %v : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %sm = hbir.softmax %min {dim = -1 : i64} : tensor<2x8xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %ln = hbir.layer_norm %sm weight(%c1 : tensor<8xf32>) bias(%c1 : tensor<8xf32>) {normalized_shape = array<i64: 8>, eps = 1.000000e-06 : f64} : tensor<2x8xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %rsum = hbir.reduce_sum %ln {dims = array<i64: 1>} : tensor<2x8xf32> -> tensor<2xf32>
// CHECK-NEXT: %rmean = hbir.reduce_mean %ln {dims = array<i64: -1>, keepdim = true} : tensor<2x8xf32> -> tensor<2x1xf32>
// CHECK-NEXT: %rmax = hbir.reduce_max %ln {dims = array<i64: 0>} : tensor<2x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %rmin = hbir.reduce_min %ln {dims = array<i64: 1>, keepdim = true} : tensor<2x8xf32> -> tensor<2x1xf32>
// CHECK-NEXT: %lw = hbir.constant dense<1.000000e-01> : tensor<8x8xf32>
// CHECK-NEXT: %lin = hbir.linear %ln, %lw bias(%c1) : (tensor<2x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %mm = hbir.matmul %lin, %lw : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %cat = hbir.concat %mm, %lin {dim = 0 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %sl = hbir.slice %cat {begin = array<i64: 0, 0>, end = array<i64: 4, 8>, step = array<i64: 2, 1>} : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %s0, %s1 = hbir.split %sl {sizes = array<i64: 3, 5>, dim = 1 : i64} : (tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>)
// CHECK-NEXT: %rsh = hbir.reshape %s1 : tensor<2x5xf32> -> tensor<10xf32>
// CHECK-NEXT: %tr = hbir.transpose %s0 {perm = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
// CHECK-NEXT: %fl = hbir.flip %tr {dims = array<i64: 0, -1>} : tensor<3x2xf32>
// CHECK-NEXT: %pad = hbir.pad %tr {low = array<i64: 0, 1>, high = array<i64: 0, 2>, value = 5.000000e-01 : f64} : tensor<3x2xf32> -> tensor<3x5xf32>
// CHECK-NEXT: %cast = hbir.cast %pad : tensor<3x5xf32> -> tensor<3x5xsi32>
// CHECK-NEXT: func.return %sl : tensor<2x8xf32>
func.func @float_ops(%x: tensor<1x4x8x8xf32>, %v: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %w = hbir.constant dense<0.5> : tensor<4x4x3x3xf32>
  %b = hbir.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %conv = hbir.conv2d %x, %w bias(%b) {stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %tw = hbir.constant dense<0.25> : tensor<4x2x2x2xf32>
  %deconv = hbir.conv_transpose2d %conv, %tw {stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, output_padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x2x2x2xf32>) -> tensor<1x2x16x16xf32>
  %mp = hbir.max_pool2d %conv {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, ceil_mode = true} : tensor<1x4x8x8xf32> -> tensor<1x4x4x4xf32>
  %ap = hbir.avg_pool2d %conv {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, count_include_pad = false} : tensor<1x4x8x8xf32> -> tensor<1x4x8x8xf32>
  %gp = hbir.global_avg_pool2d %ap : tensor<1x4x8x8xf32> -> tensor<1x4x1x1xf32>
  %rs = hbir.resize2d %mp {size = array<i64: 8, 8>, mode = "bilinear", align_corners = true} : tensor<1x4x4x4xf32> -> tensor<1x4x8x8xf32>
  %rn = hbir.resize2d %mp {size = array<i64: 8, 8>, mode = "bilinear", weight_bits = 7 : i64} : tensor<1x4x4x4xf32> -> tensor<1x4x8x8xf32>
  %neg = hbir.neg %v : tensor<2x8xf32>
  %abs = hbir.abs %neg : tensor<2x8xf32>
  %relu = hbir.relu %abs : tensor<2x8xf32>
  %clip = hbir.clip %relu {min = 0.0 : f64, max = 6.0 : f64} : tensor<2x8xf32>
  %lrelu = hbir.leaky_relu %clip {slope = 0.1 : f64} : tensor<2x8xf32>
  %elu = hbir.elu %lrelu {alpha = 0.5 : f64} : tensor<2x8xf32>
  %splus = hbir.softplus %elu {beta = 2.0 : f64} : tensor<2x8xf32>
  %erf = hbir.erf %splus : tensor<2x8xf32>
  %mish = hbir.mish %erf : tensor<2x8xf32>
  %sig = hbir.sigmoid %lrelu : tensor<2x8xf32>
  %tanh = hbir.tanh %sig : tensor<2x8xf32>
  %exp = hbir.exp %tanh : tensor<2x8xf32>
  %log = hbir.log %exp : tensor<2x8xf32>
  %sqrt = hbir.sqrt %log : tensor<2x8xf32>
  %rsqrt = hbir.rsqrt %sqrt : tensor<2x8xf32>
  %rcp = hbir.reciprocal %rsqrt : tensor<2x8xf32>
  %sin = hbir.sin %rcp : tensor<2x8xf32>
  %cos = hbir.cos %sin : tensor<2x8xf32>
  %gelu = hbir.gelu %cos {approximate = "tanh"} : tensor<2x8xf32>
  %silu = hbir.silu %gelu : tensor<2x8xf32>
  %hsig = hbir.hardsigmoid %silu : tensor<2x8xf32>
  %hsw = hbir.hardswish %hsig : tensor<2x8xf32>
  %add = hbir.add %hsw, %v : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %c1 = hbir.constant dense<2.0> : tensor<8xf32>
  %sub = hbir.sub %add, %c1 : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %mul = hbir.mul %sub, %c1 : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %div = hbir.div %mul, %c1 : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %max = hbir.maximum %div, %v : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %min = hbir.minimum %max, %v : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %sm = hbir.softmax %min {dim = -1 : i64} : tensor<2x8xf32> -> tensor<2x8xf32>
  %ln = hbir.layer_norm %sm weight(%c1 : tensor<8xf32>) bias(%c1 : tensor<8xf32>) {normalized_shape = array<i64: 8>, eps = 1.0e-06 : f64} : tensor<2x8xf32> -> tensor<2x8xf32>
  %rsum = hbir.reduce_sum %ln {dims = array<i64: 1>} : tensor<2x8xf32> -> tensor<2xf32>
  %rmean = hbir.reduce_mean %ln {dims = array<i64: -1>, keepdim = true} : tensor<2x8xf32> -> tensor<2x1xf32>
  %rmax = hbir.reduce_max %ln {dims = array<i64: 0>} : tensor<2x8xf32> -> tensor<8xf32>
  %rmin = hbir.reduce_min %ln {dims = array<i64: 1>, keepdim = true} : tensor<2x8xf32> -> tensor<2x1xf32>
  %lw = hbir.constant dense<0.1> : tensor<8x8xf32>
  %lin = hbir.linear %ln, %lw bias(%c1) : (tensor<2x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %mm = hbir.matmul %lin, %lw : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %cat = hbir.concat %mm, %lin {dim = 0 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  %sl = hbir.slice %cat {begin = array<i64: 0, 0>, end = array<i64: 4, 8>, step = array<i64: 2, 1>} : tensor<4x8xf32> -> tensor<2x8xf32>
  %s0, %s1 = hbir.split %sl {sizes = array<i64: 3, 5>, dim = 1 : i64} : (tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>)
  %rsh = hbir.reshape %s1 : tensor<2x5xf32> -> tensor<10xf32>
  %tr = hbir.transpose %s0 {perm = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  %fl = hbir.flip %tr {dims = array<i64: 0, -1>} : tensor<3x2xf32>
  %pad = hbir.pad %tr {low = array<i64: 0, 1>, high = array<i64: 0, 2>, value = 0.5 : f64} : tensor<3x2xf32> -> tensor<3x5xf32>
  %cast = hbir.cast %pad : tensor<3x5xf32> -> tensor<3x5xsi32>
  func.return %sl : tensor<2x8xf32>
}

// -----

// GENERIC-LABEL: "func.func"() <{sym_name = "fixed_point"
// GENERIC: "qnt.const_fake_quant"(%x) <{min = array<f64: -1.280000e+00>, max = array<f64: 1.270000e+00>, bits = 8 : i64, narrowRange = false}> : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// GENERIC: "qnt.requantize"(%acc) <{multiplier = array<i64: 1073741824, 1073741824, 1073741824, 1073741824>, shift = array<i64: 32, 32, 32, 33>, axis = 1 : i64, clip = array<i64: 0, 127>, rounding = "half_up", zero = 0 : i64}>
// GENERIC: "hbir.image_convert"(%y, %uv) <{mode = "nv12"}>
// CHECK-LABEL: func.func @fixed_point(%x: tensor<1x4x8x8xf32>, %y: tensor<1x4x4x1xui8>, %uv: tensor<1x2x2x2xui8>) -> tensor<1x4x4x3xf32> {
// CHECK-NEXT: %fq = qnt.const_fake_quant %x {min = array<f64: -1.280000e+00>, max = array<f64: 1.270000e+00>, bits = 8 : i64} : tensor<1x4x8x8xf32>
// CHECK-NEXT: %fqc = qnt.const_fake_quant %fq {min = array<f64: -1.000000e+00, -2.000000e+00, -3.000000e+00, -4.000000e+00>, max = array<f64: 1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00>, bits = 16 : i64, narrowRange = true, axis = 1 : i64} : tensor<1x4x8x8xf32>
// CHECK-NEXT: %q = qnt.quantize %fqc {scales = array<f32: 1.000000e-02>, zeros = array<i64: 0>} : tensor<1x4x8x8xf32> -> tensor<1x4x8x8xsi8>
// CHECK-NEXT: %w = hbir.constant dense<3> : tensor<4x4x1x1xsi8>
// CHECK-NEXT: %b = hbir.constant dense<[1, -2, 3, -4]> : tensor<4xsi32>
// CHECK-NEXT: %acc = hbir.conv2d %q, %w bias(%b) {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x8x8xsi8>, tensor<4x4x1x1xsi8>, tensor<4xsi32>) -> tensor<1x4x8x8xsi32>
// CHECK-NEXT: %rq = qnt.requantize %acc {multiplier = array<i64: 1073741824, 1073741824, 1073741824, 1073741824>, shift = array<i64: 32, 32, 32, 33>, axis = 1 : i64, clip = array<i64: 0, 127>, rounding = "half_up"} : tensor<1x4x8x8xsi32> -> tensor<1x4x8x8xsi8>
// CHECK-NEXT: %t = hbir.constant dense<"0x{{[0-9A-F]+}}"{{.*}}
// CHECK-NEXT: %lut = hbir.lut %rq {table = dense<"0x{{[0-9A-F]+}}"{{.*}}
// CHECK-NEXT: %dq = qnt.dequantize %lut {scales = array<f32: 2.000000e-02>, zeros = array<i64: 0>} : tensor<1x4x8x8xsi8> -> tensor<1x4x8x8xf32>
// CHECK-NEXT: %bar = qnt.barrier %dq : tensor<1x4x8x8xf32>
// CHECK-NEXT: %yuv = hbir.image_convert %y, %uv : (tensor<1x4x4x1xui8>, tensor<1x2x2x2xui8>) -> tensor<1x4x4x3xsi8>
// CHECK-NEXT: %img = hbir.image_preprocess %yuv {csc = "yuv_bt601_full_to_rgb", divisor = 255 : i64, mean = array<f64: 4.850000e-01, 4.560000e-01, 4.060000e-01>, std = array<f64: 2.290000e-01, 2.240000e-01, 2.250000e-01>} : tensor<1x4x4x3xsi8> -> tensor<1x4x4x3xf32>
// CHECK-NEXT: func.return %img : tensor<1x4x4x3xf32>
func.func @fixed_point(%x: tensor<1x4x8x8xf32>, %y: tensor<1x4x4x1xui8>, %uv: tensor<1x2x2x2xui8>) -> tensor<1x4x4x3xf32> {
  %fq = qnt.const_fake_quant %x {min = array<f64: -1.28>, max = array<f64: 1.27>, bits = 8 : i64} : tensor<1x4x8x8xf32>
  %fqc = qnt.const_fake_quant %fq {min = array<f64: -1.0, -2.0, -3.0, -4.0>, max = array<f64: 1.0, 2.0, 3.0, 4.0>, bits = 16 : i64, narrowRange = true, axis = 1 : i64} : tensor<1x4x8x8xf32>
  %q = qnt.quantize %fqc {scales = array<f32: 0.01>, zeros = array<i64: 0>} : tensor<1x4x8x8xf32> -> tensor<1x4x8x8xsi8>
  %w = hbir.constant dense<3> : tensor<4x4x1x1xsi8>
  %b = hbir.constant dense<[1, -2, 3, -4]> : tensor<4xsi32>
  %acc = hbir.conv2d %q, %w bias(%b) {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x4x8x8xsi8>, tensor<4x4x1x1xsi8>, tensor<4xsi32>) -> tensor<1x4x8x8xsi32>
  %rq = qnt.requantize %acc {multiplier = array<i64: 1073741824, 1073741824, 1073741824, 1073741824>, shift = array<i64: 32, 32, 32, 33>, axis = 1 : i64, clip = array<i64: 0, 127>, rounding = "half_up"} : tensor<1x4x8x8xsi32> -> tensor<1x4x8x8xsi8>
  %t = hbir.constant dense<"0x000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9FA0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBFC0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDFE0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF"> : tensor<256xsi8>
  %lut = hbir.lut %rq {table = dense<"0x000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9FA0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBFC0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDFE0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF"> : tensor<256xsi8>} : tensor<1x4x8x8xsi8> -> tensor<1x4x8x8xsi8>
  %dq = qnt.dequantize %lut {scales = array<f32: 0.02>, zeros = array<i64: 0>} : tensor<1x4x8x8xsi8> -> tensor<1x4x8x8xf32>
  %bar = qnt.barrier %dq : tensor<1x4x8x8xf32>
  %yuv = hbir.image_convert %y, %uv {mode = "nv12"} : (tensor<1x4x4x1xui8>, tensor<1x2x2x2xui8>) -> tensor<1x4x4x3xsi8>
  %img = hbir.image_preprocess %yuv {csc = "yuv_bt601_full_to_rgb", divisor = 255 : i64, mean = array<f64: 0.485, 0.456, 0.406>, std = array<f64: 0.229, 0.224, 0.225>} : tensor<1x4x4x3xsi8> -> tensor<1x4x4x3xf32>
  func.return %img : tensor<1x4x4x3xf32>
}

// -----

// An int16 lookup table: the fields of a segmented numerics.LutTable.
// CHECK-LABEL: func.func @lut16
// CHECK-NEXT: %y = hbir.lut %x {function = "sigmoid", kind = "segments", rounding = "half_even", in_scale = 0.00024414435 : f32, out_scale = 0.00784313772 : f32, in_bits = 16 : i64, out_bits = 8 : i64, num_tables = 6 : i64, frac_bits = 32 : i64, phase_mult = 0 : i64, phase_shift = 0 : i64, phase_bits = 0 : i64, octave_step = 0 : i64, starts = array<i64: -32768, -21845, -10922, 0, 10923, 21846>, offsets = array<i64: -188185662, -2173458632, 15353307442, 294035412769, 516839289733, 545349583260>, slopes = array<i64: 224031, 3016157, 21810183, 21811247, 3016157, 224047>} : tensor<4xsi16> -> tensor<4xsi8>
// GENERIC-LABEL: "func.func"() <{sym_name = "lut16"
// GENERIC: "hbir.lut"(%x) <{function = "sigmoid", kind = "segments"
func.func @lut16(%x: tensor<4xsi16>) -> tensor<4xsi8> {
  %y = hbir.lut %x {function = "sigmoid", kind = "segments", rounding = "half_even", in_scale = 0.00024414435 : f32, out_scale = 0.00784313772 : f32, in_bits = 16 : i64, out_bits = 8 : i64, num_tables = 6 : i64, frac_bits = 32 : i64, phase_mult = 0 : i64, phase_shift = 0 : i64, phase_bits = 0 : i64, octave_step = 0 : i64, starts = array<i64: -32768, -21845, -10922, 0, 10923, 21846>, offsets = array<i64: -188185662, -2173458632, 15353307442, 294035412769, 516839289733, 545349583260>, slopes = array<i64: 224031, 3016157, 21810183, 21811247, 3016157, 224047>} : tensor<4xsi16> -> tensor<4xsi8>
  func.return %y : tensor<4xsi8>
}

// Selection: values and their i64 indices, and reads at i64 indices.
// GENERIC-LABEL: "func.func"() <{sym_name = "selection"
// GENERIC: "hbir.topk"(%x) <{k = 3 : i64, dim = 1 : i64, largest = false}> : (tensor<2x8xsi8>) -> (tensor<2x3xsi8>, tensor<2x3xi64>)
// CHECK-LABEL: func.func @selection(%x: tensor<2x8xsi8>) -> tensor<3x8xsi8> {
// CHECK-NEXT: %v, %i = hbir.topk %x {k = 3 : i64, dim = 1 : i64, largest = false} : (tensor<2x8xsi8>) -> (tensor<2x3xsi8>, tensor<2x3xi64>)
// CHECK-NEXT: %a = hbir.argmax %x {dim = 1 : i64} : tensor<2x8xsi8> -> tensor<2xi64>
// CHECK-NEXT: %b = hbir.argmin %x {dim = 0 : i64, keepdim = true} : tensor<2x8xsi8> -> tensor<1x8xi64>
// CHECK-NEXT: %g = hbir.gather %x, %i {dim = 1 : i64} : (tensor<2x8xsi8>, tensor<2x3xi64>) -> tensor<2x3xsi8>
// CHECK-NEXT: %r = hbir.reshape %i : tensor<2x3xi64> -> tensor<6xi64>
// CHECK-NEXT: %s = hbir.index_select %x, %a {dim = 0 : i64} : (tensor<2x8xsi8>, tensor<2xi64>) -> tensor<2x8xsi8>
// CHECK-NEXT: %c = hbir.constant dense<[1, 0, 1]> : tensor<3xi64>
// CHECK-NEXT: %e = hbir.index_select %s, %c {dim = 0 : i64} : (tensor<2x8xsi8>, tensor<3xi64>) -> tensor<3x8xsi8>
// CHECK-NEXT: func.return %e : tensor<3x8xsi8>
func.func @selection(%x: tensor<2x8xsi8>) -> tensor<3x8xsi8> {
  %v, %i = hbir.topk %x {k = 3 : i64, dim = 1 : i64, largest = false} : (tensor<2x8xsi8>) -> (tensor<2x3xsi8>, tensor<2x3xi64>)
  %a = hbir.argmax %x {dim = 1 : i64} : tensor<2x8xsi8> -> tensor<2xi64>
  %b = hbir.argmin %x {dim = 0 : i64, keepdim = true} : tensor<2x8xsi8> -> tensor<1x8xi64>
  %g = hbir.gather %x, %i {dim = 1 : i64} : (tensor<2x8xsi8>, tensor<2x3xi64>) -> tensor<2x3xsi8>
  %r = hbir.reshape %i : tensor<2x3xi64> -> tensor<6xi64>
  %s = hbir.index_select %x, %a {dim = 0 : i64} : (tensor<2x8xsi8>, tensor<2xi64>) -> tensor<2x8xsi8>
  %c = hbir.constant dense<[1, 0, 1]> : tensor<3xi64>
  %e = hbir.index_select %s, %c {dim = 0 : i64} : (tensor<2x8xsi8>, tensor<3xi64>) -> tensor<3x8xsi8>
  func.return %e : tensor<3x8xsi8>
}

// grid_sample: float (the sampled values) and integer (codes, the grid's scale,
// the exact si32 sums).
// GENERIC-LABEL: "func.func"() <{sym_name = "grid_sample"
// GENERIC: "hbir.grid_sample"(%q, %qg) <{grid_scale = 6.103515625e-05 : f64, mode = "bilinear", padding_mode = "zeros", align_corners = false}>
// CHECK-LABEL: func.func @grid_sample(
// CHECK-NEXT: %y = hbir.grid_sample %x, %g {mode = "nearest", padding_mode = "border", align_corners = true} : (tensor<1x4x8x8xf32>, tensor<1x5x6x2xf32>) -> tensor<1x4x5x6xf32>
// CHECK-NEXT: %s = hbir.grid_sample %q, %qg {grid_scale = 6.103515625e-05 : f64} : (tensor<1x4x8x8xsi8>, tensor<1x5x6x2xsi16>) -> tensor<1x4x5x6xsi32>
func.func @grid_sample(%x: tensor<1x4x8x8xf32>, %g: tensor<1x5x6x2xf32>, %q: tensor<1x4x8x8xsi8>, %qg: tensor<1x5x6x2xsi16>) -> tensor<1x4x5x6xsi32> {
  %y = hbir.grid_sample %x, %g {mode = "nearest", padding_mode = "border", align_corners = true} : (tensor<1x4x8x8xf32>, tensor<1x5x6x2xf32>) -> tensor<1x4x5x6xf32>
  %s = hbir.grid_sample %q, %qg {grid_scale = 6.103515625e-05 : f64} : (tensor<1x4x8x8xsi8>, tensor<1x5x6x2xsi16>) -> tensor<1x4x5x6xsi32>
  func.return %s : tensor<1x4x5x6xsi32>
}

// Max pool indices (i64) and max unpooling at them.
// GENERIC-LABEL: "func.func"() <{sym_name = "max_unpool"
// GENERIC: "hbir.max_pool2d_indices"(%x) <{kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, ceil_mode = false}> : (tensor<1x4x8x6xsi8>) -> tensor<1x4x4x3xi64>
// GENERIC: "hbir.max_unpool2d"(%p, %i) <{size = array<i64: 8, 6>}> : (tensor<1x4x4x3xsi8>, tensor<1x4x4x3xi64>) -> tensor<1x4x8x6xsi8>
// CHECK-LABEL: func.func @max_unpool(
// CHECK-NEXT: %p = hbir.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : tensor<1x4x8x6xsi8> -> tensor<1x4x4x3xsi8>
// CHECK-NEXT: %i = hbir.max_pool2d_indices %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : tensor<1x4x8x6xsi8> -> tensor<1x4x4x3xi64>
// CHECK-NEXT: %u = hbir.max_unpool2d %p, %i {size = array<i64: 8, 6>} : (tensor<1x4x4x3xsi8>, tensor<1x4x4x3xi64>) -> tensor<1x4x8x6xsi8>
func.func @max_unpool(%x: tensor<1x4x8x6xsi8>) -> tensor<1x4x8x6xsi8> {
  %p = hbir.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : tensor<1x4x8x6xsi8> -> tensor<1x4x4x3xsi8>
  %i = hbir.max_pool2d_indices %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : tensor<1x4x8x6xsi8> -> tensor<1x4x4x3xi64>
  %u = hbir.max_unpool2d %p, %i {size = array<i64: 8, 6>} : (tensor<1x4x4x3xsi8>, tensor<1x4x4x3xi64>) -> tensor<1x4x8x6xsi8>
  func.return %u : tensor<1x4x8x6xsi8>
}

// The camera resizer: an NV12 frame with a roi, and a gray one (defaults elided).
// GENERIC-LABEL: "func.func"() <{sym_name = "roi_resize"
// GENERIC: "hbir.roi_resize"(%y, %uv, %roi) <{size = array<i64: 4, 6>, mode = "nv12", interpolate_mode = "nearest", expansion_mode = "border", pad_value = array<i64: 0, -128>, operandSegmentSizes = array<i32: 1, 1, 1>}>
// CHECK-LABEL: func.func @roi_resize(
// CHECK-NEXT: %a = hbir.roi_resize %y, %uv roi(%roi : tensor<1x4xsi32>) {size = array<i64: 4, 6>, interpolate_mode = "nearest", expansion_mode = "border", pad_value = array<i64: 0, -128>} : tensor<1x8x10x1xui8>, tensor<1x4x5x2xui8> -> tensor<1x4x6x3xsi8>
// CHECK-NEXT: %b = hbir.roi_resize %y roi(%roi : tensor<1x4xsi32>) {size = array<i64: 2, 2>, mode = "gray", pad_value = array<i64: 255>} : tensor<1x8x10x1xui8> -> tensor<1x2x2x1xsi8>
func.func @roi_resize(%y: tensor<1x8x10x1xui8>, %uv: tensor<1x4x5x2xui8>, %roi: tensor<1x4xsi32>) -> tensor<1x2x2x1xsi8> {
  %a = hbir.roi_resize %y, %uv roi(%roi : tensor<1x4xsi32>) {size = array<i64: 4, 6>, mode = "nv12", interpolate_mode = "nearest", expansion_mode = "border", pad_value = array<i64: 0, -128>} : tensor<1x8x10x1xui8>, tensor<1x4x5x2xui8> -> tensor<1x4x6x3xsi8>
  %b = hbir.roi_resize %y roi(%roi : tensor<1x4xsi32>) {size = array<i64: 2, 2>, mode = "gray", pad_value = array<i64: 255>} : tensor<1x8x10x1xui8> -> tensor<1x2x2x1xsi8>
  func.return %b : tensor<1x2x2x1xsi8>
}

// Masks and index arithmetic: comparisons (codes, thresholds, two grids), a
// selection of codes, // and % of i64 indices.
// GENERIC-LABEL: "func.func"() <{sym_name = "masks"
// GENERIC: "hbir.select"(%m, %a, %a) : (tensor<2x8xi1>, tensor<2x8xsi8>, tensor<2x8xsi8>) -> tensor<2x8xsi8>
// CHECK-LABEL: func.func @masks(
// CHECK-NEXT: %m = hbir.compare %a, %t {kind = "ge"} : (tensor<2x8xsi8>, tensor<1xsi32>) -> tensor<2x8xi1>
// CHECK-NEXT: %s = hbir.compare %a, %a {kind = "lt", scales = array<f64: 5.000000e-01, 2.500000e-01>} : (tensor<2x8xsi8>, tensor<2x8xsi8>) -> tensor<2x8xi1>
// CHECK-NEXT: %y = hbir.select %m, %a, %a : (tensor<2x8xi1>, tensor<2x8xsi8>, tensor<2x8xsi8>) -> tensor<2x8xsi8>
// CHECK-NEXT: %w = hbir.constant dense<4> : tensor<i64>
// CHECK-NEXT: %q = hbir.floor_divide %i, %w : (tensor<6xi64>, tensor<i64>) -> tensor<6xi64>
// CHECK-NEXT: %r = hbir.remainder %i, %w : (tensor<6xi64>, tensor<i64>) -> tensor<6xi64>
// CHECK-NEXT: func.return %y : tensor<2x8xsi8>
func.func @masks(%a: tensor<2x8xsi8>, %t: tensor<1xsi32>, %i: tensor<6xi64>) -> tensor<2x8xsi8> {
  %m = hbir.compare %a, %t {kind = "ge"} : (tensor<2x8xsi8>, tensor<1xsi32>) -> tensor<2x8xi1>
  %s = hbir.compare %a, %a {kind = "lt", scales = array<f64: 0.5, 0.25>} : (tensor<2x8xsi8>, tensor<2x8xsi8>) -> tensor<2x8xi1>
  %y = hbir.select %m, %a, %a : (tensor<2x8xi1>, tensor<2x8xsi8>, tensor<2x8xsi8>) -> tensor<2x8xsi8>
  %w = hbir.constant dense<4> : tensor<i64>
  %q = hbir.floor_divide %i, %w : (tensor<6xi64>, tensor<i64>) -> tensor<6xi64>
  %r = hbir.remainder %i, %w : (tensor<6xi64>, tensor<i64>) -> tensor<6xi64>
  func.return %y : tensor<2x8xsi8>
}
