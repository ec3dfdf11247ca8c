"""Tracing helpers: user source lines and recorded values."""

import torch
from torch import nn

from hbir.quantization import QuantStub
from hbir.quantization.tracing import record_values, trace, user_frame, value_of

TORCH_FILE = torch.__file__


def test_user_frame_skips_torch_and_hbir_frames():
    stack = (
        'File "/home/me/model.py", line 10, in forward\n    y = self.block(x)\n'
        f'  File "{TORCH_FILE}", line 1, in _call_impl\n    return forward_call()\n'
        'File "/home/me/blocks.py", line 42, in forward\n    return torch.erf(x)\n'
        f'  File "{TORCH_FILE}", line 2, in create_proxy\n    node = create_node()\n'
    )
    assert user_frame(stack) == "/home/me/blocks.py:42: return torch.erf(x)"
    assert user_frame(None) is None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        y = self.fc(self.quant(x))
        return y, y.shape[0]


def test_stubs_stay_leaves_and_values_are_recorded():
    gm = trace(Net())
    record_values(gm, (torch.randn(2, 3),))
    nodes = {n.name: n for n in gm.graph.nodes}
    assert nodes["quant"].op == "call_module"
    assert value_of(nodes["fc"]).is_float_tensor and value_of(nodes["fc"]).shape == (
        2,
        3,
    )
    assert not value_of(nodes["getitem"]).is_tensor
    assert "y = self.fc(self.quant(x))" in user_frame(nodes["fc"].stack_trace)
