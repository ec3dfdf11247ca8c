"""nn.LSTM / nn.GRU / nn.RNN unrolled into QAT steps: in float mode they compute torch's
own recurrence; every step has its own fake quants and the linears of a direction
share their weights."""

import pytest
import torch
from torch import nn

from hbir.quantization import FakeQuantState, QuantStub, prepare, set_fake_quantize
from hbir.quantization import qat_modules as qat


class _Rnn(nn.Module):
    def __init__(self, rnn, state=False):
        super().__init__()
        self.quant, self.rnn, self.state = QuantStub(), rnn, state
        shape = (rnn.num_layers * (2 if rnn.bidirectional else 1), 1, rnn.hidden_size)
        self.h0 = nn.Parameter(torch.randn(shape) * 0.3)

    def forward(self, x):
        x = self.quant(x)
        if not self.state:
            return self.rnn(x)
        batch = x.shape[0] if self.rnn.batch_first else x.shape[1]
        h0 = self.h0.expand(-1, batch, -1).contiguous()
        return self.rnn(x, (h0, h0 * 0.5) if isinstance(self.rnn, nn.LSTM) else h0)


CASES = {
    "lstm": (lambda: nn.LSTM(6, 5), False),
    "lstm-2-layers-bidirectional-batch-first": (
        lambda: nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True),
        False,
    ),
    "lstm-initial-state": (lambda: nn.LSTM(6, 5, batch_first=True), True),
    "gru": (lambda: nn.GRU(6, 5, batch_first=True), False),
    "gru-no-bias-bidirectional": (
        lambda: nn.GRU(6, 5, bias=False, bidirectional=True),
        False,
    ),
    "gru-2-layers-initial-state": (lambda: nn.GRU(6, 5, num_layers=2), True),
    "rnn": (lambda: nn.RNN(6, 5, batch_first=True), False),
    "rnn-relu-2-layers-initial-state": (
        lambda: nn.RNN(6, 5, num_layers=2, nonlinearity="relu"),
        True,
    ),
    "rnn-no-bias-bidirectional": (
        lambda: nn.RNN(6, 5, bias=False, bidirectional=True),
        False,
    ),
}


def _flat(y):
    if isinstance(y, tuple):
        return [t for part in y for t in _flat(part)]
    return [y]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_unrolled_recurrence_is_torchs_in_float_mode(name, tmp_path):
    make, state = CASES[name]
    torch.manual_seed(0)
    model = _Rnn(make(), state).eval()
    x = torch.randn(3, 4, 6)
    qat_model = prepare(model, (x,), out_dir=tmp_path)
    set_fake_quantize(qat_model, FakeQuantState._FLOAT)
    with torch.no_grad():
        got, want = _flat(qat_model(x)), _flat(model(x))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_each_step_has_its_own_fake_quants_and_shares_the_weights(tmp_path):
    model = _Rnn(nn.LSTM(6, 5)).eval()
    qat_model = prepare(model, (torch.randn(4, 2, 6),), out_dir=tmp_path)
    steps = qat_model.rnn.layers[0][0].steps
    assert len(steps) == 4
    ih = [s.ih for s in steps]
    assert all(isinstance(m, qat.Linear) for m in ih)
    assert all(m.weight is ih[0].weight for m in ih)  # one weight, trained by all
    assert ih[0].weight is model.rnn.weight_ih_l0 or torch.equal(
        ih[0].weight, model.rnn.weight_ih_l0
    )
    outputs = {id(s.h.activation_post_process) for s in steps}
    assert len(outputs) == 4  # each step's hidden state has its own scale


@pytest.mark.filterwarnings("ignore:LSTM with projections")
def test_a_projection_is_refused(tmp_path):
    from hbir.quantization import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="proj_size=3"):
        prepare(
            _Rnn(nn.LSTM(6, 5, proj_size=3)).eval(),
            (torch.randn(2, 1, 6),),
            out_dir=tmp_path,
        )
