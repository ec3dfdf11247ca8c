// Input of check-march.mlir (LACKS-*): ops and dtypes a march lacks altogether.
// check-march refuses the first one the march lacks, located at its line.
func.func @topk(%x: tensor<2x8xsi8>) -> (tensor<2x3xsi8>, tensor<2x3xi64>) {
  %v, %i = hbir.topk %x {k = 3 : i64, dim = 1 : i64, largest = true} : (tensor<2x8xsi8>) -> (tensor<2x3xsi8>, tensor<2x3xi64>)
  func.return %v, %i : tensor<2x3xsi8>, tensor<2x3xi64>
}
func.func @half(%x: tensor<1x4xf16>) -> tensor<1x4xf16> {
  %y = hbir.relu %x : tensor<1x4xf16>
  func.return %y : tensor<1x4xf16>
}
func.func @brain(%x: tensor<1x4xbf16>) -> tensor<1x4xbf16> {
  %y = hbir.relu %x : tensor<1x4xbf16>
  func.return %y : tensor<1x4xbf16>
}
