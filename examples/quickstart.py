"""Quickstart: write a model in HBIR, run it, check it against torch, save it.

    python examples/quickstart.py [--out out/quickstart]

Steps, each printed as it runs:
1. parse a small float CNN written in HBIR asm (examples/quickstart.mlir);
2. run it with ``Function.feed`` on scikit-learn's real handwritten digits and
   compare every output bit with the same network written in torch;
3. clean it up with a pass pipeline, save it as ``.bc``, load it back, and show the
   op statistics and the first lines of ``get_asm``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from xdsl.passes import PassPipeline  # noqa: E402

import hbir  # noqa: E402
from hbir.dialects import make_context  # noqa: E402
from hbir.passes import get_all_passes  # noqa: E402

HERE = Path(__file__).parent


def torch_twin(model: hbir.Module, x: torch.Tensor) -> torch.Tensor:
    """The same network in torch, with the weights read out of the IR."""
    consts = {}
    for op in model["forward"].op.walk():
        if op.name == "hbir.constant":
            t = op.output.type
            data = np.frombuffer(op.value.data.data, np.float32)
            consts[op.output.name_hint] = torch.from_numpy(
                data.reshape(t.get_shape()).copy()
            )
    h = torch.relu(F.conv2d(x, consts["w1"], consts["b1"], padding=1))
    h = F.max_pool2d(h, 2)
    h = torch.relu(F.conv2d(h, consts["w2"], consts["b2"], padding=1))
    h = F.max_pool2d(h, 2).reshape(x.shape[0], 32)
    return torch.softmax(F.linear(h, consts["w3"], consts["b3"]), dim=-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/quickstart")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    print("[1/3] parsing examples/quickstart.mlir")
    model = hbir.load(HERE / "quickstart.mlir")
    f = model["forward"]
    print(f"      inputs {list(f.inputs)}\n      outputs {list(f.outputs)}")

    print("[2/3] running 64 real digits through Function.feed and through torch")
    digits = load_digits()
    images = (digits.images[:64] / 16.0).astype(np.float32)[:, None]
    same = 0
    for img in images:
        got = f.feed({"_input_0": img[None]})["_output_0"]
        want = torch_twin(model, torch.from_numpy(img[None])).numpy()
        same += int(np.array_equal(got.view(np.int32), want.view(np.int32)))
    print(f"      bit-identical to torch on {same}/{len(images)} images")
    if same != len(images):
        raise SystemExit("mismatch between the interpreter and torch")

    print("[3/3] cleanup pipeline, save, load")
    PassPipeline.parse_spec(get_all_passes(), "cleanup").apply(
        make_context(), model.module.op
    )
    path = out / "quickstart.bc"
    hbir.save(model, path)
    again = hbir.load(path)
    assert again.module.get_asm() == model.module.get_asm()
    print(f"      wrote {path} ({path.stat().st_size:,} bytes); reload is identical")
    hbir.statistics(again)  # prints "ops encountered in func @forward" and the counts
    print("      " + "\n      ".join(again.module.get_asm().splitlines()[:4]))
    print(f"done in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
