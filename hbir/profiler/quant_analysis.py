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

The 3.x keywords: ``run(run_baseline_model=, run_analysis_model=)`` records one
side at a time (each on the bad case set for it: models that take different
input formats), saved under ``out_dir`` so another process can run the other
side; ``auto_find_bad_case(topk=)`` keeps the ``topk`` worst batches per output
and metric; ``compare_per_layer`` and ``sensitivity`` take ``prefixes`` /
``types`` filters; ``tune_bad_case`` puts the most sensitive activation fake
quants in int16, one at a time, until the outputs meet ``outputs_config``. The
baseline may be the plain float ``nn.Module`` (type ``fake_quant``): its layers
are recorded by module hooks, a conv's value taken after the batch norm and
activation that prepare fused into it.
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
            self.baseline = _baseline_stage(
                baseline_model, analysis_model, analysis_model_type
            )
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
        self._records: dict[str, og.Record] = {}
        # tune_bad_case's result: the int16 rules, and the tuned copy
        self.tuned_module_name: dict[str, Any] = {}
        self.tuned_model = None
        self._grid_source()

    # ------------------------------------------------------------------ running
    def _grid_source(self) -> None:
        """Grids for the codes of a quantized.bc: the baseline's fake quants (a
        qat.bc's ops, or a torch model's output fake quants)."""
        if not _converted(self.analysis.model):
            return
        if _is_hbir(self.baseline.model):
            self._grids = og.fake_quant_grids(self.baseline.model["forward"].op)
        elif isinstance(self.baseline, FloatStage):
            return
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
        topk: int = 1,
    ) -> None:
        """Run both models over the data and keep, per output and metric, the worst
        batch (the ``topk`` worst: ``badcase.txt`` lists them, ``run(index=)``
        takes any); the bad case is the worst batch of the worst output under
        ``metric``. The data is streamed in chunks of ``4 * workers`` batches
        (each chunk's batches run in ``workers`` processes); only the batches that
        are some metric's worst so far stay in memory."""
        metric = metrics.canonical(metric) if custom_metric_func is None else metric
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise QuantAnalysisError(
                f"auto_find_bad_case: topk must be a positive int, got {topk!r}"
            )
        names = list(metrics.NAMES[:5])  # the reference's badcase columns
        worst: dict[tuple[int, str], tuple[float, int]] = {}
        # per (output, metric): the topk worst (value, index), worst first
        tops: dict[tuple[int, str], list[tuple[float, int]]] = {}
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
                            if topk > 1:
                                _keep_top(
                                    tops.setdefault((o, n), []), n, v, index, topk
                                )
                        if "custom" in row:
                            v, old = row["custom"], custom.get(o)
                            if old is None or (v < old[0] if ascending else v > old[0]):
                                custom[o] = (v, index)
                    kept[index] = inputs
                    count += 1
                live = {i for _, i in worst.values()} | {i for _, i in custom.values()}
                live |= {i for top in tops.values() for _, i in top}
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
        if topk > 1:
            text += f"\nThe top {topk} bad case input indices of each output:\n"
            text += tables.plain(
                ["Name/Index"] + names,
                [
                    [out_names[o]]
                    + [" ".join(str(i) for _, i in tops[(o, n)]) for n in names]
                    for o in outputs
                ],
            )
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

    def run(
        self,
        device=None,
        index: int | None = None,
        run_baseline_model: bool = True,
        run_analysis_model: bool = True,
    ) -> None:
        """Record every layer of the chosen models on the bad case (or the
        ``index`` of ``auto_find_bad_case``'s kept batches); statistic.txt and
        ``record.pt`` each. Run one side, ``set_bad_case`` the other side's
        input format, and run the other: ``compare_per_layer`` pairs them (from
        ``out_dir`` when the other side ran in another process)."""
        if not (run_baseline_model or run_analysis_model):
            raise QuantAnalysisError(
                "run: run_baseline_model and run_analysis_model are both False: "
                "nothing to run"
            )
        inputs = self._need_bad_case("run")
        if index is not None:
            kept = self.bad_info[2] if self.bad_info is not None else {}
            if index not in kept:
                raise QuantAnalysisError(
                    f"run: index {index} is not a kept bad case (auto_find_bad_case "
                    f"kept {sorted(kept) or 'none'})"
                )
            inputs = kept[index]
        sides = (
            ("baseline_model", self.baseline, run_baseline_model),
            ("analysis_model", self.analysis, run_analysis_model),
        )
        for name, stage, wanted in sides:
            if not wanted:
                continue
            record = stage.record(inputs)
            self._records[name] = record
            folder = os.path.join(self.out_dir, name)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "statistic.txt"), "w") as f:
                f.write(tables.psql(_statistics(record), showindex=False))
            _save_record(record, os.path.join(folder, "record.pt"))
        self.comparison = None
        if len(self._records) == 2:
            self._compare()

    def _compare(self) -> Comparison:
        """Both sides' records compared: run here, or saved in ``out_dir``."""
        if self.comparison is not None:
            return self.comparison
        if not self._records:
            self.run()
            return self.comparison
        for name in ("baseline_model", "analysis_model"):
            if name in self._records:
                continue
            path = os.path.join(self.out_dir, name, "record.pt")
            if not os.path.exists(path):
                flag = "run_baseline_model" if name[0] == "b" else "run_analysis_model"
                raise QuantAnalysisError(
                    f"the {name.split('_')[0]} model has not been run: call "
                    f"run({flag}=True) on its bad case (set_bad_case) first"
                )
            self._records[name] = _load_saved(path, "a run's record")
        self.comparison = Comparison()
        self.comparison.add(
            self._records["baseline_model"],
            self._records["analysis_model"],
            self._grids,
        )
        return self.comparison

    def compare_per_layer(self, prefixes=None, types=None) -> list[dict]:
        rows = [d.row() for d in self._compare().layers.values()]
        rows = _filtered(
            "compare_per_layer",
            rows,
            prefixes,
            types,
            lambda r: r["mod_name"],
            lambda r: (r["base_op_type"], r["analy_op_type"]),
        )
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
        prefixes=None,
        types=None,
    ) -> dict[str, list[list]]:
        """Per output, every op's sensitivity (see the module), or of the ops
        whose name starts with one of ``prefixes`` / whose type is one of
        ``types``; writes ``output_<name>_<metric>_sensitive_ops.txt`` and
        ``.pt``."""
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
        candidates = _filtered(
            "sensitivity",
            candidates,
            prefixes,
            types,
            lambda c: c[0],
            lambda c: (c[2],),
        )
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
        ranks: dict[str, int] = {}
        for key, d in self._compare().layers.items():
            if d.atol > 0 or d.mismatch:
                ranks.setdefault(og.key_text(key), len(ranks))
        return ranks

    def tune_bad_case(
        self,
        outputs_config: dict | None = None,
        skip_prefix=(),
        max_tuned_stubs: int = 10,
    ) -> list[dict]:
        """Put the most sensitive activation fake quant of a copy of the
        analysis model in int16, measure, and repeat until every output meets
        ``outputs_config`` on the bad case (or ``max_tuned_stubs`` are tuned).

        ``outputs_config`` maps an output (its name as ``badcase.txt`` writes
        it, or its index) to ``(metric, threshold)``: met when the metric is no
        worse than the threshold; the default is Cosine
        ``quant_loss.COSINE_TOLERANCE`` for every float output. Fake quants
        under ``skip_prefix`` stay as they are. Returns a row per step (the
        fake quant, and each configured output's metric after it) and writes
        ``tune_bad_case.txt``; ``tuned_module_name`` is the
        ``QconfigSetter(module_name=...)`` that prepares the model so. The
        user's model is not changed."""
        import copy

        from hbir.profiler import quant_loss

        if self.analysis.kind != "torch":
            raise QuantAnalysisError(
                "tune_bad_case sets fake quants of a torch analysis model (qat.pt, "
                "analysis_model_type 'fake_quant') to int16, not a "
                f"{self.analysis.kind}"
            )
        if isinstance(max_tuned_stubs, bool) or not isinstance(max_tuned_stubs, int):
            raise QuantAnalysisError(
                "tune_bad_case: max_tuned_stubs must be an int, got "
                f"{max_tuned_stubs!r}"
            )
        inputs = self._need_bad_case("tune_bad_case")
        base = self._outputs(self.baseline, inputs)
        goals = self._goals(outputs_config, base)
        skip = (skip_prefix,) if isinstance(skip_prefix, str) else tuple(skip_prefix)
        model = copy.deepcopy(self.analysis.model)

        def values(m) -> dict[int, float]:
            outs = self._outputs(Stage("tuned", m), inputs)
            return {
                o: metrics.FUNCTIONS[n](base[o], outs[o]) for o, (n, _) in goals.items()
            }

        def met(v: dict[int, float]) -> bool:
            return all(
                not metrics.worse(goals[o][0], x, goals[o][1]) for o, x in v.items()
            )

        def score(v: dict[int, float]) -> float:  # the worst output, larger is better
            return min(
                -x if metrics.LARGER_IS_WORSE[goals[o][0]] else x for o, x in v.items()
            )

        names = self._names(len(base))
        now, rows = values(model), []
        self.tuned_module_name = {}
        while not met(now) and len(rows) < max_tuned_stubs:
            paths = [
                p
                for p, fq in _fake_quants(model).items()
                if not p.endswith("weight_fake_quant")
                and fq.dtype.bits < 16
                and not p.startswith(skip)
            ]
            if not paths:
                break
            trials = []
            for p in paths:  # each candidate alone float: the most recovering first
                fq = model.get_submodule(p)
                fq.enable_fake_quant(False)
                try:
                    trials.append((score(values(model)), p))
                finally:
                    fq.enable_fake_quant(True)
            _, path = max(trials, key=lambda t: t[0])
            quant_loss.to_int16(model, path)
            now = values(model)
            owner = path.rsplit(".", 1)[0]
            self.tuned_module_name[owner] = _qint16()
            rows.append(
                {"fake_quant": path, "module": owner}
                | {f"{names[o]} {goals[o][0]}": x for o, x in now.items()}
            )
        with open(os.path.join(self.out_dir, "tune_bad_case.txt"), "w") as f:
            f.write(tables.psql(rows, showindex=False) if rows else "")
            f.write(
                f"\n{'all outputs meet' if met(now) else 'not met after'} "
                f"{len(rows)} int16 fake quant(s): QconfigSetter(module_name="
                f"{ {k: 'qint16' for k in self.tuned_module_name} })\n"
            )
        self.tuned_model = model
        return rows

    def _goals(self, config, base) -> dict[int, tuple[str, float]]:
        """``outputs_config`` as output index -> (metric, threshold)."""
        from hbir.profiler import quant_loss

        names = self._names(len(base))
        if config is None:
            return {
                o: ("Cosine", quant_loss.COSINE_TOLERANCE)
                for o, x in enumerate(base)
                if np.issubdtype(np.asarray(x).dtype, np.floating)
            }
        if not isinstance(config, dict) or not config:
            raise QuantAnalysisError(
                "tune_bad_case: outputs_config maps an output (name or index) to "
                f"(metric, threshold), got {config!r}"
            )
        goals = {}
        for key, goal in config.items():
            o = names.index(key) if key in names else key
            if not isinstance(o, int) or not 0 <= o < len(base):
                raise QuantAnalysisError(
                    f"tune_bad_case: outputs_config names output {key!r}; the "
                    f"outputs are {names}"
                )
            if not (isinstance(goal, tuple | list) and len(goal) == 2):
                raise QuantAnalysisError(
                    f"tune_bad_case: outputs_config[{key!r}] must be (metric, "
                    f"threshold), got {goal!r}"
                )
            try:
                goals[o] = (metrics.canonical(goal[0]), float(goal[1]))
            except (metrics.MetricError, TypeError, ValueError) as e:
                raise QuantAnalysisError(
                    f"tune_bad_case: outputs_config[{key!r}]: {e}"
                ) from None
        return goals

    def clean(self) -> None:
        """Remove ``out_dir`` and what it holds."""
        shutil.rmtree(self.out_dir, ignore_errors=True)


def _keep_top(top: list, metric: str, value: float, index: int, k: int) -> None:
    """Insert (value, index) into ``top`` (worst first), keeping ``k``."""
    top.append((value, index))
    top.sort(key=lambda t: _badness(metric, t[0]), reverse=True)
    del top[k:]


def _filtered(what, items, prefixes, types, name_of, types_of) -> list:
    """``items`` whose name starts with one of ``prefixes`` and whose type is one
    of ``types`` (classes or names); a filter that keeps nothing is an error
    (a misspelt prefix is not an empty answer)."""
    if isinstance(prefixes, str):
        prefixes = (prefixes,)
    if isinstance(types, str | type):
        types = (types,)
    if prefixes:
        if not all(isinstance(p, str) for p in prefixes):
            raise QuantAnalysisError(
                f"{what}: prefixes are module names (str), got {list(prefixes)!r}"
            )
        kept = [i for i in items if name_of(i).startswith(tuple(prefixes))]
        if not kept:
            raise QuantAnalysisError(
                f"{what}: no layer name starts with {', '.join(map(repr, prefixes))}"
                f"; the layers are {_some(name_of(i) for i in items)}"
            )
        items = kept
    if types:
        if not all(isinstance(t, str | type) for t in types):
            raise QuantAnalysisError(
                f"{what}: types are classes or type names, got {list(types)!r}"
            )
        names = tuple(t if isinstance(t, str) else t.__name__ for t in types)
        kept = [
            i
            for i in items
            if any(_type_matches(n, t) for n in names for t in types_of(i))
        ]
        if not kept:
            raise QuantAnalysisError(
                f"{what}: no layer is of type {', '.join(names)}; the types are "
                f"{_some(t for i in items for t in types_of(i))}"
            )
        items = kept
    return items


def _type_matches(name: str, op_type: str) -> bool:
    """``Conv2d`` matches ``hbir.quantization.qat_modules.Conv2d`` and
    ``torch.nn.modules.conv.Conv2d[hbir.conv2d]``: the last dotted part."""
    base = op_type.split("[", 1)[0]
    return name in (base, base.rsplit(".", 1)[-1]) or name == op_type


def _some(values) -> str:
    seen = list(dict.fromkeys(values))
    return ", ".join(seen[:8]) + (f" and {len(seen) - 8} more" if len(seen) > 8 else "")


def _qint16():
    from hbir.quantization.dtypes import qint16

    return qint16


def _fake_quants(model) -> dict:
    from hbir.quantization.fake_quantize import FakeQuantize

    return {n: m for n, m in model.named_modules() if isinstance(m, FakeQuantize)}


def _save_record(record: og.Record, path: str) -> None:
    import torch

    torch.save(record, path)


class FloatStage(Stage):
    """A plain float ``nn.Module`` as the baseline of a prepared model: every
    module call recorded by forward hooks under the prepared model's key
    (module path, call index). A batch norm, or an activation the prepared
    conv / linear carries as ``fused_relu``, that takes the output of the
    layer before it gives its value to that layer (prepare fused it there) and
    counts no call of its own."""

    def __init__(self, name, model, keys: set, fused_relu: set):
        super().__init__(name, model)
        self.keys, self.fused_relu = keys, fused_relu

    def record(self, inputs: tuple) -> og.Record:
        import torch
        from torch import nn

        record = og.Record()
        calls: dict[str, int] = {}
        last: list = [None, None]  # the key and output tensor of the last layer

        def fused(module, args) -> bool:
            if last[0] is None or not args or args[0] is not last[1]:
                return False
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                return True
            return (
                isinstance(module, nn.ReLU | nn.ReLU6) and last[0][0] in self.fused_relu
            )

        def hook(path):
            def run(module, args, out):
                if not isinstance(out, torch.Tensor):
                    return
                op_type = type(module).__name__
                if fused(module, args):
                    key = last[0]
                    op_type = record.layers[key].op_type  # the conv's
                elif path in self.keys:
                    key = (path, calls.get(path, 0))
                    calls[path] = key[1] + 1
                else:
                    return
                value = out.detach().float().numpy().copy()
                record.layers[key] = og.Layer(key, op_type, value)
                last[:] = [key, out]

            return run

        hooks = [
            module.register_forward_hook(hook(path))
            for path, module in self.model.named_modules()
            if path and not list(module.children())
        ]
        try:
            with torch.no_grad():
                out = self.model(*inputs)
        finally:
            for h in hooks:
                h.remove()
        record.outputs = [t.detach().float().numpy() for t in og._flatten(out)]
        return record


def _baseline_stage(baseline, analysis, analysis_model_type: str) -> Stage:
    """The baseline's stage: a prepared model or HBIR as it is, a plain float
    ``nn.Module`` against the prepared model it was prepared into."""
    from torch import fx, nn

    if not isinstance(baseline, nn.Module) or isinstance(baseline, fx.GraphModule):
        return Stage("baseline", baseline)
    if analysis_model_type != "fake_quant" or not isinstance(analysis, fx.GraphModule):
        raise QuantAnalysisError(
            "a float nn.Module is the baseline of its prepared model "
            "(analysis_model_type 'fake_quant'); for "
            f"{analysis_model_type!r} give the stage before (qat.pt, a .bc)"
        )
    keys = {path for path, _ in og.torch_keys(analysis).values()}
    fused = {p for p, m in analysis.named_modules() if getattr(m, "fused_relu", None)}
    return FloatStage("baseline", baseline.eval(), keys, fused)


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
            # Ray starts its workers at niceness 15, as background work; here
            # they are the analysis' compute, and on a busy machine niced
            # workers waited minutes for a core (the driver only waits).
            ray.init(
                num_cpus=max(workers, 1),
                include_dashboard=False,
                log_to_driver=False,
                _system_config={"worker_niceness": 0},
            )
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
