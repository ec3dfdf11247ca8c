"""``QuantAnalysis``: the reference profiler's workflow, as the reference toolchain
documents it, with its artifact formats.

``auto_find_bad_case`` -> ``run`` -> ``compare_per_layer`` -> ``sensitivity``, with
the reference's files in ``out_dir``: ``badcase.txt`` / ``badcase.pt`` /
``all_badcase_info.pt``, ``baseline_model/statistic.txt`` and
``analysis_model/statistic.txt``, ``compare_per_layer_out.txt`` / ``.csv``,
``abnormal_layer_advisor.txt``, ``output_<name>_<metric>_sensitive_ops.txt`` /
``.pt``.

Either model may be a prepared torch model (an fx ``GraphModule``) or an HBIR
``Module``; layers are aligned by their torch origin (``origin.py``), so the
pairs the reference refuses (two HBIR models) work too. Sensitivity toggles:

* torch analysis model: every fake quant off, then only one op's activation
  (row ``activation``) or weight (row ``weight``) fake quant on (the reference's
  algorithm);
* ``qat.bc``: only the fake quants of one torch call kept (``remove-fake-quant``
  on all the others), row ``activation``;
* ``quantized.bc`` against its ``qat.bc`` (two HBIR models) or ``qat.pt``: one
  torch call's result replaced by the baseline's (its codes on the same grid;
  the interpreter's per-op hook writes them), row ``exact``; the metric is the
  one left with that op exact, so the op whose error matters most comes first.
  (Float fallback cannot be toggled in a given quantized.bc: it is made by
  converting an edited qat.bc, which ``bisect_float_fallback`` does.)

Sensitivity and bad-case search take ``workers`` (processes; ``fork``) and
``backend="ray"`` when ray is installed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from hbir.errors import HbirError, HbirOutputError
from hbir.profiler import metrics, tables
from hbir.profiler import origin as og
from hbir.profiler.compare import Comparison
from hbir.profiler.stages import Stage, StageError

TYPES = ("fake_quant", "pre_export", "export", "convert", "compile")


class QuantAnalysisError(HbirError):
    """A QuantAnalysis call that cannot be done (order of calls, bad arguments)."""


def _tuple(item) -> tuple:
    return tuple(item) if isinstance(item, tuple | list) else (item,)


def _is_hbir(model) -> bool:
    from hbir.module import Module

    return isinstance(model, Module)


def _converted(model) -> bool:
    return _is_hbir(model) and model.march is not None


def _load_saved(path: str, what: str):
    """``torch.load`` of a file QuantAnalysis wrote; anything else is a
    ``QuantAnalysisError`` naming the file."""
    import torch

    try:
        return torch.load(path, weights_only=False)
    except Exception as e:
        raise QuantAnalysisError(
            f"{path}: cannot read {what}: not a torch.save file ({type(e).__name__})"
        ) from None


class QuantAnalysis:
    def __init__(
        self,
        baseline_model,
        analysis_model,
        analysis_model_type: str,
        device_ids=None,
        post_process: Callable | None = None,
        out_dir: str | None = None,
    ):
        if analysis_model_type not in TYPES:
            raise QuantAnalysisError(
                f"analysis_model_type {analysis_model_type!r}: expected one of "
                + ", ".join(TYPES)
            )
        if analysis_model_type == "compile":
            self.baseline, self.analysis = _compile_stages(
                baseline_model, analysis_model
            )
        else:
            self.baseline = Stage("baseline", baseline_model)
            self.analysis = Stage("analysis", analysis_model)
        for stage in (self.baseline, self.analysis):
            if stage.kind not in ("torch", "hbir", "hbm"):
                raise StageError(f"cannot analyse a {stage.kind}")
            if stage.kind == "hbm" and analysis_model_type != "compile":
                raise StageError(
                    f"a model.hbm is analysed with analysis_model_type 'compile' "
                    f"(against its quantized.bc), not {analysis_model_type!r}"
                )
        self.analysis_model_type = analysis_model_type
        self.device_ids = device_ids
        self.post_process = post_process
        self.out_dir = out_dir or "./horizon_quant_analysis"
        try:
            os.makedirs(self.out_dir, exist_ok=True)
        except OSError as e:
            raise HbirOutputError(
                self.out_dir, "QuantAnalysis' files (out_dir=)", e
            ) from None
        self.bad_case: tuple | None = None
        self.bad_case_index: int | None = None
        self.bad_info = None
        self.comparison: Comparison | None = None
        self._grids = None
        self._base_record = None
        self._keys: dict[str, tuple[str, int]] = {}
        self._grid_source()

    # ------------------------------------------------------------------ running
    def _grid_source(self) -> None:
        """Grids for the codes of a quantized.bc: the baseline's fake quants (a
        qat.bc's ops, or a torch model's output fake quants)."""
        if not _converted(self.analysis.model):
            return
        if _is_hbir(self.baseline.model):
            self._grids = og.fake_quant_grids(self.baseline.model["forward"].op)
        else:
            self._grids = og.torch_grids(self.baseline.model)
        self.analysis.grids = self._grids

    def _outputs(self, stage: Stage, inputs: tuple) -> list[np.ndarray]:
        if stage.kind == "torch":
            import torch

            with torch.no_grad():
                out = stage.model(*inputs)
            outs = [t.detach().float().numpy() for t in og._flatten(out)]
        else:
            outs = stage.record(inputs).outputs
        if self.post_process is not None:
            outs = [np.asarray(self.post_process(o)) for o in outs]
        return outs

    def _names(self, count: int) -> list[str]:
        if _is_hbir(self.analysis.model):
            names = self.analysis.model["forward"].outputs.names
            if len(names) == count:
                return names
        return [f"output_{i}" for i in range(count)]

    # ------------------------------------------------------------------ bad cases
    def auto_find_bad_case(
        self,
        data_generator: Iterable,
        num_steps: int | None = None,
        metric: str = "L1",
        device=None,
        custom_metric_func: Callable | None = None,
        custom_metric_order_seq: str | None = None,
        cached_attrs=None,
        progress: bool = False,
        workers: int = 1,
        backend: str = "process",
    ) -> None:
        """Run both models over the data and keep, per output and metric, the worst
        batch; the bad case is the worst batch of the worst output under
        ``metric``. The data is streamed in chunks of ``4 * workers`` batches
        (each chunk's batches run in ``workers`` processes); only the batches that
        are some metric's worst so far stay in memory."""
        metric = metrics.canonical(metric) if custom_metric_func is None else metric
        names = list(metrics.NAMES[:5])  # the reference's badcase columns
        worst: dict[tuple[int, str], tuple[float, int]] = {}
        custom: dict[int, tuple[float, int]] = {}
        stream = data_generator
        if progress:
            try:
                from tqdm import tqdm

                stream = tqdm(stream, desc="auto_find_bad_case", total=num_steps)
            except ImportError:
                pass
        kept: dict[int, tuple] = {}
        count = 0
        ascending = custom_metric_order_seq == "ascending"

        def values(inputs):
            base = self._outputs(self.baseline, inputs)
            analy = self._outputs(self.analysis, inputs)
            found = []
            for x, y in zip(base, analy, strict=True):
                row = {n: metrics.FUNCTIONS[n](x, y) for n in names}
                if custom_metric_func is not None:
                    row["custom"] = float(custom_metric_func(x, y))
                found.append(row)
            return found

        pool = _Workers(values, workers, backend)
        try:
            for chunk in _chunks(stream, num_steps, 4 * max(1, workers)):
                results = pool.map([inputs for _, inputs in chunk])
                for (index, inputs), rows in zip(chunk, results, strict=True):
                    for o, row in enumerate(rows):
                        for n in names:
                            v = row[n]
                            old = worst.get((o, n))
                            if old is None or metrics.worse(n, v, old[0]):
                                worst[(o, n)] = (v, index)
                        if "custom" in row:
                            v, old = row["custom"], custom.get(o)
                            if old is None or (v < old[0] if ascending else v > old[0]):
                                custom[o] = (v, index)
                    kept[index] = inputs
                    count += 1
                live = {i for _, i in worst.values()} | {i for _, i in custom.values()}
                kept = {i: kept[i] for i in live}
        finally:
            pool.close()
        if not count:
            raise QuantAnalysisError("auto_find_bad_case: data_generator is empty")
        outputs = sorted({o for o, _ in worst})
        out_names = self._names(len(outputs))
        if custom_metric_func is not None:
            (o, (v, index)) = max(custom.items(), key=lambda kv: kv[1][0])
        else:
            o = max(
                outputs,
                key=lambda o: (
                    worst[(o, metric)][0]
                    if metrics.LARGER_IS_WORSE[metric]
                    else -worst[(o, metric)][0]
                ),
            )
            index = worst[(o, metric)][1]
        self.bad_case, self.bad_case_index = kept[index], index
        index_rows = [
            [out_names[o]] + [worst[(o, n)][1] for n in names] for o in outputs
        ]
        value_rows = [
            [out_names[o]] + [worst[(o, n)][0] for n in names] for o in outputs
        ]
        worst_rows = [
            [n, max(outputs, key=lambda o, n=n: _badness(n, worst[(o, n)][0]))]
            for n in names
        ]
        worst_rows = [[n, worst[(o, n)][1]] for n, o in worst_rows]
        text = "The bad case input index of each output:\n"
        text += tables.plain(["Name/Index"] + names, index_rows)
        text += "\nThe metric results of each badcase:\n"
        text += tables.plain(["Name/Index"] + names, value_rows)
        text += "\nThe bad case input index of the worst output:\n"
        text += tables.plain(["metric", "dataloader index"], worst_rows)
        with open(os.path.join(self.out_dir, "badcase.txt"), "w") as f:
            f.write(text)
        self.bad_info = (index_rows, dict(worst_rows), {i: kept[i] for i in kept})
        self.save_bad_case()

    def set_bad_case(
        self,
        data,
        baseline_model_cached_attr=None,
        analysis_model_cached_attr=None,
    ) -> None:
        self.bad_case, self.bad_case_index = _tuple(data), None

    def save_bad_case(self) -> None:
        import torch

        if self.bad_case is None:
            raise QuantAnalysisError("save_bad_case: no bad case yet")
        torch.save(
            (self.bad_case, None, None), os.path.join(self.out_dir, "badcase.pt")
        )
        if self.bad_info is not None:
            torch.save(self.bad_info, os.path.join(self.out_dir, "all_badcase_info.pt"))

    def load_bad_case(self, filename: str | None = None) -> None:

        path = filename or os.path.join(self.out_dir, "badcase.pt")
        if not os.path.exists(path):
            raise QuantAnalysisError(f"load_bad_case: {path} does not exist")
        saved = _load_saved(path, "a bad case")
        if not isinstance(saved, tuple) or not saved:
            raise QuantAnalysisError(
                f"load_bad_case: {path}: not a bad case (save_bad_case writes "
                f"(inputs, None, None)), got {type(saved).__name__}"
            )
        self.bad_case = _tuple(saved[0])
        info = os.path.join(self.out_dir, "all_badcase_info.pt")
        if filename is None and os.path.exists(info):
            self.bad_info = _load_saved(info, "the bad-case table")

    # ------------------------------------------------------------------ per layer
    def _need_bad_case(self, what: str) -> tuple:
        if self.bad_case is None:
            raise QuantAnalysisError(
                f"{what}: no bad case: call auto_find_bad_case, set_bad_case or "
                "load_bad_case first"
            )
        return self.bad_case

    def run(self, device=None, index: int | None = None) -> None:
        """Record every layer of both models on the bad case; statistic.txt each."""
        inputs = self._need_bad_case("run")
        if index is not None and self.bad_info is not None:
            inputs = self.bad_info[2].get(index, inputs)
        base = self.baseline.record(inputs)
        analy = self.analysis.record(inputs)
        self.comparison = Comparison()
        self.comparison.add(base, analy, self._grids)
        for name, rec in (("baseline_model", base), ("analysis_model", analy)):
            folder = os.path.join(self.out_dir, name)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "statistic.txt"), "w") as f:
                f.write(tables.psql(_statistics(rec), showindex=False))

    def compare_per_layer(self, prefixes=None, types=None) -> list[dict]:
        if self.comparison is None:
            self.run()
        rows = [d.row() for d in self.comparison.layers.values()]
        if prefixes:
            rows = [r for r in rows if r["mod_name"].startswith(tuple(prefixes))]
        if types:
            names = tuple(t if isinstance(t, str) else t.__name__ for t in types)
            rows = [r for r in rows if any(n in r["base_op_type"] for n in names)]
        with open(os.path.join(self.out_dir, "compare_per_layer_out.txt"), "w") as f:
            f.write(tables.psql(rows))
        with open(os.path.join(self.out_dir, "compare_per_layer_out.csv"), "w") as f:
            if rows:
                f.write(", ".join(rows[0]) + "\n")
                for r in rows:
                    f.write(", ".join(str(v).replace(",", "*") for v in r.values()))
                    f.write("\n")
        advice = [a for r in rows for a in _advice(r)]
        with open(os.path.join(self.out_dir, "abnormal_layer_advisor.txt"), "w") as f:
            f.write(tables.psql(advice, showindex=False) if advice else "")
        return rows

    # ------------------------------------------------------------------ sensitivity
    def sensitivity(
        self,
        device=None,
        metric: str = "L1",
        reverse: bool = False,
        workers: int = 1,
        backend: str = "process",
    ) -> dict[str, list[list]]:
        """Per output, every op's sensitivity (see the module); writes
        ``output_<name>_<metric>_sensitive_ops.txt`` and ``.pt``."""
        if self.analysis.kind == "hbm":
            raise QuantAnalysisError(
                "sensitivity toggles the ops of a torch model or a .bc; a model.hbm "
                "is exact against its quantized.bc or broken at one instruction: "
                "compare_per_layer (or hbir doctor --hbm) names it"
            )
        import torch

        metric = metrics.canonical(metric)
        inputs = self._need_bad_case("sensitivity")
        base = self._outputs(self.baseline, inputs)
        candidates, kind = self._toggles()
        flops = self._flops(candidates, inputs)
        diverge = self._first_divergence()
        jobs = [(i, c) for i, c in enumerate(candidates)]
        results = _map(
            _toggle_job, [(self, c, inputs) for _, c in jobs], workers, backend
        )
        names = self._names(len(base))
        out: dict[str, list[list]] = {}
        for o, name in enumerate(names):
            rows = []
            for (label, sens_type, op_type, dtype), outs in zip(
                candidates, results, strict=True
            ):
                value = metrics.FUNCTIONS[metric](base[o], outs[o])
                rows.append(
                    [label, sens_type, op_type, value, dtype, flops[(label, sens_type)]]
                )
            descending = metrics.LARGER_IS_WORSE[metric]
            if kind == "exact":  # the error left with the op exact: least first
                descending = not descending
            # Ties (e.g. every op after a fault restores the output alike) go to
            # the op where the models first diverge, then in execution order.
            late = len(candidates)
            rows.sort(key=lambda r: diverge.get(r[0], diverge.get(f"{r[0]}#0", late)))
            rows.sort(key=lambda r: r[3], reverse=descending != reverse)
            out[name] = rows
            stem = os.path.join(self.out_dir, f"output_{name}_{metric}_sensitive_ops")
            headers = ["op_name", "sensitive_type", "op_type", metric, "quant_dtype"]
            headers.append("flops")
            with open(stem + ".txt", "w") as f:
                f.write(tables.plain(headers, rows))
            torch.save(rows, stem + ".pt")
        return out

    def _toggles(self) -> tuple[list[tuple[str, str, str, str]], str]:
        """(op_name, sensitive_type, op_type, quant_dtype) per toggle, and the kind."""
        model = self.analysis.model
        tables = _lut_modules(model) if self.analysis.kind == "torch" else {}
        if self.analysis_model_type == "pre_export" and tables:
            # qat.export.pt differs from qat.pt only by its tables: one at a time
            return [
                (name, "table", type(m).__name__, f"num_tables={m.num_tables}")
                for name, m in tables.items()
            ], "table"
        if self.analysis.kind == "torch":
            from hbir.quantization.fake_quantize import FakeQuantize

            found = []
            for name, m in model.named_modules():
                for attr, kind in (
                    ("activation_post_process", "activation"),
                    ("weight_fake_quant", "weight"),
                ):
                    fq = getattr(m, attr, None)
                    if isinstance(fq, FakeQuantize):
                        dtype = f"qint{fq.dtype.bits}"
                        found.append((name, kind, type(m).__name__, dtype))
            return found, "fake_quant"
        if _converted(model):
            toggles = []
            for key, op in og.layer_ops(model["forward"].op).items():
                grid = (self._grids or {}).get(key)
                dtype = f"qint{grid.bits}" if grid is not None else ""
                origin = og.origin_of(op)
                toggles.append((og.key_text(key), "exact", origin.torch_op, dtype))
                self._keys[og.key_text(key)] = key
            return toggles, "exact"
        return _hbir_toggles(model), "activation"

    def _flops(self, toggles, inputs) -> dict[tuple[str, str], str]:
        """The reference's ``flops`` column: the multiply-adds of each toggled op
        (conv, transposed conv, linear, matmul) and its share, ``"N(p%)"``."""
        model = self.analysis.model
        if self.analysis.kind == "torch":
            per_key = _torch_macs(model, inputs)
            counts = {
                (label, kind): sum(
                    n for (path, _), n in per_key.items() if path == label
                )
                for label, kind, _, _ in toggles
            }
        else:
            per_key = _hbir_macs(model["forward"].op)
            counts = {
                (label, kind): sum(
                    n for k, n in per_key.items() if og.key_text(k) == label
                )
                for label, kind, _, _ in toggles
            }
        total = sum(per_key.values()) or 1
        return {k: f"{n}({100 * n / total:.2f}%)" for k, n in counts.items()}

    def toggled_outputs(self, toggle, inputs) -> list[np.ndarray]:
        """The analysis outputs with one toggle applied (one sensitivity row)."""
        label, kind, _, _ = toggle
        model = self.analysis.model
        if kind in ("activation", "weight") and self.analysis.kind == "torch":
            return self._torch_toggle(label, kind, inputs)
        if kind == "table":
            return self._table_toggle(label, inputs)
        from hbir.bc_editor import remove_fake_quant

        if kind == "exact":
            key = self._keys[label]
            if self._base_record is None:
                self._base_record = self.baseline.record(inputs)
            layer = self._base_record.layers.get(key)
            if layer is None:
                return self._outputs(self.analysis, inputs)
            function = model["forward"]
            feed = _feed(function, inputs)
            outs = og.run_replacing(function, feed, key, layer.value, self._grids)
            if self.post_process is not None:
                outs = [np.asarray(self.post_process(o)) for o in outs]
            return outs
        ids = _fake_quant_ids(model, label, keep=True)
        edited = remove_fake_quant(model, ids) if ids else model
        return self._outputs(Stage("toggled", edited), inputs)

    @staticmethod
    def _origin_labels(model):
        for op in model["forward"].op.walk():
            origin = og.origin_of(op)
            if origin is not None:
                yield og.key_text(origin.key), origin.key

    def _torch_toggle(self, label, kind, inputs):
        import torch

        from hbir.quantization.fake_quantize import FakeQuantize

        model = self.analysis.model
        saved = {
            m: bool(m.fake_quant_enabled[0])
            for m in model.modules()
            if isinstance(m, FakeQuantize)
        }
        try:
            for m in saved:
                m.enable_fake_quant(False)
            target = model.get_submodule(label)
            attr = (
                "activation_post_process"
                if kind == "activation"
                else ("weight_fake_quant")
            )
            getattr(target, attr).enable_fake_quant(True)
            with torch.no_grad():
                return self._outputs(self.analysis, inputs)
        finally:
            for m, on in saved.items():
                m.enable_fake_quant(on)

    def _table_toggle(self, label, inputs):
        """The outputs with only table ``label`` computed as its table (every
        other table op its float function, as in qat.pt)."""
        import torch

        tables = _lut_modules(self.analysis.model)
        saved = {m: m.quantized_forward for m in tables.values()}
        try:
            for name, m in tables.items():
                m.quantized_forward = name == label
            with torch.no_grad():
                return self._outputs(self.analysis, inputs)
        finally:
            for m, on in saved.items():
                m.quantized_forward = on

    def _first_divergence(self) -> dict[str, int]:
        """Toggle label -> the rank of its layer among those whose value differs
        between the models on the bad case (``run``'s comparison, in execution
        order: the first to diverge ranks 0): what breaks a sensitivity tie."""
        if self.comparison is None:
            self.run()
        ranks: dict[str, int] = {}
        for key, d in self.comparison.layers.items():
            if d.atol > 0 or d.mismatch:
                ranks.setdefault(og.key_text(key), len(ranks))
        return ranks

    def clean(self) -> None:
        """Remove ``out_dir`` and what it holds."""
        shutil.rmtree(self.out_dir, ignore_errors=True)


def _lut_modules(model) -> dict:
    """The pre-exported table modules of a torch model, by name."""
    from hbir.quantization.lut_modules import LutModule

    return {
        name: m
        for name, m in model.named_modules()
        if isinstance(m, LutModule) and m.pre_exported
    }


def _compile_stages(quantized, hbm) -> tuple[Stage, Stage]:
    """The compile pair: quantized.bc and the model.hbm compiled from it, codes
    compared with codes."""
    from hbir.hbm import Hbm
    from hbir.profiler.compile_stage import HbmStage

    if not _converted(quantized):
        raise StageError(
            "analysis_model_type 'compile': the baseline is the quantized.bc the "
            f"model.hbm was compiled from, got {type(quantized).__name__}"
            + ("" if not _is_hbir(quantized) else " (not converted)")
        )
    if not isinstance(hbm, Hbm):
        raise StageError(
            "analysis_model_type 'compile': the analysis model is the model.hbm "
            f"(hbir.load('model.hbm')), got {type(hbm).__name__}"
        )
    baseline = Stage("baseline", quantized, keep_codes=True)
    return baseline, HbmStage("analysis", hbm, source=quantized, keep_codes=True)


def _hbir_macs(func_op) -> dict[tuple[str, int], int]:
    """Multiply-adds per origin of the conv / linear / matmul ops of a function."""
    from hbir.dialects import hbir as hb

    found: dict[tuple[str, int], int] = {}
    for op in func_op.walk():
        origin = og.origin_of(op)
        if origin is None or not op.results:
            continue
        out = int(np.prod(hb.tensor_type(op.results[0]).get_shape()))
        if isinstance(op, hb.Conv2dOp | hb.LinearOp):
            w = hb.tensor_type(op.weight).get_shape()
            per = int(np.prod(w[1:])) if isinstance(op, hb.Conv2dOp) else w[-1]
            macs = out * per
        elif isinstance(op, hb.ConvTranspose2dOp):
            inp = int(np.prod(hb.tensor_type(op.input).get_shape()))
            macs = inp * int(np.prod(hb.tensor_type(op.weight).get_shape()[1:]))
        elif isinstance(op, hb.MatmulOp):
            macs = out * hb.tensor_type(op.lhs).get_shape()[-1]
        else:
            continue
        found[origin.key] = found.get(origin.key, 0) + macs
    return found


def _torch_macs(gm, inputs) -> dict[tuple[str, int], int]:
    """Multiply-adds per module call of a prepared model's conv and linear."""
    from torch import nn

    record = og.record_torch(gm, inputs)
    modules = dict(gm.named_modules())
    found: dict[tuple[str, int], int] = {}
    for node, key in og.torch_keys(gm).items():
        m = modules.get(node.target) if node.op == "call_module" else None
        layer = record.layers.get(key)
        if layer is None or not isinstance(m, nn.Conv2d | nn.Linear):
            continue
        per = int(np.prod(m.weight.shape[1:]))
        found[key] = int(layer.value.size) * per
    return found


def _chunks(stream, limit: int | None, size: int):
    """Lists of up to ``size`` (index, input tuple), the first ``limit`` items."""
    chunk = []
    for index, item in enumerate(stream):
        if limit is not None and index >= limit:
            break
        chunk.append((index, _tuple(item)))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _feed(function, inputs) -> dict[str, np.ndarray]:
    return {
        arg.name: np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)
        for arg, t in zip(function.inputs, inputs, strict=True)
    }


def _badness(metric: str, value: float) -> float:
    return value if metrics.LARGER_IS_WORSE[metric] else -value


def _hbir_toggles(qat_bc) -> list[tuple[str, str, str, str]]:
    """One toggle per torch call with fake quants in ``qat_bc``, in order."""
    from hbir.dialects import qnt

    found: dict[tuple[str, int], tuple[str, str, str, str]] = {}
    for op in qat_bc["forward"].op.walk():
        origin = og.origin_of(op)
        if origin is None or not isinstance(op, qnt.ConstFakeQuantOp):
            continue
        if op.axis is not None:
            continue  # a weight's: the op's toggle covers it
        found[origin.key] = (
            og.key_text(origin.key),
            "activation",
            origin.torch_op,
            f"qint{op.bits.value.data}",
        )
    return list(found.values())


def _fake_quant_ids(qat_bc, label: str, keep: bool) -> list[int]:
    """IDs of the fake quants of the torch call ``label`` (or of every other one)."""
    from hbir.dialects import qnt
    from hbir.dialects.op_ids import op_ids

    ids = []
    for n, op in op_ids(qat_bc["forward"].op).items():
        if not isinstance(op, qnt.ConstFakeQuantOp):
            continue
        origin = og.origin_of(op)
        mine = origin is not None and og.key_text(origin.key) == label
        if mine != keep:
            ids.append(n)
    return ids


def _toggle_job(args) -> list[np.ndarray]:
    analysis, toggle, inputs = args
    return analysis.toggled_outputs(toggle, inputs)


def _map(fn, items: list, workers: int, backend: str) -> list:
    """``[fn(x) for x in items]``, in ``workers`` processes, or on ray."""
    if backend == "ray":
        try:
            import ray
        except ImportError:
            raise QuantAnalysisError(
                "backend='ray' needs ray: pip install ray (or use workers=N)"
            ) from None
        if not ray.is_initialized():
            ray.init(num_cpus=max(workers, 1), include_dashboard=False)
        remote = ray.remote(fn)
        return ray.get([remote.remote(x) for x in items])
    if backend != "process":
        raise QuantAnalysisError(f"backend {backend!r}: expected 'process' or 'ray'")
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    import multiprocessing as mp

    # Models (xDSL IR, fx graphs) do not pickle: forked workers inherit them, and
    # only indices and the resulting arrays cross the process boundary.
    global _FORKED
    _FORKED = (fn, items)
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            chunk = max(1, len(items) // (4 * workers))
            return pool.map(_run_forked, range(len(items)), chunksize=chunk)
    finally:
        _FORKED = None


_FORKED = None


def _run_forked(index: int):
    fn, items = _FORKED
    return fn(items[index])


class _Workers:
    """``fn`` over a stream of picklable items (input batches), in one pool of
    ``workers`` forked processes opened at the first ``map`` and kept until
    ``close`` (the workers inherit ``fn`` and the models it closes over; only the
    items and the results cross the boundary), or on Ray."""

    def __init__(self, fn, workers: int, backend: str):
        if backend not in ("process", "ray"):
            raise QuantAnalysisError(
                f"backend {backend!r}: expected 'process' or 'ray'"
            )
        self.fn, self.workers, self.backend = fn, workers, backend
        self.pool = None

    def map(self, items: list) -> list:
        if self.backend == "ray":
            return _map(self.fn, items, self.workers, "ray")
        if self.workers <= 1:
            return [self.fn(x) for x in items]
        if self.pool is None:
            import multiprocessing as mp

            global _STREAMED
            _STREAMED = self.fn
            self.pool = mp.get_context("fork").Pool(self.workers)
        return self.pool.map(_run_streamed, items)

    def close(self) -> None:
        global _STREAMED
        if self.pool is not None:
            self.pool.close()
            self.pool.join()
            self.pool = None
        _STREAMED = None


_STREAMED = None


def _run_streamed(item):
    return _STREAMED(item)


def _statistics(record: og.Record) -> list[dict]:
    rows = []
    for i, layer in enumerate(record.layers.values()):
        v = layer.value.astype(np.float64)
        rows.append(
            {
                "Index": i,
                "Op Name": layer.op_type,
                "Mod Name": og.key_text(layer.key),
                "Attr": "output",
                "Dtype": layer.quant_dtype or str(layer.value.dtype),
                "Scale": layer.qscale,
                "Min": float(v.min()) if v.size else None,
                "Max": float(v.max()) if v.size else None,
                "Mean": float(v.mean()) if v.size else None,
                "Var": float(v.var()) if v.size else None,
                "Shape": str(tuple(v.shape)),
            }
        )
    return rows


def _advice(row: dict) -> list[dict]:
    """The reference's abnormal-layer checks that a per-layer row can show."""
    found = []
    values = [
        row[k]
        for k in (
            "base_model_min",
            "base_model_max",
            "analy_model_min",
            "analy_model_max",
        )
    ]

    def add(info, advice):
        found.append(
            {
                "mod_name": row["mod_name"],
                "op_type": row["analy_op_type"],
                "abnormal_info": info,
                "advice": advice,
            }
        )

    if any(v is not None and not np.isfinite(v) for v in values):
        add("inf/nan output, check if expected.", "")
        return found
    dmax = max(abs(v) for v in values if v is not None)
    scale, dtype = row["qscale"], row["quant_dtype"]
    if dmax > 32768:
        add(
            f"Total data range {2 * dmax} maybe too large for quantization.",
            "Please change model structure or limit this output range",
        )
    if scale and dtype in ("qint8", "qint16"):
        bits = int(dtype[4:])
        lo, hi = -(2 ** (bits - 1)) * scale, (2 ** (bits - 1) - 1) * scale
        # the float side (the baseline), which the fake quant has not clipped
        base_lo, base_hi = row["base_model_min"], row["base_model_max"]
        if base_lo < lo - scale or base_hi > hi + scale:
            add(
                f"Current scale {scale:g} covers [{lo:g}, {hi:g}], the data spans "
                f"[{base_lo:g}, {base_hi:g}]: values beyond it are clipped",
                "Please check the calibration data, or widen the range (a fixed "
                "scale, or another observer).",
            )
        cosine, lsb = row.get("Cosine"), row.get("max_qscale_diff")
        if (
            dtype == "qint8"
            and cosine is not None
            and cosine < 0.999
            and lsb is not None
            and lsb <= 1.0
        ):
            add(
                f"Rounding to the int8 grid alone (at most {lsb:.3g} LSB) costs "
                f"cosine {cosine:.4f} here: the grid is coarse for this output.",
                "Please try qint16 quantization.",
            )
    return found


def analyse(
    baseline, analysis, analysis_model_type: str, data, out_dir=None, metric: str = "L1"
) -> Any:
    """The reference's default pipeline: AutoFindBadCase -> Run -> ComparePerLayer
    -> Sensitivity."""
    qa = QuantAnalysis(baseline, analysis, analysis_model_type, out_dir=out_dir)
    qa.auto_find_bad_case(data, metric=metric)
    qa.run()
    qa.compare_per_layer()
    qa.sensitivity(metric=metric)
    return qa
