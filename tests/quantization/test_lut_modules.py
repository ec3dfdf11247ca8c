"""LUT-ready modules: num_tables, the float functions, singular points, sin/cos periods."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hbir.quantization import FakeQuantize, MinMaxObserver, get_qconfig, qint16
from hbir.quantization import lut_modules as lut
from hbir.runtime import numerics, op_table

REFERENCES = {
    lut.Sigmoid: torch.sigmoid,
    lut.Tanh: torch.tanh,
    lut.Exp: torch.exp,
    lut.Log: torch.log,
    lut.Sqrt: torch.sqrt,
    lut.Rsqrt: torch.rsqrt,
    lut.Reciprocal: torch.reciprocal,
    lut.Sin: torch.sin,
    lut.Cos: torch.cos,
    lut.GELU: F.gelu,
    lut.SiLU: F.silu,
    lut.Hardsigmoid: F.hardsigmoid,
    lut.Hardswish: F.hardswish,
    lut.LeakyReLU: F.leaky_relu,
    lut.ELU: F.elu,
    lut.CELU: F.celu,
    lut.Softplus: F.softplus,
    lut.SELU: F.selu,
    lut.Mish: F.mish,
    lut.Erf: torch.erf,
    lut.LogSigmoid: F.logsigmoid,
    lut.Softsign: F.softsign,
    lut.Tanhshrink: F.tanhshrink,
}
POSITIVE_ONLY = (lut.Log, lut.Sqrt, lut.Rsqrt, lut.Reciprocal)


def test_every_lut_op_has_a_module_and_a_default_table_count():
    assert set(REFERENCES) == set(lut.LUT_MODULES.values())
    lut_ops = {e.op for e in op_table.OPS if e.lut is not None}
    assert set(lut.LUT_MODULES) == lut_ops
    for cls in lut.LUT_MODULES.values():
        module = cls(get_qconfig())
        assert module.num_tables == lut.DEFAULT_NUM_TABLES[cls.op]
        assert module.num_tables > 0 and module.num_tables % 6 == 0
        assert f"num_tables={module.num_tables}" in repr(module)


@pytest.mark.parametrize("value", [0, -6, 7, 6.0, True, "12"])
def test_num_tables_must_be_a_positive_multiple_of_6(value):
    module = lut.Rsqrt(get_qconfig())
    with pytest.raises(ValueError, match="positive multiple of 6"):
        module.num_tables = value
    with pytest.raises(ValueError, match="positive multiple of 6"):
        lut.Sin(get_qconfig(), num_tables=value)


@pytest.mark.parametrize(
    "cls, value, torch_fn",
    [
        (lut.LeakyReLU, 0.2, lambda x: F.leaky_relu(x, 0.2)),
        (lut.ELU, 0.5, lambda x: F.elu(x, 0.5)),
        (lut.CELU, 2.0, lambda x: F.celu(x, 2.0)),
        (lut.Softplus, 3.0, lambda x: F.softplus(x, 3.0)),
    ],
)
def test_a_parametric_table_module_computes_and_names_its_parameter(
    cls, value, torch_fn
):
    module = cls(get_qconfig(), value=value)
    x = torch.linspace(-6, 6, 101)
    assert torch.equal(module.function(x), torch_fn(x))
    assert module.table_name() == f"{cls.op}:{value!r}"
    assert cls(get_qconfig()).table_name() == cls.op  # torch's default
    name = numerics.LUT_PARAMETERS[cls.op][0]
    assert f"{name}={value}" in repr(module)


def test_a_parameter_no_table_has_is_refused():
    with pytest.raises(ValueError, match="out of range"):
        lut.ELU(get_qconfig(), value=-1.0)


def test_num_tables_can_be_set_later():
    module = lut.Rsqrt(get_qconfig())
    module.num_tables = 108
    assert module.num_tables == 108 and "num_tables=108" in repr(module)


@pytest.mark.parametrize("cls", list(REFERENCES), ids=lambda c: c.op)
def test_function_is_the_torch_op_on_its_domain(cls):
    x = (
        torch.linspace(0.01, 8, 2001)
        if cls in POSITIVE_ONLY
        else torch.linspace(-8, 8, 2001)
    )
    module = cls(get_qconfig())
    assert torch.equal(module.function(x), REFERENCES[cls](x))


@pytest.mark.parametrize("cls", list(REFERENCES), ids=lambda c: c.op)
def test_forward_fake_quantizes_the_function(cls):
    module = cls(get_qconfig(out_dtype=qint16))
    x = (
        torch.linspace(0.01, 8, 501)
        if cls in POSITIVE_ONLY
        else torch.linspace(-8, 8, 501)
    )
    out = module(x)
    fq = module.activation_post_process
    reference = numerics.fake_quant(
        REFERENCES[cls](x).numpy(), fq.scale.numpy(), 0, fq.quant_min, fq.quant_max
    )
    assert np.array_equal(out.detach().numpy(), reference)


@pytest.mark.parametrize("cls", list(REFERENCES), ids=lambda c: c.op)
def test_gradients_stay_finite_at_singular_points(cls):
    module = cls(get_qconfig())
    module.activation_post_process.enable_observer(False)
    module.activation_post_process.scale.fill_(0.05)
    x = torch.tensor(
        [-200.0, -1.0, -1e-30, 0.0, 1e-30, 1e-3, 1.0, 200.0], requires_grad=True
    )
    out = module(x)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_singular_values_saturate_without_an_input_scale():
    qconfig = get_qconfig()
    for cls in (lut.Log, lut.Rsqrt, lut.Reciprocal):
        module = cls(qconfig)
        module.activation_post_process.enable_observer(False)
        module.activation_post_process.scale.fill_(0.05)
        out = module(torch.tensor([0.0]))
        expected = -128 if cls is lut.Log else 127
        assert out.item() == pytest.approx(expected * 0.05)
    sqrt = lut.Sqrt(qconfig)
    assert sqrt.function(torch.tensor([0.0, -1.0])).tolist() == [0.0, 0.0]


def test_singular_values_use_the_smallest_input_code_like_the_tables():
    producer = FakeQuantize(MinMaxObserver, qint16)
    producer(torch.tensor([-3.0, 3.0]))
    s = producer.scale
    x = torch.tensor([-1.0, 0.0, 2.0])
    for cls, reference in ((lut.Log, torch.log), (lut.Rsqrt, torch.rsqrt)):
        module = cls(get_qconfig())
        module.producer_fake_quants = (producer,)
        expected = reference(torch.cat([s, s, x[2:]]))
        assert torch.equal(module.function(x), expected)
    reciprocal = lut.Reciprocal(get_qconfig())
    reciprocal.producer_fake_quants = (producer,)
    assert torch.equal(reciprocal.function(x), torch.cat([1 / x[:1], 1 / s, 1 / x[2:]]))


def test_rsqrt_is_plain_rsqrt_on_positive_inputs():
    # Layer norm adds its epsilon in its own step (add_eps), not inside the table.
    module = lut.Rsqrt(get_qconfig())
    x = torch.linspace(0.01, 4, 101)
    assert torch.equal(module.function(x), torch.rsqrt(x))


@pytest.mark.parametrize("cls", [lut.Sin, lut.Cos], ids=["sin", "cos"])
def test_single_period_reduces_wide_inputs_to_one_period(cls):
    module = cls(get_qconfig(out_dtype=qint16), single_period=True)
    x = torch.linspace(-1000, 1000, 200_001)
    reduced = module.reduce(x)
    period_scale = float(numerics.scale_from_absmax(np.float32(math.pi), 16))
    assert module.period_fake_quant.scale.item() == pytest.approx(period_scale)
    assert reduced.abs().max().item() <= math.pi + period_scale
    reference = REFERENCES[cls](x.double())
    error = (module.function(x).double() - reference).abs().max().item()
    # One period-grid step of angle error at most (|f'| <= 1), plus float32 rounding.
    assert error <= period_scale / 2 + 2e-4
    assert "single_period=True" in repr(module)


def test_single_period_is_off_by_default_and_switchable():
    module = lut.Sin(get_qconfig())
    x = torch.tensor([1000.0, 3.0])
    assert torch.equal(module.function(x), torch.sin(x))
    module.single_period = True
    assert not torch.equal(module.function(x), torch.sin(x))
