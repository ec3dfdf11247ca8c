"""Calibration and QAT under torch.distributed (2 gloo processes on this machine).

Each rank calibrates on its own shard (rank 1's range 4x rank 0's), then trains 3
QAT steps under DistributedDataParallel. The references are one process: the same
model calibrated on both shards' batches concatenated step by step, and a fresh
prepared model loaded with rank 0's state_dict.
"""

import os
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import hbir
from hbir.quantization import (
    DeQuantStub,
    FakeQuantize,
    FakeQuantState,
    QuantStub,
    export,
    observers,
    prepare,
    set_fake_quantize,
)
from hbir.quantization.distributed import ObserverStateError

# not in the fast tier (docs/testing.md); the tests share a costly module
# fixture, so one process runs them all (pyproject's --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("distributed")]

WORLD = 2
BATCHES = 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(self.quant(x))))
        return self.dequant(self.fc(y.mean((2, 3))).sigmoid())


def _model() -> nn.Module:
    torch.manual_seed(0)
    return Net().eval()


def _shard(rank: int, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(2, 3, 6, 6, generator=g) * (4.0 if rank else 1.0)


EXAMPLE = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(7))


def _fake_quant_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every fake quant's scale and its observer's range."""
    state = {}
    for name, m in model.named_modules():
        if isinstance(m, FakeQuantize):
            obs = m.activation_post_process
            state[f"{name}.scale"] = m.scale.clone()
            state[f"{name}.min"] = obs.min_val.clone()
            state[f"{name}.max"] = obs.max_val.clone()
    return state


def _observers() -> dict[str, nn.Module]:
    """Every kind of observer, fed the shards directly."""
    return {
        "per_channel": observers.PerChannelMinMaxObserver(1, averaging_constant=None),
        "moving_average": observers.MovingAverageMinMaxObserver(averaging_constant=0.5),
        "histogram": observers.HistogramObserver(bins=64, percentile=0.99),
        "fixed": observers.FixedScaleObserver(0.125),
    }


def _observe(batches) -> dict[str, torch.Tensor]:
    state = {}
    for name, obs in _observers().items():
        for x in batches:
            obs(x)
        state[f"{name}.scale"] = obs.calculate_qparams()[0]
        for key, value in obs.state_dict().items():
            state[f"{name}.{key}"] = value.clone()
    return state


def _calibrate(qat, batches) -> None:
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for x in batches:
            qat(x)


def _train(model, qat, batches) -> None:
    qat.train()
    set_fake_quantize(qat, FakeQuantState.QAT)
    opt = torch.optim.SGD(qat.parameters(), lr=0.05)
    for x in batches:
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _worker(rank: int, init: str, out: str, mode: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        qat = prepare(_model(), (EXAMPLE,), out_dir=os.path.join(out, f"r{rank}"))
        if mode == "partial":  # calibration started on rank 0 only, then together
            if rank == 0:
                observers_before(qat)
            _calibrate(qat, [_shard(rank, 0)])
            return
        _calibrate(qat, [_shard(rank, s) for s in range(BATCHES)])
        torch.save(_fake_quant_state(qat), os.path.join(out, f"calib{rank}.pt"))
        observed = _observe([_shard(rank, s) for s in range(BATCHES)])
        torch.save(observed, os.path.join(out, f"observers{rank}.pt"))
        ddp = nn.parallel.DistributedDataParallel(qat)
        _train(ddp, qat, [_shard(rank, 10 + s) for s in range(3)])
        torch.save(_fake_quant_state(qat), os.path.join(out, f"qat{rank}.pt"))
        if rank == 0:
            torch.save(qat.state_dict(), os.path.join(out, "qat_state.pt"))
            qat.eval()
            set_fake_quantize(qat, FakeQuantState.VALIDATION)
            hbir.save(export(qat, (EXAMPLE,)), os.path.join(out, "rank0.bc"))
    except Exception:
        with open(os.path.join(out, f"error{rank}.txt"), "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def observers_before(qat) -> None:
    """Rank 0 alone observes a batch first (outside any collective): its observers
    then have data while rank 1's have none."""
    import hbir.quantization.distributed as d

    active = d.active
    d.active = lambda: False
    try:
        _calibrate(qat, [_shard(0, 99)])
    finally:
        d.active = active


def _spawn(tmp_path, mode: str) -> None:
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_worker, args=(init, str(tmp_path), mode), nprocs=WORLD, join=True)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    _spawn(out, "full")
    return out


def test_every_rank_calibrates_the_scales_of_all_shards(run, tmp_path):
    ranks = [torch.load(run / f"calib{r}.pt") for r in range(WORLD)]
    single = prepare(_model(), (EXAMPLE,), out_dir=tmp_path)
    steps = [torch.cat([_shard(r, s) for r in range(WORLD)]) for s in range(BATCHES)]
    _calibrate(single, steps)
    want = _fake_quant_state(single)
    assert ranks[0].keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(ranks[0][key], value), key
        assert torch.equal(ranks[1][key], value), key
    # rank 1's shard is 4x wider: a per-shard calibration would differ
    input_scale = next(k for k in want if k.endswith(".scale"))
    alone = prepare(_model(), (EXAMPLE,), out_dir=tmp_path / "alone")
    _calibrate(alone, [_shard(0, s) for s in range(BATCHES)])
    assert not torch.equal(_fake_quant_state(alone)[input_scale], want[input_scale])


def test_every_kind_of_observer_reduces_to_the_one_process_state(run):
    """Per channel, moving average (towards each step's whole batch), histogram
    (one range, summed counts), fixed scale: exact."""
    steps = [torch.cat([_shard(r, s) for r in range(WORLD)]) for s in range(BATCHES)]
    want = _observe(steps)
    for rank in range(WORLD):
        got = torch.load(run / f"observers{rank}.pt")
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert torch.equal(got[key], value), (rank, key)


def test_qat_under_ddp_keeps_the_fake_quant_state_identical(run):
    a, b = (torch.load(run / f"qat{r}.pt") for r in range(WORLD))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_rank_0s_state_dict_exports_the_same_qat_bc_in_one_process(run, tmp_path):
    single = prepare(_model(), (EXAMPLE,), out_dir=tmp_path)
    single.load_state_dict(torch.load(run / "qat_state.pt"))
    single.eval()
    set_fake_quantize(single, FakeQuantState.VALIDATION)
    mine = export(single, (EXAMPLE,)).module.get_asm()
    theirs = hbir.load(run / "rank0.bc").module.get_asm()
    assert mine == theirs


def test_observers_in_different_states_across_ranks_are_an_error(tmp_path):
    with pytest.raises(mp.ProcessRaisedException):  # each worker wrote its error
        _spawn(tmp_path, "partial")
    errors = [
        (tmp_path / f"error{r}.txt").read_text()
        for r in range(WORLD)
        if (tmp_path / f"error{r}.txt").exists()
    ]
    assert errors and all(ObserverStateError.__name__ in e for e in errors)
    assert all("different states on the ranks" in e for e in errors)


def test_without_a_process_group_nothing_is_reduced():
    assert not dist.is_initialized()
    obs = observers.MinMaxObserver()
    obs(torch.tensor([-1.0, 2.0]))
    obs(torch.empty(0))  # an empty batch is skipped, as before
    assert obs.min_val.item() == -1.0 and obs.max_val.item() == 2.0
