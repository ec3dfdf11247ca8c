"""Start-up of the console tools: ``--help`` of each, median of several runs.

Run: ``python benchmarks/startup.py [--repeat 7]``

Every console script of pyproject.toml (``hbir-opt``, ``hb_verifier``, ``hbir``,
``bc_editor``) and ``hbir doctor`` starts in a fresh interpreter, as its
installed script does, on this checkout's code; the time is the process's, from
start to exit: wall seconds and, in brackets, its CPU seconds (user + system,
which a shared machine does not inflate). The bare interpreter (``python -c
pass``) is the floor every tool pays. The issue's target: each ``--help`` in at
most 1 s on an idle machine. tests/tools/test_startup.py checks the part that
does not depend on the machine: no tool imports torch, numba or the dialects
before it has parsed its arguments.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = tomllib.loads(open(os.path.join(ROOT, "pyproject.toml")).read())["project"][
    "scripts"
]
CALL = "import sys; from {module} import {name}; sys.argv[0] = {script!r}; {name}()"
TARGET_S = 1.0


def commands() -> dict[str, list[str]]:
    """Row label -> the command line, for every console script and hbir doctor."""
    rows = {"python -c pass": [sys.executable, "-c", "pass"]}
    for script, target in SCRIPTS.items():
        module, name = target.split(":")
        call = CALL.format(module=module, name=name, script=script)
        rows[f"{script} --help"] = [sys.executable, "-c", call, "--help"]
        if script == "hbir":
            rows["hbir doctor --help"] = [
                sys.executable,
                "-c",
                call,
                "doctor",
                "--help",
            ]
    return rows


def run_once(command: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``command``."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, cwd=ROOT, capture_output=True, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs per command")
    args = ap.parse_args()
    rows = commands()
    print(f"{'command':<22} {'wall s':>8} {'(cpu s)':>8}   median of {args.repeat}")
    for label, command in rows.items():
        runs = [run_once(command) for _ in range(args.repeat)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        verdict = ""
        if label != "python -c pass":
            verdict = "ok" if wall <= TARGET_S else f"over {TARGET_S:g} s"
        print(f"{label:<22} {wall:8.3f} ({cpu:6.3f})   {verdict}")
    print(f"load average: {os.getloadavg()[0]:.2f} (the target is for an idle machine)")


if __name__ == "__main__":
    main()
