"""``horizon_plugin_profiler.bc_editor``: segmented float fallback on qat.bc."""

from hbir.profiler.bc_editor.bc_editor import QatBcEditor

__all__ = ["QatBcEditor"]
