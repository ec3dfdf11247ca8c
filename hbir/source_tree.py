"""In a source checkout, ``hbir``'s subpackages come from that same checkout.

The repository keeps ``hbir.dialects``, ``hbir.passes``, ``hbir.runtime`` and
``hbir.tools`` in top-level folders beside ``hbir/`` (``pyproject.toml``'s
``package-dir``). An editable install maps them with a finder of its own, for the
checkout it was made from: run from a second checkout, ``hbir`` itself would come
from the current folder and its subpackages from the first checkout. When
``hbir`` is imported from a checkout, :func:`use` puts a finder first that maps
those subpackages to the folders beside it. An installed wheel (the subpackages
inside ``hbir/``) is left alone.
"""

from __future__ import annotations

import os
import sys
import tomllib
from importlib.machinery import PathFinder


class CheckoutFinder:
    """Finds ``hbir.<name>`` in the checkout's ``<folder>`` (``package-dir``)."""

    def __init__(self, folders: dict[str, str]):
        self.folders = folders  # "hbir.runtime" -> "/checkout" (where runtime/ is)

    def find_spec(self, fullname, path=None, target=None):
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return PathFinder.find_spec(fullname, [folder])


def subpackage_folders(package_dir: str) -> dict[str, str]:
    """``hbir.<name>`` -> the folder holding its directory, for the checkout whose
    ``hbir/`` is ``package_dir``; empty outside a checkout."""
    root = os.path.dirname(package_dir)
    try:
        with open(os.path.join(root, "pyproject.toml"), "rb") as f:
            config = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    mapping = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    folders = {}
    for name, folder in mapping.items():
        parent, _, tail = name.rpartition(".")
        if parent != "hbir" or os.path.isdir(os.path.join(package_dir, tail)):
            continue  # not a subpackage kept outside hbir/
        where = os.path.normpath(os.path.join(root, folder))
        if os.path.basename(where) == tail and os.path.isdir(where):
            folders[name] = os.path.dirname(where)
    return folders


def use(package_dir: str) -> None:
    folders = subpackage_folders(package_dir)
    if folders and not any(isinstance(f, CheckoutFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, CheckoutFinder(folders))
