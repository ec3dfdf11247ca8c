"""set_march / get_march: the default march of prepare, convert and compile."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import hbir
from hbir.default_march import default_march, set_default_march
from hbir.plugin.march import (
    March,
    get_march,
    is_nash_series,
    set_march,
    with_march,
)
from hbir.quantization import (
    DeQuantStub,
    FakeQuantState,
    QuantStub,
    export,
    prepare,
    set_fake_quantize,
)


@pytest.fixture(autouse=True)
def _no_default_march():
    set_default_march(None)
    yield
    set_default_march(None)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x):
        return self.dequant(self.conv(self.quant(x)))


def _qat_bc(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(1, 2, 6, 6)
    qat = prepare(Tiny().eval(), (x,), out_dir=tmp_path)
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        qat(x)
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return export(qat, (x,))


def test_set_march_is_the_default_of_convert_and_compile(tmp_path):
    assert get_march() is None
    set_march("nash-m")
    assert get_march() == "nash-m" == default_march()
    qat_bc = _qat_bc(tmp_path)
    assert qat_bc.prepared_march == "nash-m"
    assert 'hbir.prepared_march = "nash-m"' in qat_bc.module.get_asm()
    quantized = hbir.convert(qat_bc)
    assert quantized.march == "nash-m"
    hbm = hbir.compile(quantized)
    assert hbm.march == "nash-m"


def test_an_explicit_march_wins_over_the_default(tmp_path):
    qat_bc = _qat_bc(tmp_path)  # prepared before any set_march: no record
    assert qat_bc.prepared_march is None
    set_march(March.NASH_M)
    assert hbir.convert(qat_bc, "nash-e").march == "nash-e"


def test_a_model_made_for_another_march_is_refused_naming_both(tmp_path):
    set_march("nash-e")
    qat_bc = _qat_bc(tmp_path)
    with pytest.raises(hbir.HbirError, match="prepared for nash-e.*not nash-m"):
        hbir.convert(qat_bc, "nash-m")
    quantized = hbir.convert(qat_bc)
    set_march("nash-m")
    with pytest.raises(hbir.HbirError, match="converted for nash-e, not nash-m"):
        hbir.compile(quantized)
    assert hbir.compile(quantized, march="nash-e").march == "nash-e"


def test_no_march_anywhere_is_a_clear_error(tmp_path):
    qat_bc = _qat_bc(tmp_path)
    with pytest.raises(hbir.HbirError, match="no march: pass one"):
        hbir.convert(qat_bc)


def test_unknown_marches_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown march 'nash-x'.*nash-e, nash-m"):
        set_march("nash-x")
    assert get_march() is None


def test_is_nash_series():
    assert is_nash_series("nash-e") and not is_nash_series("bayes")
    assert not is_nash_series()
    set_march("nash-m")
    assert is_nash_series()


def test_with_march_fills_in_the_current_march():
    @with_march
    def target(x, march=None):
        return x, march

    assert target(1) == (1, None)
    set_march("nash-p")
    assert target(2) == (2, "nash-p")
    assert target(3, march="nash-e") == (3, "nash-e")  # an explicit march wins
    assert target.__name__ == "target"


def test_plugin_paths_are_hbirs_own_objects():
    import hbir.plugin.quantization as hq
    import hbir.quantization as q
    from hbir.plugin.quantization.hbdk4 import export as plugin_export
    from hbir.plugin.quantization.observer_v2 import HistogramObserver
    from hbir.plugin.quantization.qconfig_setter import (
        ModuleNameTemplate,
        QconfigSetter,
    )
    from hbir.quantization.templates import ModuleNameTemplate as ours

    assert hq.prepare is q.prepare and plugin_export is q.export
    assert HistogramObserver is q.HistogramObserver
    assert QconfigSetter is q.QconfigSetter and ModuleNameTemplate is ours
    assert hq.FakeQuantState is q.FakeQuantState


def test_importing_hbir_plugin_loads_no_torch():
    root = str(Path(__file__).parents[2])
    code = (
        "import sys\n"
        "import hbir.plugin\n"
        "assert 'torch' not in sys.modules and 'xdsl' not in sys.modules\n"
        "from hbir.plugin import set_march\n"
        "assert 'torch' not in sys.modules\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
    )
    assert res.returncode == 0, res.stderr
