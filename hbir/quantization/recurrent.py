"""``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` unrolled over the sequence into QAT steps.

Deployment runs a recurrent layer as its cells one time step after another, so
prepare writes it that way: every step of every layer and direction is its own
chain of QAT modules (the input and hidden linears, the gate tables, the state
products and sums), each with its own fake quantization, so QAT trains the scale
of every step's state. The linears of one layer and direction share their
weights across the steps (one weight, trained by all of them), as the
per-call QAT modules of a module called several times do.

LSTM: ``gates = W_ih x + (b_ih + b_hh) + W_hh h`` (the two biases are one),
``i, f, g, o = chunk(gates, 4)``, ``c = sigmoid(f) * c + sigmoid(i) * tanh(g)``,
``h = sigmoid(o) * tanh(c)``. GRU: ``r, z`` as the LSTM's gates (``b_hr``,
``b_hz`` moved into the input bias), ``n = tanh(W_in x + b_in + r * (W_hn h +
b_hn))``, ``h = n + z * (h - n)``. RNN: ``h = tanh(W_ih x + (b_ih + b_hh) + W_hh
h)`` (or relu). Without an initial state the first step has
``h = c = 0``: its hidden linear is ``b_hn`` (GRU) or nothing (LSTM).

The hidden state and the outputs are int8 (they feed linears: a gemm takes one
int16 operand at most); the cell state and the gate sums are at least int16.
Returns what torch returns: ``(output, (h_n, c_n))`` / ``(output, h_n)``.
"""

from __future__ import annotations

import torch
from torch import fx, nn

from hbir.quantization.decompositions import Decomposition, StepQconfig
from hbir.quantization.lut_modules import Sigmoid, Tanh
from hbir.quantization.qat_modules import (
    Linear,
    QuantAdd,
    QuantAffine,
    QuantCat,
    QuantMul,
    QuantStack,
    QuantSub,
    ReLU,
)
from hbir.quantization.rule_support import require


def _linear(weight, bias) -> nn.Linear:
    """A float linear holding ``weight`` (shared) and ``bias``."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    linear.weight = weight
    if bias is not None:
        linear.bias = bias
    return linear


class _Direction(nn.Module):
    """The steps of one layer in one direction (``cell`` builds one step)."""

    def __init__(self, steps: list[nn.Module]):
        super().__init__()
        self.steps = nn.ModuleList(steps)


class RecurrentDecomposition(Decomposition):
    """The common frame: layers, directions, the sequence layout, the outputs."""

    op = ""
    gates = 0

    def __init__(
        self, rnn: nn.RNNBase, steps: int, given_state: bool, qconfig_for: StepQconfig
    ):
        super().__init__()
        self.num_layers, self.hidden = rnn.num_layers, rnn.hidden_size
        self.directions = 2 if rnn.bidirectional else 1
        self.batch_first, self.length = rnn.batch_first, steps
        self.given_state = given_state
        self._shared: dict = {}  # the parameters the steps of a direction share
        layers = []
        for layer in range(self.num_layers):
            directions = []
            for d in range(self.directions):
                suffix = f"_l{layer}" + ("_reverse" if d else "")
                params = {
                    name: getattr(rnn, f"{name}{suffix}", None)
                    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
                }
                prefix = f"l{layer}.d{d}"
                cells = [
                    self.cell(params, t, f"{prefix}.t{t}", qconfig_for)
                    for t in range(steps)
                ]
                directions.append(_Direction(cells))
            layers.append(nn.ModuleList(directions))
        self.layers = nn.ModuleList(layers)
        if self.directions == 2:  # each layer's input and the output: both halves
            self.joins = nn.ModuleList(
                nn.ModuleList(
                    QuantCat(qconfig_for(f"l{layer}.join{t}", QuantCat, True), -1)
                    for t in range(steps)
                )
                for layer in range(self.num_layers)
            )
        self.output = QuantStack(qconfig_for("output", QuantStack, True), 0)
        self.h_n = QuantStack(qconfig_for("h_n", QuantStack, True), 0)
        if self.op == "lstm":
            self.c_n = QuantStack(qconfig_for("c_n", QuantStack, False), 0)

    def cell(self, params, t, prefix, qconfig_for) -> nn.Module:
        raise NotImplementedError

    def _with_summed_bias(self, params: dict) -> dict:
        """``params`` with ``_bias``: one bias for both linears, ``b_ih + b_hh`` (a
        new parameter, shared by the direction's steps)."""
        params = dict(params)
        if params["bias_ih"] is not None:
            key = id(params["bias_ih"])
            if key not in self._shared:
                self._shared[key] = nn.Parameter(
                    (params["bias_ih"] + params["bias_hh"]).detach().clone()
                )
            params["_bias"] = self._shared[key]
        return params

    def forward(self, x, hx=None):
        # (indexing, not unbind / chunk: prepare inlines this forward on proxies)
        xs = [x[:, t] if self.batch_first else x[t] for t in range(self.length)]
        h_last, c_last = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.directions):
                index = layer * self.directions + d
                # (given_state, not ``hx is None``: the trace sees a proxy)
                state = self._initial(hx, index) if self.given_state else None
                order = range(self.length)
                if d:
                    order = reversed(order)
                hs = [None] * self.length
                for step, t in enumerate(order):
                    state = self.layers[layer][d].steps[step](xs[t], state)
                    hs[t] = state[0]
                outs.append(hs)
                h_last.append(state[0])
                if self.op == "lstm":
                    c_last.append(state[1])
            if self.directions == 1:
                xs = outs[0]
            else:
                xs = [
                    self.joins[layer][t]([outs[0][t], outs[1][t]])
                    for t in range(self.length)
                ]
        output = self.output(xs)
        if self.batch_first:
            output = output.transpose(0, 1)
        h_n = self.h_n(h_last)
        if self.op == "lstm":
            return output, (h_n, self.c_n(c_last))
        return output, h_n

    def _initial(self, hx, index):
        if self.op == "lstm":
            return hx[0][index], hx[1][index]
        return (hx[index],)

    def extra_repr(self) -> str:
        return (
            f"layers={self.num_layers}, directions={self.directions}, "
            f"hidden={self.hidden}, steps={self.length}"
        )


class _LSTMCell(nn.Module):
    def __init__(self, params, first: bool, hidden: int, prefix, qconfig_for):
        super().__init__()

        def q(name, cls, final=False):
            return qconfig_for(f"{prefix}.{name}", cls, final)

        bias = None
        if params["bias_ih"] is not None:
            bias = params["_bias"]
        self.hidden, self.first = hidden, first
        self.ih = Linear.from_float(_linear(params["weight_ih"], bias), q("ih", Linear))
        if not first:
            self.hh = Linear.from_float(
                _linear(params["weight_hh"], None), q("hh", Linear)
            )
            self.gates = QuantAdd(q("gates", QuantAdd))
            self.f = Sigmoid(q("f", Sigmoid))  # (c = 0 at the first step: no forget)
            self.forget = QuantMul(q("forget", QuantMul))
            self.cell = QuantAdd(q("cell", QuantAdd))
        self.i, self.o = Sigmoid(q("i", Sigmoid)), Sigmoid(q("o", Sigmoid))
        self.g = Tanh(q("g", Tanh))
        self.write = QuantMul(q("write", QuantMul))
        self.tanh_c = Tanh(q("tanh_c", Tanh))
        self.h = QuantMul(q("h", QuantMul, True))

    def forward(self, x, state):
        gates = self.ih(x)
        if not self.first:
            gates = self.gates(gates, self.hh(state[0]))
        h = self.hidden
        i, f, g, o = (gates[..., k * h : (k + 1) * h] for k in range(4))
        write = self.write(self.i(i), self.g(g))
        c = write if self.first else self.cell(self.forget(self.f(f), state[1]), write)
        return self.h(self.o(o), self.tanh_c(c)), c


class LSTMDecomposition(RecurrentDecomposition):
    op = "lstm"

    def cell(self, params, t, prefix, qconfig_for):
        params = self._with_summed_bias(params)
        first = t == 0 and not self.given_state
        return _LSTMCell(params, first, self.hidden, prefix, qconfig_for)


class _GRUCell(nn.Module):
    def __init__(self, params, first: bool, hidden: int, prefix, qconfig_for):
        super().__init__()

        def q(name, cls, final=False):
            return qconfig_for(f"{prefix}.{name}", cls, final)

        self.first, self.hidden = first, hidden
        self.ih = Linear.from_float(
            _linear(params["weight_ih"], params["_bias_ih"]), q("ih", Linear)
        )
        self.r, self.z = Sigmoid(q("r", Sigmoid)), Sigmoid(q("z", Sigmoid))
        if first:  # h = 0: the hidden linear is its bias b_hn (if any)
            self.hh_n = None
            if params["_bias_hn"] is not None:
                self.hh_n = QuantAffine(
                    q("hh_n", QuantAffine), params["_bias_hn"], None, (-1,)
                )
        else:
            self.hh = Linear.from_float(
                _linear(params["weight_hh"], params["_bias_hh"]), q("hh", Linear)
            )
            self.gates = QuantAdd(q("gates", QuantAdd))
            self.diff = QuantSub(q("diff", QuantSub))
            self.reset = QuantMul(q("reset", QuantMul))
        self.pre_n = QuantAdd(q("pre_n", QuantAdd))
        self.n = Tanh(q("n", Tanh))
        self.update = QuantMul(q("update", QuantMul))
        self.h = (QuantSub if first else QuantAdd)(q("h", QuantAdd, True))

    def forward(self, x, state):
        two = 2 * self.hidden
        ih = self.ih(x)
        ih_rz, ih_n = ih[..., :two], ih[..., two:]
        if self.first:
            rz = ih_rz
        else:
            hh = self.hh(state[0])
            hh_rz, hh_n = hh[..., :two], hh[..., two:]
            rz = self.gates(ih_rz, hh_rz)
        r, z = self.r(rz[..., : self.hidden]), self.z(rz[..., self.hidden :])
        if self.first:
            n_in = ih_n if self.hh_n is None else self.pre_n(ih_n, self.hh_n(r))
            n = self.n(n_in)
            return (self.h(n, self.update(z, n)),)  # (1 - z) * n
        n = self.n(self.pre_n(ih_n, self.reset(r, hh_n)))
        return (self.h(n, self.update(z, self.diff(state[0], n))),)


class GRUDecomposition(RecurrentDecomposition):
    op = "gru"

    def cell(self, params, t, prefix, qconfig_for):
        params = dict(params)
        h = self.hidden
        shared = self._shared
        key = id(params["weight_ih"])
        if key not in shared:
            b_ih, b_hh = params["bias_ih"], params["bias_hh"]
            if b_ih is None:
                shared[key] = (None, None, None)
            else:
                moved = torch.cat([b_hh[: 2 * h], torch.zeros(h)]).detach()
                kept = torch.cat([torch.zeros(2 * h), b_hh[2 * h :]]).detach()
                shared[key] = (
                    nn.Parameter((b_ih + moved).detach().clone()),
                    nn.Parameter(kept.clone()),
                    nn.Parameter(b_hh[2 * h :].detach().clone()),
                )
        params["_bias_ih"], params["_bias_hh"], params["_bias_hn"] = shared[key]
        first = t == 0 and not self.given_state
        return _GRUCell(params, first, h, prefix, qconfig_for)


class _RNNCell(nn.Module):
    """``h = act(W_ih x + (b_ih + b_hh) + W_hh h)``, act tanh (a table) or relu."""

    def __init__(self, params, first: bool, relu: bool, prefix, qconfig_for):
        super().__init__()

        def q(name, cls, final=False):
            return qconfig_for(f"{prefix}.{name}", cls, final)

        self.first = first
        bias = params["_bias"] if params["bias_ih"] is not None else None
        self.ih = Linear.from_float(_linear(params["weight_ih"], bias), q("ih", Linear))
        if not first:
            self.hh = Linear.from_float(
                _linear(params["weight_hh"], None), q("hh", Linear)
            )
            self.gates = QuantAdd(q("gates", QuantAdd))
        self.act = (ReLU if relu else Tanh)(q("h", ReLU if relu else Tanh, True))

    def forward(self, x, state):
        pre = self.ih(x)
        if not self.first:
            pre = self.gates(pre, self.hh(state[0]))
        return (self.act(pre),)


class RNNDecomposition(RecurrentDecomposition):
    op = "rnn"

    def __init__(self, rnn: nn.RNN, *args):
        self.relu = rnn.nonlinearity == "relu"
        super().__init__(rnn, *args)

    def cell(self, params, t, prefix, qconfig_for):
        params = self._with_summed_bias(params)
        first = t == 0 and not self.given_state
        return _RNNCell(params, first, self.relu, prefix, qconfig_for)


RECURRENT = {
    nn.LSTM: LSTMDecomposition,
    nn.GRU: GRUDecomposition,
    nn.RNN: RNNDecomposition,
}


# ----------------------------------------------------------------- prepare's rule


def _zero_state(q, hx) -> bool:
    """``hx`` is made of constant zeros (``torch.zeros`` folded by tracing): the
    same as no initial state."""
    states = hx if isinstance(hx, list | tuple) else (hx,)
    for node in states:
        if not (isinstance(node, fx.Node) and node.op == "get_attr"):
            return False
        if bool(q.constant(node).any()):
            return False
    return True


def module_recurrent(q, mod, x, hx=None, *, fused_relu=None):
    shape = x.meta["hbir_value"].shape
    require(len(shape) == 3, "an unbatched sequence (a 2-d input)")
    steps = shape[1 if mod.batch_first else 0]
    if hx is not None and _zero_state(q, hx):
        hx = None
    require(not getattr(mod, "proj_size", 0), f"proj_size={mod.proj_size}")
    module = RECURRENT[type(mod)](mod, steps, hx is not None, q.step)
    return module, (x,) if hx is None else (x, hx)
