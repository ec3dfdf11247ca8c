"""The metrics against the reference's definitions, computed with torch."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hbir.profiler import metrics

RNG = np.random.default_rng(3)
X = RNG.normal(size=(2, 4, 3, 3)).astype(np.float32)
Y = (X + RNG.normal(scale=0.1, size=X.shape)).astype(np.float32)


def _t(a):
    return torch.from_numpy(a).double()


def test_cosine_is_torch_cosine_similarity_of_flattened_tensors():
    ref = torch.nn.CosineSimilarity(dim=0)(_t(X).flatten(), _t(Y).flatten())
    assert metrics.cosine(X, Y) == pytest.approx(float(ref), abs=1e-12)


def test_mse_and_l1_are_torch_losses():
    assert metrics.mse(X, Y) == pytest.approx(float(F.mse_loss(_t(Y), _t(X))))
    assert metrics.l1(X, Y) == pytest.approx(float(F.l1_loss(_t(Y), _t(X))))


@pytest.mark.filterwarnings("ignore:reduction. 'mean'")  # the reference's own mean
@pytest.mark.parametrize("shape", [(2, 4, 3, 3), (5, 7)])
def test_kl_is_kldivloss_of_log_softmax_over_dim_1_or_last(shape):
    x = RNG.normal(size=shape)
    y = x + RNG.normal(scale=0.2, size=shape)
    dim = 1 if len(shape) > 2 else -1
    ref = torch.nn.KLDivLoss()(F.log_softmax(_t(y), dim=dim), F.softmax(_t(x), dim=dim))
    assert metrics.kl(x, y) == pytest.approx(float(ref), rel=1e-9)


def test_sqnr_atol_rtol():
    x, y = _t(X), _t(Y)
    sqnr = 20 * math.log10(float(x.norm() / (x - y).norm()))
    assert metrics.sqnr(X, Y) == pytest.approx(sqnr)
    assert metrics.sqnr(X, X) == math.inf
    assert metrics.atol(X, Y) == float((x - y).abs().max())
    x0 = x.clone()
    x0[0, 0, 0, 0] = 0.0  # a zero baseline: nan_to_num, as the reference
    rtol = torch.nan_to_num((x0 - y) / x0).abs().max()
    assert metrics.rtol(x0.numpy(), Y) == float(rtol)


def test_names_and_which_way_is_worse():
    assert metrics.NAMES == ("Cosine", "MSE", "L1", "KL", "SQNR", "Atol", "Rtol")
    assert metrics.worse("Cosine", 0.9, 0.99) and metrics.worse("L1", 0.2, 0.1)
    assert metrics.metric("atol") is metrics.atol  # the 3.x docs write ATOL
    with pytest.raises(metrics.MetricError, match="known: Cosine"):
        metrics.metric("cos")
