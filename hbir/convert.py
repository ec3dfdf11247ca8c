"""``from hbir.convert import convert``: the same function as ``hbir.convert``.

Importing this module leaves ``hbir.convert`` the function (see ``hbir/__init__``);
the code lives in ``hbir/conversion.py``.
"""

from hbir.conversion import March, convert, cpu_advice

__all__ = ["March", "convert", "cpu_advice"]
