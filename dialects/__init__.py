"""The hbir, qnt and npu dialects, and the lazy dialect table every tool loads from."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


def _builtin() -> Dialect:
    from xdsl.dialects.builtin import Builtin

    return Builtin


def _func() -> Dialect:
    from xdsl.dialects.func import Func

    return Func


def _hbir() -> Dialect:
    from hbir.dialects.hbir import HBIR

    return HBIR


def _qnt() -> Dialect:
    from hbir.dialects.qnt import QNT

    return QNT


def _npu() -> Dialect:
    from hbir.dialects.npu import NPU

    return NPU


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Dialect name -> factory; factories import on first use."""
    return {"builtin": _builtin, "func": _func, "hbir": _hbir, "qnt": _qnt, "npu": _npu}


def make_context():
    """A Context that knows builtin, func, hbir, qnt and npu (loaded lazily)."""
    from xdsl.context import Context

    ctx = Context()
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx
