"""A batch on the simulated NPU (``runtime/npu_batch.py``): the batch-1 program
run on N samples at once equals N runs of it, bit for bit, on zoo models with
convs, pools, residual adds, attention and CPU islands; the layers really run
once for the batch (not a loop in disguise), and a program that cannot be
batched falls back to sample by sample."""

import numpy as np
import pytest
import zoo
from zoo_stages import calibrated

import hbir
from hbir.quantization import export
from hbir.runtime import npu_batch, npu_merge
from hbir.runtime.npu_sim import FunctionSim


def _compiled(name: str, tmp_path):
    qat, _ = calibrated(name, tmp_path / name)
    inputs = zoo.batches(name, 1, batch=1, seed=5)[0]
    quantized = hbir.convert(export(qat, inputs), "nash-e")
    return hbir.compile(quantized, tmp_path / f"{name}.hbm")


def _samples(name: str, n: int, seed: int) -> list[np.ndarray]:
    return [x.numpy() for x in zoo.batches(name, 1, batch=n, seed=seed)[0]]


@pytest.mark.parametrize("name", ["resnet", "mobilenet", "transformer", "fpn_head"])
def test_a_batch_at_once_equals_each_sample_alone(name, tmp_path):
    f = _compiled(name, tmp_path)[0]
    xs = _samples(name, 4, seed=11)
    names = [d.name for d in f.inputs]
    sim = f._sim.batched(4)
    assert sim is not None and sim.batch == 4
    got = sim.run(xs)
    for i in range(4):
        alone = f._sim.run([x[i : i + 1] for x in xs])
        for y, want in zip(got, alone, strict=True):
            assert y[i : i + 1].tobytes() == want.tobytes()
    # and through feed, which takes the batched program
    fed = f.feed(dict(zip(names, xs, strict=True)))
    assert [y.tobytes() for y in fed.values()] == [y.tobytes() for y in got]


def test_convs_run_once_for_the_whole_batch(tmp_path):
    f = _compiled("resnet", tmp_path)[0]
    sim = f._sim.batched(3)
    convs = [s for s in sim.steps if s.name == "conv"]
    assert convs
    for step in convs:  # one kernel call on (3, ...) views, not three
        assert step.run is not npu_batch.run_samples
        if step.run is not npu_merge.run_tile:
            assert step.out[0][0] == 3 and step.ins[0].shape[0] == 3
    calls = []
    real = npu_merge.TileGroup.sums

    def counting(group, x):
        calls.append(x.shape[0])
        return real(group, x)

    npu_merge.TileGroup.sums = counting
    try:
        sim.run(_samples("resnet", 3, seed=2))
    finally:
        npu_merge.TileGroup.sums = real
    assert all(n == 3 for n in calls)


def test_the_batched_programs_are_kept_for_two_sizes(tmp_path):
    f = _compiled("resnet", tmp_path)[0]
    a, b = f._sim.batched(2), f._sim.batched(3)
    assert f._sim.batched(2) is a and f._sim.batched(3) is b
    f._sim.batched(4)
    assert sorted(f._sim._batched) == [3, 4]


def test_a_program_that_cannot_batch_runs_sample_by_sample(tmp_path, monkeypatch):
    hbm = _compiled("resnet", tmp_path)
    f = hbm[0]

    def refuse(*args, **kwargs):
        raise npu_batch.NpuBatchError("refused for the test")

    monkeypatch.setattr(npu_batch, "spread", refuse)
    f._sim._batched.clear()
    assert f._sim.batched(2) is None
    (x,) = _samples("resnet", 2, seed=4)
    got = f.feed({"_input_0": x})["_output_0"]
    want = [f.feed({"_input_0": x[i : i + 1]})["_output_0"] for i in range(2)]
    assert got.tobytes() == np.concatenate(want).tobytes()


def test_a_batch_simulator_keeps_the_plans_bytes_per_sample(tmp_path):
    f = _compiled("resnet", tmp_path)[0]
    sim = FunctionSim(f.code, f._sim.islands, batch=2)
    assert sim.ddr.shape == (2, f.code.ddr_peak_bytes)
    assert sim.sram.shape == (2, f.code.sram_peak_bytes)
    for key, b in f.code.buffers.items():
        v = sim.views[key]
        if b.space in ("ddr", "sram"):
            arena = sim.ddr if b.space == "ddr" else sim.sram
            for i in range(2):  # sample i's buffer: the plan's offset in row i
                start = v[i].__array_interface__["data"][0]
                assert start == arena[i].__array_interface__["data"][0] + b.offset
