"""hbir/quantization/options.py: one explicit options object, the setters shims.

The reference API's switches (set_round_mode, ConsistencyStrategy,
float_validation) read and write the same ``QuantOptions``; ``using`` scopes a
change; ``prepare`` and ``export`` take ``options=`` for one call and leave the
defaults alone. Each explicit form must give the model the switch gives.
"""

import threading

import numpy as np
import pytest
import torch
from torch import nn
from zoo_stages import calibrated, validated

from hbir.quantization import (
    ConsistencyStrategy,
    DeQuantStub,
    QuantOptions,
    QuantStub,
    current_options,
    export,
    float_validation,
    get_round_mode,
    set_round_mode,
    using,
)


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"rounding": "nearest"}, "round mode must be one of"),
        ({"consistency_level": 3}, "consistency level must be 0, 1, 2 or None"),
        ({"consistency_level": True}, "consistency level must be 0, 1, 2 or None"),
        ({"fixed_point_validation": 1}, "must be True or False"),
    ],
)
def test_options_refuse_what_they_cannot_mean(bad, message):
    with pytest.raises(ValueError, match=message):
        QuantOptions(**bad)
    with pytest.raises(ValueError, match=message):
        with using(**bad):
            pass


def test_the_setters_are_shims_over_the_defaults():
    assert current_options() == QuantOptions()
    set_round_mode("half_up")
    ConsistencyStrategy.set_consistency_level(1)
    try:
        assert current_options() == QuantOptions("half_up", 1)
        assert get_round_mode() == "half_up"
        assert ConsistencyStrategy.get_consistency_level() == 1
        with pytest.raises(ValueError, match="consistency level"):
            ConsistencyStrategy.set_consistency_level(True)  # (was accepted)
    finally:
        set_round_mode("half_even")
        ConsistencyStrategy.set_consistency_level(None)
    assert current_options() == QuantOptions()


def test_using_scopes_a_change_per_thread():
    seen = []
    with using(rounding="half_up") as inside:
        assert inside == current_options() == QuantOptions(rounding="half_up")
        with float_validation():  # nested: both changes in force
            assert current_options() == QuantOptions("half_up", None, False)
        assert current_options().fixed_point_validation
        other = threading.Thread(target=lambda: seen.append(current_options()))
        other.start()
        other.join()
    assert current_options() == QuantOptions()
    assert seen == [QuantOptions()]  # a block is its thread's own


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.dequant(torch.relu(self.conv(self.quant(x))))


def test_prepare_and_export_take_options_for_one_call(tmp_path):
    torch.manual_seed(0)
    model, inputs = _Net().eval(), [torch.randn(1, 3, 6, 6) for _ in range(3)]
    level2 = QuantOptions(consistency_level=2)
    explicit = validated(model, inputs, tmp_path, options=level2)
    assert current_options() == QuantOptions()  # the defaults untouched
    ConsistencyStrategy.set_consistency_level(2)
    try:
        shimmed = validated(model, inputs, tmp_path)
    finally:
        ConsistencyStrategy.set_consistency_level(None)
    assert explicit._consistency_level == shimmed._consistency_level == 2
    half_up = QuantOptions(rounding="half_up")
    a = export(explicit, (inputs[0],), options=half_up)
    assert a._legacy_round and current_options() == QuantOptions()
    set_round_mode("half_up")
    try:
        b = export(shimmed, (inputs[0],))
    finally:
        set_round_mode("half_even")
    assert a.module.get_asm() == b.module.get_asm()
    assert not export(explicit, (inputs[0],))._legacy_round


def test_float_validation_is_the_option(tmp_path):
    qat, example = calibrated("resnet", tmp_path)
    with torch.no_grad():
        with float_validation():
            assert not current_options().fixed_point_validation
            shim = qat(*example)
        with using(fixed_point_validation=False):
            explicit = qat(*example)
    assert np.array_equal(shim.numpy(), explicit.numpy())
