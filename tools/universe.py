"""Entry point that lets plain ``xdsl-opt`` see the hbir and qnt dialects and passes.

Registered in pyproject.toml under ``[project.entry-points."xdsl.universe"]``. It
lives with the tools, not the dialects, because it lists the passes too.
"""

from xdsl.universe import Universe

from hbir.dialects import get_all_dialects
from hbir.passes import get_all_passes

_OURS = ("hbir", "qnt")

HBIR_UNIVERSE = Universe(
    all_dialects={k: v for k, v in get_all_dialects().items() if k in _OURS},
    all_passes=get_all_passes(),
)
