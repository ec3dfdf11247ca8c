"""The emitter: an npu module -> a Program, checked field by field on a small model."""

import numpy as np
import pytest

import hbir
from hbir.compile import lower_to_npu
from hbir.dialects import npu
from hbir.hbm.emit import EmitError, emit
from hbir.runtime.hbm_opcodes import BY_NAME, BY_NUMBER, NONE

QAT = """
builtin.module {
  func.func @forward(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
    %xq = qnt.const_fake_quant %x {min = array<f64: -1.0>, max = array<f64: 0.9921875>,
      bits = 8 : i64} : tensor<2x4xf32>
    %w = hbir.constant dense<[[0.5, -0.25, 0.125, 1.0], [0.3, 0.2, -0.1, 0.0],
      [1.0, 1.0, 1.0, 1.0]]> : tensor<3x4xf32>
    %wq = qnt.const_fake_quant %w {min = array<f64: -1.0>, max = array<f64: 0.9921875>,
      bits = 8 : i64} : tensor<3x4xf32>
    %y = hbir.linear %xq, %wq : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
    %r = hbir.relu %y : tensor<2x3xf32>
    %yq = qnt.const_fake_quant %r {min = array<f64: -4.0>, max = array<f64: 3.96875>,
      bits = 8 : i64} : tensor<2x3xf32>
    func.return %yq : tensor<2x3xf32>
  }
}
"""


@pytest.fixture(scope="module")
def models():
    quantized = hbir.convert(hbir.Module.parse(QAT), "nash-e")
    compiled = lower_to_npu(quantized)
    return quantized, compiled, emit(compiled, quantized)


def _names(code):
    return [BY_NUMBER[i.opcode].name for i in code.instructions]


def test_every_op_becomes_one_instruction_in_program_order(models):
    _, compiled, program = models
    code = program.functions[0]
    ops = [
        op.name.removeprefix("npu.")
        for op in compiled["forward"].op.body.block.ops
        if op.name not in ("npu.constant", "func.return")
    ]
    assert _names(code) == ops
    assert _names(code)[0] == "cpu_call" and _names(code)[-1] == "cpu_call"
    assert "gemm" in _names(code) and program.march == "nash-e"
    assert [i.unit for i in code.instructions][:2] == ["cpu", "dma"]
    assert all(i.start <= i.end for i in code.instructions)


def test_the_gemm_carries_its_post_process_as_constants(models):
    _, compiled, program = models
    code = program.functions[0]
    gemm_op = next(op for op in compiled.module.op.walk() if isinstance(op, npu.GemmOp))
    gemm = next(i for i in code.instructions if i.opcode == BY_NAME["gemm"].number)
    f = gemm.fields
    assert list(f) == [name for name, _ in BY_NAME["gemm"].fields]
    assert f["clip"] == (0, 127)  # the fused relu narrows si8's range
    assert f["transpose_b"] is True and f["pre_shift"] in (NONE, *range(32))
    multiplier = code.constants[f["multiplier"]]
    assert code.buffers[f["multiplier"]].space == "const"
    assert multiplier.dtype == np.int32
    assert multiplier.tolist() == list(gemm_op.multiplier.get_values())
    assert code.constants[f["shift"]].tolist() == list(gemm_op.shift.get_values())


def test_buffers_follow_the_memory_plan_and_constants_do_not_overlap(models):
    _, _, program = models
    code = program.functions[0]
    for b in code.buffers.values():
        assert int(np.prod(b.shape)) * np.dtype(b.dtype).itemsize <= b.size
    assert code.ddr_peak_bytes == max(
        b.offset + b.size for b in code.buffers.values() if b.space == "ddr"
    )
    consts = sorted(
        (b.offset, b.offset + b.size)
        for b in code.buffers.values()
        if b.space == "const"
    )
    assert all(
        end <= start for (_, end), (start, _) in zip(consts, consts[1:], strict=False)
    )
    assert set(code.constants) == {
        k for k, b in code.buffers.items() if b.space == "const"
    }


def test_inputs_outputs_islands_and_debug_table(models):
    quantized, _, program = models
    code = program.functions[0]
    assert [(d.name, d.shape, d.dtype) for d in code.inputs] == [
        ("_input_0", (2, 4), "float32")
    ]
    assert [(d.name, d.shape, d.dtype) for d in code.outputs] == [
        ("_output_0", (2, 3), "float32")
    ]
    assert len(code.islands) == 2 and all(
        "func.func @island" in t for t in code.islands
    )
    island = hbir.Module.parse(code.islands[0])
    assert [op.name for op in island["island"].op.body.block.ops] == [
        "qnt.quantize",
        "func.return",
    ]
    names = [op.name for op in quantized["forward"].op.body.block.ops]
    gemm = _names(code).index("gemm")
    entry = code.debug[gemm]
    assert entry.op == names[entry.op_ids[-1]] and entry.value_of == entry.op_ids[-1]
    assert len(code.debug) == len(code.instructions)


def test_emit_refuses_a_module_without_a_memory_plan(models):
    quantized, _, _ = models
    with pytest.raises(EmitError, match="compiled through npu-plan-memory"):
        emit(quantized)


def test_load_reads_hbm_files_and_other_models(models, tmp_path):
    quantized, _, program = models
    hbir.save(quantized, tmp_path / "quantized.bc")
    assert isinstance(hbir.load(tmp_path / "quantized.bc"), hbir.Module)
    hbm = hbir.Hbm(program)
    hbm.save(tmp_path / "model.hbm")
    loaded = hbir.load(tmp_path / "model.hbm")
    assert isinstance(loaded, hbir.Hbm) and loaded.path == str(tmp_path / "model.hbm")
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    assert np.array_equal(loaded["forward"](x), quantized["forward"](x))


def test_the_shape_rules_accept_the_program_and_name_what_breaks_them(models):
    from dataclasses import replace

    from hbir.runtime.hbm_opcodes import check

    _, _, program = models
    code = program.functions[0]
    assert all(check(i, code) is None for i in code.instructions)
    index = _names(code).index("gemm")
    gemm = code.instructions[index]
    bad_clip = replace(gemm, fields={**gemm.fields, "clip": (5, 1)})
    assert "clip [5, 1]" in check(bad_clip, code)
    bad_bias = replace(gemm, operands=(*gemm.operands, gemm.operands[0]))
    assert "bias must be int32" in check(bad_bias, code)
    no_shift = replace(gemm, fields={**gemm.fields, "shift": NONE})
    assert "go together" in check(no_shift, code)
    wrong = replace(gemm, results=(gemm.operands[0],))
    assert "result shape" in check(wrong, code)
    into_constant = replace(gemm, results=(gemm.fields["multiplier"],))
    assert "writes a const buffer" in check(into_constant, code)
