"""bc_editor: segmented float fallback for ``qat.bc``, driven by a JSON config.

The config names the ``qnt.const_fake_quant`` ops to remove by the ``%N`` IDs
``qat_bc.module.get_asm()`` prints: single IDs and inclusive ``[start, end]``
ranges (a range takes every fake quant inside it)::

    {"remove_fake_quant": [[1, 100], 102]}

An optional ``"function": "name"`` picks the function whose IDs are meant when a
model has several. Converting the edited model keeps the ops that lost their fake
quantization in float (CPU islands). The work is done by the
``remove-fake-quant`` pass; this module reads the config and the files.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Sequence
from typing import Any

from hbir import files
from hbir.diagnostics import HbirError, HbirFileError
from hbir.module import Module, load
from hbir.passes.remove_fake_quant import IdRange, remove_fake_quants

KEYS = ("remove_fake_quant", "function")
# The largest config read (1 MiB holds about 100,000 IDs; ranges hold any number).
MAX_CONFIG_BYTES = 2**20
EXAMPLE = '{"remove_fake_quant": [[1, 100], 102]}'


class ConfigError(HbirError):
    """A bc_editor config that cannot be read or does not have the right shape."""


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a real number"}
    names |= {str: "a string", list: "a list", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _id_problem(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return "IDs are >= 0"
    return f"an ID is an integer, got {_kind(value)}"


def _entry_problem(entry: Any) -> str | None:
    """Why ``entry`` is neither an ID nor a ``[start, end]`` range, or None."""
    if _is_id(entry):
        return None
    if not isinstance(entry, list | tuple):
        return _id_problem(entry)
    if len(entry) != 2:
        n = len(entry)
        return f"a range is [start, end], got {n} value{'' if n == 1 else 's'}"
    for value in entry:
        if not _is_id(value):
            return _id_problem(value)
    return None


def id_ranges(entries: Any, where: str = "remove_fake_quant") -> list[IdRange]:
    """JSON-shaped IDs (``[[1, 100], 102]``) as ranges; every bad entry at once."""
    if not isinstance(entries, list | tuple):
        raise ConfigError(
            f"{where}: expected a list of IDs and [start, end] ranges like "
            f"[[1, 100], 102], got {_kind(entries)}"
        )
    if not entries:
        raise ConfigError(f"{where}: the list is empty: nothing to remove")
    ranges: list[IdRange] = []
    bad: list[str] = []
    for i, entry in enumerate(entries):
        text = _text(entry)
        problem = _entry_problem(entry)
        if problem:
            bad.append(f"  [{i}] {text}: {problem}")
        elif isinstance(entry, list | tuple):
            ranges.append(IdRange(entry[0], entry[1], text, True))
        else:
            ranges.append(IdRange(entry, entry, text, False))
    if bad:
        raise ConfigError(f"{where}: wrong types:\n" + "\n".join(bad))
    return ranges


def _text(value: Any) -> str:
    """``value`` as the config spells it."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ConfigError(f"key '{key}' appears twice")
        seen[key] = value
    return seen


def read_config(path: str | os.PathLike) -> tuple[list[IdRange], str]:
    """The ranges to remove and the function name ("" = the only one)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_CONFIG_BYTES} bytes: a config lists IDs "
            "and ranges, use [start, end] ranges to keep it short"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text at byte {e.start}") from None
    try:
        config = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{path}:{e.lineno}:{e.colno}: malformed JSON: {e.msg}"
        ) from None
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deep") from None
    except ValueError:  # Python refuses integers of more than 4300 digits
        raise ConfigError(
            f"{path}: a number has more than 4300 digits: IDs are the %N numbers "
            "get_asm prints"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(
            f"{path}: expected a JSON object like {EXAMPLE}, got {_kind(config)}"
        )
    unknown = [k for k in config if k not in KEYS]
    if unknown:
        raise ConfigError(f"{path}: " + "; ".join(_unknown_key(k) for k in unknown))
    if "remove_fake_quant" not in config:
        raise ConfigError(f"{path}: missing key 'remove_fake_quant', as in {EXAMPLE}")
    function = config.get("function", "")
    if not isinstance(function, str):
        raise ConfigError(
            f"{path}: function: expected a function name, got {_kind(function)}"
        )
    try:
        return id_ranges(config["remove_fake_quant"]), function
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def _unknown_key(key: str) -> str:
    close = difflib.get_close_matches(key, KEYS, n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(KEYS)}"
    return f"unknown key '{key}' ({hint})"


def remove_fake_quant(
    module: Module, ids: Sequence[int | Sequence[int]], function: str = ""
) -> Module:
    """A copy of ``module`` without the fake quants ``ids`` (config form) names."""
    edited = module.clone()
    remove_fake_quants(
        edited.module.op, id_ranges(ids), function, source="remove_fake_quant"
    )
    return edited


def edit_bc(
    bc_path: str | os.PathLike,
    config_path: str | os.PathLike,
    new_bc_path: str | os.PathLike,
) -> list[int]:
    """Apply the config to ``bc_path`` and save to ``new_bc_path``; removed IDs."""
    new_bc_path = os.fspath(new_bc_path)
    if not new_bc_path.endswith(".bc"):
        raise HbirFileError(
            f"{new_bc_path}: the edited model is written as .bc: end the path in .bc"
        )
    ranges, function = read_config(config_path)
    module = load(bc_path)
    removed = remove_fake_quants(
        module.module.op,
        ranges,
        function,
        source=f"{os.fspath(config_path)}: remove_fake_quant",
    )
    try:
        files.save_module(module.module.op, new_bc_path)
    except OSError as e:
        raise HbirError(f"{new_bc_path}: cannot write: {e.strerror}") from None
    return removed


class QatBcEditor:
    """The reference toolchain's spelling: ``QatBcEditor(...).run()``."""

    def __init__(self, bc_path: str, config_path: str, new_bc_path: str):
        self.bc_path = bc_path
        self.config_path = config_path
        self.new_bc_path = new_bc_path

    def run(self) -> list[int]:
        return edit_bc(self.bc_path, self.config_path, self.new_bc_path)
