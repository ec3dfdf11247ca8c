"""The J6 marches as march models (passes/march.py), each checked end to end.

For every march: a model with an op or dtype it lacks is refused by convert,
a located error naming the op and the march; a model it runs converts and
compiles to a model.hbm bit-identical to quantized.bc. The cycle estimate
follows each march's TOPS a core, DDR and ``core_num`` (up to its cores); the
hbdk4 names (``March.get``, ``.series``, ``hbir.march``) read the same table.
"""

import re
import warnings

import compile_models
import pytest
import torch
import zoo
from zoo_stages import calibrated, every_stage_bit_identical, validated

import hbir
import hbir.march
import hbir.plugin.march
from hbir.compile_options import CompileOptionError
from hbir.passes.check_march import MarchSupportError
from hbir.passes.march import MARCHES, NPUS, March
from hbir.quantization import export

ALL = list(MARCHES)
J6B = ["nash-b", "nash-b-lite", "nash-b-plus"]

# The public figures (Horizon's J6 deployment guides; hbdk4's core counts):
# int8 TOPS and BPU cores per march, written out again to check the table.
PUBLIC = {
    "nash-e": (80, 1),
    "nash-m": (128, 1),
    "nash-p": (560, 4),
    "nash-h": (420, 3),
    "nash-b": (18, 1),
    "nash-b-lite": (18, 1),
    "nash-b-plus": (18, 1),
}

FLOAT_MODEL = """
func.func @forward(%x: tensor<1x4x{t}>) -> tensor<1x4x{t}> {{
  %y = hbir.relu %x : tensor<1x4x{t}>
  func.return %y : tensor<1x4x{t}>
}}
"""


def _float_model(tmp_path, element: str):
    path = tmp_path / f"{element}.mlir"
    path.write_text(FLOAT_MODEL.format(t=element))
    return hbir.load(str(path))


def _convert(model, march):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a float model: "every op stays float"
        return hbir.convert(model, march)


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    qat, _ = calibrated("resnet", tmp_path_factory.mktemp("resnet"))
    return qat, [b[0] for b in zoo.batches("resnet", 2)]


@pytest.fixture(scope="module")
def topk_qat_bc(tmp_path_factory):
    qat, example = calibrated("sparse_bev", tmp_path_factory.mktemp("sparse_bev"))
    return export(qat, example)


# ------------------------------------------------------- what a march lacks


def test_the_table_holds_the_public_figures():
    for name, (tops, cores) in PUBLIC.items():
        assert NPUS[name].int8_tops == tops and NPUS[name].cores == cores
        assert hbir.march.get_march_num_cores(name) == cores
    assert MARCHES["nash-p"].float_bits == MARCHES["nash-h"].float_bits == (16,)
    assert all(not MARCHES[m].float_bits for m in ["nash-e", "nash-m", *J6B])
    assert all("spu" not in MARCHES[m].units for m in J6B)
    assert all({"vpu", "spu"} <= set(MARCHES[m].units) for m in ALL if m not in J6B)


@pytest.mark.parametrize("march", J6B)
def test_j6b_refuses_topk_naming_op_and_march(march, topk_qat_bc):
    with pytest.raises(MarchSupportError) as e:
        hbir.convert(topk_qat_bc, march)
    message = str(e.value)
    assert re.search(
        rf"^\S.*: error: 'hbir\.topk' op is not supported on {march}: it runs on "
        rf"the SPU, which {march} lacks \(Horizon's J6B deployment guide\)$",
        message,
    ), message


def test_topk_converts_where_the_march_has_an_spu(topk_qat_bc):
    for march in ["nash-e", "nash-p"]:
        quantized = hbir.convert(topk_qat_bc, march)
        assert any(op.name == "hbir.topk" for op in quantized.module.op.walk())


@pytest.mark.parametrize("march", ["nash-e", "nash-m", *J6B])
def test_no_fp16_refuses_f16_naming_op_and_march(march, tmp_path):
    with pytest.raises(MarchSupportError) as e:
        _convert(_float_model(tmp_path, "f16"), march)
    assert str(e.value).startswith(
        f"@forward %y: error: 'hbir.relu' op reads or makes f16, which {march} "
        "lacks: it computes in int8/int16 only ("
    )


@pytest.mark.parametrize("march", ["nash-p", "nash-h"])
def test_fp16_marches_take_f16_and_refuse_bf16(march, tmp_path):
    assert _convert(_float_model(tmp_path, "f16"), march).march == march
    with pytest.raises(MarchSupportError) as e:
        _convert(_float_model(tmp_path, "bf16"), march)
    assert str(e.value) == (
        f"@forward %y: error: 'hbir.relu' op reads or makes bf16, which {march} "
        "lacks: it computes in int8/int16 and fp16 only (Horizon's J6H/P "
        "deployment guide)"
    )


# --------------------------------------------------- what a march runs


@pytest.mark.parametrize("march", ALL)
def test_each_march_compiles_bit_identically(march, resnet, tmp_path):
    qat, inputs = resnet
    units = every_stage_bit_identical(qat, inputs, tmp_path, march)
    assert hbir.load(str(tmp_path / "model.hbm")).march == march
    assert {"tae", "dma"} <= {unit for _, unit in units}


@pytest.fixture(scope="module")
def int16_gemm(tmp_path_factory):
    """conv (int8) -> a linear with int16 input and int16 weight -> linear."""
    torch.manual_seed(0)
    inputs = [torch.randn(2, 3, 4, 4) for _ in range(3)]
    qat = validated(
        compile_models.IslandNet(),
        inputs,
        tmp_path_factory.mktemp("int16_gemm"),
        compile_models.ISLAND_QCONFIG,
    )
    return qat, inputs


@pytest.mark.parametrize("march", ["nash-p", "nash-h"])
def test_int16_by_int16_gemms_run_on_the_npu_of_nash_p_and_h(
    march, int16_gemm, tmp_path
):
    qat, inputs = int16_gemm
    units = every_stage_bit_identical(qat, inputs, tmp_path, march)
    assert ("qnt.requantize", "tae") in units  # fc1's gemm, fused


@pytest.mark.parametrize("march", ["nash-e", "nash-m", *J6B])
def test_int16_by_int16_gemms_are_cpu_islands_elsewhere(march, int16_gemm):
    qat, inputs = int16_gemm
    quantized = hbir.convert(export(qat, (inputs[0],)), march)
    (line,) = [x for x in hbir.conversion.cpu_advice(quantized) if "linear" in x]
    assert line.endswith(
        f"'hbir.linear' (%12 of @forward) runs on the CPU: input and weight "
        f"cannot both be int16 on {march}"
    ), line


def _cycles(qat, inputs, march, tmp_path, **options) -> dict:
    quantized = hbir.convert(export(qat, (inputs[0],)), march)
    path = tmp_path / f"{march}-{options.get('core_num', 1)}.hbm"
    hbir.compile(quantized, path, march, **options)
    (forward,) = hbir.hbm_perf(path, tmp_path)["functions"]
    return forward


def test_the_estimate_follows_tops_cores_and_ddr(resnet, tmp_path, capsys):
    qat, inputs = resnet
    b = _cycles(qat, inputs, "nash-b", tmp_path)
    e = _cycles(qat, inputs, "nash-e", tmp_path)
    p1 = _cycles(qat, inputs, "nash-p", tmp_path)
    p4 = _cycles(qat, inputs, "nash-p", tmp_path, core_num=4)
    # one core's TOPS: nash-b 18 < nash-e 80 < nash-p 560 / 4; four cores more
    assert b["units"]["tae"] > e["units"]["tae"] > p1["units"]["tae"]
    assert p1["units"]["tae"] > p4["units"]["tae"]
    # DDR (assumed): nash-b 25.6 < nash-e 51.2 < nash-p 102.4 GB/s
    assert b["units"]["dma"] > e["units"]["dma"] > p1["units"]["dma"]
    assert p1["units"]["dma"] == p4["units"]["dma"]  # the cores share the DDR
    assert b["cycles"] > e["cycles"] > p1["cycles"] > p4["cycles"]
    assert b["latency_us"] > e["latency_us"] > p4["latency_us"]
    capsys.readouterr()


def test_macs_per_cycle_are_one_cores_share_of_the_tops():
    for name, (tops, cores) in PUBLIC.items():
        npu = NPUS[name]
        want = tops * 1e12 / cores / 2 / (npu.clock_mhz * 1e6)
        assert npu.macs_per_cycle_int8 == round(want)


# ------------------------------------------------------------- core_num


@pytest.mark.parametrize("march", ALL)
def test_core_num_is_taken_up_to_the_marchs_cores(march):
    from hbir.compile_options import check

    cores = PUBLIC[march][1]
    for n in range(1, cores + 1):
        check({"core_num": n}, march)
    noun = "cores" if cores > 1 else "core"
    with pytest.raises(
        CompileOptionError,
        match=rf"core_num={cores + 1}: {march} has {cores} BPU {noun}$",
    ):
        check({"core_num": cores + 1}, march)


def test_compile_refuses_core_num_above_the_cores_before_compiling(resnet, tmp_path):
    qat, inputs = resnet
    quantized = hbir.convert(export(qat, (inputs[0],)), "nash-h")
    with pytest.raises(CompileOptionError, match="core_num=4: nash-h has 3 BPU"):
        hbir.compile(quantized, tmp_path / "model.hbm", "nash-h", core_num=4)
    assert not (tmp_path / "model.hbm").exists()


# ---------------------------------------------------------- hbdk4's names


def test_hbdk4_march_names_read_the_table():
    assert March.get("nash-e") is March.nash_e
    assert March.get(March.NASH_B_PLUS) == "nash-b-plus"
    assert {March.get(n).series for n in ALL} == {"nash"}
    assert hbir.march.get_all_bpu_march_names() == ALL
    assert hbir.march.March is hbir.March is hbir.plugin.march.March
    with pytest.raises(hbir.HbirError, match="unknown march 'nash-x'"):
        March.get("nash-x")
    with pytest.raises(hbir.HbirError, match="unknown march 'bayes'"):
        hbir.march.get_march_num_cores("bayes")
