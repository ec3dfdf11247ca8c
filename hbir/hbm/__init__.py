"""Compiled models: ``model.hbm`` and the ``Hbm`` object that runs it.

``hbir.compile(quantized, "model.hbm", march)`` writes the file and returns an
:class:`Hbm`; ``hbir.load("model.hbm")`` reads one back (verified once by the
loader, ``container.read``). ``hbm[0]`` / ``hbm["forward"]`` is an
:class:`HbmFunction`: ``.inputs`` / ``.outputs`` describe its tensors (names,
shapes, dtypes, layouts, scales) and ``.feed({"_input_0": x})["_output_0"]``
runs it on the simulated NPU (``runtime/npu_sim.py``), bit for bit what
``quantized.bc`` computes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from hbir.errors import HbirError
from hbir.runtime.hbm_program import FunctionCode, Program, TensorDesc

__all__ = ["Hbm", "HbmFunction", "load"]


def _island(text: str):
    """A CPU island's ``(func.func, rounding mode)``, for the simulator."""
    from hbir.module import Module

    module = Module.parse(text, "<island>")
    if len(module.functions) != 1:
        raise HbirError(
            f"a CPU island holds one function, this one {len(module.functions)}"
        )
    return module.functions[0].op, module.rounding


class HbmFunction:
    """One function of a compiled model, run by the simulated NPU."""

    def __init__(self, code: FunctionCode):
        from hbir.runtime.npu_sim import FunctionSim

        self.code = code
        # Prepared now, so that an island that does not match its buffers is an
        # error when the model is loaded, not when it first runs.
        self._sim = FunctionSim(code, [_island(text) for text in code.islands])

    @property
    def name(self) -> str:
        return self.code.name

    @property
    def inputs(self) -> tuple[TensorDesc, ...]:
        return self.code.inputs

    @property
    def outputs(self) -> tuple[TensorDesc, ...]:
        return self.code.outputs

    def __repr__(self) -> str:
        return (
            f"<HbmFunction @{self.name} inputs={[d.name for d in self.inputs]} "
            f"outputs={[d.name for d in self.outputs]}>"
        )

    def _check_inputs(
        self, feed: Mapping[str, Any]
    ) -> tuple[list[np.ndarray], int | None]:
        """The inputs as arrays, and the batch size when every input is a batch
        of its batch-1 shape (else None)."""
        from hbir.module import FeedError, batch_size

        names = [d.name for d in self.inputs]
        if not isinstance(feed, Mapping):
            example = ", ".join(f"{n!r}: x{i}" for i, n in enumerate(names))
            raise FeedError(
                f"@{self.name}: feed takes a dict of named inputs, {{{example}}}, "
                f"got {type(feed).__name__}; to pass inputs by position, call the "
                "function: f(x)"
            )
        missing = [n for n in names if n not in feed]
        extra = [n for n in feed if n not in names]
        if missing or extra:
            parts = [f"missing inputs {missing}"] if missing else []
            parts += [f"unexpected inputs {extra}"] if extra else []
            raise FeedError(f"@{self.name}: {'; '.join(parts)}; expected {names}")
        arrays = [self._array(feed[d.name], d) for d in self.inputs]
        pairs = [(d.name, d.shape) for d in self.inputs]
        outputs = [(d.name, d.shape) for d in self.outputs]
        return arrays, batch_size(f"@{self.name}", pairs, arrays, outputs)

    def _array(self, value: Any, desc: TensorDesc) -> np.ndarray:
        from hbir.module import FeedError, _is_batch_of, shape_error

        where = f"@{self.name}: input '{desc.name}'"
        if type(value).__module__.startswith("torch"):
            try:
                value = value.detach().cpu().resolve_conj().resolve_neg().numpy()
            except (AttributeError, TypeError, RuntimeError) as e:
                raise FeedError(f"{where}: cannot read this tensor: {e}") from None
        try:
            x = np.asarray(value)
        except (TypeError, ValueError) as e:
            raise FeedError(f"{where}: not an array: {e}") from None
        if tuple(x.shape) != desc.shape and not _is_batch_of(x.shape, desc.shape):
            raise shape_error(f"@{self.name}", desc.name, x.shape, desc.shape)
        if x.dtype != np.dtype(desc.dtype):
            raise FeedError(f"{where} has dtype {x.dtype}, expected {desc.dtype}")
        return x

    def feed(self, inputs: Mapping[str, Any], on_instruction=None) -> dict:
        """Run on named inputs (numpy arrays or torch tensors): output name ->
        array, in output order. ``on_instruction(index, instruction, debug_entry,
        results)`` is called after each instruction (``results``: copies of its
        result buffers).

        A function compiled with batch 1 also takes a batch (every input with a
        leading dimension of N instead of 1): the program runs on the N samples
        at once (``runtime/npu_batch.py``: each layer one kernel call for the
        batch where its kernel allows; with ``on_instruction``, once per
        sample) and each output stacks the N results. Outputs come back in the
        inputs' kind: torch tensors when an input is a tensor, numpy arrays
        otherwise."""
        from hbir.module import Outputs, in_kind, sample_by_sample, wants_torch

        arrays, batch = self._check_inputs(inputs)
        with self._sim.lock:  # (one run at a time: the simulator's memories)
            batched = None
            if batch is not None and on_instruction is None:
                batched = self._sim.batched(batch)
            if batch is None:
                results = self._sim.run(arrays, on_instruction)
            elif batched is not None:
                results = batched.run([np.ascontiguousarray(x) for x in arrays])
            else:
                run = lambda xs: self._sim.run(xs, on_instruction)  # noqa: E731
                results = sample_by_sample(run, arrays, batch)
        outputs = Outputs(zip((d.name for d in self.outputs), results, strict=True))
        return in_kind(outputs, wants_torch(inputs))

    def __call__(self, *arrays: Any):
        """Positional call: ``f(x)`` -> one array, or a tuple for several outputs."""
        from hbir.module import FeedError

        names = [d.name for d in self.inputs]
        if len(arrays) != len(names):
            raise FeedError(
                f"@{self.name} takes {len(names)} inputs {names}, got {len(arrays)}"
            )
        out = list(self.feed(dict(zip(names, arrays, strict=True))).values())
        return out[0] if len(out) == 1 else tuple(out)


class Hbm:
    """A compiled model (``model.hbm``): its program and its functions."""

    def __init__(self, program: Program | str | os.PathLike, path: str | None = None):
        if isinstance(program, str | os.PathLike):  # the reference's Hbm(path)
            from hbir.hbm import container

            program, path = container.read(program), os.fspath(program)
        self.program = program
        self.path = path  # the file it was read from or written to, if any
        self.functions = [HbmFunction(code) for code in program.functions]

    @property
    def march(self) -> str:
        return self.program.march

    @property
    def graphs(self) -> list[HbmFunction]:
        """The reference's other name for ``functions``."""
        return self.functions

    def __getitem__(self, key: int | str) -> HbmFunction:
        if isinstance(key, int):
            return self.functions[key]
        for f in self.functions:
            if f.name == key:
                return f
        raise KeyError(f"no function @{key}; have {[f.name for f in self.functions]}")

    def save(self, path: str | os.PathLike) -> None:
        """Write the model to ``path`` (a ``.hbm`` file)."""
        from hbir.hbm import container

        container.write(self.program, path)
        self.path = os.fspath(path)

    def __repr__(self) -> str:
        names = [f.name for f in self.functions]
        return f"<hbir.Hbm march={self.march} functions={names}>"


def load(path: str | os.PathLike):
    """``hbir.load``: a ``.hbm`` file as an :class:`Hbm` (verified by the
    loader before anything runs), any other model file as an ``hbir.Module``."""
    if os.fspath(path).endswith(".hbm"):
        from hbir.hbm import container

        return Hbm(container.read(path), os.fspath(path))
    from hbir.module import load as load_module

    return load_module(path)
