// RUN: hbir-opt %s --compile-to=convert | filecheck %s
// RUN: hbir-opt %s --compile-to=configure-lut | filecheck %s
// RUN: hbir-opt %s --compile-to=compile --march=nash-m 2>/dev/null | filecheck %s --check-prefix=COMPILE
// RUN: hbir-opt %s -o %t.bc && hbir-opt %t.bc --print-debuginfo | filecheck %s --check-prefix=BC
// RUN: not hbir-opt %s -p no-such-pass 2>&1 | filecheck %s --check-prefix=NOPASS
// RUN: not hbir-opt %S/Inputs/parse_error.mlir 2>&1 | filecheck %s --check-prefix=PARSE
// RUN: not hbir-opt %S/Inputs/verify_error.mlir 2>&1 | filecheck %s --check-prefix=VERIFY
// RUN: not hbir-opt %S/Inputs/not_a_model.txt 2>&1 | filecheck %s --check-prefix=SUFFIX
// RUN: hbir-opt --help | filecheck %s --check-prefix=HELP

// CHECK: %y = hbir.relu %x : tensor<4xf32>
// BC: %y = hbir.relu %x : tensor<4xf32> loc("model.py":3:7)
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = hbir.relu %x : tensor<4xf32> loc("model.py":3:7)
  func.return %y : tensor<4xf32>
}

// A float model compiles to one CPU island.
// COMPILE: builtin.module attributes {hbir.march = "nash-m"
// COMPILE: "npu.cpu_call"(%{{.*}}) <{reason = "float"}>
// COMPILE: hbir.relu
// NOPASS: hbir-opt: error: unknown pass 'no-such-pass' (hbir-opt --help lists every pass)
// PARSE: parse_error.mlir:3:3: error: Operation hbir.nope is not registered
// PARSE-NEXT: %y = hbir.nope %x
// PARSE-NOT: Traceback
// VERIFY: verify_error.mlir:3:3: error: 'hbir.matmul' op lhs inner dim 8 != rhs rows 4
// VERIFY-NOT: builtin.module
// SUFFIX: hbir-opt: error: {{.*}}not_a_model.txt: unsupported file type '.txt'
// HELP: passes:
// HELP: cleanup {{ +}}Remove dead pure ops
// HELP: phases (--compile-to):
