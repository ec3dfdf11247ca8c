"""Quantized data types: symmetric signed integers with a code range.

``qint8`` and ``qint16`` are what users pick in qconfigs; ``qint32`` is the grid of
conv/linear biases at consistency level 2. A dtype is a ``str`` (it prints and compares
as its name, like the reference toolchain's ``QuantDType``) that also carries ``bits``,
``min`` and ``max``; the ranges come from ``hbir.runtime.numerics.qrange``.
"""

from __future__ import annotations

from hbir.runtime import numerics


class QuantDType(str):
    """A signed integer type for fake quantization; ``min``/``max`` bound the codes."""

    bits: int
    min: int
    max: int

    def __new__(cls, name: str, bits: int) -> QuantDType:
        obj = super().__new__(cls, name)
        obj.bits = bits
        obj.min, obj.max = numerics.qrange(bits)
        return obj

    def __repr__(self) -> str:
        return str(self)

    def __reduce__(self):
        return QuantDType, (str(self), self.bits)


qint8 = QuantDType("qint8", 8)
qint16 = QuantDType("qint16", 16)
qint32 = QuantDType("qint32", 32)


class FloatDType(str):
    """A float grid (``float16``: IEEE binary16), the dtype of a ``FakeCast``.

    It prints and compares as its name, like a :class:`QuantDType`; ``bits`` is its
    width. A value on it is an IEEE binary16 (docs/quantization.md, fp16)."""

    bits: int

    def __new__(cls, name: str, bits: int) -> FloatDType:
        obj = super().__new__(cls, name)
        obj.bits = bits
        return obj

    def __repr__(self) -> str:
        return str(self)

    def __reduce__(self):
        return FloatDType, (str(self), self.bits)


float16 = FloatDType("float16", 16)

_BY_NAME = {str(d): d for d in (qint8, qint16, qint32, float16)}


def qinfo(dtype: object) -> QuantDType | FloatDType:
    """The dtype object for a name (``"qint8"``), a dtype or ``torch.float16``;
    raises on unknown names."""
    if str(dtype) == "torch.float16":
        return float16
    try:
        return _BY_NAME[str(dtype)]
    except KeyError:
        known = ", ".join(_BY_NAME)
        raise ValueError(f"unknown quantized dtype {dtype!r}; known: {known}") from None
