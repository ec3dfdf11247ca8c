"""What to quantize with: qconfigs, their factories, and per-module overrides.

A :class:`QConfig` holds one :class:`FakeQuantSpec` for the output (``activation``),
one for weights (``weight``, always per channel) and optionally one for the inputs
(``input``, from ``in_dtype``). Specs are plain data, so ``model_check_result.txt`` can
print exactly which dtype and observer every layer got and which rule chose it.

Overrides: ``QconfigSetter(default, module_name={...}, module_type={...})``. A name
rule matches the module itself and everything under it (``"backbone"`` covers
``"backbone.conv1"``); the longest matching name wins, and names beat types. A type
rule matches the float module class (``nn.Conv2d``), the QAT class, the torch function
(``torch.add``, ``operator.add``) or the op name (``"add"``, ``"softmax"``). A rule's
value is a ``QConfig``, a dtype (the default with that output dtype) or a dict with
``"out"`` / ``"weight"`` / ``"in"`` dtypes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from hbir.quantization.dtypes import FloatDType, QuantDType, float16, qint8
from hbir.quantization.fake_cast import FakeCast
from hbir.quantization.fake_quantize import FakeQuantize
from hbir.quantization.observers import MinMaxObserver, PerChannelMinMaxObserver


@dataclasses.dataclass(frozen=True)
class FakeQuantSpec:
    """A recipe for a ``FakeQuantize``: observer class, dtype, POT flag, kwargs."""

    observer: type[nn.Module] = MinMaxObserver
    dtype: QuantDType = qint8
    pot: bool = False
    observer_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __call__(self, channel_len: int = 1, **observer_kwargs) -> FakeQuantize:
        if isinstance(self.dtype, FloatDType):
            return FakeCast(self.dtype)
        kwargs = {**self.observer_kwargs, **observer_kwargs}
        return FakeQuantize(
            self.observer, self.dtype, channel_len, pot=self.pot, **kwargs
        )

    def replace(self, **changes) -> FakeQuantSpec:
        return dataclasses.replace(self, **changes)

    @property
    def is_float16(self) -> bool:
        """An fp16 output: a ``FakeCast``, no observer."""
        return isinstance(self.dtype, FloatDType)

    def __str__(self) -> str:
        if self.is_float16:
            return f"{self.dtype} FakeCast"
        return f"{self.dtype} {self.observer.__name__}" + (" pot" if self.pot else "")


@dataclasses.dataclass(frozen=True)
class QConfig:
    """Fake-quant recipes for a module's output, weight and (optionally) inputs."""

    activation: FakeQuantSpec
    weight: FakeQuantSpec | None = None
    # one spec for every input, or one per input (a matmul's two operands)
    input: FakeQuantSpec | tuple[FakeQuantSpec, ...] | None = None
    # input fake quants only where a producer's dtype differs from the input's
    # (a template's input dtype, met by the producer when it already matches)
    input_if_retyped: bool = False

    def replace(self, **changes) -> QConfig:
        return dataclasses.replace(self, **changes)

    def input_specs(self, count: int) -> tuple[FakeQuantSpec, ...] | None:
        """The input spec of each of ``count`` inputs (None: no input fake quants)."""
        if self.input is None:
            return None
        if isinstance(self.input, FakeQuantSpec):
            return (self.input,) * count
        return tuple(self.input[min(i, len(self.input) - 1)] for i in range(count))

    def __str__(self) -> str:
        return f"QConfig(out={self.activation}, weight={self.weight}, in={self.input})"


def get_qconfig(
    observer: type[nn.Module] = MinMaxObserver,
    in_dtype: QuantDType | None = None,
    weight_dtype: QuantDType | None = qint8,
    out_dtype: QuantDType = qint8,
    observer_kwargs: Mapping[str, Any] | None = None,
) -> QConfig:
    """The qconfig for ``observer`` on outputs (and inputs if ``in_dtype`` is given).

    Weights always use a per-channel min/max observer that follows the current weight.
    ``out_dtype=torch.float16`` (or ``float16``) is the float16 qconfig: the op runs
    in fp16 (``FakeCast`` on its inputs and output) where it has an fp16 form and
    the march has fp16 (docs/quantization.md).
    """
    out_dtype = _as_float16(out_dtype)
    kwargs = dict(observer_kwargs or {})
    weight = None
    if weight_dtype is not None:
        weight = FakeQuantSpec(PerChannelMinMaxObserver, weight_dtype)
    inputs = (
        None if in_dtype is None else FakeQuantSpec(observer, in_dtype, False, kwargs)
    )
    return QConfig(FakeQuantSpec(observer, out_dtype, False, kwargs), weight, inputs)


def _as_float16(dtype):
    """``torch.float16`` spelled as hbir's ``float16``; other dtypes unchanged."""
    return float16 if str(dtype) in ("torch.float16", "float16") else dtype


Override = QConfig | QuantDType | Mapping[str, QuantDType]


class QconfigSetter:
    """A default qconfig, overrides by module name and type, and templates.

    ``QconfigSetter(reference_qconfig, templates=[...])`` is the reference
    toolchain's form (``hbir/quantization/templates.py``); ``module_name=`` /
    ``module_type=`` rules apply first, then the templates in order.
    """

    def __init__(
        self,
        default: QConfig | None = None,
        templates: Sequence[Any] = (),
        *,
        module_name: Mapping[str, Override] | None = None,
        module_type: Mapping[Any, Override] | None = None,
        reference_qconfig: QConfig | None = None,
    ) -> None:
        if reference_qconfig is not None:
            if default is not None:
                raise TypeError(
                    "QconfigSetter: reference_qconfig is the default qconfig: give one"
                )
            default = reference_qconfig
        self.default = default or get_qconfig()
        self.module_name = {k: self._expand(v) for k, v in (module_name or {}).items()}
        self.module_type = {k: self._expand(v) for k, v in (module_type or {}).items()}
        self.templates = list(templates)
        for t in self.templates:
            if not all(hasattr(t, a) for a in ("apply", "labels", "named_labels")):
                raise TypeError(
                    "QconfigSetter: templates are ModuleNameTemplate, "
                    "ConvDtypeTemplate, MatmulDtypeTemplate or SensitivityTemplate; "
                    f"got {type(t).__name__}"
                )
        self.made_at = _made_at()

    def _expand(self, value: Override) -> QConfig:
        if isinstance(value, QConfig):
            return value
        value = _as_float16(value)
        if isinstance(value, QuantDType | FloatDType):
            value = {"out": value}
        if not isinstance(value, Mapping) or set(value) - {"out", "weight", "in"}:
            raise TypeError(
                "an override must be a QConfig, a dtype or a dict with 'out', "
                f"'weight', 'in' dtypes; got {value!r}"
            )
        qc = self.default
        if "out" in value:
            out = _as_float16(value["out"])
            qc = qc.replace(activation=qc.activation.replace(dtype=out))
        if "weight" in value:
            qc = qc.replace(
                weight=FakeQuantSpec(PerChannelMinMaxObserver, value["weight"])
            )
        if "in" in value:
            qc = qc.replace(input=qc.activation.replace(dtype=value["in"]))
        return qc

    def rule_labels(self) -> list[str]:
        names = [f"module_name[{key!r}]" for key in self.module_name]
        types = [f"module_type[{_type_label(key)}]" for key in self.module_type]
        return names + types + [x for t in self.templates for x in t.labels()]

    def named_labels(self) -> dict[str, str]:
        """The rules that name a module (label -> where they were made): one that
        sets no module is an error (``prepare``)."""
        found = {f"module_name[{key!r}]": self.made_at for key in self.module_name}
        for t in self.templates:
            found.update(t.named_labels())
        return found

    def resolve(
        self, name: str, type_keys: Sequence[Any], site: str | None = None
    ) -> tuple[QConfig, str]:
        """The qconfig for module ``name`` (its QAT module: ``site``) with
        ``type_keys``, and the rules that chose it (``" + "``-joined labels, or
        ``"default"``)."""
        qconfig, source = self._resolve_rules(name, type_keys)
        labels = [] if source == "default" else [source]
        frozen = False
        for template in self.templates:
            if frozen:
                break
            change = template.apply(name, site or name, type_keys, qconfig)
            if change is not None:
                qconfig, label = change
                labels.append(label)
                frozen = template.freeze
        return qconfig, " + ".join(labels) or "default"

    def _resolve_rules(self, name: str, type_keys: Sequence[Any]):
        matches = [k for k in self.module_name if k == name or name.startswith(k + ".")]
        if matches:
            key = max(matches, key=len)
            return self.module_name[key], f"module_name[{key!r}]"
        for key, qconfig in self.module_type.items():
            if any(_same_key(key, t) for t in type_keys):
                return qconfig, f"module_type[{_type_label(key)}]"
        return self.default, "default"


def _made_at() -> str:
    from hbir.quantization.templates import _made_at

    return _made_at()


def _same_key(a: Any, b: Any) -> bool:
    return a is b or (isinstance(a, str) and isinstance(b, str) and a == b)


def _type_label(key: Any) -> str:
    if isinstance(key, str):
        return repr(key)
    if isinstance(key, type):
        return key.__name__
    return getattr(key, "__qualname__", None) or getattr(key, "__name__", repr(key))


def as_setter(qconfig: QConfig | QconfigSetter | None) -> QconfigSetter:
    """Normalise ``prepare``'s ``qconfig`` argument."""
    if qconfig is None:
        return QconfigSetter()
    if isinstance(qconfig, QConfig):
        return QconfigSetter(qconfig)
    if isinstance(qconfig, QconfigSetter):
        return qconfig
    raise TypeError(f"qconfig must be a QConfig or QconfigSetter, got {type(qconfig)}")
