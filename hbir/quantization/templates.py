"""qconfig templates: the reference toolchain's (OE 3.x) way to configure QAT.

``QconfigSetter(reference_qconfig, templates=[...])`` starts every module at the
reference qconfig, then applies the templates in order; a later template
changes what an earlier one set, except for modules a ``freeze=True``
``ModuleNameTemplate`` set. Each template names the rules it makes (its
``labels``): prepare records, per QAT module, every rule that set it, and
``model_check_result.txt`` lists each rule with the modules it set. A rule that
names a module (a ``ModuleNameTemplate`` key, a ``SensitivityTemplate`` row)
and matches none is a located error (where the template was made, and the
nearest module names).

* ``ModuleNameTemplate({"": qint8, "backbone.conv1": {"dtype": qint16,
  "threshold": 1.0}})``: by module name (a name covers everything under it;
  ``""`` covers the model; the longest matching name wins). A value is a dtype
  (the output's) or a dict with ``"dtype"`` and ``"threshold"``: a float fixes
  the output scale to ``threshold / -qmin`` (a ``FixedScaleObserver``), a dict
  ``{"output": t, "input": t_in}`` fixes the output and / or input scale.
* ``ConvDtypeTemplate(input_dtype, weight_dtype)``: conv-like ops (conv,
  transposed conv, linear: the ops with a weight on the gemm unit).
* ``MatmulDtypeTemplate(input_dtypes)``: matmul; one dtype or one per operand.
* ``SensitivityTemplate(sensitive_table, topk_or_ratio, ...)``: reads a
  sensitivity table (``QuantAnalysis.sensitivity``'s rows or its
  ``output_<name>_<metric>_sensitive_ops.pt``), most sensitive first; the top
  ``k`` rows (a ratio below 1: that share of the rows) get
  ``high_precision_dtype``, the other rows ``low_precision_dtype``.

An input dtype is met by the producer's output when that is already of the
dtype; otherwise the op gets its own input fake quant of that dtype (a
requantization, as the reference inserts).
"""

from __future__ import annotations

import math
import os
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from hbir.errors import HbirValueError
from hbir.quantization.dtypes import FloatDType, QuantDType, qinfo
from hbir.quantization.observers import FixedScaleObserver, PerChannelMinMaxObserver
from hbir.quantization.qconfig import FakeQuantSpec, QConfig

__all__ = [
    "ConvDtypeTemplate",
    "MatmulDtypeTemplate",
    "ModuleNameTemplate",
    "SensitivityTemplate",
    "TemplateError",
]

CONV_OPS = frozenset(
    {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "linear"}
)
MATMUL_OPS = frozenset({"matmul"})


class TemplateError(HbirValueError):
    """A qconfig template that cannot be applied (bad value, unknown name)."""


def _made_at() -> str:
    """``file:line`` of the user code that made a template (for located errors)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not os.path.abspath(frame.filename).startswith(here):
            return f"{frame.filename}:{frame.lineno}"
    return "<unknown>"


def _dtype(value: Any, where: str, float_ok: bool = False) -> QuantDType:
    """A quantized dtype, or ``float16`` where ``float_ok`` (an op's output: an fp16
    op on a march with fp16; gemm operands are always int8 / int16)."""
    try:
        dtype = qinfo(value)
    except ValueError:
        also = ", float16" if float_ok else ""
        raise TemplateError(
            f"{where}: {value!r} is not a quantized dtype (qint8, qint16{also})"
        ) from None
    if isinstance(dtype, FloatDType) and not float_ok:
        raise TemplateError(
            f"{where}: {value!r}: gemm operands are int8 or int16 (float16 is for "
            "the non-gemm ops, as the J6 guide advises for J6P / J6H)"
        )
    return dtype


def _fixed(dtype: QuantDType, threshold: Any, where: str) -> FakeQuantSpec:
    """A fixed-scale spec covering ``[-threshold, threshold]``: the reference's
    ``scale = threshold / -quant_min``."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise TemplateError(f"{where}: threshold must be a number, got {threshold!r}")
    if not threshold > 0 or not math.isfinite(threshold):
        raise TemplateError(f"{where}: threshold must be positive, got {threshold}")
    scale = float(threshold) / -dtype.min
    return FakeQuantSpec(FixedScaleObserver, dtype, False, {"scale": scale})


def apply_setting(qconfig: QConfig, value: Any, where: str) -> QConfig:
    """``qconfig`` with a ``ModuleNameTemplate`` value applied: a dtype, or a dict
    with ``"dtype"`` and ``"threshold"`` (see the module)."""
    if not isinstance(value, Mapping):
        value = {"dtype": value}
    unknown = set(value) - {"dtype", "threshold"}
    if unknown:
        raise TemplateError(
            f"{where}: unknown key(s) {sorted(unknown)}: a setting is a dtype or "
            "a dict with 'dtype' and 'threshold'"
        )
    activation = qconfig.activation
    if "dtype" in value:
        dtype = _dtype(value["dtype"], where, float_ok=True)
        if isinstance(dtype, FloatDType) and "threshold" in value:
            raise TemplateError(f"{where}: a float16 output has no threshold")
        activation = activation.replace(dtype=dtype)
    threshold = value.get("threshold")
    inputs = qconfig.input
    if isinstance(threshold, Mapping):
        unknown = set(threshold) - {"output", "input"}
        if unknown:
            raise TemplateError(
                f"{where}: threshold keys are 'output' and 'input', got "
                f"{sorted(unknown)}"
            )
        if "input" in threshold:
            dtype = inputs.dtype if isinstance(inputs, FakeQuantSpec) else None
            inputs = _fixed(dtype or activation.dtype, threshold["input"], where)
            qconfig = qconfig.replace(input_if_retyped=False)  # always its own
        threshold = threshold.get("output")
    if threshold is not None:
        activation = _fixed(activation.dtype, threshold, where)
    return qconfig.replace(activation=activation, input=inputs)


def _retyped_inputs(qconfig: QConfig, dtypes: Sequence[QuantDType]) -> QConfig:
    """Inputs of ``dtypes``: an input fake quant where the producer differs."""
    base = qconfig.activation
    specs = tuple(base.replace(dtype=d) for d in dtypes)
    return qconfig.replace(
        input=specs[0] if len(specs) == 1 else specs, input_if_retyped=True
    )


class ModuleNameTemplate:
    """Settings by module name (see the module)."""

    def __init__(self, settings: Mapping[str, Any], freeze: bool = False) -> None:
        if not isinstance(settings, Mapping):
            raise TemplateError(
                f"ModuleNameTemplate takes a dict {{module name: setting}}, got "
                f"{type(settings).__name__}"
            )
        self.made_at = _made_at()
        self.freeze = freeze
        self.settings = dict(settings)
        for key, value in self.settings.items():
            if not isinstance(key, str):
                raise TemplateError(
                    f"{self.made_at}: ModuleNameTemplate keys are module names, got "
                    f"{key!r}"
                )
            apply_setting(QConfig(FakeQuantSpec()), value, self._label(key))

    def _label(self, key: str) -> str:
        return f"ModuleNameTemplate[{key!r}]"

    def labels(self) -> list[str]:
        return [self._label(k) for k in self.settings]

    def named_labels(self) -> dict[str, str]:
        """Rules that name a module: label -> where the template was made."""
        return {label: self.made_at for label in self.labels()}

    def apply(self, name: str, site: str, type_keys, qconfig: QConfig):
        covering = [
            k for k in self.settings if k == "" or name == k or name.startswith(k + ".")
        ]
        if not covering:
            return None
        key = max(covering, key=len)
        label = self._label(key)
        return apply_setting(qconfig, self.settings[key], label), label


class ConvDtypeTemplate:
    """Input and weight dtypes of the conv-like ops (conv, transposed conv,
    linear)."""

    freeze = False

    def __init__(self, input_dtype=None, weight_dtype=None) -> None:
        self.made_at = _made_at()
        where = "ConvDtypeTemplate"
        self.input_dtype = None if input_dtype is None else _dtype(input_dtype, where)
        self.weight_dtype = (
            None if weight_dtype is None else _dtype(weight_dtype, where)
        )

    def labels(self) -> list[str]:
        return [
            f"ConvDtypeTemplate(input_dtype={self.input_dtype}, "
            f"weight_dtype={self.weight_dtype})"
        ]

    def named_labels(self) -> dict[str, str]:
        return {}

    def apply(self, name: str, site: str, type_keys, qconfig: QConfig):
        if not CONV_OPS & {k for k in type_keys if isinstance(k, str)}:
            return None
        if self.input_dtype is not None:
            qconfig = _retyped_inputs(qconfig, [self.input_dtype])
        if self.weight_dtype is not None:
            weight = qconfig.weight or FakeQuantSpec(PerChannelMinMaxObserver)
            qconfig = qconfig.replace(weight=weight.replace(dtype=self.weight_dtype))
        return qconfig, self.labels()[0]


class MatmulDtypeTemplate:
    """Operand dtypes of matmul: one dtype for both, or one per operand."""

    freeze = False

    def __init__(self, input_dtypes) -> None:
        self.made_at = _made_at()
        where = "MatmulDtypeTemplate"
        many = isinstance(input_dtypes, list | tuple)
        dtypes = list(input_dtypes) if many else [input_dtypes]
        if not 1 <= len(dtypes) <= 2:
            raise TemplateError(
                f"{self.made_at}: MatmulDtypeTemplate takes one dtype or two (one "
                f"per operand), got {len(dtypes)}"
            )
        self.input_dtypes = [_dtype(d, where) for d in dtypes]

    def labels(self) -> list[str]:
        shown = ", ".join(self.input_dtypes)
        return [f"MatmulDtypeTemplate(input_dtypes=[{shown}])"]

    def named_labels(self) -> dict[str, str]:
        return {}

    def apply(self, name: str, site: str, type_keys, qconfig: QConfig):
        if not MATMUL_OPS & {k for k in type_keys if isinstance(k, str)}:
            return None
        return _retyped_inputs(qconfig, self.input_dtypes), self.labels()[0]


SENSITIVE_TYPES = ("activation", "weight", "both")


def read_sensitive_table(table: Any) -> list[tuple[str, str]]:
    """(op_name, sensitive_type) per row of a sensitivity table: the rows
    ``QuantAnalysis.sensitivity`` returns for one output (``[op_name,
    sensitive_type, op_type, value, quant_dtype, flops]``, most sensitive first)
    or the path of the ``.pt`` file it writes."""
    if isinstance(table, str | os.PathLike):
        import torch

        path = os.fspath(table)
        try:
            table = torch.load(path, weights_only=False)
        except (OSError, RuntimeError, EOFError) as e:
            raise TemplateError(
                f"{path}: cannot read a sensitivity table "
                f"(output_<name>_<metric>_sensitive_ops.pt): {e}"
            ) from None
    if not isinstance(table, Sequence) or isinstance(table, str):
        raise TemplateError(
            "SensitivityTemplate: sensitive_table is the list of rows "
            "QuantAnalysis.sensitivity returns for one output, or its .pt file; "
            f"got {type(table).__name__}"
        )
    rows = []
    for i, row in enumerate(table):
        if (
            not isinstance(row, Sequence)
            or len(row) < 2
            or not isinstance(row[0], str)
            or row[1] not in (*SENSITIVE_TYPES, "exact", "table")
        ):
            raise TemplateError(
                f"SensitivityTemplate: row {i} is not [op_name, sensitive_type, "
                f"...]: {row!r}"
            )
        if row[1] in ("exact", "table"):
            raise TemplateError(
                f"SensitivityTemplate: row {i} ({row[0]!r}) is a '{row[1]}' row: "
                "the table must come from a torch analysis model (rows "
                "'activation' / 'weight': QuantAnalysis of qat.pt against the float "
                "model)"
            )
        rows.append((row[0], row[1]))
    return rows


class SensitivityTemplate:
    """The most sensitive ops at high precision, the rest at low (see the
    module). ``sensitive_type`` selects the rows used (``"both"``: all);
    ``high_precision_dtype`` may also be a ``ModuleNameTemplate`` setting (e.g.
    ``{"threshold": 1.0}``)."""

    freeze = False

    def __init__(
        self,
        sensitive_table,
        topk_or_ratio: int | float = 0.2,
        sensitive_type: str = "activation",
        low_precision_dtype=None,
        high_precision_dtype=None,
    ) -> None:
        from hbir.quantization.dtypes import qint8, qint16

        self.made_at = _made_at()
        if sensitive_type not in SENSITIVE_TYPES:
            raise TemplateError(
                f"{self.made_at}: sensitive_type must be one of {SENSITIVE_TYPES}, "
                f"got {sensitive_type!r}"
            )
        rows = [
            (op, kind)
            for op, kind in read_sensitive_table(sensitive_table)
            if sensitive_type == "both" or kind == sensitive_type
        ]
        k = topk_or_ratio
        if isinstance(k, bool) or not isinstance(k, int | float) or k < 0:
            raise TemplateError(
                f"{self.made_at}: topk_or_ratio is a count (int) or a share of the "
                f"rows (float below 1), got {k!r}"
            )
        count = math.ceil(k * len(rows)) if isinstance(k, float) and k < 1 else int(k)
        self.high = qint16 if high_precision_dtype is None else high_precision_dtype
        self.low = qint8 if low_precision_dtype is None else low_precision_dtype
        for value, which in ((self.high, "high"), (self.low, "low")):
            apply_setting(QConfig(FakeQuantSpec()), value, f"{which}_precision_dtype")
        # op name -> [(kind, setting)], the table's order (most sensitive first)
        self.rows = [
            (op, kind, self.high if i < count else self.low)
            for i, (op, kind) in enumerate(rows)
        ]

    def _label(self, op: str, kind: str, setting) -> str:
        return f"SensitivityTemplate[{op!r} {kind}: {_show(setting)}]"

    def labels(self) -> list[str]:
        return [self._label(*row) for row in self.rows]

    def named_labels(self) -> dict[str, str]:
        return {label: self.made_at for label in self.labels()}

    def apply(self, name: str, site: str, type_keys, qconfig: QConfig):
        matched = [row for row in self.rows if row[0] in (site, name)]
        if not matched:
            return None
        labels = []
        for op, kind, setting in matched:
            label = self._label(op, kind, setting)
            if kind == "weight":
                if qconfig.weight is None:
                    continue
                dtype = (
                    setting.get("dtype") if isinstance(setting, Mapping) else setting
                )
                if dtype is not None:
                    weight = qconfig.weight.replace(dtype=_dtype(dtype, label))
                    qconfig = qconfig.replace(weight=weight)
            else:
                qconfig = apply_setting(qconfig, setting, label)
            labels.append(label)
        return (qconfig, " + ".join(labels)) if labels else None


def _show(setting) -> str:
    if isinstance(setting, Mapping):
        return ", ".join(f"{k}={v}" for k, v in setting.items())
    return str(setting)
