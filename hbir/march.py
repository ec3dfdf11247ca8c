"""``hbdk4.march`` -> ``hbir.march``: the march names and their cores.

Thin names over the march table (``passes/march.py``), the one list of marches.
"""

from hbir.passes.march import March, get_all_bpu_march_names, get_march_num_cores

__all__ = ["March", "get_all_bpu_march_names", "get_march_num_cores"]
