"""Survey: how far real timm models get through the workflow (issue 9).

    python tests/models/survey.py [--out DIR] [--timeout S] [--qat-steps N] [MODEL ...]

Not a pytest test: the table behind the timm suite (``test_timm.py``). For each model
of ``timm_suite.MODELS``, in its own subprocess with a timeout, it runs
``timm_suite.run_stages``:

    float -> prepare -> calibration -> qat_step -> validation -> pre_export
          -> export -> convert -> feed

stopping at the first stage that raises. It prints one table row per model: the
stage that failed (or ``ok``), the exception type, the first lines of its message,
the innermost project frame (``file:function:line``) and the seconds taken. Full
tracebacks go to ``DIR/<model>/error.txt``, the rows to ``DIR/survey.json``.
For a model that passes it also reports the stage contract numbers the suite will
assert: elements of ``qat.bc`` (fed) differing from ``qat.export.pt``, the max
difference of ``quantized.bc`` to ``qat.bc`` in output LSBs, and the CPU-island op
count of ``quantized.bc``.

Needs timm (see ``timm_import.py`` for the install and the torchvision work-around).
Run with ``OMP_NUM_THREADS=1``; ``--timeout`` is per model (default 120 s).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent.parent


# ----------------------------------------------------------------- one model (child)


def _project_frame(error: BaseException) -> str:
    """Innermost frame in the project's own source over the exception chain."""
    chain, seen = [], set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    for exc in chain:  # the outermost error first: that is where it was reported
        frames = traceback.extract_tb(exc.__traceback__)
        for frame in reversed(frames):
            path = os.path.abspath(frame.filename)
            if path.startswith(str(PROJECT)) and "/tests/" not in path:
                rel = os.path.relpath(path, PROJECT)
                return f"{rel}:{frame.name}:{frame.lineno}"
    return ""


def _problems(message: str) -> dict[str, int]:
    """Distinct problems of a prepare/export error listing ("  where\n    what")."""
    counts: dict[str, int] = {}
    lines = message.splitlines()
    for where, what in zip(lines, lines[1:], strict=False):
        if (
            where.startswith("  ")
            and not where.startswith("    ")
            and what.startswith("    ")
        ):
            site = where.strip().split(": ", 1)[0].split("site-packages/")[-1]
            what = re.sub(r" \(module '[^']*'\)", "", what.strip())
            key = f"{what}  @ {site}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def _innermost_frame(error: BaseException) -> str:
    """Innermost frame of the root cause (torch / timm code, for the grouping)."""
    e = error
    while e.__cause__ is not None:
        e = e.__cause__
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f"{f.filename.split('site-packages/')[-1]}:{f.name}:{f.lineno}"


def run_one(
    name: str, out: Path, qat_steps: int, progress: Path, level: int | None
) -> dict:
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(HERE))
    from timm_suite import MODELS, Result, run_stages

    t0 = time.perf_counter()
    result = Result(name)
    row: dict = {"model": name, "input": f"1x3x{MODELS[name][1]}", "ok": False}
    try:
        run_stages(name, out, result, qat_steps, level)
        row.update(ok=True)
    except BaseException as error:  # noqa: BLE001 - the survey records everything
        lines = [ln for ln in str(error).splitlines() if ln.strip()]
        row["error_type"] = type(error).__name__
        row["message"] = lines[:3]
        row["problems"] = _problems(str(error))
        row["project_frame"] = _project_frame(error)
        row["root_frame"] = _innermost_frame(error)
        (out / "error.txt").write_text("".join(traceback.format_exception(error)))
    row.update(
        stage=result.stage,
        cpu_ops=len(result.cpu_ops),
        cpu_advice=result.cpu_ops,
        bc_vs_export_pt_diff_elems=result.bc_vs_export_pt_diff,
        quantized_vs_bc_max_lsb=round(result.quantized_vs_bc_lsb, 2),
        hbm_vs_quantized_diff_elems=result.hbm_vs_quantized_diff,
        float_vs_qat_max_abs=round(result.float_vs_qat_max_abs, 4),
        seconds=round(time.perf_counter() - t0, 1),
    )
    progress.write_text(json.dumps(row))
    return row


# ----------------------------------------------------------------- the table (parent)


def survey(
    names: list[str], out: Path, timeout: float, qat_steps: int, level: int | None
) -> list[dict]:
    rows = []
    for name in names:
        model_out = out / name
        model_out.mkdir(parents=True, exist_ok=True)
        progress = model_out / "row.json"
        progress.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            __file__,
            "--one",
            name,
            "--out",
            str(model_out),
            "--qat-steps",
            str(qat_steps),
        ] + ([] if level is None else ["--level", str(level)])
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, cwd=PROJECT
            )
            (model_out / "child.log").write_text(proc.stdout + proc.stderr)
            crashed = proc.returncode != 0
        except subprocess.TimeoutExpired:
            crashed = None
        row = json.loads(progress.read_text()) if progress.exists() else {"model": name}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        if crashed is None:
            row.update(ok=False, error_type="Timeout", message=[f"> {timeout:.0f} s"])
        elif crashed and not row.get("error_type"):
            row.update(ok=False, error_type="Crash", message=["see child.log"])
        rows.append(row)
        print(_format(row), flush=True)
    (out / "survey.json").write_text(json.dumps(rows, indent=1))
    return rows


def _format(row: dict) -> str:
    if row.get("ok"):
        extra = (
            f"cpu_ops={row.get('cpu_ops')} "
            f"bc!=export.pt={row.get('bc_vs_export_pt_diff_elems')} "
            f"quantized-bc={row.get('quantized_vs_bc_max_lsb')} LSB"
        )
        return f"{row['model']:<30} ok          {row['seconds']:>6.1f}s  {extra}"
    message = " | ".join(row.get("message") or [])
    text = (
        f"{row['model']:<30} {row.get('stage', '?'):<11} {row['seconds']:>6.1f}s  "
        f"{row.get('error_type')}: {message[:300]}  [{row.get('project_frame', '')}]"
    )
    for problem, count in (row.get("problems") or {}).items():
        text += f"\n{'':<32}{count:>3} x {problem}"
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="default: all of MODELS")
    ap.add_argument("--out", default="/tmp/hbir_timm_survey")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--qat-steps", type=int, default=1)
    ap.add_argument("--level", type=int, default=None, help="consistency level")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one:
        run_one(args.one, out, args.qat_steps, out / "row.json", args.level)
        return
    sys.path.insert(0, str(HERE))
    from timm_suite import MODELS

    names = args.models or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {list(MODELS)}")
    rows = survey(names, out, args.timeout, args.qat_steps, args.level)
    passed = sum(r.get("ok", False) for r in rows)
    print(f"\n{passed} of {len(rows)} models went through every stage")


if __name__ == "__main__":
    main()
