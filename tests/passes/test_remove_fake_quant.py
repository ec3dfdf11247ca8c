"""remove-fake-quant and op IDs: the %N numbers get_asm prints, ranges, bad IDs."""

import re

import numpy as np
import pytest
import zoo
from xdsl.dialects.func import FuncOp
from xdsl.passes import PassPipeline
from zoo_stages import calibrated

import hbir
from hbir.dialects import make_context
from hbir.dialects.op_ids import OpIdError, op_ids
from hbir.dialects.qnt import ConstFakeQuantOp
from hbir.passes import get_all_passes
from hbir.passes.remove_fake_quant import FAKE_QUANT, RemoveFakeQuantPass, parse_ids
from hbir.quantization import export

# One printed op line of get_asm: its number (and result count) and its op name.
RESULT_LINE = re.compile(r'^\s*%(\d+)(?::(\d+))? = "?([a-z_0-9]+\.[a-z_0-9]+)')
FAKE_QUANT_LINE = re.compile(r'^\s*%(\d+) = "?qnt\.const_fake_quant\b')

SMALL = """\
func.func @forward(%0: tensor<4xf32>) -> tensor<4xf32> {
  %1 = qnt.const_fake_quant %0 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<4xf32>
  %2 = hbir.sigmoid %1 : tensor<4xf32>
  %3 = qnt.const_fake_quant %2 {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<4xf32>
  %4 = hbir.relu %3 : tensor<4xf32>
  %5 = qnt.const_fake_quant %4 {min = array<f64: -2.0>, max = array<f64: 1.984375>, bits = 8 : i64} : tensor<4xf32>
  func.return %5 : tensor<4xf32>
}
"""
# get_asm numbers the ops of SMALL from 0: fake quants 0, 2, 4; sigmoid 1; relu 3.

# Name hints, a two-result op and a second argument: names are not kept, every op
# with a result is numbered, a two-result op once.
NAMED = """\
func.func @forward(%0: tensor<2x8xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>) {
  %1 = qnt.const_fake_quant %0 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<2x8xf32>
  %x = hbir.relu %1 : tensor<2x8xf32>
  %q = qnt.const_fake_quant %x {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<2x8xf32>
  %2, %3 = hbir.split %q {sizes = array<i64: 3, 5>, dim = 1 : i64} : (tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>)
  %4 = hbir.add %2, %y : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = qnt.const_fake_quant %4 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<2x3xf32>
  func.return %5, %3 : tensor<2x3xf32>, tensor<2x5xf32>
}
"""


def printed_results(text: str) -> list[tuple[int, int, str]]:
    """(number, result count, op name) of every printed op with results, in order."""
    found = []
    for line in text.splitlines():
        m = RESULT_LINE.match(line)
        if m:
            found.append((int(m[1]), int(m[2] or 1), m[3]))
    return found


def printed_args(text: str) -> list[str]:
    """The argument names of the first function: on the first line holding a %."""
    line = next(line for line in text.splitlines() if "%" in line)
    return re.findall(r"(%[\w$.-]+)\s*:", line)


def printed_fake_quants(text: str) -> list[int]:
    return [
        int(m[1]) for line in text.splitlines() if (m := FAKE_QUANT_LINE.match(line))
    ]


def only_function(m: hbir.Module) -> FuncOp:
    (f,) = m.functions
    return f.op


def assert_ids_match_text(m: hbir.Module) -> None:
    """op_ids names every op as get_asm prints it, with and without debug info."""
    func = only_function(m)
    ids = op_ids(func)
    expected = [(n, len(op.results), op.name) for n, op in sorted(ids.items())]
    assert [n for n, _, _ in expected] == list(range(len(ids)))
    for debug in (False, True):
        text = m.module.get_asm(enable_debug_info=debug)
        assert printed_results(text) == expected, debug
        arity = len(func.body.block.args)
        assert printed_args(text) == [f"%arg{i}" for i in range(arity)]


def run_pass(m: hbir.Module, spec: str) -> hbir.Module:
    edited = m.clone()
    PassPipeline.parse_spec(get_all_passes(), spec).apply(
        make_context(), edited.module.op
    )
    return edited


# Removing a fake quant also drops the qnt.exact mark of its neighbours
# (tests/passes/test_exact_marks.py): blank the marks.
EXACT_MARK = re.compile(r" ?\{qnt\.exact = \{[^{}]*\}\}|,? ?qnt\.exact = \{[^{}]*\}")


def op_lines(text: str) -> list[str]:
    """The op lines of a printed function with every SSA name and every
    ``qnt.exact`` mark blanked."""
    lines = [EXACT_MARK.sub("", line.strip()) for line in text.splitlines()]
    return [re.sub(r"%[\w$.-]+", "%", line) for line in lines if " = " in line]


@pytest.fixture(scope="module")
def zoo_bc(tmp_path_factory):
    """Every zoo model exported to qat.bc, with its example inputs."""
    models = {}
    for name in zoo.NAMES:
        qat, example = calibrated(name, tmp_path_factory.mktemp(name))
        models[name] = (export(qat, example), example)
    return models


# ---- op IDs


@pytest.mark.parametrize("name", zoo.NAMES)
def test_ids_match_the_printed_text_of_every_zoo_model(zoo_bc, name):
    m, _ = zoo_bc[name]
    assert len(op_ids(only_function(m))) > 10
    assert_ids_match_text(m)


def test_ids_after_save_and_load_are_the_same(zoo_bc, tmp_path):
    m, _ = zoo_bc["multi_io"]
    hbir.save(m, tmp_path / "qat.bc")
    again = hbir.load(tmp_path / "qat.bc")
    assert again.module.get_asm() == m.module.get_asm()
    assert_ids_match_text(again)


def test_names_from_the_text_are_not_kept():
    m = hbir.Module.parse(NAMED)
    assert_ids_match_text(m)
    func = only_function(m)
    text = m.module.get_asm()
    assert '%1 = "hbir.relu"(%0)' in text
    assert '%2 = "qnt.const_fake_quant"(%1)' in text
    assert '%3:2 = "hbir.split"(%2)' in text
    assert '%4 = "hbir.add"(%3#0, %arg1)' in text
    assert "return %5, %3#1 :" in text
    ids = op_ids(func)
    assert [ids[n].name for n in sorted(ids)] == [
        "qnt.const_fake_quant",
        "hbir.relu",
        "qnt.const_fake_quant",
        "hbir.split",
        "hbir.add",
        "qnt.const_fake_quant",
    ]
    # The custom form (hbir-opt's) keeps the names and numbers the arguments too.
    assert "%2, %3 = hbir.split %q" in m.module.get_asm(pretty=True)


def test_each_function_counts_from_zero():
    text = SMALL + SMALL.replace("@forward", "@head")
    m = hbir.Module.parse(text)
    printed = m.module.get_asm()
    assert printed.count('%4 = "qnt.const_fake_quant"(%3)') == 2
    for f in m.functions:
        assert sorted(op_ids(f.op)) == [0, 1, 2, 3, 4]


# ---- the pass on a real model


def test_removes_exactly_the_chosen_fake_quants(zoo_bc):
    m, _ = zoo_bc["resnet"]
    before = m.module.get_asm()
    fqs = printed_fake_quants(before)
    a, b, single = fqs[3], fqs[6], fqs[10]
    edited = run_pass(m, f"remove-fake-quant{{ids={a}-{b},{single}}}")
    chosen = [n for n in fqs if a <= n <= b] + [single]
    assert len(chosen) == 5

    after = edited.module.get_asm()
    assert len(printed_fake_quants(after)) == len(fqs) - len(chosen)
    # The edited function prints as the original without exactly those lines.
    assert op_lines(after) == op_lines(without(before, chosen))
    # The original is untouched.
    assert m.module.get_asm() == before


def _trace(m: hbir.Module, inputs) -> tuple[list, dict]:
    """The ops in execution order and the array of every value."""
    f = m["forward"]
    ops = []
    env = dict(zip(f.op.body.block.args, inputs, strict=True))

    def on_op(op, results):
        ops.append(op)
        env.update(zip(op.results, results, strict=True))

    f.feed(dict(zip(f.inputs.names, inputs, strict=True)), on_op=on_op)
    return ops, env


def _downstream(op) -> set:
    """Every op that reads ``op``'s results, directly or not."""
    seen, todo = set(), [op]
    while todo:
        for r in todo.pop().results:
            for use in r.uses:
                if use.operation not in seen:
                    seen.add(use.operation)
                    todo.append(use.operation)
    return seen


ARITHMETIC = {"hbir.conv2d", "hbir.linear", "hbir.matmul", "hbir.add", "hbir.mul"}


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", ["resnet", "mobilenet", "transformer"])
def test_edited_model_runs_and_differs_only_downstream(zoo_bc, name):
    m, example = zoo_bc[name]
    ids = op_ids(only_function(m))
    inputs = [x.numpy() for x in zoo.batches(name, 1, batch=len(example[0]), seed=3)[0]]
    ops, env = _trace(m, inputs)
    # A fake quant that changes what flows through it into plain float arithmetic
    # (a table op re-quantizes its input, and a fake quant after a max pool of
    # quantized values changes nothing).
    working = [
        n
        for n, op in sorted(ids.items())
        if isinstance(op, ConstFakeQuantOp)
        and not _same(env[op.input], env[op.output])
        and any(use.operation.name in ARITHMETIC for use in op.output.uses)
    ]
    chosen = working[len(working) // 2]
    fq = ids[chosen]
    edited = run_pass(m, f"remove-fake-quant{{ids={chosen}}}")

    new_ops, new_env = _trace(edited, inputs)
    kept = [op for op in ops if op is not fq]
    assert [op.name for op in kept] == [op.name for op in new_ops]
    changed = {
        old
        for old, new in zip(kept, new_ops, strict=True)
        if not all(
            _same(env[a], new_env[b])
            for a, b in zip(old.results, new.results, strict=True)
        )
    }
    assert changed, "removing the fake quant changed nothing"
    assert changed <= _downstream(fq), "an op upstream or aside of the edit changed"
    consumers = {use.operation for use in fq.output.uses}
    assert changed & consumers
    # The model still runs end to end on its own inputs.
    out = edited["forward"](*inputs)
    for o in out if isinstance(out, tuple) else (out,):
        assert np.isfinite(o).all()


# ---- range semantics, on IR whose IDs are read off the text


def without(text: str, ids) -> str:
    """``text`` without the printed fake-quant lines of ``ids``."""
    return "\n".join(
        line
        for line in text.splitlines()
        if not ((m := FAKE_QUANT_LINE.match(line)) and int(m[1]) in ids)
    )


@pytest.mark.parametrize(
    ("ids", "removed"),
    [
        ("2", [2]),
        ("0-4", [0, 2, 4]),  # both ends included
        ("1-3", [2]),  # ends on non-fake-quant ops: only what lies inside
        ("1-4", [2, 4]),
        ("2-2", [2]),
        ("0-2,2,0", [0, 2]),  # overlaps count once
        ('"0 - 2, %4"', [0, 2, 4]),  # quoted: spaces and % as get_asm prints
        ('"%0-%2"', [0, 2]),
    ],
)
def test_range_semantics(ids, removed):
    m = hbir.Module.parse(SMALL)
    edited = run_pass(m, f"remove-fake-quant{{ids={ids}}}")
    after = edited.module.get_asm()
    assert op_lines(after) == op_lines(without(m.module.get_asm(), removed))


def test_option_syntax_reaches_the_pass_as_written():
    passes = get_all_passes()
    for spec, ids in [
        ("remove-fake-quant{ids=1-100,102}", ("1-100", 102)),
        ('remove-fake-quant{ids="1-100,102"}', ("1-100,102",)),
        ("remove-fake-quant{ids=7}", (7,)),
    ]:
        (p,) = PassPipeline.parse_spec(passes, spec).passes
        assert isinstance(p, RemoveFakeQuantPass) and p.ids == ids
    (p,) = PassPipeline.parse_spec(
        passes, "remove-fake-quant{ids=3 function=head}"
    ).passes
    assert p.function == "head"


def test_function_option_picks_the_function():
    m = hbir.Module.parse(SMALL + SMALL.replace("@forward", "@head"))
    edited = run_pass(m, "remove-fake-quant{ids=2 function=head}")
    fwd, head = (f.statistics()["qnt.const_fake_quant"] for f in edited.functions)
    assert (fwd, head) == (3, 2)


def test_removing_the_output_fake_quant_returns_the_float_value():
    m = hbir.Module.parse(SMALL)
    edited = run_pass(m, "remove-fake-quant{ids=4}")
    assert "return %3 : tensor<4xf32>" in edited.module.get_asm()
    x = np.array([-3.3, -0.2, 0.37, 2.9], np.float32)
    _, env = _trace(m, [x])
    relu = op_ids(only_function(m))[3]
    assert _same(edited["forward"](x), env[relu.output])
    assert not _same(m["forward"](x), env[relu.output])


def test_removal_rewires_the_consumer_to_the_float_input():
    m = hbir.Module.parse(SMALL)
    text = run_pass(m, "remove-fake-quant{ids=2}").module.get_asm()
    assert '%1 = "hbir.sigmoid"(%0)' in text
    assert '%2 = "hbir.relu"(%1)' in text


# ---- bad input


def _error(m: hbir.Module, spec: str) -> str:
    before = m.module.get_asm()
    with pytest.raises(OpIdError) as e:
        run_pass(m, spec)
    assert m.module.get_asm() == before
    return str(e.value)


def test_every_bad_entry_is_listed_in_one_error():
    m = hbir.Module.parse(SMALL)
    message = _error(m, "remove-fake-quant{ids=2,3,1,9,4-1,0-9,1-1,0}")
    assert message.splitlines() == [
        "remove-fake-quant: 6 bad entries for @forward:",
        "  3: %3 is 'hbir.relu', not a qnt.const_fake_quant",
        "  1: %1 is 'hbir.sigmoid', not a qnt.const_fake_quant",
        "  9: @forward has no %9 (its IDs end at %4)",
        "  4-1: reversed range: 4 > 1",
        "  0-9: @forward has no %9 (its IDs end at %4)",
        "  1-1: no qnt.const_fake_quant from %1 to %1",
    ]


def test_bad_ids_in_named_ir():
    m = hbir.Module.parse(NAMED)
    message = _error(m, "remove-fake-quant{ids=3,1,6}")
    assert message.splitlines()[1:] == [
        "  3: %3 is 'hbir.split', not a qnt.const_fake_quant",
        "  1: %1 is 'hbir.relu', not a qnt.const_fake_quant",
        "  6: @forward has no %6 (its IDs end at %5)",
    ]


def test_a_bad_range_end_names_both_missing_ends():
    m = hbir.Module.parse(SMALL)
    message = _error(m, "remove-fake-quant{ids=7-9}")
    assert "7-9: @forward has no %7 or %9 (its IDs end at %4)" in message


def test_functions_must_be_chosen_when_there_are_several():
    m = hbir.Module.parse(SMALL + SMALL.replace("@forward", "@head"))
    assert _error(m, "remove-fake-quant{ids=1}") == (
        "remove-fake-quant: IDs are numbered per function and the module has 2 "
        "(@forward, @head): choose one with `function`"
    )
    assert _error(m, "remove-fake-quant{ids=1 function=tail}") == (
        "remove-fake-quant: no function @tail (the module has @forward, @head)"
    )


@pytest.mark.parametrize(
    ("ids", "problem"),
    [
        (("x",), "'x': not an ID (7, %7) or a range (1-100)"),
        (("%arg0",), "'%arg0': a function argument, not an op ID"),
        (("1-",), "'1-': not an ID"),
        (("1-2-3",), "'1-2-3': not an ID"),
        (("1,,2",), "'': not an ID"),
        ((-5,), "-5: IDs are >= 0"),
        ((True,), "'True': not an ID"),
    ],
)
def test_malformed_ids(ids, problem):
    with pytest.raises(OpIdError) as e:
        parse_ids(ids)
    assert str(e.value).startswith("remove-fake-quant: malformed ids:\n")
    assert problem in str(e.value)


def test_messages_name_the_op_as_the_dialect_does():
    # The pass spells the name out so that importing it does not import qnt.
    assert FAKE_QUANT == ConstFakeQuantOp.name


def test_ids_are_required():
    with pytest.raises(OpIdError, match="ids is empty"):
        parse_ids(())
    with pytest.raises(ValueError, match='requires argument "ids"'):
        PassPipeline.parse_spec(get_all_passes(), "remove-fake-quant")


# A configured sigmoid (its table's grids are the fake quants around it, as
# configure-lut writes them) between two fake quants.
TABLED = """\
func.func @forward(%0: tensor<8xf32>) -> tensor<8xf32> {
  %1 = qnt.const_fake_quant %0 {min = array<f64: -4.0>, max = array<f64: 3.96875>, bits = 8 : i64} : tensor<8xf32>
  %2 = hbir.sigmoid %1 {num_tables = 162 : i64, in_scale = 3.125e-02 : f64, in_bits = 8 : i64, out_scale = 7.8125e-03 : f64, out_bits = 8 : i64} : tensor<8xf32>
  %3 = qnt.const_fake_quant %2 {min = array<f64: -1.0>, max = array<f64: 0.9921875>, bits = 8 : i64} : tensor<8xf32>
  %4 = hbir.relu %3 : tensor<8xf32>
  %5 = qnt.const_fake_quant %4 {min = array<f64: -2.0>, max = array<f64: 1.984375>, bits = 8 : i64} : tensor<8xf32>
  func.return %5 : tensor<8xf32>
}
"""


def test_float_fallback_of_a_table_op_computes_the_float_function():
    """Regression: the sigmoid kept its table configuration after the fake quants
    around it were removed, so the "float" region still ran the int8 table."""
    import torch

    x = np.linspace(-3.7, 3.9, 8, dtype=np.float32)
    x[3] = 0.0173  # between two grid points of the input
    from hbir.bc_editor import remove_fake_quant

    edited = remove_fake_quant(hbir.Module.parse(TABLED), [0, 2])
    ops = [op for op in edited.module.op.walk() if op.name == "hbir.sigmoid"]
    assert ops[0].lut_config() is None
    assert ops[0].num_tables.value.data == 162  # what the torch module asked for
    # Independent reference: torch's float sigmoid, relu, then the output grid.
    ref = torch.fake_quantize_per_tensor_affine(
        torch.relu(torch.sigmoid(torch.from_numpy(x))), 1 / 64, 0, -128, 127
    ).numpy()
    out = edited["forward"].feed({"_input_0": x})["_output_0"]
    np.testing.assert_array_equal(out, ref)
    # Converted, the sigmoid is a CPU island computing the same float function.
    quantized = hbir.convert(edited, "nash-e")
    assert "hbir.lut" not in quantized.module.get_asm()
    got = quantized["forward"].feed({"_input_0": x})["_output_0"]
    np.testing.assert_array_equal(got, ref)
