"""compile: quantized.bc -> the npu dialect, checked numerically after every pass.

For the zoo, the digits model, a model with a CPU island and an NV12 model
(nv12_quantized.bc), the program after each compile pass, executed by the
interpreter, is bit-identical to quantized.bc (one test per model and pass, so a
wrong pass is named); the models come from tests/compile_models.py. Then tiling
against SRAM, memory planning, the march, hbir-opt, hbir.compile writing
model.hbm, and the debug origin every npu op carries.
"""

import os
import subprocess

import compile_models
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import zoo
from torch import nn
from xdsl.dialects.func import ReturnOp
from xdsl.ir import OpResult
from xdsl.passes import ModulePass
from zoo_stages import calibrated, validated

import hbir
from hbir import diagnostics
from hbir.compile import compile_passes, lower_to_npu, run_passes
from hbir.dialects import make_context, npu
from hbir.hbm import container
from hbir.hbm.emit import emit
from hbir.passes.npu_lower import CompileError
from hbir.passes.npu_tile import NpuTilePass, tile_op
from hbir.quantization import DeQuantStub, QuantStub, export

PASSES = [p.name for p in compile_passes("nash-e")]
BATCHES = 3


def _outputs(f, inputs):
    """``f``'s outputs as the interpreter defines them (a quantized.bc's own fast
    feed is its compiled program: the thing under test)."""
    if isinstance(f, hbir.Function):
        feed = dict(zip(f.inputs.names, inputs, strict=True))
        return list(f.feed(feed, reference=True).values())
    out = f(*inputs)  # a model.hbm function
    return list(out) if isinstance(out, tuple) else [out]


MODELS = [*zoo.NAMES, "digits", "island", "nv12"]  # of compile_models.NAMES
_CACHE: dict = {}


def _stages(name, tmp_path_factory):
    """quantized.bc, its inputs, and the program after each compile pass."""
    if name not in _CACHE:
        quantized, batches = compile_models.quantized(
            name, tmp_path_factory.mktemp(name), BATCHES
        )
        stages, current, ctx = {}, quantized.clone(), make_context()
        for p in compile_passes("nash-e"):
            p.apply(ctx, current.module.op)
            diagnostics.verify(current.module.op, filename=p.name)
            npu.verify_sram(current.module.op)
            stages[p.name] = current.clone()
        _CACHE[name] = (quantized, batches, stages)
    return _CACHE[name]


@pytest.mark.parametrize("pass_name", PASSES)
@pytest.mark.parametrize("name", MODELS)
def test_every_compile_pass_is_bit_identical(name, pass_name, tmp_path_factory):
    quantized, batches, stages = _stages(name, tmp_path_factory)
    program = stages[pass_name]
    for inputs in batches:
        want = _outputs(quantized["forward"], inputs)
        got = _outputs(program["forward"], inputs)
        for w, g in zip(want, got, strict=True):
            assert w.dtype == g.dtype and w.shape == g.shape
            assert np.array_equal(w, g), f"{name}: {pass_name} changed the numbers"


def _names(module):
    return [op.name for op in module.module.op.walk()]


@pytest.mark.parametrize("name", MODELS)
def test_the_compiled_program_is_npu_ops_and_cpu_islands(name, tmp_path_factory):
    _, _, stages = _stages(name, tmp_path_factory)
    top = [
        op.name
        for op in stages["npu-plan-memory"]["forward"].op.body.block.ops
        if op.name != "func.return"
    ]
    assert all(n.startswith("npu.") for n in top), top
    # Fusion happened: no requantization is left as a separate op after a conv.
    fused = stages["npu-fuse"]
    convs = [op for op in fused.module.op.walk() if isinstance(op, npu.ConvOp)]
    assert all(op.multiplier is not None for op in convs)


def test_the_island_model_keeps_its_float_linear_on_the_cpu(tmp_path_factory):
    _, _, stages = _stages("island", tmp_path_factory)
    calls = [
        op
        for op in stages["npu-lower"].module.op.walk()
        if isinstance(op, npu.CpuCallOp)
    ]
    inner = {o.name for c in calls for o in c.body.block.ops}
    assert "hbir.linear" in inner and "qnt.quantize" in inner


def test_layout_cancels_the_transposes_between_spatial_ops(tmp_path_factory):
    _, _, stages = _stages("resnet", tmp_path_factory)
    lowered = _names(stages["npu-lower"]).count("npu.transpose")
    laid_out = _names(stages["npu-layout"]).count("npu.transpose")
    assert lowered >= 20 and laid_out <= 1  # only the input's NCHW -> NHWC stays


@pytest.mark.parametrize("name", zoo.NAMES)
def test_memory_plan_reuses_ddr_buffers(name, tmp_path_factory):
    _, _, stages = _stages(name, tmp_path_factory)
    attrs = stages["npu-plan-memory"].module.op.attributes
    peak = attrs["npu.ddr_peak_bytes"].value.data
    total = attrs["npu.ddr_total_bytes"].value.data
    sram = attrs["npu.sram_peak_bytes"].value.data
    assert 0 < peak < total
    assert sram <= attrs[npu.ATTR_SRAM_LIMIT].value.data


# ---------------------------------------------------------------- tiling / SRAM


class WideConv(nn.Module):
    """One 3x3 conv on 192 x 192: input + output do not fit 1 MiB of SRAM."""

    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.pool(F.relu(self.conv(self.quant(x)))))


def test_layers_that_do_not_fit_sram_are_tiled_bit_identically(tmp_path):
    torch.manual_seed(0)
    inputs = [torch.randn(1, 3, 192, 192) for _ in range(2)]
    qat = validated(WideConv(), inputs, tmp_path)
    quantized = hbir.convert(export(qat, (inputs[0],)), "nash-e")
    limit = 1 << 20
    ctx = make_context()
    untiled = quantized.clone()
    for p in compile_passes("nash-e", stop="npu-fuse"):
        p.apply(ctx, untiled.module.op)
    conv = next(op for op in untiled.module.op.walk() if isinstance(op, npu.ConvOp))
    assert npu.working_set(conv, 16) > limit  # the layer does not fit untiled
    untiled.module.op.attributes[npu.ATTR_SRAM_LIMIT] = hbir.dialects.hbir.i64_attr(
        limit
    )
    with pytest.raises(npu.SramError, match="needs .* bytes of SRAM"):
        npu.verify_sram(untiled.module.op)

    compiled = lower_to_npu(quantized, march="nash-e")
    tiles = [op for op in compiled.module.op.walk() if npu.ATTR_TILE in op.attributes]
    assert "npu.conv" in {op.name for op in tiles}
    npu.verify_sram(compiled.module.op)
    attrs = compiled.module.op.attributes
    assert attrs["npu.sram_peak_bytes"].value.data <= limit
    x = torch.randn(1, 3, 192, 192).numpy()
    assert np.array_equal(quantized["forward"](x), compiled["forward"](x))


class GroupedConvs(nn.Module):
    """Grouped 3x3 convs whose weights are larger than a small SRAM (ResNeSt's
    radix convs at its last stage: 2.4 MB of weight in two groups), then a
    depthwise conv."""

    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.radix = nn.Conv2d(32, 64, 3, padding=1, groups=2)
        self.cardinal = nn.Conv2d(64, 64, 3, padding=1, groups=4)
        self.depthwise = nn.Conv2d(64, 64, 3, padding=1, groups=64)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = F.relu(self.radix(self.quant(x)))
        return self.dequant(self.depthwise(F.relu(self.cardinal(x))))


@pytest.mark.parametrize(("sram", "within_a_group"), [(8_000, False), (6_000, True)])
def test_grouped_convs_past_sram_tile_by_groups_bit_identically(
    sram, within_a_group, tmp_path
):
    """A grouped conv whose weight does not fit splits into tiles of whole
    groups (each on its groups' input channels) or, where one group's weight
    does not fit either, into parts of each group (each a conv of one group);
    the program computes the same numbers, through model.hbm too."""
    torch.manual_seed(0)
    inputs = [torch.randn(1, 32, 8, 8) for _ in range(2)]
    qat = validated(GroupedConvs(), inputs, tmp_path)
    quantized = hbir.convert(export(qat, (inputs[0],)), "nash-e")
    fused = quantized.clone()
    ctx = make_context()
    for p in compile_passes("nash-e", stop="npu-fuse"):
        p.apply(ctx, fused.module.op)
    convs = [op for op in fused.module.op.walk() if isinstance(op, npu.ConvOp)]
    assert all(npu.working_set(op, 16) > sram for op in convs)  # none fits whole
    tiled = fused.clone()
    NpuTilePass(sram_bytes=sram).apply(ctx, tiled.module.op)
    npu.verify_sram(tiled.module.op)
    diagnostics.verify(tiled.module.op, filename="tiled")
    joins = [  # the channel joins of the grouped convs, in order
        op
        for op in tiled.module.op.walk()
        if isinstance(op, npu.ConcatOp)
        and op.dim.value.data == 3
        and all(isinstance(v.owner, npu.ConvOp) for v in op.operands)
    ]
    convs = [(2, 32), (4, 16), (64, 1)]  # (groups, output channels a group)
    assert len(joins) >= 2  # (the depthwise conv's weight may fit whole)
    for join, (groups, per_group) in zip(joins, convs, strict=False):
        tiles = [v.owner for v in join.operands]
        widths = [shape_of_last(t) for t in tiles]
        assert sum(widths) == 64
        for t in tiles:  # each reads its groups' input channels
            assert isinstance(t.input.owner, npu.SliceOp)
        if within_a_group and groups == 2:  # one group's weight does not fit
            assert all(t.groups.value.data == 1 for t in tiles)
            assert max(widths) < per_group
        else:  # tiles of whole groups, each a conv of its groups
            for t, w in zip(tiles, widths, strict=True):
                assert w % per_group == 0
                assert t.groups.value.data == w // per_group
    x = [torch.randn(1, 32, 8, 8).numpy()]
    want = _outputs(quantized["forward"], x)
    for w, g in zip(want, _outputs(tiled["forward"], x), strict=True):
        assert np.array_equal(w, g)
    rest = [p.name for p in compile_passes("nash-e")]
    for p in compile_passes("nash-e")[rest.index("npu-tile") + 1 :]:
        p.apply(ctx, tiled.module.op)
    path = tmp_path / "model.hbm"
    container.write(emit(tiled, quantized), path)
    for w, g in zip(want, _outputs(hbir.load(path)["forward"], x), strict=True):
        assert np.array_equal(w, g)


class PaddedAveragePools(nn.Module):
    """EfficientFormer's token mixer: padded 3x3 average pools, counting the
    padding and not."""

    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.without = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.with_pad = nn.AvgPool2d(3, 2, 1, count_include_pad=True)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        return self.dequant(self.with_pad(self.without(x) - x))


def test_padded_average_pools_past_sram_tile_by_rows_bit_identically(tmp_path):
    """Each row tile of a padded average pool has its own padding (the top
    tile the top's, the bottom tile the bottom's, halo rows between), and its
    windows count as the whole pool's do."""
    torch.manual_seed(0)
    inputs = [torch.randn(2, 16, 24, 20) for _ in range(2)]
    qat = validated(PaddedAveragePools(), inputs, tmp_path)
    quantized = hbir.convert(export(qat, (inputs[0],)), "nash-e")
    tiled, ctx = quantized.clone(), make_context()
    for p in compile_passes("nash-e", stop="npu-fuse"):
        p.apply(ctx, tiled.module.op)
    for op in [o for o in tiled.module.op.walk() if isinstance(o, npu.PoolOp)]:
        assert tile_op(op, npu.working_set(op, 16) // 3, 16) > 2  # (npu-tile's)
    pools = [op for op in tiled.module.op.walk() if isinstance(op, npu.PoolOp)]
    tops = {op.padding.get_values()[0] for op in pools}
    assert all(npu.ATTR_TILE in op.attributes for op in pools) and tops == {0, 1}
    x = [torch.randn(2, 16, 24, 20).numpy()]
    for w, g in zip(
        _outputs(quantized["forward"], x), _outputs(tiled["forward"], x), strict=True
    ):
        assert np.array_equal(w, g)


def shape_of_last(op) -> int:
    """The output channels of a conv."""
    return op.results[0].type.get_shape()[-1]


@pytest.mark.parametrize("name", zoo.NAMES)
def test_tiny_sram_tiles_the_zoo_bit_identically(name, tmp_path_factory):
    quantized, batches, stages = _stages(name, tmp_path_factory)
    fused = stages["npu-fuse"]
    largest = max(
        npu.working_set(op, 16) for op in fused.module.op.walk() if npu.is_compute(op)
    )
    limit = largest // 2  # the smallest SRAM (from half the largest op up) that works
    while True:
        tiled = fused.clone()
        try:
            NpuTilePass(sram_bytes=limit).apply(make_context(), tiled.module.op)
            break
        except CompileError:
            limit = limit * 5 // 4
    assert limit < largest
    npu.verify_sram(tiled.module.op)
    assert any(npu.ATTR_TILE in op.attributes for op in tiled.module.op.walk())
    for inputs in batches:
        for w, g in zip(
            _outputs(quantized["forward"], inputs),
            _outputs(tiled["forward"], inputs),
            strict=True,
        ):
            assert np.array_equal(w, g)


def test_an_op_that_cannot_fit_is_an_error_naming_it(tmp_path_factory):
    _, _, stages = _stages("resnet", tmp_path_factory)
    module = stages["npu-fuse"].clone()
    with pytest.raises(CompileError, match="'npu.conv' needs .* bytes of SRAM"):
        NpuTilePass(sram_bytes=2000).apply(make_context(), module.module.op)


# ---------------------------------------------------------------- march, API, CLI


def test_nash_m_is_faster_than_nash_e(tmp_path_factory):
    quantized, _, _ = _stages("resnet", tmp_path_factory)
    qat_like = quantized.clone()
    qat_like.module.op.attributes["hbir.march"] = hbir.dialects.hbir.StringAttr(
        "nash-m"
    )
    e = lower_to_npu(quantized, march="nash-e").module.op.attributes
    m = lower_to_npu(qat_like, march="nash-m").module.op.attributes
    assert m["npu.estimated_cycles"].value.data < e["npu.estimated_cycles"].value.data


def test_compile_refuses_qat_bc_and_a_march_mismatch(tmp_path):
    qat, example = calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    with pytest.raises(hbir.HbirError, match="convert"):
        hbir.compile(qat_bc, "model.hbm", "nash-e")
    quantized = hbir.convert(qat_bc, "nash-e")
    with pytest.raises(hbir.HbirError, match="converted for nash-e"):
        hbir.compile(quantized, "model.hbm", "nash-m")
    with pytest.raises(hbir.HbirError, match=r"ends in \.hbm"):
        hbir.compile(quantized, "model.bc", "nash-e")
    assert not os.path.exists("model.hbm")


def test_hbir_opt_compiles_quantized_bc_and_times_every_pass(
    tmp_path, tmp_path_factory
):
    quantized, batches, stages = _stages("multi_io", tmp_path_factory)
    hbir.save(quantized, tmp_path / "quantized.bc")
    out = tmp_path / "npu.mlir"
    run = subprocess.run(
        [
            "hbir-opt",
            str(tmp_path / "quantized.bc"),
            "--compile-to=compile",
            "--march=nash-e",
            "--time-passes",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    for name in PASSES:
        assert f"pass '{name}' took" in run.stderr
    compiled = hbir.load(out)
    for inputs in batches:
        for w, g in zip(
            _outputs(quantized["forward"], inputs),
            _outputs(compiled["forward"], inputs),
            strict=True,
        ):
            assert np.array_equal(w, g)
    stop = subprocess.run(
        ["hbir-opt", str(tmp_path / "quantized.bc"), "--compile-to=npu-layout"],
        capture_output=True,
        text=True,
    )
    assert stop.returncode == 0 and "npu.transpose" in stop.stdout
    assert "npu.dma_load" not in stop.stdout


# ---------------------------------------------------------------- accumulator limit

LONG_GEMM = """
builtin.module attributes {hbir.march = "nash-e"} {
  func.func @forward(%x: tensor<1x1024xsi16>) -> tensor<1x2xsi32> {
    %w = hbir.constant dense<-128> : tensor<2x1024xsi8>
    %y = hbir.linear %x, %w : (tensor<1x1024xsi16>, tensor<2x1024xsi8>) -> tensor<1x2xsi32>
    func.return %y : tensor<1x2xsi32>
  }
}
"""


def test_a_gemm_past_the_32_bit_accumulator_saturates_identically():
    # 1024 products of -32768 x -128 sum to 2**32: beyond si32. The accumulator
    # saturates at 2**31 - 1, in quantized.bc and in every compiled stage, and
    # npu-lower names the op.
    quantized = hbir.Module.parse(LONG_GEMM)
    x = np.full((1, 1024), -32768, np.int16)
    assert quantized["forward"](x).tolist() == [[2**31 - 1] * 2]
    module, ctx = quantized.clone(), make_context()
    for p in compile_passes("nash-e"):
        p.apply(ctx, module.module.op)
        assert module["forward"](x).tolist() == [[2**31 - 1] * 2], p.name
    gemms = [op for op in module.module.op.walk() if isinstance(op, npu.GemmOp)]
    assert gemms and all("npu.acc_may_saturate" in op.attributes for op in gemms)
    y = np.full((1, 1024), 1000, np.int16)  # in range: exact
    assert module["forward"](y).tolist() == [[-128 * 1000 * 1024] * 2]


WIDE_INT16 = """
builtin.module {
  func.func @forward(%x: tensor<1x512xf32>) -> tensor<1x2xf32> {
    %xq = qnt.const_fake_quant %x {min = array<f64: -32.768>, max = array<f64: 32.767>, bits = 16 : i64} : tensor<1x512xf32>
    %w = hbir.constant dense<-1.28> : tensor<2x512xf32>
    %wq = qnt.const_fake_quant %w {min = array<f64: -1.28>, max = array<f64: 1.27>, bits = 8 : i64} : tensor<2x512xf32>
    %y = hbir.linear %xq, %wq : (tensor<1x512xf32>, tensor<2x512xf32>) -> tensor<1x2xf32>
    %yq = qnt.const_fake_quant %y {min = array<f64: -1024.0>, max = array<f64: 1023.0>, bits = 8 : i64} : tensor<1x2xf32>
    func.return %yq : tensor<1x2xf32>
  }
}
"""


def test_a_converted_long_int16_gemm_cannot_saturate():
    # convert divides the si16 codes by 2 before the 512-term gemm
    # (numerics.gemm_operand_shifts): npu-lower sees the narrower codes and does
    # not mark it.
    quantized = hbir.convert(hbir.Module.parse(WIDE_INT16), "nash-e")
    module, ctx = quantized.clone(), make_context()
    for p in compile_passes("nash-e"):
        p.apply(ctx, module.module.op)
    gemms = [op for op in module.module.op.walk() if isinstance(op, npu.GemmOp)]
    assert gemms and not any("npu.acc_may_saturate" in op.attributes for op in gemms)
    x = np.full((1, 512), -32.768, np.float32)  # every code -32768
    assert module["forward"](x).tolist() == quantized["forward"](x).tolist()


def test_compile_writes_model_hbm_and_reports_progress(
    tmp_path, tmp_path_factory, capsys
):
    quantized, batches, _ = _stages("transformer", tmp_path_factory)
    path = tmp_path / "model.hbm"
    hbm = hbir.compile(quantized, path, march="nash-e", opt=2, progress_bar=True)
    err = capsys.readouterr().err
    assert [line.split()[-1] for line in err.splitlines()] == PASSES
    assert isinstance(hbm, hbir.Hbm) and hbm.march == "nash-e"
    assert path.exists() and hbm.path == str(path)
    loaded = hbir.load(path)
    for inputs in batches:
        want = _outputs(quantized["forward"], inputs)
        for got in (_outputs(hbm["forward"], inputs), _outputs(loaded[0], inputs)):
            assert all(np.array_equal(w, g) for w, g in zip(want, got, strict=True))
    in_memory = hbir.compile(quantized, march="nash-e")  # no path: nothing written
    assert in_memory.path is None and len(in_memory.functions) == 1


def test_the_npu_module_saves_as_bc(tmp_path, tmp_path_factory):
    quantized, batches, _ = _stages("transformer", tmp_path_factory)
    compiled = lower_to_npu(quantized, march="nash-e")
    hbir.save(compiled, tmp_path / "npu.bc")
    again = hbir.load(tmp_path / "npu.bc")
    for inputs in batches:
        assert all(
            np.array_equal(w, g)
            for w, g in zip(
                _outputs(quantized["forward"], inputs),
                _outputs(again["forward"], inputs),
                strict=True,
            )
        )
    unfused = lower_to_npu(quantized, march="nash-e", opt=0)
    assert "npu.rescale" in _names(unfused)


def test_a_wrong_opt_and_an_unwritable_path_are_located_errors(tmp_path_factory):
    quantized, _, _ = _stages("digits", tmp_path_factory)
    for opt in (99, -1, True):
        with pytest.raises(hbir.HbirError, match="opt must be 0"):
            hbir.compile(quantized, None, "nash-e", opt=opt)
    missing = tmp_path_factory.mktemp("out") / "no_such_folder" / "model.hbm"
    with pytest.raises(hbir.HbirOutputError, match="no_such_folder/model.hbm: cannot"):
        hbir.compile(quantized, missing, "nash-e")


# ---------------------------------------------------------------- verification


class _DropReturn(ModulePass):
    """Breaks the IR: ``forward`` loses its terminator."""

    name = "drop-return"

    def apply(self, ctx, op) -> None:
        for inner in op.walk():
            if isinstance(inner, ReturnOp):
                inner.detach()
                inner.erase()
                return


class _UseBeforeDefinition(ModulePass):
    """Breaks the IR in a way only the final check sees (xDSL's verifier does not
    check dominance): the op feeding the last op moves after it."""

    name = "use-before-definition"

    def apply(self, ctx, op) -> None:
        for ret in op.walk():
            if isinstance(ret, ReturnOp):
                last = ret.operands[0].owner
                fed = next(v.owner for v in last.operands if isinstance(v, OpResult))
                fed.detach()
                ret.parent_block().insert_op_before(fed, ret)
                return


def _count_sram_checks(monkeypatch) -> list[int]:
    calls = [0]
    real = npu.verify_sram

    def counted(op):
        calls[0] += 1
        return real(op)

    monkeypatch.setattr(npu, "verify_sram", counted)
    return calls


@pytest.mark.parametrize("each", [False, True])
def test_the_compile_phase_verifies_once_or_after_every_pass(each, monkeypatch):
    calls = _count_sram_checks(monkeypatch)
    passes = compile_passes("nash-e")
    run_passes(hbir.Module.parse(LONG_GEMM), passes, verify=False)
    by_passes = calls[0]  # npu-tile checks what it tiles
    calls[0] = 0
    run_passes(hbir.Module.parse(LONG_GEMM), passes, verify_each=each)
    # after every pass, the final check does not repeat the last pass's
    assert calls[0] - by_passes == (len(passes) if each else 1)


def test_the_final_check_after_verify_each_runs_its_own_rules():
    """Verified after its last pass, the module still gets the final check's
    rules beyond xDSL's (here: a value used before its definition)."""
    passes = [*compile_passes("nash-e"), _UseBeforeDefinition()]
    for each in (True, False):
        with pytest.raises(diagnostics.HbirVerifyError, match="before it is defined"):
            run_passes(hbir.Module.parse(LONG_GEMM), passes, verify_each=each)


def test_verify_each_names_the_pass_that_broke_the_ir(monkeypatch):
    passes = [*compile_passes("nash-e"), _DropReturn()]
    with pytest.raises(diagnostics.HbirVerifyError, match="after pass 'drop-return'"):
        run_passes(hbir.Module.parse(LONG_GEMM), passes, verify_each=True)
    # verified once: the break is found all the same, at the end
    with pytest.raises(diagnostics.HbirVerifyError, match="after compile: error: "):
        run_passes(hbir.Module.parse(LONG_GEMM), passes, verify_each=False)
    # the default is the environment's (the suite sets HBIR_VERIFY_EACH=1)
    monkeypatch.setenv("HBIR_VERIFY_EACH", "1")
    with pytest.raises(diagnostics.HbirVerifyError, match="after pass 'drop-return'"):
        run_passes(hbir.Module.parse(LONG_GEMM), passes)
    monkeypatch.setenv("HBIR_VERIFY_EACH", "0")
    with pytest.raises(diagnostics.HbirVerifyError, match="after compile"):
        run_passes(hbir.Module.parse(LONG_GEMM), passes)


def test_hbir_compile_takes_verify_each(monkeypatch):
    calls = _count_sram_checks(monkeypatch)
    quantized = hbir.Module.parse(LONG_GEMM)
    hbir.compile(quantized, None, "nash-e", verify_each=False)
    once = calls[0]
    hbir.compile(quantized, None, "nash-e", verify_each=True)
    # npu-tile's own checks (once, less the final check), one after each pass,
    # and no final check repeating the last pass's
    assert calls[0] - once == (once - 1) + len(PASSES)
