"""The NV12 stage in hbir.profiler.diagnose: the right insertion is within the nv12
contract, a wrong insert_image_preprocess mode (planted fault (d)) or layout is
found at the hbir.image_preprocess op with the cause "input preprocessing or
layout", and a corrupted body is a tool bug.

Measured on these 16 x 16 crops of the sample photos, through the zoo resnet
(input grid 1 / 127.5: 1 LSB = 1.004 levels), the mean |difference of 2 x 2
block means| of the entering codes, worst batch of 2 crops, over 3 batches:
yuvbt601full2rgb (right) 0.82 levels; yuvbt601video2rgb 11.2; bgr2rgb 64.4;
yuvbt601full2bgr 68.5; None 72.5. The bound is 2 levels (profiler/nv12.py).
"""

import numpy as np
import profiler_faults as faults
import pytest

import hbir
from hbir.dialects import hbir as hbir_ops
from hbir.dialects.op_ids import op_ids
from hbir.profiler import diagnose
from hbir.profiler.nv12 import BOUND_LEVELS, entering_difference
from hbir.profiler.origin import origin_of


def _diagnose(case, **kw):
    return diagnose(
        case.qat,
        case.data,
        qat_bc=case.qat_bc,
        quantized_bc=case.quantized,
        nv12_quantized_bc=case.nv12,
        nv12_data=case.planes,
        **kw,
    )


def _expected_block_levels(case) -> float:
    """The check's statistic computed here from the images: quantized.bc's input
    codes are the float input on the QuantStub's grid, the NV12 model's are the
    decoded frame (hbir.data.nv12_to_rgb) normalised onto the same grid."""
    scale = float(case.qat.quant.activation_post_process.scale.reshape(-1)[0])
    worst = 0.0
    for (x,), (y, uv) in zip(case.data, case.planes, strict=True):
        decoded = faults.photo_input(hbir.data.nv12_to_rgb(y, uv)).numpy()
        a = np.clip(np.rint(x.numpy() / scale), -128, 127)
        b = np.clip(np.rint(decoded / scale), -128, 127)
        block, _, _ = entering_difference(a, b, "NCHW", scale * 128)
        worst = max(worst, block)
    return worst


def test_the_right_insertion_is_within_the_nv12_contract(tmp_path):
    case = faults.nv12_case(tmp_path)
    d = _diagnose(case)
    assert d.finding is None, d.text()
    assert d.stages[-1] == "nv12_quantized.bc"
    last = d.pairs[-1]
    assert (last.baseline, last.analysis, last.contract) == (
        "quantized.bc",
        "nv12_quantized.bc",
        "nv12",
    )
    assert [p.within for p in d.pairs] == [True] * 4
    (entering,) = last.inputs
    assert entering["input"] == "_input_0" and entering["shapes"] is None
    # Chroma subsampling moves single pixels a lot, their block means little.
    assert entering["max_levels"] > 10 * BOUND_LEVELS
    assert 0 < entering["block_levels"] < BOUND_LEVELS
    assert entering["block_levels"] == pytest.approx(
        _expected_block_levels(case), abs=0.02
    )
    # The layers after the input differ (not required to be identical).
    assert max(p.output_atol[0] for p in d.pairs[-1:]) > 0
    assert "every stage is within its contract" in d.text()


@pytest.mark.parametrize(
    "mode, csc",
    [("yuvbt601video2rgb", "yuv_bt601_video_to_rgb"), ("bgr2rgb", "bgr_to_rgb")],
)
def test_a_wrong_preprocess_mode_is_found_at_the_preprocess_op(mode, csc, tmp_path):
    case = faults.nv12_case(tmp_path, mode=mode)
    d = _diagnose(case, out_dir=tmp_path / "report")
    f = d.finding
    assert f is not None, d.text()
    assert (f.baseline, f.analysis) == ("quantized.bc", "nv12_quantized.bc")
    assert f.cause == "input preprocessing or layout"
    assert [p.within for p in d.pairs] == [True, True, True, False]
    # The op: hbir.image_preprocess in nv12_quantized.bc, with the planted mode.
    op = op_ids(case.nv12["forward"].op)[f.analysis_op_id]
    assert isinstance(op, hbir_ops.ImagePreprocessOp) and op.csc.data == csc
    assert f.hbir_op == "hbir.image_preprocess" and f.input == "_input_0"
    assert "insert_image_preprocess" in f.location
    # ... feeding the QuantStub: its op in qat.bc and its torch source line.
    qat_op = op_ids(case.qat_bc["forward"].op)[f.op_id]
    assert origin_of(qat_op).module_path == "quant" and f.layer == "quant#0"
    line = faults.zoo_line("x = self.pool(self.stem(self.quant(x)))")
    assert f.source == f"tests/zoo.py:{line}"
    assert f.lsb > 2 * BOUND_LEVELS  # clearly beyond the bound
    assert f.lsb == pytest.approx(_expected_wrong(case, csc), abs=0.02)
    text = d.text()
    assert f"%{f.analysis_op_id} 'hbir.image_preprocess' in nv12_quantized.bc" in text
    assert "cause: input preprocessing or layout" in text and csc in text
    assert "input _input_0" in (tmp_path / "report" / "report.html").read_text()
    if csc == "yuv_bt601_video_to_rgb":  # the right mode is found and named
        assert 'decoded with csc = "yuv_bt601_full_to_rgb" the codes agree' in f.detail
        assert "full-range RGB" in f.detail
    else:  # bgr_to_rgb reads the planes as colour: no YUV decoding explains it
        assert "the codes agree" not in f.detail


def test_swapped_chroma_planes_are_named(tmp_path):
    """The right mode on frames whose U and V are swapped (NV21): found at the
    preprocess op, and the swap named."""
    case = faults.nv12_case(tmp_path)
    swapped = [(y, np.ascontiguousarray(uv[..., ::-1])) for y, uv in case.planes]
    case = faults.Nv12Case(
        case.qat, case.qat_bc, case.quantized, case.nv12, case.data, swapped
    )
    d = _diagnose(case)
    f = d.finding
    assert f is not None and f.cause == "input preprocessing or layout", d.text()
    assert "with the U and V planes swapped the codes agree" in f.detail
    assert "NV21" in f.detail


def _expected_wrong(case, csc) -> float:
    """The statistic for frames decoded with ``csc`` instead of full range."""
    from hbir.runtime import yuv

    scale = float(case.qat.quant.activation_post_process.scale.reshape(-1)[0])
    worst = 0.0
    for (x,), (y, uv) in zip(case.data, case.planes, strict=True):
        rgb = yuv.convert_colour(yuv.nv12_to_yuv444(y, uv), csc).astype(np.uint8)
        decoded = faults.photo_input(rgb).numpy()
        a = np.clip(np.rint(x.numpy() / scale), -128, 127)
        b = np.clip(np.rint(decoded / scale), -128, 127)
        worst = max(worst, entering_difference(a, b, "NCHW", scale * 128)[0])
    return worst


def test_a_wrong_layout_is_found_with_the_same_cause(tmp_path):
    # permutes [0, 3, 2, 1]: the frame is fed with height and width swapped.
    case = faults.nv12_case(tmp_path, permutes=(0, 3, 2, 1))
    d = _diagnose(case)
    f = d.finding
    assert (f.analysis, f.cause) == (
        "nv12_quantized.bc",
        "input preprocessing or layout",
    )
    assert f.input == "_input_0" and f.lsb > 2 * BOUND_LEVELS


def test_a_corrupted_constant_after_the_input_is_a_tool_bug(tmp_path):
    case = faults.nv12_case(tmp_path, batches=1)
    faults.corrupt_requantize(case.nv12)
    d = _diagnose(case)
    f = d.finding
    assert (f.baseline, f.analysis) == ("quantized.bc", "nv12_quantized.bc")
    assert f.cause == "tool bug" and f.layer == f"{faults.PLANTED_CONV}#0"
    assert "bit-identical" in f.detail
    assert d.pairs[-1].inputs[0]["block_levels"] < BOUND_LEVELS


def test_the_nv12_stage_needs_its_planes_batch_for_batch(tmp_path):
    case = faults.nv12_case(tmp_path, batches=2)
    with pytest.raises(hbir.HbirError, match="needs both"):
        diagnose(case.qat, case.data, nv12_quantized_bc=case.nv12)
    with pytest.raises(hbir.HbirError, match="nv12_data has 1 batch"):
        diagnose(
            case.qat,
            case.data,
            qat_bc=case.qat_bc,
            nv12_quantized_bc=case.nv12,
            nv12_data=case.planes[:1],
        )
    with pytest.raises(hbir.HbirError, match="more batches than data"):
        diagnose(
            case.qat,
            case.data[:1],
            qat_bc=case.qat_bc,
            nv12_quantized_bc=case.nv12,
            nv12_data=case.planes,
        )
    with pytest.raises(hbir.HbirError, match="no hbir.image_preprocess"):
        diagnose(
            case.qat,
            case.data,
            qat_bc=case.qat_bc,
            nv12_quantized_bc=case.quantized,
            nv12_data=case.data,
        )
