"""The reference's compile keywords: accepted where they hold for the march
model, refused by name (never a TypeError) where not."""

import numpy as np
import pytest
import torch
from torch import nn

import hbir
from hbir.compile_options import RULES, CompileOptionError, check
from hbir.passes.march import NPUS
from hbir.quantization import (
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    export,
    prepare,
    set_fake_quantize,
)

ACCEPTED = {
    "core_num": 1,
    "balance": 100,
    "input_no_padding": True,
    "output_no_padding": False,
    "cache_mode": "disable",
    "cache_path": "",
    "max_l2m_size": 0,
    "max_time_per_fc": 0.0,
    "advice": 0.0,
    "hbdk3_compatible_mode": False,
    "enable_hpc": False,
}

REFUSED = [
    ("core_num", 4, "nash-e has 1 BPU core"),
    ("core_num", 0, "a positive number of cores"),
    ("balance", 50, "latency-first"),
    ("balance", 101, "0 (least DDR traffic) .. 100"),
    ("input_no_padding", "yes", "True or False"),
    ("cache_mode", "enable", "no compile cache"),
    ("cache_mode", "sometimes", "one of disable, enable, force_overwrite"),
    ("max_l2m_size", 1 << 20, "no L2M"),
    ("max_time_per_fc", -1, "seconds >= 0"),
    ("advice", 0.5, "hbm_perf"),
    ("hbdk3_compatible_mode", True, "no hbdk3 format"),
    ("enable_hpc", True, "nash-e has no HPC mode"),
]


def test_every_rule_has_an_accepted_value():
    assert set(ACCEPTED) == set(RULES)
    for march in NPUS:
        check(ACCEPTED, march)


@pytest.mark.parametrize("name, value, why", REFUSED)
def test_refused_values_name_the_keyword(name, value, why):
    with pytest.raises(CompileOptionError) as caught:
        check({name: value}, "nash-e")
    assert str(caught.value).startswith(f"hbir.compile: {name}={value!r}: ")
    assert why in str(caught.value)


def test_an_unknown_keyword_is_named():
    with pytest.raises(CompileOptionError, match="unknown keyword 'jobz'"):
        check({"jobz": 4}, "nash-e")


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.conv = nn.Conv2d(2, 4, 3, padding=1)

        def forward(self, x):
            return self.dequant(self.conv(self.quant(x)))

    torch.manual_seed(0)
    x = torch.randn(1, 2, 6, 6)
    qat = prepare(Tiny().eval(), (x,), out_dir=tmp_path_factory.mktemp("tiny"))
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(x)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return hbir.convert(export(qat, (x,)), "nash-e"), x.numpy()


def test_compile_takes_the_reference_keywords(quantized, tmp_path):
    m, x = quantized
    plain = hbir.compile(m, march="nash-e")
    hbm = hbir.compile(m, tmp_path / "model.hbm", "nash-e", jobs=64, **ACCEPTED)
    feed = {"_input_0": x}
    (want,) = plain[0].feed(feed).values()
    (got,) = hbm[0].feed(feed).values()
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_compile_refuses_a_keyword_before_compiling(quantized, tmp_path):
    m, _ = quantized
    with pytest.raises(CompileOptionError, match="core_num=4: nash-e has 1 BPU"):
        hbir.compile(m, tmp_path / "model.hbm", "nash-e", core_num=4)
    assert not (tmp_path / "model.hbm").exists()


def test_compile_refuses_a_torch_model_with_the_fix():
    """(was a KeyError: the fix text for compile was missing)"""
    with pytest.raises(hbir.ModelTypeError, match="export and convert it first"):
        hbir.compile(nn.Linear(2, 2))
