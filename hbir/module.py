"""The user-facing model objects: ``Module``, ``Function``, ``Argument``.

Shapes follow the reference toolchain's API: ``m.module.get_asm()``,
``m.functions``, ``m["forward"]`` / ``m[0]``, ``f.inputs`` / ``f.outputs``,
``f.feed({"_input_0": x}) -> {"_output_0": y}``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute

from hbir import files
from hbir.diagnostics import HbirError, parse_module
from hbir.dialects import make_context
from hbir.inputs import Argument
from hbir.passes.fixed_point import ATTR_FUSE_REQUANTIZE, ATTR_LEGACY_ROUND, op_device

# Module attributes that record how the model was made (see docs/ir.md); the
# two that convert reads are defined with it, in passes/fixed_point.py.
ATTR_MARCH = "hbir.march"
ATTR_PREPARED_MARCH = "hbir.prepared_march"  # set_march's, at prepare / export
ATTR_CONSISTENCY_LEVEL = "hbir.consistency_level"
ATTR_HIGH_PRECISION_QPP = "hbir.high_precision_qpp"
ATTR_ARG_NAME = "hbir.name"


class FeedError(HbirError):
    """Inputs that do not match a function's signature."""


class Arguments(Sequence[Argument]):
    """Function inputs or outputs, indexable by position or by name."""

    def __init__(self, args: list[Argument]):
        self._args = args

    def __len__(self) -> int:
        return len(self._args)

    def __getitem__(self, key):
        if isinstance(key, str):
            for arg in self._args:
                if arg.name == key:
                    return arg
            raise KeyError(f"no argument named {key!r}; have {self.names}")
        return self._args[key]

    def __iter__(self) -> Iterator[Argument]:
        return iter(self._args)

    @property
    def names(self) -> list[str]:
        return [a.name for a in self._args]

    def __repr__(self) -> str:
        return repr(self._args)


def _is_batch_of(shape: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """A batch of N > 1 samples of a batch-1 shape: ``(N, *expected[1:])``."""
    return (
        expected[:1] == (1,)
        and len(shape) == len(expected)
        and shape[0] > 1
        and tuple(shape[1:]) == tuple(expected[1:])
    )


def batch_size(
    where: str,
    inputs: Sequence[tuple[str, tuple[int, ...]]],
    arrays: Sequence[np.ndarray],
    outputs: Sequence[tuple[str, tuple[int, ...]]],
) -> int | None:
    """The batch size N when every input is a batch of its batch-1 shape (a
    leading dimension N > 1 where the function has 1), None when none is; a
    located ``FeedError`` for a feed that batches some inputs and not others,
    or a function whose outputs have no leading batch dimension to stack on.
    ``inputs`` / ``outputs`` are (name, shape) pairs; ``arrays`` the inputs'
    values, each already of its own or its batch shape."""
    batches = {
        name: x.shape[0]
        for (name, shape), x in zip(inputs, arrays, strict=True)
        if _is_batch_of(x.shape, shape)
    }
    if not batches:
        return None
    sizes = set(batches.values())
    if len(batches) != len(inputs) or len(sizes) != 1:
        shapes = {name: x.shape for (name, _), x in zip(inputs, arrays, strict=True)}
        raise FeedError(
            f"{where}: a batch feed needs every input batched the same "
            f"way (leading dimension N where the function has 1); got {shapes}"
        )
    single = [(name, shape) for name, shape in outputs if shape[:1] != (1,)]
    if single:
        raise FeedError(
            f"{where}: a batch feed needs outputs with a leading "
            f"dimension of 1; output '{single[0][0]}' has shape "
            f"{single[0][1]}: feed one input at a time"
        )
    return sizes.pop()


def shape_error(where: str, name: str, got, expected: tuple[int, ...]) -> FeedError:
    """An input of the wrong shape, naming the batch form a batch-1 input takes."""
    batch = ""
    if expected[:1] == (1,):
        batch = f" (or a batch: {('N', *expected[1:])})"
    return FeedError(
        f"{where}: input '{name}' has shape {tuple(got)}, expected {expected}{batch}"
    )


def sample_by_sample(run, arrays: list[np.ndarray], batch: int) -> list[np.ndarray]:
    """``run`` (batch-1 arrays -> outputs) on each sample of a batch, its
    outputs stacked along the leading dimension."""
    runs = [run([x[i : i + 1] for x in arrays]) for i in range(batch)]
    return [np.concatenate(ys) for ys in zip(*runs, strict=True)]


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def wants_torch(feed: Any) -> bool:
    """Whether a feed's outputs come back as torch tensors: when one of its
    inputs is a tensor (outputs take the inputs' kind: tensors in, tensors out;
    numpy arrays, lists or numbers in, numpy arrays out)."""
    return isinstance(feed, Mapping) and any(_is_torch(v) for v in feed.values())


def in_kind(outputs: Outputs, torch_out: bool, bf16: Sequence[str] = ()) -> Outputs:
    """``outputs`` as torch tensors (sharing the arrays' memory; the outputs
    named in ``bf16`` as ``torch.bfloat16``, whose values they hold exactly)
    when ``torch_out``, else as they are."""
    if not torch_out:
        return outputs
    import torch

    def tensor(name: str, y: np.ndarray):
        if not (y.flags.c_contiguous and y.flags.writeable):  # (a constant's view)
            y = np.array(y, order="C")
        t = torch.from_numpy(y)
        return t.to(torch.bfloat16) if name in bf16 else t

    return Outputs((name, tensor(name, np.asarray(y))) for name, y in outputs.items())


def _arg_name(attrs: DictionaryAttr | None, default: str) -> str:
    if attrs is not None and isinstance(attrs.data.get(ATTR_ARG_NAME), StringAttr):
        return attrs.data[ATTR_ARG_NAME].data
    return default


class OutputNameError(FeedError, KeyError):
    """An output name a function does not have (also a ``KeyError``)."""

    def __str__(self) -> str:
        return str(self.args[0])


class Outputs(dict):
    """``feed``'s result: output name -> array; a wrong name says which exist."""

    def __missing__(self, key):
        raise OutputNameError(f"no output named {key!r}; the outputs are {list(self)}")


def _to_numpy(value: Any, arg: Argument, where: str) -> np.ndarray:
    """``value`` (numpy array, torch tensor, nested lists) as a numpy array."""
    if type(value).__module__.startswith("torch"):
        import torch

        if not isinstance(value, torch.Tensor):
            raise FeedError(f"{where}: expected an array or tensor, got {value!r}")
        if value.is_meta:
            raise FeedError(f"{where}: a meta tensor holds no data; feed real values")
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            if str(arg.type.element_type) != "bf16":
                raise FeedError(
                    f"{where}: has dtype torch.bfloat16, expected {arg.dtype} "
                    f"({arg.type}); convert it with .to(torch.float32)"
                )
            value = value.float()  # bf16 values travel as float32 (exact)
        try:
            return value.resolve_conj().resolve_neg().numpy()
        except (TypeError, RuntimeError) as e:
            raise FeedError(f"{where}: cannot read this tensor: {e}") from None
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as e:
        raise FeedError(f"{where}: not an array: {e}") from None


class Function:
    """One ``func.func`` of a module: signature, and execution by the interpreter."""

    def __init__(self, module: Module, op: FuncOp):
        self._module = module
        self.op = op

    @property
    def name(self) -> str:
        return self.op.sym_name.data

    def _arguments(self, types, attrs, prefix: str) -> Arguments:
        args = []
        for i, t in enumerate(types):
            a = attrs.data[i] if attrs is not None else None
            if not isinstance(t, TensorType):
                raise HbirError(f"function @{self.name}: argument {i} is not a tensor")
            name = _arg_name(a, f"_{prefix}_{i}")
            args.append(Argument.of(name, t, a, self, prefix == "input"))
        return Arguments(args)

    @property
    def inputs(self) -> Arguments:
        ft = self.op.function_type
        return self._arguments(ft.inputs.data, self.op.arg_attrs, "input")

    @property
    def outputs(self) -> Arguments:
        ft = self.op.function_type
        return self._arguments(ft.outputs.data, self.op.res_attrs, "output")

    def _check_inputs(
        self, feed: Mapping[str, Any]
    ) -> tuple[list[np.ndarray], int | None]:
        """The inputs as C-contiguous arrays, and the batch size when every input
        has a leading dimension of N where the function's has 1 (else None)."""
        arrays = self._exact_arrays(feed)
        if arrays is not None:
            return arrays, None
        inputs = self.inputs
        if not isinstance(feed, Mapping):
            example = ", ".join(f"{n!r}: x{i}" for i, n in enumerate(inputs.names))
            raise FeedError(
                f"@{self.name}: feed takes a dict of named inputs, "
                f"{{{example}}}, got {type(feed).__name__}; to pass inputs by "
                f"position, call the function: f(x)"
            )
        missing = [n for n in inputs.names if n not in feed]
        extra = [n for n in feed if n not in inputs.names]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing inputs {missing}")
            if extra:
                parts.append(f"unexpected inputs {extra}")
            raise FeedError(
                f"@{self.name}: {'; '.join(parts)}; expected {inputs.names}"
            )
        arrays = []
        for arg in inputs:
            x = _to_numpy(feed[arg.name], arg, f"@{self.name}: input '{arg.name}'")
            if tuple(x.shape) != arg.shape and not _is_batch_of(x.shape, arg.shape):
                raise shape_error(f"@{self.name}", arg.name, x.shape, arg.shape)
            if x.dtype != arg.dtype:
                raise FeedError(
                    f"@{self.name}: input '{arg.name}' has dtype {x.dtype}, "
                    f"expected {arg.dtype}"
                )
            # (np.ascontiguousarray would make a rank-0 input 1-d)
            arrays.append(x if x.flags.c_contiguous else x.copy(order="C"))
        pairs = [(a.name, a.shape) for a in inputs]
        outputs = [(o.name, o.shape) for o in self.outputs]
        return arrays, batch_size(f"@{self.name}", pairs, arrays, outputs)

    def _exact_arrays(self, feed: Any) -> list[np.ndarray] | None:
        """The fast path of ``_check_inputs``: when ``feed`` is a dict of exactly
        the input names to C-contiguous numpy arrays of the exact dtypes and
        shapes, those arrays (what the full check returns for it); else None."""
        names, types, _ = self._signature()
        if type(feed) is not dict or len(feed) != len(names):
            return None
        arrays = []
        for name, (dtype, shape) in zip(names, types, strict=True):
            x = feed.get(name)
            if (
                type(x) is not np.ndarray
                or x.dtype != dtype
                or x.shape != shape
                or not x.flags.c_contiguous
            ):
                return None
            arrays.append(x)
        return arrays

    def _signature(self) -> tuple[list[str], list[tuple[np.dtype, tuple]], list[str]]:
        """(input names, inputs' (dtype, shape), output names): what ``feed``
        reads on every call, cached on the ``func.func`` for as long as its
        properties (its type, its argument and result attributes) are equal."""
        op = self.op
        cached = op.__dict__.get("_hbir_signature")
        if cached is None or cached[0] != op.properties:
            inputs = self.inputs
            types = [(a.dtype, a.shape) for a in inputs]
            cached = dict(op.properties), (inputs.names, types, self.outputs.names)
            op.__dict__["_hbir_signature"] = cached
        return cached[1]

    def feed(
        self, inputs: Mapping[str, Any], on_op=None, *, reference: bool = False
    ) -> dict[str, np.ndarray]:
        """Run the function on named inputs (numpy arrays or torch tensors).

        A converted model (``quantized.bc``) runs its compiled program, the one
        ``model.hbm`` holds, on the simulated NPU (``hbir/fast_feed.py``); other
        models run as the interpreter's prepared plan. ``reference=True`` runs the
        interpreter's definition instead (op by op, no fusion: the engine every
        fast path is proved against, which the verification tools compare with);
        ``on_op(op, results)`` is called after every op, and implies it.

        A function exported with batch 1 also takes a batch: every input with a
        leading dimension of N instead of 1. A converted model's compiled
        program runs the N samples at once (``runtime/npu_batch.py``); the
        interpreter's plan and reference run one sample at a time (``on_op``
        is called per sample). Each output comes back with the N results
        stacked along that dimension.

        Outputs come back in the inputs' kind: torch tensors when an input is
        a tensor, numpy arrays otherwise.
        """
        arrays, batch = self._check_inputs(inputs)
        results = None
        if batch is None:
            results = self._run(arrays, on_op, reference)
        elif on_op is None and not reference:  # quantized.bc: the batch at once
            from hbir import fast_feed

            results = fast_feed.run(self._module._op, self.name, arrays, batch)
        if results is None:
            run = lambda xs: self._run(xs, on_op, reference)  # noqa: E731
            results = sample_by_sample(run, arrays, batch)
        outputs = Outputs(zip(self._signature()[2], results, strict=True))
        if not wants_torch(inputs):  # (the fast path: numpy in, numpy out)
            return outputs
        bf16 = [o.name for o in self.outputs if str(o.type.element_type) == "bf16"]
        return in_kind(outputs, True, bf16)

    def _run(
        self, arrays: list[np.ndarray], on_op, reference: bool = False
    ) -> list[np.ndarray]:
        from hbir import fast_feed
        from hbir.runtime.interpreter import run_function

        if on_op is None and not reference:  # quantized.bc: its compiled program
            results = fast_feed.run(self._module._op, self.name, arrays)
            if results is not None:
                return results
        results = run_function(
            self.op, arrays, rounding=self._module.rounding, on_op=on_op
        )
        # An output that is (a view of) an input is copied: the caller's array
        # must not come back as a result.
        return [
            y.copy() if any(np.may_share_memory(y, x) for x in arrays) else y
            for y in results
        ]

    def __call__(self, *arrays: Any):
        """Positional call: ``f(x)`` -> one array, or a tuple for several outputs."""
        names = self.inputs.names
        if len(arrays) != len(names):
            raise FeedError(
                f"@{self.name} takes {len(names)} inputs {names}, got {len(arrays)}"
            )
        out = list(self.feed(dict(zip(names, arrays, strict=True))).values())
        return out[0] if len(out) == 1 else tuple(out)

    def remove_io_op(
        self,
        op_types: Sequence[str] | None = None,
        op_names: Sequence[str] | None = None,
    ) -> list[str]:
        """Remove Quantize / Dequantize / Transpose / Cast / Reshape / Softmax ops at
        the inputs and outputs (``passes/remove_io_op.py``); the names removed."""
        from hbir.passes.remove_io_op import remove_io_op

        types, names = list(op_types or ()), list(op_names or ())
        removed = self._run_pass(
            "remove-io-op", lambda m: remove_io_op(m, self.name, types, names)
        )
        for name in removed:
            print(f"Remove op {name} successfully")
        return removed

    def _run_pass(self, name: str, edit) -> Any:
        """Run an input/output edit (a pass's function) on the module in place,
        then verify it."""
        from hbir.diagnostics import verify

        result = edit(self._module._op)
        verify(self._module._op, filename=f"after {name}")
        return result

    def statistics(self) -> dict[str, int]:
        """Op name -> count inside this function (the terminator excluded)."""
        counts: dict[str, int] = {}
        for op in self.op.walk():
            if op is self.op or op.name == "func.return":
                continue
            counts[op.name] = counts.get(op.name, 0) + 1
        return dict(sorted(counts.items()))

    def __repr__(self) -> str:
        return f"<Function @{self.name} inputs={self.inputs} outputs={self.outputs}>"


class AsmView:
    """``Module.module``: the underlying ModuleOp plus ``get_asm``.

    Attribute access falls through to the xDSL ``ModuleOp``.
    """

    def __init__(self, op: ModuleOp):
        self.op = op

    @property
    def operation(self) -> AsmView:
        return self

    def get_asm(
        self,
        enable_debug_info: bool = False,
        pretty_debug_info: bool = False,
        pretty: bool = False,
        generic: bool = False,
    ) -> str:
        """The module as text, by default in the reference toolchain's form.

        ``%N`` numbers are the op IDs the tools use (``hbir/asm.py``).
        ``enable_debug_info=True`` adds every op's ``loc(...)``;
        ``pretty_debug_info`` is accepted as the reference spells it (locations
        always print inline, in the form that parses back). ``pretty=True`` gives
        the custom op forms ``hbir-opt`` prints, ``generic=True`` xDSL's generic
        form of every op.
        """
        del pretty_debug_info
        if pretty or generic:
            return files.print_module(
                self.op, generic=generic, debuginfo=enable_debug_info
            )
        from hbir.asm import print_reference

        return print_reference(self.op, debuginfo=enable_debug_info)

    def __getattr__(self, name: str):
        return getattr(self.op, name)

    def __str__(self) -> str:
        return self.get_asm()


class Module:
    """An HBIR model: one ``builtin.module`` holding ``func.func`` functions."""

    def __init__(self, op: ModuleOp):
        if not isinstance(op, ModuleOp):
            raise TypeError(f"expected a ModuleOp, got {type(op).__name__}")
        self._op = op

    @classmethod
    def parse(cls, text: str, filename: str = "<string>") -> Module:
        """Parse and verify IR text (raises a located ``HbirError``)."""
        return cls(parse_module(make_context(), text, filename))

    @property
    def module(self) -> AsmView:
        return AsmView(self._op)

    @property
    def functions(self) -> list[Function]:
        return [
            Function(self, op)
            for op in self._op.body.block.ops
            if isinstance(op, FuncOp)
        ]

    @property
    def graphs(self) -> list[Function]:
        """The reference's other name for ``functions``."""
        return self.functions

    def __getitem__(self, key: int | str) -> Function:
        functions = self.functions
        if isinstance(key, int):
            return functions[key]
        for f in functions:
            if f.name == key:
                return f
        raise KeyError(f"no function @{key}; have {[f.name for f in functions]}")

    def clone(self) -> Module:
        return Module(self._op.clone())

    # ---- module attributes
    def _attr(self, name: str) -> Attribute | None:
        return self._op.attributes.get(name)

    def _flag(self, name: str, default: bool) -> bool:
        attr = self._attr(name)
        if isinstance(attr, IntegerAttr):  # BoolAttr is an i1 IntegerAttr
            return bool(attr.value.data)
        return default

    @property
    def march(self) -> str | None:
        attr = self._attr(ATTR_MARCH)
        return attr.data if isinstance(attr, StringAttr) else None

    @property
    def prepared_march(self) -> str | None:
        """The march ``set_march`` chose when the qat.bc was prepared / exported
        (None: none was set); convert refuses another."""
        attr = self._attr(ATTR_PREPARED_MARCH)
        return attr.data if isinstance(attr, StringAttr) else None

    @property
    def _legacy_round(self) -> bool:
        return self._flag(ATTR_LEGACY_ROUND, False)

    @property
    def _high_precision_qpp(self) -> bool:
        return self._flag(ATTR_HIGH_PRECISION_QPP, False)

    @property
    def _fuse_requantize(self) -> bool:
        return self._flag(ATTR_FUSE_REQUANTIZE, True)

    @property
    def rounding(self) -> str:
        from hbir.runtime import numerics

        return numerics.HALF_UP if self._legacy_round else numerics.HALF_EVEN

    def __repr__(self) -> str:
        names = [f.name for f in self.functions]
        return f"<hbir.Module functions={names}>"


def run_dataset(
    function: Any,
    loader: Iterable[Any],
    *,
    progress: bool = True,
    total: int | None = None,
) -> Iterator[Outputs]:
    """Feed every item of ``loader`` to ``function``, yielding each result.

    An item is what ``feed`` takes (a dict of named inputs), a tuple / list of
    arrays in input order, or one array for a one-input function; a batch (leading
    dimension N where the function has 1) gives batched outputs, in the item's
    kind (torch tensors for tensors). Results are yielded one item at a time,
    so memory stays bounded by one item's results unless the caller keeps
    them. ``function`` is a ``Function`` or a compiled model's function
    (``hbm[0]``); a module or an ``Hbm`` stands for its only function. With
    ``progress`` a tqdm bar counts the items (``total`` defaults to
    ``len(loader)`` when the loader has one)::

        for out in hbir.run_dataset(quantized[0], images):
            logits = out["_output_0"]
    """
    if hasattr(function, "functions"):  # a Module, or a compiled model (Hbm)
        functions = function.functions
        if len(functions) != 1:
            names = [f.name for f in functions]
            raise FeedError(
                f"run_dataset: the model has functions {names}; pass one, e.g. "
                f"model[{names[0]!r}]"
            )
        function = functions[0]
    if not callable(getattr(function, "feed", None)):
        raise FeedError(
            f"run_dataset takes an hbir.Module, an hbir.Hbm or one of their "
            f"functions, got {type(function).__name__}"
        )
    names = [a.name for a in function.inputs]
    if total is None and hasattr(loader, "__len__"):
        total = len(loader)
    if progress:
        from tqdm import tqdm

        loader = tqdm(loader, desc=f"@{function.name}", total=total, unit="item")
    for index, item in enumerate(loader):
        yield function.feed(_named_inputs(item, names, f"run_dataset item {index}"))


def _named_inputs(item: Any, names: list[str], where: str) -> Mapping[str, Any]:
    if isinstance(item, Mapping):
        return item
    if isinstance(item, tuple | list):
        if len(item) != len(names):
            raise FeedError(
                f"{where}: has {len(item)} arrays, the function takes "
                f"{len(names)} inputs {names}"
            )
        return dict(zip(names, item, strict=True))
    if len(names) != 1:
        raise FeedError(
            f"{where}: one array for a function with inputs {names}; yield a "
            f"dict or a tuple in input order"
        )
    return {names[0]: item}


def load(path: str | os.PathLike) -> Module:
    """Load a ``.bc`` or ``.mlir`` file (raises a located ``HbirError``)."""
    text = files.read_text(path)
    return Module(parse_module(make_context(), text, os.fspath(path)))


class ModelTypeError(HbirError, TypeError):
    """Something else where an ``hbir.Module`` is expected (also a ``TypeError``)."""


# What to do instead, per call, when it is handed a torch model.
_TORCH_FIX = {
    "convert": "export it first: qat_bc = hbir.quantization.export(qat_model, "
    "example_inputs), then hbir.convert(qat_bc, march)",
    "save": "hbir.save writes HBIR models: export it first "
    "(hbir.quantization.export(qat_model, example_inputs)), or save the torch "
    "model with torch.save(model.state_dict(), 'qat.pt')",
    "statistics": "export it first: hbir.statistics(hbir.quantization.export("
    "qat_model, example_inputs))",
    "compile": "export and convert it first: hbir.compile(hbir.convert("
    "hbir.quantization.export(qat_model, example_inputs), march), 'model.hbm')",
    "visualize": "export it first: hbir.visualize(hbir.quantization.export("
    "qat_model, example_inputs), html_file='model.html')",
}


def require_module(value: Any, call: str, kind: str) -> None:
    """Raise ``ModelTypeError`` naming the fix unless ``value`` is a ``Module``."""
    if isinstance(value, Module):
        return
    got = type(value).__name__
    if type(value).__module__.startswith("torch") or hasattr(value, "state_dict"):
        fix = _TORCH_FIX[kind]
        raise ModelTypeError(f"{call}: got a torch model ({got}): {fix}")
    if isinstance(value, str | os.PathLike):
        raise ModelTypeError(
            f"{call}: got a path ({os.fspath(value)!r}), expected an hbir.Module: "
            f"load it first with hbir.load({os.fspath(value)!r})"
        )
    raise ModelTypeError(
        f"{call}: expected an hbir.Module (from hbir.load or "
        f"hbir.quantization.export), got {got}"
    )


def save(module: Module, path: str | os.PathLike) -> None:
    """Save to ``.bc`` (compressed container) or ``.mlir`` (text)."""
    require_module(module, "hbir.save", "save")
    files.save_module(module._op, path)


def statistics(
    module: Module, by_device: bool = False
) -> dict[str, dict[str, int]] | dict[str, dict[str, dict[str, int]]]:
    """Op counts per function: ``{"forward": {"hbir.conv2d": 3, ...}}``.

    Also prints them as the reference toolchain does, per function::

        ops encountered in func @forward
        \t hbir.conv2d : 3

    With ``by_device=True`` the counts are split by where each op runs:
    ``{"forward": {"npu": {...}, "cpu": {...}}}`` (see ``op_device``).
    """
    require_module(module, "hbir.statistics", "statistics")
    counts = {f.name: f.statistics() for f in module.functions}
    for function, ops in counts.items():
        print(f"ops encountered in func @{function}")
        for name, count in ops.items():
            print(f"\t {name} : {count}")
    if not by_device:
        return counts
    result = {}
    for f in module.functions:
        counts: dict[str, dict[str, int]] = {"npu": {}, "cpu": {}}
        for op in f.op.walk():
            if op is f.op or op.name == "func.return":
                continue
            device = counts[op_device(op)]
            device[op.name] = device.get(op.name, 0) + 1
        result[f.name] = {k: dict(sorted(v.items())) for k, v in counts.items()}
    return result
