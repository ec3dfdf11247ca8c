"""report.json and report.html; the page checked in a real headless Chromium."""

import json
import shutil
import subprocess

import numpy as np
import profiler_faults as faults
import pytest

from hbir.profiler import diagnose

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FINDING_RED = (214, 39, 40)  # #d62728: the finding's bar


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    qat, qat_bc = faults.few_tables(out)
    d = diagnose(qat, faults.data("transformer"), qat_bc=qat_bc, out_dir=out)
    return d, out


def test_report_json_is_the_diagnosis(report):
    d, out = report
    data = json.loads((out / "report.json").read_text())
    assert data["ok"] is False
    assert data["finding"]["cause"] == "lookup-table approximation"
    assert data["finding"]["layer"] == "norm2.rsqrt#0"
    assert data["finding"]["op_id"] == d.finding.op_id
    assert [p["contract"] for p in data["pairs"]] == ["lut", "exact", "exact"]
    first = data["pairs"][0]
    assert len(first["layers"]) == len(d.pairs[0].layers) > 10
    assert sum(first["histogram"]) > 0


def test_report_html_links_each_op_to_its_torch_line(report):
    d, out = report
    page = (out / "report.html").read_text()
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page  # offline: nothing to fetch
    line = faults.zoo_line("x = x + self.fc2(self.act(self.fc1(self.norm2(x))))")
    anchor = f"src-tests-zoo-py-{line}"
    assert f'href="#{anchor}"' in page and f'id="{anchor}"' in page
    assert "self.norm2(x)" in page  # the source line itself is embedded


def test_the_source_lines_are_found_from_another_folder(report, tmp_path, monkeypatch):
    """Locations are relative to their project's root: a report written from
    elsewhere still finds the file (here through the loaded zoo module)."""
    from hbir.profiler.report import render_html

    d, _ = report
    monkeypatch.chdir(tmp_path)
    page = render_html(d, root=str(tmp_path))
    assert "self.norm2(x)" in page and "(source not found)" not in page


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_the_chart_renders_in_a_headless_browser(report, tmp_path):
    from PIL import Image

    d, out = report
    url = (out / "report.html").as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1000,1400"]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert 'data-rendered="yes"' in dom
    bars = dom.count('class="bar"')
    assert bars == sum(len(p.layers) for p in d.pairs)
    assert dom.count('class="layer-name"') >= len(d.pairs)  # the bars are labelled
    assert ">norm2.rsqrt#0</text>" in dom  # the finding's layer among them
    shot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, *flags, f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    red = np.all(pixels == FINDING_RED, axis=-1)
    assert red.sum() > 100  # the finding's bar is drawn
    rows = np.nonzero(red.any(axis=1))[0]
    assert rows.max() - rows.min() > 20  # a bar, not a stray pixel
