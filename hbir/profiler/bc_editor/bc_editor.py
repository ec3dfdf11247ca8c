"""``horizon_plugin_profiler.bc_editor.bc_editor.QatBcEditor``: the reference's
class form of the ``bc_editor`` command (docs/bc-editor.md), over
``hbir.bc_editor.edit_bc``."""

from __future__ import annotations

import os

__all__ = ["QatBcEditor"]


class QatBcEditor:
    """``QatBcEditor(bc_path, config_path, new_bc_path).run()``: remove the
    ``qnt.const_fake_quant`` ops the config names (``{"remove_fake_quant":
    [[1, 100], 102]}``: IDs and ranges of ``get_asm()``'s ``%N``) and save the
    edited model; ``run`` returns the removed IDs."""

    def __init__(
        self,
        bc_path: str | os.PathLike,
        config_path: str | os.PathLike,
        new_bc_path: str | os.PathLike,
    ) -> None:
        self.bc_path, self.config_path = bc_path, config_path
        self.new_bc_path = new_bc_path

    def run(self) -> list[int]:
        from hbir.bc_editor import edit_bc

        return edit_bc(self.bc_path, self.config_path, self.new_bc_path)
