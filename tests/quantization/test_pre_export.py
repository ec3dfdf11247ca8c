"""pre_export: LUT modules compute their tables; sub-modules, num_tables, fallback."""

import pytest
import torch
import zoo
from lut_reference import exact_apply
from zoo_stages import calibrated

import hbir
from hbir.quantization import FakeQuantState, set_fake_quantize
from hbir.quantization import lut_modules as lut
from hbir.quantization.pre_export import PreExportError, pre_export
from hbir.runtime import numerics


def _luts(model):
    return {n: m for n, m in model.named_modules() if isinstance(m, lut.LutModule)}


@pytest.fixture(scope="module")
def posenc(tmp_path_factory):
    return calibrated("posenc", tmp_path_factory.mktemp("posenc"))


def _record(model, inputs):
    """Each LUT module's (input, output) on ``inputs``."""
    seen = {}
    hooks = [
        m.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, (i[0], o)))
        for n, m in _luts(model).items()
    ]
    with torch.no_grad():
        model(*inputs)
    for h in hooks:
        h.remove()
    return seen


def test_every_lut_module_computes_its_table(posenc):
    qat, example = posenc
    exported = pre_export(qat)
    seen = _record(exported, example)
    assert len(seen) >= 10
    for name, mod in _luts(exported).items():
        x, y = seen[name]
        config = mod.table_config()
        assert config is not None, name
        # Independent path: input codes by torch (half to even, saturated); the
        # table's output by torch float64 (direct tables: the correctly rounded
        # function) or by exact integer evaluation of its stored segments
        # (tests/lut_reference.py), not by apply_lut; then the output scale.
        hi = 2 ** (config.in_bits - 1) - 1
        q = torch.clamp(torch.round(x.double() / config.in_scale), -hi - 1, hi)
        table = numerics.build_lut(
            mod.table_name(),
            config.in_scale,
            config.in_bits,
            config.out_scale,
            config.out_bits,
            config.num_tables,
        )
        codes = exact_apply(table, q.to(torch.int64).flatten().tolist())
        want = torch.tensor(codes, dtype=torch.float32).reshape(y.shape)
        want = want * torch.tensor(config.out_scale, dtype=torch.float32)
        assert torch.equal(y, want), name


def test_only_lut_modules_change(posenc):
    qat, example = posenc
    exported = pre_export(qat)
    for m in exported.modules():
        if isinstance(m, lut.LutModule):
            m.quantized_forward = False
    with torch.no_grad():
        a, b = qat(*example), exported(*example)
    assert torch.equal(a, b)


def test_pre_export_leaves_the_original_alone(posenc):
    qat, example = posenc
    pre_export(qat)
    assert not any(m.pre_exported for m in _luts(qat).values())


def test_num_tables_set_after_pre_export_takes_effect(posenc):
    qat, example = posenc
    exported = pre_export(qat)
    name, mod = next((n, m) for n, m in _luts(exported).items() if m.op == "sin")
    before = _record(exported, example)[name][1]
    mod.num_tables = 6
    coarse = _record(exported, example)[name][1]
    assert not torch.equal(before, coarse)
    mod.num_tables = numerics.DEFAULT_NUM_TABLES["sin"]
    assert torch.equal(_record(exported, example)[name][1], before)
    with pytest.raises(ValueError, match="positive multiple of 6"):
        mod.num_tables = 7


def test_quantized_forward_false_falls_back_to_float(posenc):
    qat, example = posenc
    exported = pre_export(qat)
    name, mod = next((n, m) for n, m in _luts(exported).items() if m.op == "exp")
    table_out = _record(exported, example)[name][1]
    mod.quantized_forward = False
    float_out = _record(exported, example)[name][1]
    float_ref = _record(qat, example)[name][1]
    assert torch.equal(float_out, float_ref)
    assert "quantized_forward=False" in repr(mod)
    assert table_out.shape == float_out.shape


def test_pre_export_on_a_sub_module(tmp_path):
    qat, example = calibrated("mobilenet", tmp_path)
    whole = pre_export(qat)
    owner = next(n for n, m in qat.named_children() if _luts(m))
    setattr(qat, owner, pre_export(getattr(qat, owner)))
    assert all(m.pre_exported for m in _luts(getattr(qat, owner)).values())
    with torch.no_grad():
        assert torch.equal(qat(*example), whole(*example))


def test_refuses_train_mode_and_observers(tmp_path):
    qat, _ = calibrated("mobilenet", tmp_path)
    qat.train()
    with pytest.raises(PreExportError, match="needs eval mode"):
        pre_export(qat)
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with pytest.raises(PreExportError, match="observer enabled"):
        pre_export(qat)
    assert issubclass(PreExportError, hbir.HbirError)  # one family of user errors


def test_zoo_models_expose_lut_modules():
    assert {"posenc", "mobilenet", "transformer"} <= set(zoo.NAMES)
