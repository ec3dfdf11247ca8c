"""Argument.insert_* and Function.remove_io_op on real exported models.

The reference for an edited model is the un-edited one: the NV12 model fed with
camera planes must give what ``quantized.bc`` gives for the equivalent float image
computed by ``runtime/yuv.py`` (the conversion is part of the inserted nodes, so
the two agree bit for bit), and a model whose boundary quantize/dequantize were
removed must give the original outputs from the integer inputs its ``quant_info``
describes.
"""

import numpy as np
import pytest
import torch
import zoo
import zoo_stages
from torch import nn

import hbir
from hbir.passes.function_io import InputEditError
from hbir.passes.remove_io_op import removable_ops
from hbir.quantization import export
from hbir.runtime import yuv

MODES = [None, *[m for m in yuv.USER_MODES if m is not None]]


def photo_crops(n: int, size: int, seed: int = 0) -> np.ndarray:
    """``n`` random ``size x size`` crops of scikit-learn's sample photos (RGB)."""
    from sklearn.datasets import load_sample_images

    images = load_sample_images().images
    rng = np.random.default_rng(seed)
    crops = []
    for k in range(n):
        im = images[k % 2]
        i, j = rng.integers(0, im.shape[0] - size), rng.integers(0, im.shape[1] - size)
        crops.append(im[i : i + size, j : j + size])
    return np.stack(crops)


def tiny(channels: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(channels, 4, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, 5),
    )


@pytest.fixture(scope="module")
def tiny_qat_bc(tmp_path_factory):
    """channels -> (qat.bc of a small conv model on N x C x 8 x 8 images, quantized)."""
    models = {}
    for channels in (1, 3):
        torch.manual_seed(channels)
        inputs = [torch.rand(2, channels, 8, 8) * 4 - 2 for _ in range(4)]
        out = tmp_path_factory.mktemp(f"tiny{channels}")
        qat = zoo_stages.validated(tiny(channels), inputs, out)
        qat_bc = export(qat, (inputs[0],))
        models[channels] = (qat_bc, hbir.convert(qat_bc, "nash-e"))
    return models


def adapt(qat_bc, mode, divisor=1, mean=(128.0,) * 3, std=(128.0,) * 3):
    """The canonical insertion block on a clone; returns it and its plane inputs."""
    model = qat_bc.clone()
    func = model.functions[0]
    node = func.inputs[0].insert_transpose(permutes=[0, 3, 1, 2])
    node = node.insert_image_preprocess(mode, divisor, list(mean), list(std))
    planes = node.insert_image_convert("nv12" if len(mean) == 3 else "gray")
    return model, planes


def equivalent_input(y, uv, mode, divisor, mean, std) -> np.ndarray:
    """The NCHW float image the original model sees for NV12 (or gray) planes."""
    v = y.astype(np.int64) if uv is None else yuv.nv12_to_yuv444(y, uv)
    v = yuv.convert_colour(v, yuv.USER_MODES[mode])
    return np.ascontiguousarray(
        yuv.normalise(v, divisor, mean, std).transpose(0, 3, 1, 2)
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("data", ["photos", "random"])
def test_nv12_model_equals_the_model_on_the_equivalent_image(tiny_qat_bc, mode, data):
    qat_bc, quantized = tiny_qat_bc[3]
    mean, std = (120.0, 128.0, 136.0), (64.0, 128.0, 60.0)
    model, (y_arg, uv_arg) = adapt(qat_bc, mode, 1, mean, std)
    nv12 = hbir.convert(model, "nash-e")
    assert (y_arg.name, uv_arg.name) == ("_input_0_y", "_input_0_uv")
    assert nv12["forward"].inputs.names == ["_input_0_y", "_input_0_uv"]
    rgb = (
        photo_crops(2, 8)
        if data == "photos"
        else np.random.default_rng(3).integers(0, 256, (2, 8, 8, 3)).astype(np.uint8)
    )
    y, uv = yuv.rgb_to_nv12(rgb)
    got = nv12["forward"].feed({"_input_0_y": y, "_input_0_uv": uv})["_output_0"]
    x = equivalent_input(y, uv, mode, 1, mean, std)
    want = quantized["forward"].feed({"_input_0": x})["_output_0"]
    np.testing.assert_array_equal(got, want)
    # and the float qat.bc with the inserted nodes agrees with qat.bc
    got_float = model["forward"].feed({"_input_0_y": y, "_input_0_uv": uv})
    want_float = qat_bc["forward"].feed({"_input_0": x})
    np.testing.assert_array_equal(got_float["_output_0"], want_float["_output_0"])


@pytest.mark.parametrize("data", ["photos", "random"])
def test_gray_model_equals_the_model_on_the_equivalent_image(tiny_qat_bc, data):
    qat_bc, quantized = tiny_qat_bc[1]
    model, y_arg = adapt(qat_bc, None, 64, (2.0,), (1.0,))
    assert y_arg.name == "_input_0_y" and y_arg.shape == (2, 8, 8, 1)
    gray = hbir.convert(model, "nash-e")
    y = (
        photo_crops(2, 8)[..., :1].copy()
        if data == "photos"
        else np.random.default_rng(5).integers(0, 256, (2, 8, 8, 1)).astype(np.uint8)
    )
    got = gray["forward"].feed({"_input_0_y": y})["_output_0"]
    x = equivalent_input(y, None, None, 64, (2.0,), (1.0,))
    np.testing.assert_array_equal(got, quantized["forward"](x))


def test_after_convert_no_cpu_op_at_the_input(tiny_qat_bc, capsys):
    model, _ = adapt(tiny_qat_bc[3][0], "yuvbt601full2rgb")
    counts = hbir.statistics(hbir.convert(model, "nash-e"), by_device=True)
    assert counts["forward"]["cpu"] == {}
    npu = counts["forward"]["npu"]
    assert npu["hbir.image_convert"] == 1 and npu["hbir.image_preprocess"] == 1
    assert "qnt.quantize" not in npu  # folded into the preprocess table


def test_nv12_model_saves_and_loads(tiny_qat_bc, tmp_path):
    model, _ = adapt(tiny_qat_bc[3][0], "yuvbt601video2bgr")
    nv12 = hbir.convert(model, "nash-e")
    hbir.save(nv12, tmp_path / "nv12_quantized.bc")
    again = hbir.load(tmp_path / "nv12_quantized.bc")
    y, uv = yuv.rgb_to_nv12(photo_crops(2, 8, seed=4))
    feed = {"_input_0_y": y, "_input_0_uv": uv}
    np.testing.assert_array_equal(
        again["forward"].feed(feed)["_output_0"],
        nv12["forward"].feed(feed)["_output_0"],
    )


def test_resnet_canonical_block(tmp_path):
    """The reference's canonical insertion on the zoo's resnet, bit for bit."""
    qat, example = zoo_stages.calibrated("resnet", tmp_path)
    qat_bc = export(qat, example)
    quantized = hbir.convert(qat_bc, "nash-e")
    func = qat_bc.functions[0]
    for input in func.inputs[::-1]:
        node = input.insert_transpose(permutes=[0, 3, 1, 2])
        node = node.insert_image_preprocess(
            mode="yuvbt601full2rgb", divisor=1, mean=[128, 128, 128], std=[128] * 3
        )
        node.insert_image_convert("nv12")
    nv12 = hbir.convert(qat_bc, "nash-e")
    n, _, h, w = example[0].shape
    y, uv = yuv.rgb_to_nv12(photo_crops(n, h, seed=7))
    got = nv12[0].feed({"_input_0_y": y, "_input_0_uv": uv})["_output_0"]
    x = equivalent_input(y, uv, "yuvbt601full2rgb", 1, [128.0] * 3, [128.0] * 3)
    np.testing.assert_array_equal(got, quantized[0](x))


# ------------------------------------------------------------------ misuse


def test_insert_transpose_follows_the_reference_convention(tiny_qat_bc):
    model = tiny_qat_bc[3][0].clone()
    node = model["forward"].inputs["_input_0"].insert_transpose([0, 3, 1, 2])
    assert node.shape == (2, 8, 8, 3)  # dim 1 (C) moved to position 3
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    got = model["forward"](np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    np.testing.assert_array_equal(got, tiny_qat_bc[3][0]["forward"](x))
    with pytest.raises(InputEditError, match="not a permutation"):
        node.insert_transpose([0, 1, 1, 2])


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda a: a.insert_image_preprocess("rgb2yuv", 1, [0] * 3, [1] * 3),
            "unknown mode",
        ),
        (
            lambda a: a.insert_image_preprocess(None, 1, [0] * 3, [1] * 3),
            "insert_transpose",
        ),
        (lambda a: a.insert_image_convert("nv12"), "insert_image_preprocess"),
    ],
)
def test_errors_before_transpose(tiny_qat_bc, edit, message):
    model = tiny_qat_bc[3][0].clone()
    with pytest.raises(InputEditError, match=message) as e:
        edit(model["forward"].inputs[0])
    assert "@forward" in str(e.value) and "'_input_0'" in str(e.value)


def test_errors_after_transpose(tiny_qat_bc):
    node = tiny_qat_bc[3][0].clone()["forward"].inputs[0].insert_transpose([0, 3, 1, 2])
    with pytest.raises(InputEditError, match="mean has 2 values, the image has 3"):
        node.insert_image_preprocess(None, 1, [0, 0], [1, 1, 1])
    with pytest.raises(InputEditError, match="std has 1 values"):
        node.insert_image_preprocess(None, 1, [0, 0, 0], [1])
    node = node.insert_image_preprocess("bgr2rgb", 1, [0] * 3, [1] * 3)
    with pytest.raises(InputEditError, match="unknown mode 'nv21'"):
        node.insert_image_convert("nv21")
    with pytest.raises(InputEditError, match="1 channel"):
        node.insert_image_convert("gray")


def test_colour_mode_needs_three_channels(tiny_qat_bc):
    node = tiny_qat_bc[1][0].clone()[0].inputs[0].insert_transpose([0, 3, 1, 2])
    with pytest.raises(InputEditError, match=r"N x H x W x 3\), the input has shape"):
        node.insert_image_preprocess("yuvbt601full2rgb", 1, [0] * 3, [1] * 3)


def test_unsigned_codes_cannot_take_image_convert(tiny_qat_bc):
    node = tiny_qat_bc[3][0].clone()[0].inputs[0].insert_transpose([0, 3, 1, 2])
    node = node.insert_image_preprocess(None, 255, [0] * 3, [1] * 3, is_signed=False)
    assert node.dtype == np.uint8
    with pytest.raises(InputEditError, match="is_signed=True"):
        node.insert_image_convert("nv12")


def test_odd_sizes_cannot_be_nv12():
    model = hbir.Module.parse(
        "func.func @forward(%x: tensor<1x5x6x3xsi8>) -> tensor<1x5x6x3xsi8> {\n"
        "  func.return %x : tensor<1x5x6x3xsi8>\n}"
    )
    with pytest.raises(InputEditError, match="even height and width.*5 x 6"):
        model[0].inputs[0].insert_image_convert("nv12")


def test_edits_after_convert_are_refused(tiny_qat_bc):
    quantized = tiny_qat_bc[3][1].clone()
    with pytest.raises(InputEditError, match="already converted.*then convert"):
        quantized[0].inputs[0].insert_transpose([0, 3, 1, 2])
    with pytest.raises(InputEditError, match="already converted"):
        quantized[0].inputs[0].insert_image_preprocess(None, 1, [0] * 3, [1] * 3)


def test_unknown_input_and_outputs_are_not_editable(tiny_qat_bc):
    func = tiny_qat_bc[3][0].clone()[0]
    with pytest.raises(KeyError, match="no argument named 'img'"):
        func.inputs["img"]
    with pytest.raises(InputEditError, match="is an output"):
        func.outputs[0].insert_transpose([1, 0])


# ------------------------------------------------------------------ remove_io_op


@pytest.mark.parametrize("name", zoo.NAMES)
def test_remove_io_op_on_the_zoo(name, tmp_path, capsys):
    qat, example = zoo_stages.calibrated(name, tmp_path)
    quantized = hbir.convert(export(qat, example), "nash-e")
    func = quantized[0]
    feed = {a.name: x.numpy() for a, x in zip(func.inputs, example, strict=True)}
    want = func.feed(feed)
    # what is removable: the quantize of each float input, the dequantize of each
    # float output, each its chain's first op
    candidates = removable_ops(func.op)
    expected = {
        n for n, op in candidates.items() if n.endswith("_0") and "quantize" in op.name
    }
    edited = quantized.clone()
    removed = edited[0].remove_io_op(op_types=["Quantize", "Dequantize"])
    assert set(removed) == expected
    floats = [a for a in (*func.inputs, *func.outputs) if a.dtype.kind == "f"]
    assert len(expected) == len(floats)  # (int64 indices have no quantize)
    assert "successfully" in capsys.readouterr().out
    stats = edited[0].statistics()
    assert stats.get("qnt.quantize", 0) == func.statistics().get(
        "qnt.quantize", 0
    ) - len(func.inputs)
    codes = {
        a.name: a.quant_info.quantize(feed[a.name], a.dtype) for a in edited[0].inputs
    }
    got = edited[0].feed(codes)
    for out in edited[0].outputs:
        if out.quant_info is None:  # indices, as they were
            np.testing.assert_array_equal(got[out.name], want[out.name])
            continue
        assert out.dtype in (np.int8, np.int16)
        np.testing.assert_array_equal(
            out.quant_info.dequantize(got[out.name]), want[out.name]
        )


def test_remove_io_op_by_name_and_no_skipping(tiny_qat_bc):
    quantized = tiny_qat_bc[3][1].clone()
    func = quantized[0]
    with pytest.raises(InputEditError, match="not ops at an input or output"):
        func.remove_io_op(op_names=["_input_0_Quantize_7"])
    assert func.remove_io_op(op_names=["_output_0_Dequantize_0"]) == [
        "_output_0_Dequantize_0"
    ]
    assert func.outputs[0].quant_info is not None
    assert func.inputs[0].dtype == np.float32  # the input quantize stays


def test_remove_io_op_chain_is_recursive_and_refuses_skipping():
    text = """
    func.func @forward(%x: tensor<2x3xf32>) -> tensor<6xf32> {
      %t = hbir.transpose %x {perm = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
      %r = hbir.reshape %t : tensor<3x2xf32> -> tensor<6xf32>
      %s = hbir.softmax %r {dim = 0 : i64} : tensor<6xf32> -> tensor<6xf32>
      %u = hbir.reshape %s : tensor<6xf32> -> tensor<2x3xf32>
      %v = hbir.reshape %u : tensor<2x3xf32> -> tensor<6xf32>
      func.return %v : tensor<6xf32>
    }"""
    func = hbir.Module.parse(text)[0]
    for names in (
        ["_input_0_Reshape_1"],
        ["_output_0_Reshape_0", "_input_0_Reshape_1"],
    ):
        with pytest.raises(
            InputEditError, match=r"\['_input_0_Reshape_1'\].*no skipping"
        ):
            func.remove_io_op(op_names=names)
        # refused: nothing changed
        assert func.statistics() == {
            "hbir.transpose": 1,
            "hbir.reshape": 3,
            "hbir.softmax": 1,
        }
    removed = func.remove_io_op(op_types=["Transpose", "Reshape"])
    assert sorted(removed) == [
        "_input_0_Reshape_1",
        "_input_0_Transpose_0",
        "_output_0_Reshape_0",
        "_output_0_Reshape_1",
    ]
    assert func.inputs[0].shape == (6,) and func.outputs[0].shape == (6,)
    assert func.statistics() == {"hbir.softmax": 1}


def test_remove_io_op_misuse(tiny_qat_bc):
    qat_bc = tiny_qat_bc[3][0].clone()
    with pytest.raises(
        InputEditError, match=r"\['Quantize'\] can only be removed after"
    ):
        qat_bc[0].remove_io_op(op_types=["Quantize"])
    with pytest.raises(InputEditError, match="unknown op types"):
        qat_bc[0].remove_io_op(op_types=["FilterCopyy"])
    with pytest.raises(InputEditError, match="no .*Transpose.* op is removable"):
        qat_bc[0].remove_io_op(op_types=["Transpose"])


# ------------------------------------------------------------------ insert_split


def test_insert_split_feeds_a_batch_as_one_input_per_image(tiny_qat_bc, tmp_path):
    """The split model on the images equals the original on their batch, in
    qat.bc, quantized.bc and model.hbm (the concat moves values: exact)."""
    qat_bc, quantized = tiny_qat_bc[3]
    model = qat_bc.clone()
    parts = model["forward"].inputs["_input_0"].insert_split(dim=0)
    assert [p.name for p in parts] == ["_input_0_0", "_input_0_1"]
    assert all(p.shape == (1, 3, 8, 8) for p in parts)
    assert [a.name for a in model["forward"].inputs] == ["_input_0_0", "_input_0_1"]
    split_quantized = hbir.convert(model, "nash-e")
    hbm = hbir.compile(split_quantized, tmp_path / "split.hbm", "nash-e")
    g = np.random.default_rng(3)
    for _ in range(3):
        x = (g.random((2, 3, 8, 8)) * 4 - 2).astype(np.float32)
        feed = {"_input_0_0": x[:1], "_input_0_1": x[1:]}
        for original, edited in ((qat_bc, model), (quantized, split_quantized)):
            (want,) = original["forward"].feed({"_input_0": x}, reference=True).values()
            (got,) = edited["forward"].feed(feed, reference=True).values()
            np.testing.assert_array_equal(got, want)
        (got,) = hbm[0].feed(feed).values()
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize(
    "dim, message",
    [(4, "dim 4 is not a dimension of the input"), (1, None), (2, None)],
)
def test_insert_split_errors(tiny_qat_bc, dim, message):
    qat_bc, quantized = tiny_qat_bc[1]
    arg = qat_bc.clone()["forward"].inputs[0]
    if message is None:  # size 1 along dim 1 (one channel); dim 2 splits
        if dim == 1:
            with pytest.raises(InputEditError, match="has size 1: nothing to split"):
                arg.insert_split(dim)
        else:
            assert len(arg.insert_split(dim)) == 8
        return
    with pytest.raises(InputEditError, match=message):
        arg.insert_split(dim)
    with pytest.raises(InputEditError, match="already converted"):
        quantized.clone()["forward"].inputs[0].insert_split(0)


def test_an_argument_type_reads_as_the_reference_tensor_type(tiny_qat_bc):
    import copy
    import pickle

    qat_bc, quantized = tiny_qat_bc[3]
    quantized = quantized.clone()
    arg = qat_bc["forward"].inputs[0]
    t = arg.type
    assert t.shape == arg.shape and t.dims == list(arg.shape)
    assert t.rank == len(arg.shape)
    assert (t.dtype, t.np_dtype, t.torch_dtype) == ("f32", np.float32, torch.float32)
    assert t == t.tensor_type and str(t) == str(t.tensor_type)
    assert t.element_type == t.tensor_type.element_type  # the xDSL type's own
    assert copy.deepcopy(t) == t and pickle.loads(pickle.dumps(t)) == t
    quantized["forward"].remove_io_op(op_types=["Quantize"])
    codes = quantized["forward"].inputs[0].type
    assert (codes.dtype, codes.np_dtype, codes.torch_dtype) == (
        "si8",
        np.int8,
        torch.int8,
    )
    assert codes.quant_info is not None and codes.quant_info.scales
