// Locations survive the pass and print only when asked for.
// RUN: hbir-opt %s -p cleanup --print-debuginfo | filecheck %s
// RUN: hbir-opt %s -p cleanup | filecheck %s --check-prefix=NODEBUG

// CHECK: hbir.transpose %x {perm = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32> loc("model.py":9:7)
// CHECK: hbir.relu %{{.*}} : tensor<4x2x3xf32> loc("block.act"("model.py":10:3))
// NODEBUG-NOT: loc(
func.func @f(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %a = hbir.transpose %x {perm = array<i64: 1, 0, 2>} : tensor<2x3x4xf32> -> tensor<3x2x4xf32> loc("model.py":8:7)
  %b = hbir.transpose %a {perm = array<i64: 2, 1, 0>} : tensor<3x2x4xf32> -> tensor<4x2x3xf32> loc("model.py":9:7)
  %c = hbir.relu %b : tensor<4x2x3xf32> loc("block.act"("model.py":10:3))
  func.return %c : tensor<4x2x3xf32>
}
