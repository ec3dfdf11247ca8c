"""Command-line tools run as their console scripts run them, in the test process.

A tool started as a process of its own first spends seconds importing torch,
numba and xDSL (~6 s for ``hbir doctor``); most tests of a tool's behaviour
call its ``main(argv)`` here instead, and each tool keeps at least one test
that starts it as a real process (its console script or ``python -m``).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from types import SimpleNamespace


def run_main(main: Callable[[Sequence[str]], None], *args, cwd=None) -> SimpleNamespace:
    """``main(args)`` (paths as strings) from ``cwd``: ``returncode``, ``stdout``
    and ``stderr`` as ``subprocess.run`` gives them. An exception ``main`` does
    not turn into an exit status propagates (a traceback: the test fails)."""
    out, err = io.StringIO(), io.StringIO()
    where = contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext()
    with where, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            status = 0
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return SimpleNamespace(
        returncode=status, stdout=out.getvalue(), stderr=err.getvalue()
    )
