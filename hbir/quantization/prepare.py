"""``prepare``: turn a float model into a QAT model (a torch.fx GraphModule).

Steps: trace (``tracing.py``, which also says why fx), record what each node produces
on the example inputs, fold conv+bn(+relu) (``fusion.py``), then rebuild the graph node
by node with the rules of ``op_rules.py``:

* a node whose inputs are all float (before a ``QuantStub``, after a ``DeQuantStub``,
  constants) stays float and is listed as unquantized;
* a node with a quantized input becomes a ``call_module`` to a QAT module (or the
  inlined steps of a decomposition), or stays a pass-through node keeping its input's
  scale; any float input it also takes (a constant, a raw input) gets a generated
  ``QuantStub``;
* anything else is an unsupported op, reported all at once with the user's source line.

A model without any ``QuantStub`` gets one generated per float input. A module
called at several places (a detection head run on every FPN level, a reused ReLU)
gets one QAT module per call, named ``<name>_<k>`` after the first: each call has its
own input and output scales, as the integer pipeline computes each call with its own;
the calls of a weight module share its parameters and its weight fake quant, so they
train one weight. The calls are listed in ``model_check_result.txt``.
"""

from __future__ import annotations

import copy
import difflib
import operator
import os
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import fx, nn

from hbir.default_march import default_march
from hbir.errors import HbirOutputError
from hbir.quantization import functionalize, op_rules, stubs
from hbir.quantization import qat_modules as qat
from hbir.quantization.check_result import (
    Report,
    applied_rules,
    write_check_result,
    write_fx_graph,
)
from hbir.quantization.consistency import (
    model_flags,
    qconfig_for_level,
)
from hbir.quantization.decompositions import Decomposition
from hbir.quantization.dtypes import qint8, qint16
from hbir.quantization.fake_cast import FakeCast
from hbir.quantization.fake_quantize import FakeQuantize
from hbir.quantization.fusion import fuse
from hbir.quantization.observers import FixedScaleObserver
from hbir.quantization.options import QuantOptions, current_options, using
from hbir.quantization.qconfig import QConfig, QconfigSetter, as_setter
from hbir.quantization.tracing import (
    HbirTracer,
    PrepareError,
    describe_target,
    describe_value,
    keep_sources,
    record_values,
    trace,
    user_frame,
    value_of,
)
from hbir.runtime import op_table, selection

# FP16: a value on the fp16 grid (an fp16 op's output, rounded by a FakeCast)
QUANT, FLOAT, OTHER, FP16 = "quant", "float", "other", "fp16"


class UnsupportedOpError(PrepareError):
    """Ops with quantized inputs that prepare has no rule for."""


def prepare(
    model: nn.Module,
    example_inputs,
    qconfig: QConfig | QconfigSetter | None = None,
    out_dir: str | os.PathLike = ".",
    *,
    qconfig_setter: QconfigSetter | None = None,
    options: QuantOptions | None = None,
) -> fx.GraphModule:
    """Return the QAT version of ``model`` and write the two check files to ``out_dir``.

    ``qconfig`` is a ``QConfig`` for every layer or a ``QconfigSetter`` with overrides;
    ``qconfig_setter=`` is the reference toolchain's name for it. ``options``
    (``QuantOptions``) give the consistency level and the rounding for this call;
    by default the options in force (``ConsistencyStrategy.set_consistency_level``
    and ``set_round_mode`` set them). The float model is not modified.
    """
    if options is not None:
        with using(options):
            return prepare(model, example_inputs, qconfig, out_dir,
                           qconfig_setter=qconfig_setter)  # fmt: skip
    if qconfig_setter is not None:
        if qconfig is not None:
            raise TypeError(
                "prepare: qconfig and qconfig_setter are one argument: give one"
            )
        qconfig = qconfig_setter
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    # The model runs on them while tracing: in-place ops must not touch the user's.
    example_inputs = tuple(
        x.clone() if isinstance(x, torch.Tensor) else x for x in example_inputs
    )
    setter = as_setter(qconfig)
    level = current_options().consistency_level
    gm = trace(copy.deepcopy(model), example_inputs)
    record_values(gm, example_inputs)
    report = Report(
        level=level,
        rule_labels=setter.rule_labels(),
        named_labels=setter.named_labels(),
    )
    report.call_counts = _call_counts(gm)
    report.unfused = fuse(gm)
    builder = _GraphBuilder(gm, setter, level, report)
    qat_model = builder.build()
    qat_model.train(model.training)
    for key, value in model_flags(level).items():
        setattr(qat_model, key, value)
    qat_model._march = default_march()  # set_march's, written into qat.bc
    _dry_run(qat_model, example_inputs)
    try:
        os.makedirs(out_dir, exist_ok=True)
        write_check_result(
            os.path.join(out_dir, "model_check_result.txt"), qat_model, report
        )
        write_fx_graph(os.path.join(out_dir, "fx_graph.txt"), qat_model)
    except OSError as e:
        raise HbirOutputError(out_dir, "prepare's check files (out_dir=)", e) from None
    _refuse_unmatched_names(qat_model, report)
    keep_sources(qat_model)  # for a whole-saved qat.pt exported elsewhere
    return qat_model


def _refuse_unmatched_names(qat_model: fx.GraphModule, report: Report) -> None:
    """A qconfig rule that names a module (``module_name``, a
    ``ModuleNameTemplate`` key, a ``SensitivityTemplate`` row) and set none is a
    misspelt name: a located error, with the nearest module names."""
    applied = applied_rules(qat_model, report)
    unmatched = [label for label in report.named_labels if not applied.get(label)]
    if not unmatched:
        return
    names = sorted(report.sources)
    lines = []
    for label in unmatched:
        key = label.split("[", 1)[1].split("'")[1] if "'" in label else label
        near = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
        hint = f" (nearest: {', '.join(near)})" if near else ""
        lines.append(f"{report.named_labels[label]}: {label} names no module{hint}")
    raise PrepareError(
        "prepare: qconfig rules that set no module (model_check_result.txt lists "
        "every module and the rule that set it):\n  " + "\n  ".join(lines)
    )


def _call_counts(gm: fx.GraphModule) -> dict[str, tuple[int, str]]:
    modules = dict(gm.named_modules())
    counts = Counter(n.target for n in gm.graph.nodes if n.op == "call_module")
    return {t: (c, type(modules[t]).__name__) for t, c in counts.items() if c > 1}


def _dry_run(model: fx.GraphModule, example_inputs: tuple) -> None:
    """Run once with fake quant and observers off, so a broken graph fails here."""
    fake_quants = [m for m in model.modules() if isinstance(m, FakeQuantize)]
    saved = [
        (fq.fake_quant_enabled.clone(), fq.observer_enabled.clone())
        for fq in fake_quants
    ]
    for fq in fake_quants:
        fq.enable_fake_quant(False).enable_observer(False)
    try:
        with torch.no_grad():
            model(*example_inputs)
    finally:
        for fq, (fake_quant, observe) in zip(fake_quants, saved, strict=True):
            fq.fake_quant_enabled.copy_(fake_quant)
            fq.observer_enabled.copy_(observe)


@dataclass
class _QconfigFor:
    """Qconfigs for a builder: ``q()`` for its module, ``q.step`` for steps."""

    builder: _GraphBuilder
    name: str  # the name module_name rules match
    type_keys: list = field(default_factory=list)
    site: str | None = None  # the QAT module's own name, when not ``name``

    def __call__(self) -> QConfig:
        return self.builder.resolve(self.name, self.type_keys, site=self.site)

    def is_data_mask(self, node) -> bool:
        """``node`` (of the new graph) is a mask computed from the data."""
        return node in self.builder.data_index_values and (
            value_of(node).dtype == torch.bool
        )

    def is_quantized(self, node) -> bool:
        return isinstance(node, fx.Node) and self.builder.state.get(node) == QUANT

    def step(self, step: str, cls: type, final: bool) -> QConfig:
        keys = [cls, cls.op, *self.type_keys]
        site = None if self.site is None else f"{self.site}.{step}"
        return self.builder.resolve(
            f"{self.name}.{step}", keys, internal=not final, site=site
        )

    def constant(self, node):
        """The tensor behind a ``get_attr`` node (layer-norm weights), or None."""
        if node is None:
            return None
        if not isinstance(node, fx.Node) or node.op != "get_attr":
            raise op_rules.Unsupported("weights that are not module attributes")
        return operator.attrgetter(node.target)(self.builder.gm)

    def from_parameters(self, node) -> bool:
        """``node`` is a float tensor the graph computes from the model's
        parameters and sizes only (a standardised weight), no input among its
        ancestors."""
        if not isinstance(node, fx.Node) or self.builder.state.get(node) != FLOAT:
            return False
        seen, todo = set(), [node]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op in ("placeholder", "call_module"):
                return False
            todo.extend(n.all_input_nodes)
        return True


# Integer arithmetic on indices (``idx % w``, ``idx // w``, ``idx * 4 + 1``).
_INDEX_ARITHMETIC = frozenset({"add", "sub", "mul", "floor_divide", "remainder"})
_INDEX_ARITHMETIC |= {"compare"}

# Ops that quantize their own source (an embedding's table), float inputs or not.
_SOURCES = frozenset({"embedding"})

# The ops integer indices may reach: they move, select or read with them.
_INDEX_READERS = frozenset(
    {"reshape", "transpose", "slice", "split", "repeat", "flip", "cast", "where"}
    | {"topk", "sort", "argmax", "argmin", "max", "min"}
    | {"gather", "index_select", "embedding", "max_unpool2d"}
)


def _one_index(key) -> tuple[int | None, str | None]:
    """(the dim of the one index tensor among full slices, or why not)."""
    key = key if isinstance(key, tuple) else (key,)
    tensors = [d for d, k in enumerate(key) if isinstance(k, fx.Node)]
    full = all(k == slice(None) for d, k in enumerate(key) if d not in tensors)
    if len(tensors) != 1 or not full:
        return None, "one index tensor among full slices (canvas[:, idx]) only"
    return tensors[0], None


def _entry_of(node: fx.Node):
    """The op table entry of a function or method call (None: none)."""
    if node.op == "call_method":
        return op_rules.ENTRY_OF_METHOD.get(node.target)
    if node.op == "call_function":
        return op_rules.ENTRY_OF_FUNCTION.get(node.target)
    return None


# the fields of torch's (values, indices) return types (topk, sort, max(dim))
_RETURN_FIELDS = {"values": 0, "indices": 1}


def _is_field_read(node: fx.Node) -> bool:
    return (
        node.op == "call_function"
        and node.target is getattr
        and len(node.args) == 2
        and node.args[1] in _RETURN_FIELDS
        and isinstance(node.args[0], fx.Node)
        and not value_of(node.args[0]).is_tensor
    )


class _GraphBuilder:
    """Rebuilds the traced graph with QAT modules (see the module docstring)."""

    def __init__(
        self, gm: fx.GraphModule, setter: QconfigSetter, level, report: Report
    ):
        self.gm, self.setter, self.level, self.report = gm, setter, level, report
        self.modules = dict(gm.named_modules())
        self.graph = fx.Graph()
        self.env: dict[fx.Node, fx.Node] = {}
        self.state: dict[fx.Node, str] = {}
        self.fake_quant_of: dict[fx.Node, FakeQuantize] = {}
        self.stub_for: dict[fx.Node, fx.Node] = {}
        self.cast_for: dict[fx.Node, fx.Node] = {}  # a value's FakeCast (fp16 ops)
        self.taken = set(self.modules)
        self.counters: Counter = Counter()
        self.site_counts: Counter = Counter()
        self.qat_of_target: dict[str, nn.Module] = {}  # the first call's
        self.decompositions: dict[str, Decomposition] = {}
        self.unsupported: list[str] = []
        self.data_indices: set[fx.Node] = set()  # index tensors made from data
        self.data_index_values: set[fx.Node] = set()  # the same, in the new graph
        self.has_user_stub = any(
            isinstance(m, stubs.QuantStub) for m in self.modules.values()
        )

    # ------------------------------------------------------------- qconfigs

    def resolve(
        self, name: str, type_keys: list, internal: bool = False, site=None
    ) -> QConfig:
        """The qconfig the rules give ``name``, recorded for the QAT module
        ``site`` (default: ``name``)."""
        qconfig, source = self.setter.resolve(name, type_keys, site=site or name)
        naming = {f"module_name[{name!r}]", f"ModuleNameTemplate[{name!r}]"}
        if internal and not naming & set(source.split(" + ")):
            activation = qconfig.activation
            if activation.dtype.bits < qint16.bits:
                qconfig = qconfig.replace(activation=activation.replace(dtype=qint16))
                source += " (int16: decomposition step)"
        qconfig = qconfig_for_level(qconfig, self.level)
        self.report.sources[site or name] = source
        return qconfig

    # ------------------------------------------------------------- walking

    def build(self) -> fx.GraphModule:
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self._placeholder(node)
            elif node.op == "get_attr":
                new = self.graph.node_copy(node, self.env.__getitem__)
                self._set(node, new, FLOAT if value_of(node).is_float_tensor else OTHER)
            elif node.op == "output":
                self.graph.node_copy(node, self.env.__getitem__)
            else:
                self._call(node)
        if self.unsupported:
            count = len(self.unsupported)
            raise UnsupportedOpError(
                f"prepare cannot quantize {count} op{'s' if count > 1 else ''}:\n"
                + "\n".join(self.unsupported)
                + "\nPut a DeQuantStub before an op to run it in float, or replace it "
                "with a supported op."
            )
        qat_model = fx.GraphModule(self.gm, self.graph, type(self.gm).__name__)
        for name, container in self.decompositions.items():
            qat_model.add_submodule(name, container)
        qat_model.graph.lint()
        qat_model.recompile()
        return qat_model

    def _set(self, old: fx.Node, new: fx.Node, state: str, fake_quant=None) -> None:
        self.env[old] = new
        self.state[new] = state
        if fake_quant is not None:
            self.fake_quant_of[new] = fake_quant

    def _placeholder(self, node: fx.Node) -> None:
        new = self.graph.node_copy(node, self.env.__getitem__)
        is_float = value_of(node).is_float_tensor
        self._set(node, new, FLOAT if is_float else OTHER)
        if value_of(node).holds_index_tensor:  # token ids, masks: from the data
            self.data_indices.add(node)
            self.data_index_values.add(new)
        if is_float and not self.has_user_stub:
            self.env[node] = self._stub(new, "input without QuantStub")

    def _call(self, node: fx.Node) -> None:
        if _is_field_read(node):  # ``torch.topk(...).indices``: the tuple's part
            node.target = operator.getitem
            node.args = (node.args[0], _RETURN_FIELDS[node.args[1]])
        entry = _entry_of(node)
        if (
            entry is not None
            and entry.op == "cast"
            and value_of(node).holds_index_tensor
            and any(
                self.state.get(self.env.get(n)) == QUANT for n in node.all_input_nodes
            )
        ):
            self._unsupported(
                node,
                "a cast of quantized values to integers (a truncation) has no "
                "quantized form",
            )
            self._copy(node, node.args, node.kwargs, OTHER)
            return
        if not self._reads_indices_as_it_may(node):
            self._unsupported(
                node,
                "it computes with integer indices (of a top-k, an argmax, an integer "
                "input), which have no quantized form: indices may only be moved "
                "(reshape, slice, ...), selected or used by gather, index_select, "
                "indexing and embedding",
            )
            self._copy(node, node.args, node.kwargs, OTHER)
            return
        refused = len(self.unsupported)
        self._call_op(node)
        if len(self.unsupported) > refused:
            return  # listed once: what follows from it is not listed again
        if self._is_index_cast(node):
            self.env[node] = self._index_stub(self.env[node])
            return
        from_sizes = functionalize.FROM_SIZES_META in node.meta  # a mask, a grid
        if (
            not from_sizes
            and value_of(node).holds_index_tensor
            and any(
                n in self.data_indices or self._is_data(n) for n in node.all_input_nodes
            )
        ):
            self.data_indices.add(node)
            if isinstance(self.env.get(node), fx.Node):
                self.data_index_values.add(self.env[node])

    def _is_index_cast(self, node: fx.Node) -> bool:
        """``idx.float()``: indices become values."""
        entry = _entry_of(node)
        return (
            entry is not None
            and entry.op == "cast"
            and value_of(node).is_float_tensor
            and any(n in self.data_indices for n in node.all_input_nodes)
        )

    def _index_stub(self, node: fx.Node) -> fx.Node:
        """Indices as values on the grid of scale 1, int16 (exact up to 32767: a
        fixed scale, no observer), so arithmetic with them is the usual."""

        def scale_one(activation):
            return activation.replace(
                dtype=qint16,
                observer=FixedScaleObserver,
                observer_kwargs={"scale": 1.0},
            )

        return self._stub(node, "indices as values (scale 1, int16)", scale_one)

    def _is_data(self, node: fx.Node) -> bool:
        return self.state.get(self.env.get(node)) in (QUANT, FLOAT)

    def _reads_indices_as_it_may(self, node: fx.Node) -> bool:
        """Integer tensors computed from the model's data (indices) reach only the
        ops that move, select or read with them (``_INDEX_READERS``)."""
        if not any(n in self.data_indices for n in node.all_input_nodes):
            return True
        if node.op == "call_module":  # its rule takes or refuses what it is given
            module = self.modules[node.target]
            entry = op_rules.ENTRY_OF_MODULE.get(type(module))
            if entry is not None and entry.op in _INDEX_READERS:
                return True
            return op_rules.module_rule(module) is not None
        if node.target is functionalize.index_assign:
            return True  # the index of a scatter (_index_write checks the rest)
        entry = _entry_of(node)
        if entry is None:
            return False
        if entry.op == "cast":  # .contiguous(), .long(); .float(): a value of scale 1
            dtype = value_of(node).dtype
            return dtype is not None and (
                dtype.is_floating_point or dtype == torch.int64
            )
        if entry.op == "where":  # a selection; where(cond) alone: a data-made count
            return len(node.args) + len(node.kwargs) >= 3
        if entry.op in _INDEX_ARITHMETIC:  # on indices and numbers only
            data = any(self._is_data(n) for n in node.all_input_nodes)
            return not data and value_of(node).holds_index_tensor
        return entry.op in _INDEX_READERS

    def _call_op(self, node: fx.Node) -> None:
        args = fx.node.map_arg(node.args, self.env.__getitem__)
        kwargs = fx.node.map_arg(node.kwargs, self.env.__getitem__)
        if node.target is operator.getitem and isinstance(args[0], tuple | list):
            # a part of a decomposition's result (LSTM's ``(h_n, c_n)``)
            part = args[0][args[1]]
            if part is not None:
                if isinstance(part, fx.Node) and "hbir_value" in node.meta:
                    # the part's own value (its node has the whole call's meta)
                    part.meta["hbir_value"] = node.meta["hbir_value"]
                self.env[node] = part
                return
        inputs = [
            n
            for n in _nodes_in((args, kwargs))
            if self.state.get(n) in (QUANT, FLOAT, FP16)
        ]
        module = self.modules.get(node.target) if node.op == "call_module" else None
        if any(self.state[n] in (QUANT, FP16) for n in inputs):
            source = self._runs_in_fp16(node, module)
            if source is not None:
                self._fp16_call(node, args, kwargs, source)
                return
            if any(self.state[n] == FP16 for n in inputs):
                args, kwargs, inputs = self._fp16_inputs_taken(node, args, kwargs)
                if args is None:
                    return
        quantized_input = any(self.state[n] == QUANT for n in inputs)
        if isinstance(module, stubs.QuantStub):
            self._module_call(
                node, op_rules.OpRule("quantize", _build_stub), module, args
            )
        elif isinstance(module, stubs.DeQuantStub):
            new = self._emit(self._site_name(node), qat.DeQuantStub(), args, node)
            self._set(node, new, FLOAT)
        elif isinstance(module, nn.Identity):
            self.env[node] = args[0]
        elif isinstance(module, nn.Flatten):
            flat = (args[0], module.start_dim, module.end_dim)
            new = self.graph.call_function(torch.flatten, flat)
            if quantized_input:
                self._passthrough(node, new, inputs)
            else:
                new.meta = dict(node.meta)
                self._set(node, new, FLOAT)
        elif (rule := self._rule(node, module)) is not None and rule.op in _SOURCES:
            # quantizes what it reads (a table), whatever its inputs are
            if module is not None:
                self._module_call(node, rule, module, args, kwargs)
            else:
                self._function_call(node, rule, args, kwargs)
        elif quantized_input and self._is_passthrough(node, module, args, kwargs):
            self._passthrough(node, self._node_copy(node), inputs)
        elif (
            not value_of(node).is_float_tensor
            and (module is None or not quantized_input)
            and node.target not in op_rules.WITH_INDICES
        ):
            if quantized_input and value_of(node).holds_index_tensor:
                # argmax, topk, max(dim), comparisons: export has no integer
                # tensors of a quantized value (refused here, not after QAT)
                self._unsupported(
                    node,
                    "its result holds integer or bool tensors (indices, masks), "
                    "which have no quantized form yet",
                )
            self._copy(node, args, kwargs, OTHER)
        elif not quantized_input:
            self._copy(node, args, kwargs, FLOAT)
            reason = (
                "inputs are float (before a QuantStub, after a DeQuantStub, constants)"
            )
            self.report.unquantized.append((node.name, self._describe(node), reason))
        else:
            rule = self._rule(node, module)
            if node.target is functionalize.index_assign:
                self._index_write(node, args, inputs)
            elif rule is None:
                self._unsupported(node, "no quantization rule for this op")
                self._copy(node, args, kwargs, QUANT)  # keep checking what follows
            elif module is not None:
                self._module_call(node, rule, module, args, kwargs)
            else:
                self._function_call(node, rule, args, kwargs)

    def _index_write(self, node: fx.Node, args, inputs) -> None:
        """``canvas[:, idx] = feats`` into a zero canvas (PointPillars' scatter):
        the written values keep their grid, zeros are on every grid, so it passes
        the values' scale through (``selection.index_copy``, one index tensor)."""
        canvas, key, value = args
        dim, why = _one_index(key)
        if why is None and not self._is_zero_canvas(node.args[0]):
            why = "it writes into a tensor that is not a zero canvas (torch.zeros)"
        if why is None and self.state.get(value) != QUANT:
            why = "the written value is not quantized"
        if why is not None:
            self._unsupported(node, f"an indexed write (x[i] = v): {why}")
            self._copy(node, args, {}, QUANT)  # keep checking what follows
            return
        new = self.graph.call_function(
            selection.index_copy, (canvas, dim, key[dim], value)
        )
        self._passthrough(node, new, inputs)

    def _is_zero_canvas(self, node) -> bool:
        """A tensor of zeros made in forward (traced as a constant or a value)."""
        if not isinstance(node, fx.Node):
            return False
        value = node.meta.get(functionalize.FROM_SIZES_META)
        if node.op == "get_attr":
            value = operator.attrgetter(node.target)(self.gm)
        return isinstance(value, torch.Tensor) and not bool(value.any())

    def _rule(self, node: fx.Node, module) -> op_rules.OpRule | None:
        if node.op == "call_module":
            return op_rules.module_rule(module)
        if node.op == "call_method":
            return op_rules.METHOD_RULES.get(node.target)
        return op_rules.FUNCTION_RULES.get(node.target)

    def _is_passthrough(self, node, module, args, kwargs) -> bool:
        if node.op == "call_module":
            return isinstance(module, op_rules.PASSTHROUGH_MODULES)
        if node.op == "call_method":
            check = op_rules.CONDITIONAL_METHODS.get(node.target)
            if check is not None:
                return check(*args, **kwargs)
            return node.target in op_rules.PASSTHROUGH_METHODS
        check = op_rules.CONDITIONAL_PASSTHROUGH.get(node.target)
        if check is not None:
            return check(*args, **kwargs)
        return node.target in op_rules.PASSTHROUGH_FUNCTIONS

    def _copy(self, node, args, kwargs, state) -> None:
        self._set(node, self._node_copy(node), state)

    def _node_copy(self, node: fx.Node) -> fx.Node:
        """``node`` in the new graph; a top-k or sort calls ``runtime/selection.py``'s
        (equal values in index order, as every engine selects them)."""
        new = self.graph.node_copy(node, self.env.__getitem__)
        if node.op in ("call_function", "call_method"):
            tied = op_rules.TIE_RULED.get(node.target)
            if tied is not None:
                new.op, new.target = "call_function", tied
        return new

    def _passthrough(self, node: fx.Node, new: fx.Node, inputs: list[fx.Node]) -> None:
        """Keep the producer's scale (tuples too: ``split`` then ``getitem``)."""
        new.meta = dict(node.meta)
        value = value_of(node)
        if value.is_tensor and not value.is_float_tensor:
            self._set(node, new, OTHER)
            return
        source = next(n for n in inputs if self.state[n] == QUANT)
        self._set(node, new, QUANT, self.fake_quant_of.get(source))

    def _describe(self, node: fx.Node) -> str:
        return describe_target(node, self.modules)

    def _unsupported(self, node: fx.Node, reason: str) -> None:
        where = user_frame(node.stack_trace) or "(source line unknown)"
        self.unsupported.append(f"  {where}\n    {self._describe(node)}: {reason}")

    # ------------------------------------------------------------- emission

    def _module_call(self, node, rule, module, args, kwargs=None) -> None:
        name = self._site_name(node)
        # A module_name rule names the module: it applies to every call.
        q = _QconfigFor(self, node.target, [type(module), rule.op], site=name)
        fused_relu = node.meta.get("hbir_fused_relu")
        kwargs = kwargs or {}
        try:
            # every argument reaches the rule (a mask passed by keyword is refused
            # there, never dropped)
            built, call_args = rule.build(
                q, module, *args, **kwargs, fused_relu=fused_relu
            )
        except op_rules.Unsupported as error:
            self._unsupported(node, str(error))
            self._copy(node, args, kwargs, QUANT)
            return
        except TypeError as error:
            self._unsupported(node, f"unsupported arguments ({error})")
            self._copy(node, args, kwargs, QUANT)
            return
        first = self.qat_of_target.setdefault(node.target, built)
        if first is not built:
            _share_weights(built, first)
        self._place(node, name, built, call_args)

    def _function_call(self, node, rule, args, kwargs) -> None:
        name = self._generated_name(node, rule.op)
        keys = [node.target, rule.op]
        try:
            built, call_args = rule.build(
                _QconfigFor(self, name, keys), *args, **kwargs
            )
        except (op_rules.Unsupported, TypeError) as error:
            self._unsupported(node, f"unsupported arguments ({error})")
            self._copy(node, args, kwargs, QUANT)
            return
        self._place(node, name, built, call_args)

    def _place(self, node, name, built, call_args) -> None:
        if isinstance(built, Decomposition):
            self.decompositions[name] = built
            self._install(name, built)
            out = self._inline(name, built, call_args, node)
            if isinstance(out, tuple):  # (output, None): nn.MultiheadAttention
                self.env[node] = out
                for user in node.users:  # code that reads the None
                    none = user.target is operator.getitem and out[user.args[1]] is None
                    if none and user.users:
                        why = f"{built.op} does not compute output {user.args[1]}"
                        self._unsupported(user, why + " (the attention weights)")
                return
        else:
            out = self._emit(name, built, call_args, node)
        self._set(node, out, QUANT, self.fake_quant_of.get(out))

    def _emit(self, name: str, module: nn.Module, args, origin: fx.Node) -> fx.Node:
        """Install ``module`` at ``name`` and call it."""
        self._install(name, module)
        return self._call_module(name, module, args, origin)

    def _call_module(self, name, module, args, origin: fx.Node) -> fx.Node:
        """Call the installed ``module``, quantizing float inputs first."""
        if isinstance(module, qat.ComputedWeightConv2d):  # (x, float weight)
            args = (self._quantized(args[0]), *args[1:])
        elif not isinstance(module, qat.QuantStub | qat.DeQuantStub):
            args = fx.node.map_aggregate(args, self._quantized)
        new = self.graph.call_module(name, tuple(args))
        new.meta = dict(origin.meta)
        if not isinstance(module, qat.QATModule):
            self.state[new] = FLOAT
            return new
        self.state[new] = QUANT
        self.fake_quant_of[new] = module.activation_post_process
        if not isinstance(module, qat.QuantStub):
            self._link(name, module, args, origin)
        return new

    def _link(self, name, module, args, origin: fx.Node) -> None:
        """Record the producer fake quants of ``module``'s inputs. Every call site
        has its own QAT module, so a module has one set of producers."""
        if module.producer_fake_quants:
            raise RuntimeError(
                f"prepare: QAT module '{name}' placed twice (at "
                f"{user_frame(origin.stack_trace)}): each call needs its own module"
            )
        inputs = [n for n in _nodes_in(args) if self.state.get(n) == QUANT]
        module.producer_fake_quants = tuple(self.fake_quant_of.get(n) for n in inputs)
        module.attach_input_fake_quants(len(inputs), module.producer_fake_quants)
        module.exact = self.level == 2 and module.supports_exact
        module.exact_inputs = self.level != 2 and module.exact_below_level_2

    def _quantized(self, value):
        """``value``, or its quantized form if it is a float tensor node."""
        if isinstance(value, fx.Node) and self.state.get(value) == FLOAT:
            return self._stub(value, "float tensor used by a quantized op")
        if isinstance(value, fx.Node) and self.state.get(value) == FP16:
            return self._stub(value, "fp16 value used by an integer op", _integer)
        return value

    # ------------------------------------------------------------- fp16

    def _runs_in_fp16(self, node: fx.Node, module) -> str | None:
        """The rule that gives ``node``'s op the float16 qconfig (its output
        dtype), or None: it runs in fp16 if it has an fp16 form
        (``op_table.FP16_OPS``), and is refused, named, if not."""
        rule = self._rule(node, module)
        if rule is None:
            return None
        if node.op == "call_module":
            name, keys = node.target, [type(module), rule.op]
        else:
            name = self._peek_generated_name(node, rule.op)
            keys = [node.target, rule.op]
        qconfig, source = self.setter.resolve(name, keys)
        if not qconfig.activation.is_float16:
            return None
        if rule.op not in op_table.FP16_OPS:
            entry = op_table.BY_OP.get(rule.op)
            if entry is not None and entry.quantized == op_table.PASSTHROUGH:
                return None  # moves values: keeps the fp16 grid of its input
            shown = ", ".join(sorted(op_table.FP16_OPS))
            self._unsupported(
                node,
                f"the float16 qconfig ({source}) is for ops with an fp16 form "
                f"({shown}); '{rule.op}' has none: give it an integer dtype",
            )
            return None
        return source

    def _peek_generated_name(self, node: fx.Node, op: str) -> str:
        """The name ``_generated_name`` will give ``node`` (nothing taken)."""
        stack = node.meta.get("nn_module_stack") or {}
        owner = list(stack.values())[-1][0] if stack else ""
        base = f"{owner}._generated_{op}" if owner else f"_generated_{op}"
        return f"{base}_{self.counters[base]}"

    def _fp16_call(self, node: fx.Node, args, kwargs, source: str) -> None:
        """The float op between FakeCasts: each float input (a quantized value's
        float32, a constant) rounded to fp16 once, the op computed in float32 on
        those binary16 values, its output rounded to fp16."""

        def cast(value):
            if not isinstance(value, fx.Node) or self.state.get(value) not in (
                QUANT,
                FLOAT,
            ):
                return value
            return self._fake_cast(value, node)

        args = fx.node.map_aggregate(args, cast)
        kwargs = fx.node.map_aggregate(kwargs, cast)
        new = self.graph.node_copy(node, self.env.__getitem__)
        new.args, new.kwargs = args, kwargs
        new.meta = dict(node.meta)
        self.state[new] = FLOAT
        out = self._fake_cast(new, node, output=True)
        self.report.sources[out.target] = source  # model_check_result.txt
        self._set(node, out, FP16)

    def _fake_cast(self, value: fx.Node, origin: fx.Node, output=False) -> fx.Node:
        """``value`` through a generated ``FakeCast`` (one per value)."""
        if value not in self.cast_for:
            op = "fake_cast" if output else "input_fake_cast"
            name = self._generated_name(origin, op)
            self._install(name, FakeCast())
            new = self.graph.call_module(name, (value,))
            new.meta = dict(origin.meta)
            self.state[new] = FP16
            self.cast_for[value] = new
        return self.cast_for[value]

    def _fp16_inputs_taken(self, node: fx.Node, args, kwargs):
        """A non-fp16 op reading fp16 values: data movement keeps them fp16 (the
        node copied, None returned); an integer op quantizes them (a generated
        QuantStub, as for a float value)."""
        module = self.modules.get(node.target) if node.op == "call_module" else None
        if self._is_passthrough(node, module, args, kwargs) or isinstance(
            module, stubs.DeQuantStub
        ):
            if isinstance(module, stubs.DeQuantStub):
                new = self._emit(self._site_name(node), qat.DeQuantStub(), args, node)
                self._set(node, new, FLOAT)
            else:
                new = self._node_copy(node)
                new.meta = dict(node.meta)
                fp16 = value_of(node).is_float_tensor
                self._set(node, new, FP16 if fp16 else OTHER)
            return None, None, None

        def stub(value):
            if isinstance(value, fx.Node) and self.state.get(value) == FP16:
                return self._stub(value, "fp16 value used by an integer op", _integer)
            return value

        args = fx.node.map_aggregate(args, stub)
        kwargs = fx.node.map_aggregate(kwargs, stub)
        inputs = [
            n for n in _nodes_in((args, kwargs)) if self.state.get(n) in (QUANT, FLOAT)
        ]
        return args, kwargs, inputs

    def _stub(self, node: fx.Node, reason: str, activation=None) -> fx.Node:
        """A generated QuantStub for ``node`` (``activation``: a change of its
        qconfig's activation spec), one per node."""
        if node not in self.stub_for:
            name = self._generated_name(node, "quant_stub")
            qconfig = self.resolve(name, [qat.QuantStub, "quantize"])
            if activation is not None:
                qconfig = qconfig.replace(activation=activation(qconfig.activation))
            stub = qat.QuantStub(qconfig)
            self._install(name, stub)
            new = self.graph.call_module(name, (node,))
            new.meta = dict(node.meta)
            self.state[new] = QUANT
            self.fake_quant_of[new] = stub.activation_post_process
            self.stub_for[node] = new
            self.report.generated_stubs.append((name, node.name, reason))
        return self.stub_for[node]

    def _inline(self, base: str, container: Decomposition, args, origin) -> fx.Node:
        """Emit the steps of ``container.forward`` as nodes of the new graph."""
        sub = HbirTracer().trace(container)
        env: dict[fx.Node, object] = {}
        inputs = iter(args)
        for n in sub.nodes:
            if n.op == "placeholder":  # an argument not given: its default
                env[n] = next(inputs, n.args[0] if n.args else None)
            elif n.op == "call_module":
                step_args = fx.node.map_arg(n.args, env.__getitem__)
                env[n] = self._emit(
                    f"{base}.{n.target}",
                    container.get_submodule(n.target),
                    step_args,
                    origin,
                )
            elif n.op == "output":
                return fx.node.map_arg(n.args[0], env.__getitem__)
            elif n.op == "get_attr":  # a buffer of the container (a constant mask)
                new = self.graph.get_attr(f"{base}.{n.target}")
                new.meta = dict(origin.meta)
                value = operator.attrgetter(n.target)(container)
                new.meta["hbir_value"] = describe_value(value)
                # (an integer buffer, a conv3d's depth taps, is no value to quantize)
                self.state[new] = FLOAT if value.is_floating_point() else OTHER
                env[n] = new
            else:
                # a pass-through op of the steps (a slice of the input: quantized
                # first, as a step's input would be)
                new = self.graph.node_copy(n, lambda m: self._quantized(env[m]))
                quant_inputs = [
                    m
                    for m in _nodes_in((new.args, new.kwargs))
                    if self.state.get(m) == QUANT
                ]
                new.meta = dict(origin.meta)
                if quant_inputs:
                    self.state[new] = QUANT
                    self.fake_quant_of[new] = self.fake_quant_of.get(quant_inputs[0])
                else:  # sizes
                    self.state[new] = OTHER
                env[n] = new
        raise AssertionError("decomposition without output")

    def _install(self, name: str, module: nn.Module) -> None:
        self.gm.add_submodule(name, module)
        self.taken.add(name)

    # ------------------------------------------------------------- names

    def _site_name(self, node: fx.Node) -> str:
        """The module's name for its first call, a fresh one for each later call."""
        self.site_counts[node.target] += 1
        calls = self.site_counts[node.target]
        if calls == 1:
            return node.target
        return self._fresh(f"{node.target}_{calls - 1}")

    def _generated_name(self, node: fx.Node, op: str) -> str:
        stack = node.meta.get("nn_module_stack") or {}
        owner = list(stack.values())[-1][0] if stack else ""
        base = f"{owner}._generated_{op}" if owner else f"_generated_{op}"
        index = self.counters[base]
        self.counters[base] += 1
        return self._fresh(f"{base}_{index}")

    def _fresh(self, name: str) -> str:
        candidate, k = name, 0
        while candidate in self.taken:
            k += 1
            candidate = f"{name}_{k}"
        self.taken.add(candidate)
        return candidate


def _integer(activation):
    """A stub's output spec: the quantized dtype (int8 where the rules say
    float16, as for a stub inside an fp16 module)."""
    return activation.replace(dtype=qint8) if activation.is_float16 else activation


def _build_stub(q, module, x, *, fused_relu=None):
    qconfig = q()
    if module.qconfig is not None:
        qconfig = qconfig_for_level(module.qconfig, q.builder.level)
        q.builder.report.sources[q.name] = "QuantStub(qconfig=...)"
    return qat.QuantStub.from_float(module, qconfig), (x,)


def _share_weights(later: nn.Module, first: nn.Module) -> None:
    """Give a later call's QAT module the first call's parameters and weight fake
    quants (submodule by submodule, by path), so every call trains and quantizes
    the one weight."""
    originals = dict(first.named_modules())
    for path, sub in list(later.named_modules()):
        original = originals.get(path)
        if original is None:
            continue
        for key in sub._parameters:
            if original._parameters.get(key) is not None:
                sub._parameters[key] = original._parameters[key]
        if isinstance(getattr(original, "weight_fake_quant", None), FakeQuantize):
            sub.weight_fake_quant = original.weight_fake_quant


def _nodes_in(value) -> list[fx.Node]:
    found: list[fx.Node] = []
    fx.node.map_arg(value, found.append)
    return found
