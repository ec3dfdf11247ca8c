"""Run the Python blocks of the documentation: ``python docs_pages.py [PAGE...]``.

``tests/test_docs.py`` runs this once; each page runs in its own process (pages
set global state: a consistency level, a registered user pass) and in an empty
folder. The blocks of a page run in order in one namespace, since a page's later
blocks build on its earlier ones. The names a page takes as given (the user's
float model, ``example_inputs``, a calibrated ``qat``, ``out/digits/qat.bc``, ...)
come from ``FIXTURES``: small stand-ins made here in about a second, never the
slow example. A block whose first line is ``# <path>.py`` quotes that file of the
repository: it must appear there verbatim instead of running.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def page_path(page: str) -> Path:
    return ROOT / page if page == "README.md" else ROOT / "docs" / page


def python_blocks(page: str) -> list[tuple[int, str]]:
    """(first line number, code) of every ```python block of ``page``."""
    text = page_path(page).read_text()
    return [
        (text[: m.start()].count("\n") + 2, textwrap.dedent(m[1]))
        for m in _BLOCK.finditer(text)
    ]


def quoted_file(code: str) -> Path | None:
    """The repository file a block quotes (its first line ``# <path>.py``)."""
    m = re.match(r"# (\S+\.py)\n", code)
    if m is None:
        return None
    found = [p for p in ROOT.glob(f"**/{m[1]}") if ".git" not in p.parts]
    assert len(found) == 1, f"{m[1]}: {len(found)} files of that name"
    return found[0]


# ---- fixtures: small stand-ins for what the pages take as given


def _tiny_model():
    """conv-bn-relu, sigmoid (a table op), mean, linear: 2x3x8x8 -> 2x5."""
    import torch
    from torch import nn

    from hbir.quantization import DeQuantStub, QuantStub

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4, 5)

        def forward(self, x):
            x = torch.sigmoid(torch.relu(self.bn(self.conv(self.quant(x)))))
            return self.dequant(self.fc(x.mean((2, 3))))

    torch.manual_seed(0)
    return Tiny().eval(), (torch.randn(2, 3, 8, 8),)


def _calibrated():
    import torch

    from hbir.quantization import FakeQuantState, prepare, set_fake_quantize

    model, example_inputs = _tiny_model()
    qat = prepare(model, example_inputs, out_dir="prepare_out")
    qat.eval()
    set_fake_quantize(qat, FakeQuantState.CALIBRATION)
    with torch.no_grad():
        for _ in range(2):
            qat(torch.randn(2, 3, 8, 8))
    set_fake_quantize(qat, FakeQuantState.VALIDATION)
    return qat, example_inputs


def _qat_bc():
    from hbir.quantization import export

    qat, example_inputs = _calibrated()
    return export(qat, example_inputs)


def _files(*paths: str) -> dict:
    """Writes the tiny model's qat.bc to each path (and the bc_editor output)."""
    import hbir
    from hbir.bc_editor import remove_fake_quant
    from hbir.dialects.op_ids import op_ids

    qat_bc = _qat_bc()
    for path in paths:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        hbir.save(qat_bc, path)
    first = next(
        n
        for n, op in op_ids(qat_bc["forward"].op).items()
        if op.name == "qnt.const_fake_quant"
    )
    hbir.save(remove_fake_quant(qat_bc, [first]), "qat_modified.bc")
    return {}


def _readme() -> dict:
    float_model, example_inputs = _tiny_model()
    _files("out/digits/qat.bc")
    return {"float_model": float_model, "example_inputs": example_inputs}


def _quantization() -> dict:
    import torch
    from torch import nn

    from hbir.quantization import DeQuantStub, QuantStub

    class Backbone(nn.Module):
        """The names the qconfig example overrides: backbone.conv1, head, a matmul."""

        def __init__(self):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.backbone = nn.Sequential(
                OrderedDict(conv1=nn.Conv2d(3, 4, 3, padding=1))
            )
            self.head = nn.Linear(4, 4)

        def forward(self, x):
            y = self.head(self.backbone(self.quant(x)).mean((2, 3)))
            return self.dequant(torch.matmul(y, y.t()))

    torch.manual_seed(0)
    probe = torch.randn(4, 3, 32, 32)

    def evaluate(model) -> float:
        with torch.no_grad():
            return float(model(probe).sum())

    return {
        "calibration_batches": [torch.randn(4, 3, 32, 32) for _ in range(2)],
        "evaluate": evaluate,
        "model": Backbone().eval(),
        "example_inputs": (torch.randn(2, 3, 8, 8),),
    }


def _export() -> dict:
    qat, example_inputs = _calibrated()
    return {"qat": qat, "example_inputs": example_inputs}


def _convert() -> dict:
    import numpy as np

    qat_bc = _qat_bc()
    shape = qat_bc["forward"].inputs[0].shape
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return {"qat_bc": qat_bc, "x": x}


def _writing_passes() -> dict:
    import hbir

    example = ROOT / "docs" / "examples" / "my_hbir_passes"
    sys.path.insert(0, str(example / "src"))
    import my_hbir_passes.passes  # noqa: F401  registers merge-double-relu

    return {"model": hbir.load(example / "model.mlir")}


def _adding_ops() -> dict:
    from hbir.runtime import op_table

    return dict(vars(op_table))


FIXTURES = {
    "README.md": _readme,
    "adding-ops.md": _adding_ops,
    "bc-editor.md": lambda: _files("qat.bc"),
    "convert.md": _convert,
    "export.md": _export,
    "image-input.md": lambda: {"qat_bc": _qat_bc(), **_files("qat.bc")},
    "quantization.md": _quantization,
    "writing-passes.md": _writing_passes,
}


def run(page: str) -> int:
    """Run (or check) every block of ``page``; the number of blocks."""
    blocks = python_blocks(page)
    namespace = {"__name__": "__docs__"} | FIXTURES.get(page, dict)()
    for line, code in blocks:
        where = f"{page_path(page).relative_to(ROOT)}:{line}"
        quoted = quoted_file(code)
        if quoted is not None:
            body = code.split("\n", 1)[1].strip()
            assert body in quoted.read_text(), f"{where}: not a quote of {quoted}"
            continue
        exec(compile(code, where, "exec"), namespace)
    return len(blocks)


def main(pages: list[str]) -> int:
    """Run each page in a child process forked after the heavy imports (torch, the
    torch side of hbir): pages set global state, and importing torch once keeps the
    whole run to seconds. Prints ``PAGE: ok (N blocks)`` or the error per page."""
    import tempfile
    import traceback

    from hbir.quantization import export  # noqa: F401  loads torch and hbir's side
    from hbir.quantization.tracing import HbirTracer

    # Tracing loads more of torch on first use (its traceback symbolizer): once here.
    HbirTracer().trace(_tiny_model()[0])

    failed = 0
    for page in pages:
        folder = tempfile.mkdtemp(prefix="docs-")
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the child: run the page, report, and leave without cleanup
            status = 0
            try:
                os.chdir(folder)
                print(f"{page}: ok ({run(page)} blocks)")
            except BaseException:
                traceback.print_exc()
                print(f"{page}: FAILED")
                status = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    return failed


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(1 if main(sys.argv[1:] or PAGES) else 0)
