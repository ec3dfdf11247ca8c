"""qat.pt vs qat.export.pt on the model zoo: what the lookup tables change.

Run: ``python benchmarks/pre_export_error.py``

For each zoo model (prepared, calibrated, two QAT steps, VALIDATION): the cosine
similarity and max |difference| of the model outputs between ``qat.pt`` and
``pre_export(qat.pt)`` on 8 input batches, and for each LUT module the max
difference of its output in output LSBs (table vs float function, same input).
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import zoo_loader  # noqa: E402, F401  (makes the test zoo importable)

# isort: split
import zoo  # noqa: E402
from zoo_stages import calibrated  # noqa: E402

from hbir.quantization import lut_modules as lut  # noqa: E402
from hbir.quantization.pre_export import pre_export  # noqa: E402


def _flat(out):
    out = out if isinstance(out, tuple | list) else (out,)
    return torch.cat([o.detach().flatten().double() for o in out])


def _lut_lsb(qat, exported, inputs) -> dict[str, float]:
    """Per LUT module: max |table(x) - fake_quant(f(x))| / s_out on the same x."""
    worst: dict[str, float] = {}
    mods = {n: m for n, m in exported.named_modules() if isinstance(m, lut.LutModule)}
    seen = {}
    hooks = [
        m.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, (i[0], o)))
        for n, m in mods.items()
    ]
    with torch.no_grad():
        exported(*inputs)
        for name, mod in mods.items():
            x, table_out = seen[name]
            mod.quantized_forward = False
            float_out = mod(x)
            mod.quantized_forward = True
            scale = float(mod.activation_post_process.scale[0])
            diff = (table_out - float_out).abs().max().item() / scale
            key = f"{mod.op}({mod.activation_post_process.dtype})"
            worst[key] = max(worst.get(key, 0.0), diff)
    for h in hooks:
        h.remove()
    return worst


def main() -> None:
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp()
    print(f"{'model':<12} {'cosine':>12} {'max |diff|':>11}  LUT max diff (LSB)")
    for name in zoo.NAMES:
        qat, example = calibrated(name, tmp, qat_steps=2)
        exported = pre_export(qat)
        a, b, luts = [], [], {}
        for inputs in zoo.batches(name, 8, batch=len(example[0]), seed=11):
            with torch.no_grad():
                a.append(_flat(qat(*inputs)))
                b.append(_flat(exported(*inputs)))
            for k, v in _lut_lsb(qat, exported, inputs).items():
                luts[k] = max(luts.get(k, 0.0), v)
        x, y = torch.cat(a), torch.cat(b)
        cosine = torch.nn.functional.cosine_similarity(x, y, dim=0).item()
        diff = (x - y).abs().max().item()
        detail = ", ".join(f"{k} {v:.0f}" for k, v in sorted(luts.items())) or "-"
        print(f"{name:<12} {cosine:>12.8f} {diff:>11.3g}  {detail}")


if __name__ == "__main__":
    main()
