"""Batches, datasets and the outputs' kind on a compiled model (``Hbm``) and on
``quantized.bc``: a batch of N samples fed to a batch-1 model equals N
per-sample feeds and quantized.bc's op-by-op outputs bit for bit;
``run_dataset`` takes an ``Hbm``; tensors in give tensors out, numpy in numpy
out (issue 32 item 4, issue 30 item 3)."""

import numpy as np
import pytest
import torch
import zoo
from zoo_stages import calibrated

import hbir
from hbir.quantization import export


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(quantized.bc, model.hbm) of the zoo resnet exported at batch 1."""
    qat, _ = calibrated("resnet", tmp_path_factory.mktemp("resnet"))
    (x,) = zoo.batches("resnet", 1, batch=1, seed=5)[0]
    quantized = hbir.convert(export(qat, (x,)), "nash-e")
    hbm = hbir.compile(quantized, tmp_path_factory.mktemp("hbm") / "model.hbm")
    return quantized, hbm


def _batch(n: int, seed: int = 7) -> np.ndarray:
    (x,) = zoo.batches("resnet", 1, batch=n, seed=seed)[0]
    return x.numpy()


def _op_by_op(quantized, x: np.ndarray) -> np.ndarray:
    """quantized.bc's outputs, sample by sample, by the interpreter's definition."""
    f = quantized[0]
    return np.concatenate(
        [
            f.feed({"_input_0": x[i : i + 1]}, reference=True)["_output_0"]
            for i in range(len(x))
        ]
    )


def test_a_batch_equals_per_sample_feeds_and_quantized_bc(models):
    quantized, hbm = models
    x = _batch(5)
    want = _op_by_op(quantized, x)
    for f in (hbm[0], quantized[0]):
        got = f.feed({"_input_0": x})["_output_0"]
        assert type(got) is np.ndarray and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
        one = [f.feed({"_input_0": x[i : i + 1]})["_output_0"] for i in range(5)]
        assert np.concatenate(one).tobytes() == got.tobytes()


def test_tensors_in_give_tensors_out(models):
    quantized, hbm = models
    x = _batch(3)
    want = _op_by_op(quantized, x)
    for f in (hbm[0], quantized[0]):
        got = f.feed({"_input_0": torch.from_numpy(x)})["_output_0"]
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        assert got.numpy().tobytes() == want.tobytes()
        top = f(torch.from_numpy(x[:1])).topk(2)  # the guide's evaluate loop
        assert top.indices.shape == (1, 2)
        assert type(f(x[:1])) is np.ndarray


def test_run_dataset_takes_a_compiled_model(models):
    quantized, hbm = models
    x = _batch(4, seed=9)
    items = [x[:1], torch.from_numpy(x[1:3]), (x[3:],)]
    for model in (hbm, hbm[0]):
        outs = [o["_output_0"] for o in hbir.run_dataset(model, items, progress=False)]
        assert [type(o) for o in outs] == [np.ndarray, torch.Tensor, np.ndarray]
        assert [tuple(o.shape)[0] for o in outs] == [1, 2, 1]
        got = np.concatenate([np.asarray(o) for o in outs])
        assert got.tobytes() == _op_by_op(quantized, x).tobytes()


def test_a_batch_of_the_wrong_shape_names_the_batch_form(models):
    _, hbm = models
    x = _batch(2)
    with pytest.raises(hbir.FeedError, match=r"\(or a batch: \('N', 3, 16, 16\)\)"):
        hbm[0].feed({"_input_0": x[:, :, :8]})


def test_run_dataset_refuses_what_cannot_feed():
    with pytest.raises(hbir.FeedError, match="run_dataset takes an hbir.Module"):
        next(hbir.run_dataset(object(), [np.ones(2)], progress=False))
