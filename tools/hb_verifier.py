"""hb_verifier: do two models compute the same outputs on the same inputs?

    hb_verifier -m quantized.bc,model.hbm -i input.npy [-i input2.npy] [-c 5]
    hb_verifier -m qat.bc,quantized.bc -i input.npy [--dump-all-nodes DIR]

As the reference toolchain documents its own ``hb_verifier``, a pair with an
``.hbm`` prints the consistency table (per output: ``Consistency``, every element
within ``10**-c``; the mismatched elements; the largest absolute and relative
differences), any other pair (``.bc`` / ``.mlir``) the cosine-similarity
table. Beyond the reference, our contract is exact, so the table has a ``Bit
Identical`` column and a verdict line follows it (``bit-identical: ...`` or
``not bit-identical: <output>: K of N elements differ``), and a difference is
traced to its origin: for a ``.bc,.hbm`` pair the first instruction whose value
differs from the ``.bc`` op it computes (its op ID, op and torch source line, from
the ``.hbm`` debug table; only when the ``.hbm`` was compiled from that ``.bc``,
whose op IDs its debug table uses); for two ``.bc`` models the first torch call
whose value differs. Integer codes of one model against float values of the other
are compared dequantized (the ``.hbm`` records each output's scale).
``--dump-all-nodes`` writes every op's value of both models as ``.npy`` files with
an ``index.json``.

Inputs: one ``-i`` per model input, in input order, or several in one ``-i``
separated by commas (an NV12 input is two planes: ``-i y.npy,uv.npy``); ``name:path``
binds a file to a named input. Both models get the same inputs, except as the
reference documents: when the first ``-i`` alone feeds every input of the first
model, a second ``-i`` is the second model's own data (the runtime data of a
model whose Quantize / Dequantize nodes were removed).

Board options (``--ip``, ``-b``, ``-u``, ``-p``, ``--port``, ``--remote-root``,
``--skip-arm``, ``--skip-sim``, ``-s``) are accepted as the reference spells them
and reported as not applicable: hbir runs every model on its simulator (``--ip
None`` is the reference's way to ask for the simulator).

Exit status (as ``diff``'s): 0 consistent (the cosine table always), 1 the
consistency check failed, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hbir.errors import HbirError

MODEL_SUFFIXES = (".bc", ".mlir", ".hbm")
HEADERS_CONSISTENCY = (
    "OutputName",
    "Consistency",
    "Mismatched Elements",
    "Max Abs Diff",
    "Max Rel Diff",
    "Bit Identical",
)
# "Consine" is the reference's spelling, kept so scripts that read it still work.
HEADERS_COSINE = ("NodeName", "TensorName", "ConsineSimilarity")


class VerifierError(HbirError):
    """Bad command-line input: a model or input file hb_verifier cannot use."""


@dataclass
class Model:
    """One model of the pair: its file, kind and first function."""

    path: str
    kind: str  # "bc" (also .mlir) or "hbm"
    function: Any  # hbir.Function or HbmFunction

    @property
    def label(self) -> str:
        return os.path.basename(self.path)

    def signature(self, which: str) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        """(name, shape, dtype) of each input or output."""
        args = getattr(self.function, which)
        return [(a.name, tuple(a.shape), np.dtype(a.dtype)) for a in args]


def _outputs(model: Model, feed) -> dict:
    """A model's outputs: a .bc as the interpreter defines it (its fast feed is
    the compiled program itself, which would compare model.hbm with itself)."""
    if model.kind == "bc":
        return model.function.feed(feed, reference=True)
    return model.function.feed(feed)


def load_model(path: str) -> Model:
    suffix = os.path.splitext(path)[1]
    if suffix not in MODEL_SUFFIXES:
        raise VerifierError(
            f"{path}: unsupported model type '{suffix}': expected one of "
            f"{', '.join(MODEL_SUFFIXES)}"
        )
    if not os.path.isfile(path):
        raise VerifierError(f"{path}: no such file")
    import hbir

    return Model(path, "hbm" if suffix == ".hbm" else "bc", hbir.load(path)[0])


def _read_npy(path: str) -> np.ndarray:
    if not path.endswith(".npy"):
        raise VerifierError(f"{path}: inputs are .npy files (numpy.save)")
    try:
        value = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise VerifierError(f"{path}: no such file") from None
    except (OSError, ValueError, EOFError) as e:
        raise VerifierError(f"{path}: not a readable .npy file: {e}") from None
    if not isinstance(value, np.ndarray):
        raise VerifierError(f"{path}: not a .npy array file")
    return value


def read_inputs(specs: Sequence[str], model: Model) -> dict[str, np.ndarray]:
    """The feed of ``model`` from ``-i`` values (see the module), every file
    checked against the input it feeds."""
    items = [item for spec in specs for item in spec.split(",") if item]
    inputs = model.signature("inputs")
    names = [name for name, _, _ in inputs]
    if len(items) != len(inputs):
        raise VerifierError(
            f"{model.label} has {len(inputs)} inputs {names}, got {len(items)} "
            "input files: give one per input, in order (-i a.npy -i b.npy or "
            "-i a.npy,b.npy)"
        )
    feed: dict[str, np.ndarray] = {}
    files: dict[str, str] = {}
    for position, item in enumerate(items):
        name, sep, path = item.rpartition(":")
        if not sep:
            name = names[position]
        elif name not in names:
            raise VerifierError(f"{item}: {model.label} has no input '{name}': {names}")
        if name in feed:
            raise VerifierError(f"{item}: input '{name}' is given twice")
        feed[name], files[name] = _read_npy(path), path
    for name, shape, dtype in inputs:
        x = feed[name]
        if x.shape != shape or x.dtype != dtype:
            raise VerifierError(
                f"{files[name]}: holds {x.dtype}{list(x.shape)}, but input "
                f"'{name}' of {model.label} is {dtype}{list(shape)}"
            )
    return feed


def read_feeds(
    specs: Sequence[str], a: Model, b: Model
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each model's feed from the ``-i`` values (see the module): a second ``-i``
    is the second model's own data when the first feeds all of the first's
    inputs; otherwise both models get every ``-i`` and must take the same."""
    first = [item for item in specs[0].split(",") if item] if specs else []
    if len(specs) == 2 and len(first) == len(a.signature("inputs")):
        check_pair(a, b, same_inputs=False)
        return read_inputs(specs[:1], a), read_inputs(specs[1:], b)
    check_pair(a, b)
    feed = read_inputs(specs, a)
    return feed, feed


def check_pair(a: Model, b: Model, same_inputs: bool = True) -> None:
    """The two models must give as many outputs and (``same_inputs``: fed the
    same data) take the same inputs."""
    for which in ("inputs", "outputs") if same_inputs else ("outputs",):
        sa, sb = a.signature(which), b.signature(which)
        if len(sa) != len(sb):
            raise VerifierError(
                f"{a.label} has {len(sa)} {which}, {b.label} has {len(sb)}"
            )
        if which == "outputs":
            return
        for (name, shape, dtype), (_, shape_b, dtype_b) in zip(sa, sb, strict=True):
            if (shape, dtype) != (shape_b, dtype_b):
                raise VerifierError(
                    f"input '{name}' is {dtype}{list(shape)} in {a.label} but "
                    f"{dtype_b}{list(shape_b)} in {b.label}: compare models that "
                    "take the same inputs"
                )


# ------------------------------------------------------------------ tables


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A boxed table as the reference prints it (prettytable's default style)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells):
        padded = (c.ljust(w) for c, w in zip(cells, widths, strict=True))
        return "| " + " | ".join(padded) + " |"

    return "\n".join([rule, line(headers), rule, *map(line, rows), rule])


def _number(v: float) -> str:
    return f"{v:.6g}"


def consistency_row(name: str, a: np.ndarray, b: np.ndarray, digits: int) -> list:
    """One row of the consistency table; ``a`` is the reference side.

    Consistent: every element within ``10**-digits`` of the other (no relative
    tolerance, unlike the reference's ``np.allclose``: the contract is exact)."""
    if a.shape != b.shape:
        shapes = f"shape {list(a.shape)} vs {list(b.shape)}"
        return [name, "False", shapes, "", "", "False"]
    x, y = a.astype(np.float64), b.astype(np.float64)
    same = _same(x, y)
    diff = np.where(same, 0.0, np.abs(x - y))
    mismatched = int(np.count_nonzero(~same))
    max_abs = float(diff.max(initial=0.0))
    max_rel = float((diff / np.maximum(np.abs(x), 1e-10)).max(initial=0.0))
    consistent = bool(np.all(diff <= 10.0**-digits))
    share = 100.0 * mismatched / a.size if a.size else 0.0
    return [
        name,
        str(consistent),
        f"{mismatched}/{a.size} ({share:.2f}%)",
        _number(max_abs),
        _number(max_rel),
        str(mismatched == 0),
    ]


def _same(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise equality, a NaN equal to a NaN."""
    return (x == y) | (np.isnan(x) & np.isnan(y))


def comparable(
    a: np.ndarray, b: np.ndarray, models: Sequence[Model], index: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """Output ``index`` of both models as like with like: integer codes of one
    side against float values of the other are dequantized with the scale the
    ``.hbm`` records for that output; ``""``, or why they cannot be compared."""
    if _is_int(a) == _is_int(b):
        return a, b, ""
    side = 0 if _is_int(a) else 1
    model, codes = models[side], (a, b)[side]
    scales = ()
    if model.kind == "hbm":
        desc = model.function.outputs[index]
        scales, zeros = desc.scales, desc.zeros or (0,)
    else:  # a .bc whose Dequantize was removed records its output grid
        grid = model.function.outputs[index].quant_info
        if grid is not None:
            scales, zeros = grid.scales, grid.zeros or (0,)
    if len(scales) != 1:
        other = (b, a)[side]
        return (
            a,
            b,
            (
                f"{codes.dtype} codes in {model.label} against {other.dtype} values: "
                "no per-tensor scale to dequantize them with"
            ),
        )
    values = ((codes.astype(np.float64) - zeros[0]) * scales[0]).astype(np.float32)
    return (values, b, "") if side == 0 else (a, values, "")


def bit_verdict(
    names: Sequence[str], pairs: Sequence[tuple[np.ndarray, np.ndarray]]
) -> tuple[bool, str]:
    """Whether every output is bit-identical, and the sentence that says so (or
    which output differs first, in how many elements)."""
    for name, (x, y) in zip(names, pairs, strict=True):
        if x.shape != y.shape:
            return False, (
                f"not bit-identical: {name} has shape {list(y.shape)}, expected "
                f"{list(x.shape)}"
            )
        same = _same(x.astype(np.float64), y.astype(np.float64))
        if not same.all():
            return False, f"not bit-identical: {name}: {_difference(x, y)}"
    total = sum(x.size for x, _ in pairs)
    return True, f"bit-identical: all {total} elements of {len(pairs)} output(s)"


def _aligned(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``b`` in ``a``'s shape: as it is, NHWC <-> NCHW, a broadcast batch of 1, or
    flattened when only the sizes agree; None when nothing fits."""
    if a.shape == b.shape:
        return b
    if a.ndim == b.ndim == 4:
        for perm in ((0, 3, 1, 2), (0, 2, 3, 1)):
            if np.transpose(b, perm).shape == a.shape:
                return np.transpose(b, perm)
    if a.ndim == b.ndim and a.shape[1:] == b.shape[1:] and b.shape[0] == 1:
        return np.broadcast_to(b, a.shape)
    if a.size == b.size:
        return b.reshape(a.shape)
    return None


def cosine_row(node: str, name: str, a: np.ndarray, b: np.ndarray) -> list:
    from hbir.profiler.metrics import cosine

    b = _aligned(a, b)
    value = "shape mismatch" if b is None else _number(cosine(a, b))
    return [node, name, value]


def output_node(model: Model, index: int) -> str:
    """The torch call (or op) that produces output ``index`` of a ``.bc`` model."""
    from xdsl.ir import Operation

    from hbir.profiler.origin import origin_of

    owner = model.function.op.body.block.last_op.operands[index].owner
    if not isinstance(owner, Operation):
        return "input"  # the output is an input (a block argument)
    origin = origin_of(owner)
    return origin.module_path if origin is not None else owner.name


# ------------------------------------------------------------------ tracing


def compiled_from(bc: Model, hbm: Model) -> bool:
    """Whether ``hbm`` was compiled from ``bc``: its debug table names ops by the
    IDs of the quantized.bc it came from (``profiler/compile_stage.py``)."""
    from hbir.profiler.compile_stage import source_mismatch

    return not source_mismatch(bc.function, hbm.function)


def _where(op_id: int, op: str, loc: str) -> str:
    return f"%{op_id} {op}" + (f" at {loc}" if loc else "")


def first_instruction_mismatch(
    bc: Model, hbm: Model, feed, dump: Dump | None, sides: tuple[int, int]
) -> str | None:
    """Run both models op by op; the first instruction whose value differs from
    the ``.bc`` op it computes (``DebugEntry.value_of``), as a sentence (None:
    none differs). ``sides``: where ``bc`` and ``hbm`` dump to."""
    from hbir.dialects.op_ids import op_ids
    from hbir.runtime.hbm_opcodes import BY_NUMBER

    code = hbm.function.code
    wanted = {d.value_of for d in code.debug if d.value_of is not None}
    ids = {op: n for n, op in op_ids(bc.function.op).items()}
    ops = {n: op for op, n in ids.items()}
    values: dict[int, np.ndarray] = {}

    def on_op(op, results):
        n = ids.get(op)
        if n in wanted:
            values[n] = np.array(results[0], copy=True)
        if dump is not None and n is not None:
            dump.op(sides[0], n, op.name, _loc_of(op), results)

    bc.function.feed(feed, on_op=on_op)
    found: list[str] = []

    def on_instruction(index, instruction, debug, results):
        n = debug.value_of
        if n is None:
            return
        value = results[0]
        if debug.perm is not None:
            value = np.transpose(value, debug.perm)
        if dump is not None:
            dump.op(sides[1], n, debug.op, debug.loc, (value,))
        if found or n not in values:
            return
        expected = values[n]
        if expected.shape == value.shape and np.array_equal(
            expected, value, equal_nan=True
        ):
            return
        opcode = BY_NUMBER[instruction.opcode].name
        name = ops[n].name if n in ops else debug.op
        fused = [f"%{i} {ops[i].name}" for i in debug.op_ids if i != n and i in ops]
        fused_text = f" (fused with {', '.join(fused)})" if fused else ""
        found.append(
            f"first mismatching instruction: #{index} {opcode} computes "
            f"{_where(n, name + fused_text, debug.loc)}: "
            f"{_difference(expected, value)}"
        )

    hbm.function.feed(feed, on_instruction=on_instruction)
    return found[0] if found else None


def _dump_outputs_only(dump: Dump, models, out_a, out_b) -> None:
    """Nothing pairs the two models' ops: each model's outputs only."""
    for side, outs in enumerate((out_a, out_b)):
        for i, value in enumerate(outs):
            dump.op(side, -1 - i, "output", "", (value,))


def _difference(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"shape {list(b.shape)}, expected {list(a.shape)}"
    x, y = a.astype(np.float64), b.astype(np.float64)
    count = int(np.count_nonzero(~_same(x, y)))
    return (
        f"{count} of {a.size} elements differ, max abs diff "
        f"{_number(float(np.abs(x - y).max()))}"
    )


def first_layer_difference(a: Model, b: Model, feed, dump) -> str | None:
    """Run two ``.bc`` models; the first torch call (op origin, see
    ``hbir.profiler.origin``) of ``b`` whose value differs from ``a``'s, as a
    sentence (None: none differs). Codes compare with codes; codes compare with
    float values once dequantized on the float model's fake-quant grid."""
    from hbir.profiler import origin as og

    va, vb = (_layer_values(m, side, feed, dump) for side, m in enumerate((a, b)))
    grids = og.fake_quant_grids(a.function.op) | og.fake_quant_grids(b.function.op)
    for key, (op_b, y) in vb.items():
        if key not in va:
            continue
        op_a, x = va[key]
        if _is_int(x) != _is_int(y):
            grid = grids.get(key)
            codes = x if _is_int(x) else y
            if grid is None or not grid.fits(codes):
                continue  # codes of no known grid: nothing to compare
            x, y = (grid.dequantize(v) if _is_int(v) else v for v in (x, y))
        if x.shape == y.shape and np.array_equal(x, y, equal_nan=True):
            continue
        source = og.origin_of(op_b).source
        ids_a, ids_b = _ids(a), _ids(b)
        return (
            f"first differing op: {_where(ids_b[op_b], op_b.name, source)} in "
            f"{b.label} (torch call {og.key_text(key)}; %{ids_a[op_a]} "
            f"{op_a.name} in {a.label}): {_difference(x, y)}"
        )
    return None


def _is_int(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.integer)


def _layer_values(model: Model, side: int, feed, dump) -> dict:
    """Origin key -> (op, value) of the op whose result is that torch call's value
    (``hbir.profiler.origin.layer_ops``), in execution order."""
    from hbir.profiler.origin import layer_ops

    chosen = {op: key for key, op in layer_ops(model.function.op).items()}
    ids = _ids(model)
    values = {}

    def on_op(op, results):
        if op in chosen:
            values[chosen[op]] = (op, np.array(results[0], copy=True))
        if dump is not None and op in ids:
            dump.op(side, ids[op], op.name, _loc_of(op), results)

    model.function.feed(feed, on_op=on_op)
    return values


def _ids(model: Model) -> dict:
    from hbir.dialects.op_ids import op_ids

    return {op: n for n, op in op_ids(model.function.op).items()}


def _loc_of(op) -> str:
    from hbir.profiler.origin import origin_of

    origin = origin_of(op)
    if origin is None:
        return ""
    return f"{origin.source} ({origin.module_path})" if origin.source else str(origin)


class Dump:
    """``--dump-all-nodes``: each model's op values under ``<dir>/model1`` and
    ``<dir>/model2`` as ``%N_<op>.npy`` (op ID of the ``.bc`` numbering; an
    ``.hbm``'s instruction values in the op's layout, so files of one name
    compare), and ``<dir>/index.json`` listing them."""

    def __init__(self, folder: str, models: Sequence[Model]):
        self.folder = folder
        self.index = [{"model": m.path, "nodes": []} for m in models]
        for side in (0, 1):
            os.makedirs(os.path.join(folder, f"model{side + 1}"), exist_ok=True)

    def op(self, side: int, op_id: int, name: str, loc: str, results) -> None:
        for i, value in enumerate(results):
            suffix = f"#{i}" if len(results) > 1 else ""
            file = os.path.join(f"model{side + 1}", f"%{op_id}{suffix}_{name}.npy")
            np.save(os.path.join(self.folder, file), value)
            self.index[side]["nodes"].append(
                {
                    "id": op_id,
                    "result": i,
                    "op": name,
                    "loc": loc,
                    "shape": list(np.shape(value)),
                    "dtype": str(np.asarray(value).dtype),
                    "file": file,
                }
            )

    def close(self) -> None:
        with open(os.path.join(self.folder, "index.json"), "w") as f:
            json.dump(self.index, f, indent=1)


# ------------------------------------------------------------------ main

_OWN_INPUTS = (
    "each model was fed its own inputs (-i twice): no op-by-op trace across them"
)

# The reference's board options (hb_verifier.md): accepted, not applicable here.
BOARD_OPTIONS = {
    "board_ip": "-b/--board-ip",
    "username": "-u/--username",
    "password": "-p/--password",
    "port": "--port",
    "remote_root": "--remote-root",
}


def board_notes(ns: argparse.Namespace, paths: Sequence[str]) -> list[str]:
    """One line per board option given: what hbir does instead (see the module)."""
    notes = []
    ips = [] if ns.ip is None else ns.ip.split(",")
    if len(ips) > len(paths):
        raise VerifierError(
            f"--ip {ns.ip}: one entry per model ({len(paths)}), None for the simulator"
        )
    for path, ip in zip(paths, ips, strict=False):
        if ip.strip() not in ("None", "none", ""):
            runner = "simulator" if path.endswith(".hbm") else "interpreter"
            notes.append(
                f"--ip {ip.strip()} ({os.path.basename(path)}): board runs are not "
                f"applicable; it runs on the {runner}"
            )
    for attr, flag in BOARD_OPTIONS.items():
        if getattr(ns, attr) is not None:
            notes.append(f"{flag}: a board option, not applicable to the simulator")
    if ns.skip_arm:
        notes.append("--skip-arm: there is no board run to skip")
    if ns.skip_sim:
        notes.append("--skip-sim: the simulator is the only runner here; it runs")
    if ns.run_sim:
        notes.append("-s/--run-sim (deprecated): the simulator always runs")
    return [f"note: {n}" for n in notes]


def verify(
    paths: Sequence[str],
    inputs: Sequence[str],
    digits: int,
    dump_dir: str | None,
    strict: bool = False,
) -> int:
    """Print the table, the bit-identity verdict and the trace of a difference;
    the exit status: 0 consistent, 1 not (``strict``: 0 only when every output is
    bit-identical, as ``hbir verify`` decides)."""
    if len(paths) != 2:
        raise VerifierError(
            f"give exactly two models, -m MODEL1,MODEL2; got {len(paths)}: "
            f"{','.join(paths)}"
        )
    models = [load_model(p) for p in paths]
    a, b = models
    feed, feed_b = read_feeds(inputs, a, b)
    out_a, out_b = list(_outputs(a, feed).values()), list(_outputs(b, feed_b).values())
    own_inputs = feed_b is not feed
    names = [name for name, _, _ in a.signature("outputs")]
    dump = None if dump_dir is None else Dump(dump_dir, models)
    kinds = [m.kind for m in models]
    pairs, notes = [], []
    for i, (x, y) in enumerate(zip(out_a, out_b, strict=True)):
        x, y, why = comparable(x, y, models, i)
        pairs.append((x, y))
        if why:
            notes.append(f"{names[i]}: {why}")
    identical, verdict = bit_verdict(names, pairs)
    if "hbm" in kinds:
        rows = [
            consistency_row(n, x, y, digits)
            for n, (x, y) in zip(names, pairs, strict=True)
        ]
        print(table(HEADERS_CONSISTENCY, rows))
        status = 0 if all(r[1] == "True" for r in rows) else 1
        trace, untraced, unpaired = None, "", False
        if kinds == ["hbm", "hbm"]:
            untraced = "two .hbm files: no .bc op to trace the difference to"
        elif own_inputs:
            untraced = _OWN_INPUTS
            if dump is not None:
                _dump_outputs_only(dump, models, out_a, out_b)
                unpaired = True
        elif not identical or dump is not None:
            sides = (0, 1) if kinds[0] == "bc" else (1, 0)
            bc, hbm = models[sides[0]], models[sides[1]]
            if compiled_from(bc, hbm):
                trace = first_instruction_mismatch(bc, hbm, feed, dump, sides)
                untraced = (
                    f"every instruction with a debug value equals its op in "
                    f"{bc.label}: the difference arises in a tile or DMA instruction"
                )
            else:
                untraced = (
                    f"{hbm.label} was not compiled from {bc.label} (its debug table "
                    f"names other ops): give the quantized.bc it was compiled from to "
                    "trace a difference to an instruction"
                )
                if dump is not None:
                    _dump_outputs_only(dump, models, out_a, out_b)
                    unpaired = True
    else:
        rows = [
            cosine_row(output_node(a, i), n, x, y)
            for i, (n, (x, y)) in enumerate(zip(names, pairs, strict=True))
        ]
        print(table(HEADERS_COSINE, rows))
        trace, unpaired = None, False
        untraced = "no torch call's value differs: only the outputs do"
        if own_inputs:
            untraced = _OWN_INPUTS
            if dump is not None:
                _dump_outputs_only(dump, models, out_a, out_b)
                unpaired = True
        elif not identical or dump is not None:
            trace = first_layer_difference(a, b, feed, dump)
        status = 0
    for note in notes:
        print(note)
    print(verdict)
    if identical and trace is not None:
        trace = f"outputs bit-identical, but an intermediate value differs: {trace}"
    if trace is not None:
        print(trace)
    elif not identical or unpaired:
        print(untraced)
    if dump is not None:
        dump.close()
        print(f"per-op values of both models written to {dump_dir}")
    if strict:
        return 0 if identical else 1
    return status


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(
        prog="hb_verifier",
        description="Compare the outputs of two models on the same inputs: "
        "bit consistency for a .bc,.hbm pair, cosine similarity for two .bc.",
    )
    parser.add_argument(
        "-m", "--model", required=True, help="MODEL1,MODEL2 (.bc, .mlir or .hbm)"
    )
    parser.add_argument(
        "-i",
        "--input",
        action="append",
        required=True,
        help="a .npy file per model input, in order (repeat -i, or a,b); "
        "name:file binds a file to a named input",
    )
    parser.add_argument(
        "-c",
        "--compare_digits",
        "--compare-digits",
        type=int,
        default=5,
        help="consistent when every element is within 10**-C (default 5)",
    )
    parser.add_argument(
        "--dump-all-nodes",
        "--dump_all_nodes",
        metavar="DIR",
        help="write every op's value of both models (.npy + index.json) to DIR",
    )
    parser.add_argument(
        "-r",
        "--dump-all-nodes-results",
        action="store_true",
        help="as --dump-all-nodes dump_all_nodes_results",
    )
    parser.add_argument(
        "--ip", help="IP1,IP2: None runs a model on the simulator (the only runner)"
    )
    for flags in (
        ("-b", "--board-ip"),
        ("-u", "--username"),
        ("-p", "--password"),
        ("--port",),
        ("--remote-root", "--remote_root"),
    ):
        parser.add_argument(*flags, help="board option: not applicable")
    for flags in (("--skip-arm",), ("--skip-sim",), ("-s", "--run-sim")):
        parser.add_argument(*flags, action="store_true", help="board option")
    parser.add_argument("--version", action="version", version=_version())
    ns = parser.parse_args(argv)
    paths = [p for p in ns.model.split(",") if p]
    dump_dir = ns.dump_all_nodes
    if ns.dump_all_nodes_results and dump_dir is None:
        dump_dir = "dump_all_nodes_results"
    try:
        for note in board_notes(ns, paths):
            print(note)
        return verify(paths, ns.input, ns.compare_digits, dump_dir)
    except HbirError as e:
        print(f"hb_verifier: error: {e}", file=sys.stderr)
        return 2


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"hb_verifier (hbir {version('hbir')})"
    except PackageNotFoundError:
        return "hb_verifier (hbir, not installed)"


if __name__ == "__main__":
    sys.exit(main())
