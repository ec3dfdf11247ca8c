"""bc_editor: remove chosen fake quantizations from a qat.bc (segmented float fallback).

    bc_editor --bc_path qat.bc --config_path config.json --new_bc_path qat_modified.bc

with ``config.json`` = ``{"remove_fake_quant": [[1, 100], 102]}``: IDs and inclusive
``[start, end]`` ranges of the ``%N`` numbers ``qat_bc.module.get_asm()`` prints.
Any bad input is one message on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def main(args: Sequence[str] | None = None) -> None:
    parser = _Parser(
        prog="bc_editor",
        description="Remove qnt.const_fake_quant ops from a qat.bc by their %N IDs, "
        "so that convert keeps the region between them in float.",
    )
    parser.add_argument("--bc_path", "--bc-path", required=True, help="input qat.bc")
    parser.add_argument(
        "--config_path",
        "--config-path",
        required=True,
        help='JSON config, e.g. {"remove_fake_quant": [[1, 100], 102]}',
    )
    parser.add_argument(
        "--new_bc_path", "--new-bc-path", required=True, help="output .bc path"
    )
    ns = parser.parse_args(args)

    from hbir import HbirError
    from hbir.bc_editor import edit_bc

    try:
        removed = edit_bc(ns.bc_path, ns.config_path, ns.new_bc_path)
    except HbirError as e:
        print(f"bc_editor: error: {e}", file=sys.stderr)
        sys.exit(1)
    ids = ", ".join(f"%{n}" for n in removed)
    print(f"removed {len(removed)} qnt.const_fake_quant ({ids})")
    print(f"wrote {ns.new_bc_path}")


if __name__ == "__main__":
    main()
