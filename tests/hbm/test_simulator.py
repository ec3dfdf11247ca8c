"""model.hbm on the simulated NPU: bit-identical to quantized.bc.

Every model of tests/compile_models.py (the zoo, digits, a CPU island, NV12, a
level-2 model and a half-up one) is compiled once to a ``.hbm`` file; 20 input
batches run through quantized.bc (the interpreter), the returned ``Hbm`` and the
file loaded back, and the outputs must be equal bit for bit. The debug table is
checked against quantized.bc's own intermediate values, and the Hbm API's
descriptors and input errors are tested.
"""

import compile_models
import numpy as np
import pytest
import torch

import hbir
from hbir.compile import compile_passes, run_passes
from hbir.dialects import npu
from hbir.dialects.op_ids import op_ids
from hbir.hbm import verify
from hbir.hbm.emit import emit
from hbir.passes.npu_tile import NpuTilePass
from hbir.runtime.hbm_opcodes import BY_NUMBER
from hbir.runtime.hbm_program import Buffer, FunctionCode


def _compiled(name, tmp_path_factory):
    """(quantized.bc, 20 batches, the Hbm compile returned, its file)."""
    return compile_models.compiled(name, tmp_path_factory)


def _reference(f, inputs, on_op=None):
    """quantized.bc's outputs, op by op: the interpreter's definition (its
    prepared plan, ``runtime/plan.py``, is tested equal to it elsewhere)."""
    names = f.inputs.names
    return f.feed(
        dict(zip(names, inputs, strict=True)), on_op=on_op or (lambda op, r: None)
    )


def _feed(f, inputs):
    return f.feed(dict(zip([d.name for d in f.inputs], inputs, strict=True)))


@pytest.mark.parametrize("name", compile_models.NAMES)
def test_model_hbm_is_bit_identical_to_quantized_bc(name, tmp_path_factory):
    quantized, batches, hbm, path = _compiled(name, tmp_path_factory)
    loaded = hbir.load(path)
    assert isinstance(loaded, hbir.Hbm) and loaded.march == "nash-e"
    reference = quantized["forward"]
    for inputs in batches:
        want = _reference(reference, inputs)
        for model in (hbm, loaded):
            got = _feed(model["forward"], inputs)
            assert list(got) == list(want)
            for key, w in want.items():
                assert got[key].dtype == w.dtype and got[key].shape == w.shape
                assert np.array_equal(got[key], w), f"{name}: output {key} differs"


@pytest.mark.parametrize("name", compile_models.NAMES)
def test_the_debug_table_names_quantized_bc_values(name, tmp_path_factory):
    # Each instruction whose debug entry says it computes quantized.bc's op %N
    # (value_of, in the layout perm undoes) holds exactly that op's value.
    quantized, batches, hbm, _ = _compiled(name, tmp_path_factory)
    reference = quantized["forward"]
    ids = {op: i for i, op in op_ids(reference.op).items()}
    values = {}

    def record(op, results):
        if op in ids and results:
            values[ids[op]] = results[0]

    _reference(reference, batches[0], on_op=record)
    checked = []

    def compare(index, instruction, entry, results):
        if entry.value_of is None:
            return
        got = results[0] if entry.perm is None else np.transpose(results[0], entry.perm)
        want = values[entry.value_of]
        assert got.shape == want.shape and np.array_equal(got, want), (
            f"{name}: instruction {index} "
            f"({BY_NUMBER[instruction.opcode].name}) is not %{entry.value_of}"
        )
        checked.append(entry.value_of)

    f = hbm["forward"]
    inputs = dict(zip([d.name for d in f.inputs], batches[0], strict=True))
    f.feed(inputs, on_instruction=compare)
    code = hbm["forward"].code
    computes = [
        e
        for i, e in zip(code.instructions, code.debug, strict=True)
        if BY_NUMBER[i.opcode].unit in ("tae", "vae", "aae", "cpu")
    ]
    assert all(e.op_ids for e in computes), "a compute instruction lacks its op IDs"
    assert all(e.op for e in computes) and any(e.loc for e in computes)
    assert len(set(checked)) >= len(computes) // 2  # most ops name a whole value


def test_the_hbm_describes_its_inputs_and_outputs(tmp_path_factory):
    _, _, hbm, _ = _compiled("nv12", tmp_path_factory)
    f = hbm["forward"]
    assert hbm[0] is f and hbm.functions == [f]
    assert [(d.name, d.shape, d.dtype, d.layout) for d in f.inputs] == [
        ("_input_0_y", (2, 8, 8, 1), "uint8", "NV12_Y"),
        ("_input_0_uv", (2, 4, 4, 2), "uint8", "NV12_UV"),
    ]
    assert [(d.name, d.shape, d.dtype) for d in f.outputs] == [
        ("_output_0", (2, 5), "float32")
    ]
    with pytest.raises(KeyError, match="no function @backward"):
        hbm["backward"]


def test_feed_refuses_bad_inputs_by_name(tmp_path_factory):
    _, batches, hbm, _ = _compiled("resnet", tmp_path_factory)
    f = hbm["forward"]
    (x,) = batches[0]
    with pytest.raises(hbir.FeedError, match=r"missing inputs \['_input_0'\]"):
        f.feed({"x": x})
    with pytest.raises(hbir.FeedError, match="has shape .*, expected"):
        f.feed({"_input_0": x[:1]})
    with pytest.raises(hbir.FeedError, match="has dtype float64, expected float32"):
        f.feed({"_input_0": x.astype(np.float64)})
    with pytest.raises(hbir.FeedError, match="feed takes a dict"):
        f.feed([x])
    with pytest.raises(hbir.FeedError, match="takes 1 inputs"):
        f(x, x)


def test_outputs_are_the_callers_own_arrays(tmp_path_factory):
    _, batches, hbm, _ = _compiled("resnet", tmp_path_factory)
    f = hbm["forward"]
    first = f(*batches[0])
    kept = first.copy()
    f(*batches[1])  # the arenas are reused: the first result must not change
    assert np.array_equal(first, kept)
    first[...] = 0
    assert np.array_equal(f(*batches[0]), kept)


def test_the_simulator_executes_the_memory_plan(tmp_path_factory):
    # Buffers live in byte arenas at their planned offsets: with every DDR buffer
    # moved to offset 0, live values overwrite each other (the residual adds read
    # clobbered inputs) and the numbers change; per-value arrays would hide it.
    from hbir.hbm import HbmFunction

    _, batches, hbm, _ = _compiled("resnet", tmp_path_factory)
    code = hbm["forward"].code
    collapsed = {
        k: Buffer(b.id, b.space, 0, b.size, b.shape, b.dtype) if b.space == "ddr" else b
        for k, b in code.buffers.items()
    }
    broken = HbmFunction(FunctionCode(**{**code.__dict__, "buffers": collapsed}))
    for inputs in batches[:3]:
        good = hbm["forward"](*inputs)
        assert not np.array_equal(broken(*inputs), good)


def test_constants_are_prepared_only_where_the_memory_plan_keeps_them(
    tmp_path_factory,
):
    # With every SRAM buffer at offset 0, each load overwrites the weights loaded
    # before it. A conv may use its weight packed (and bias folded) from the
    # constant only if no write reached those bytes between load and use: the
    # simulator must give exactly what computing from the SRAM bytes gives.
    from hbir.hbm import HbmFunction

    _, batches, hbm, _ = _compiled("resnet", tmp_path_factory)
    code = hbm["forward"].code
    collapsed = {
        k: Buffer(b.id, b.space, 0, b.size, b.shape, b.dtype)
        if b.space == "sram"
        else b
        for k, b in code.buffers.items()
    }
    broken_code = FunctionCode(**{**code.__dict__, "buffers": collapsed})
    broken, truth = HbmFunction(broken_code), HbmFunction(broken_code)
    for step in truth._sim.steps:  # every conv computes from the bytes in SRAM
        step.fields = {
            k: v for k, v in step.fields.items() if k not in ("_packed", "_fused")
        }
    for inputs in batches[:2]:  # (an observer: truth runs every load)
        every = truth._sim.run(inputs, on_instruction=lambda *_: None)
        assert np.array_equal(broken(*inputs), every[0])

    def prepared(f):
        return sum("_fused" in s.fields for s in f._sim.steps)

    # the intact program uses its constants; the collapsed one may not, mostly
    assert prepared(broken) < prepared(hbm["forward"]) >= 5


def test_copies_that_nothing_reads_are_skipped_and_change_nothing(tmp_path_factory):
    # A conv with a fused epilogue takes its weight and bias from their packed
    # forms, and a reader of a copied activation reads it where it was copied
    # from: those DMA copies are dead work. Without an observer the simulator
    # skips them, with one it runs every instruction.
    from hbir.hbm import HbmFunction

    _, batches, hbm, _ = _compiled("resnet", tmp_path_factory)
    code = hbm["forward"].code
    sim = HbmFunction(code)._sim
    skipped = set(range(len(sim.steps))) - {i for i, _ in sim.live}
    fused = sum("_fused" in s.fields for s in sim.steps)
    assert len(skipped) >= fused >= 5
    assert {sim.steps[i].name for i in skipped} <= {"dma_load", "dma_store"}
    for inputs in batches[:3]:
        fast = sim.run(inputs)
        every = sim.run(inputs, on_instruction=lambda *_: None)
        assert all(np.array_equal(a, b) for a, b in zip(fast, every, strict=True))
    for step in sim.steps:  # convs that read their weights from SRAM
        step.fields.pop("_fused", None)
    assert not sim._unread_copies(sim._buffers_read()) & {
        i for i in skipped if any(
            s.name == "conv" and code.instructions[i].results[0] in ins.operands
            for s, ins in zip(sim.steps, code.instructions, strict=True)
        )
    }  # fmt: skip


def test_copies_are_forwarded_only_while_source_and_copy_hold_the_same_bytes(
    tmp_path_factory, monkeypatch
):
    # A reader of a DMA copy reads the copy's source instead while neither is
    # written in between. With every DDR (or SRAM) buffer at offset 0, sources
    # and copies are overwritten all the time: the simulator must give exactly
    # what it gives with no copy forwarded.
    from hbir.hbm import HbmFunction
    from hbir.runtime import npu_forward

    _, batches, hbm, _ = _compiled("resnet", tmp_path_factory)
    code = hbm["forward"].code
    sim = hbm["forward"]._sim
    forwarded = [
        (j, n)
        for j, ins in enumerate(code.instructions)
        for n, key in enumerate(sim.reads[j])
        if key is not None and key != ins.operands[n]
    ]
    assert len(forwarded) >= 10
    for j, n in forwarded:  # the reader's operand is a view of the source
        source = sim.views[sim.reads[j][n]]
        assert sim.steps[j].ins[n] is source
        assert code.buffers[code.instructions[j].operands[n]].space in ("sram", "ddr")
    # through a store and a load: a loaded value read in the SRAM it was
    # computed in
    assert any(
        code.buffers[sim.reads[j][n]].space == "sram"
        and code.buffers[code.instructions[j].operands[n]].space == "sram"
        for j, n in forwarded
    )

    def collapsed(space):
        return FunctionCode(
            **code.__dict__
            | {
                "buffers": {
                    k: Buffer(b.id, b.space, 0, b.size, b.shape, b.dtype)
                    if b.space == space
                    else b
                    for k, b in code.buffers.items()
                }
            }
        )

    programs = [code, collapsed("ddr"), collapsed("sram")]
    fast = [HbmFunction(c) for c in programs]
    monkeypatch.setattr(npu_forward, "forward_copies", lambda sim, reads: 0)
    slow = [HbmFunction(c) for c in programs]
    assert sum(len(f._sim.live) for f in slow) > sum(len(f._sim.live) for f in fast)
    for inputs in batches[:3]:
        for a, b in zip(fast, slow, strict=True):
            assert np.array_equal(a(*inputs), b(*inputs))
        assert not np.array_equal(fast[1](*inputs), fast[0](*inputs))


@pytest.mark.parametrize("name", ["resnet", "multi_io"])
def test_a_program_tiled_for_a_tiny_sram_runs_tile_by_tile(name, tmp_path_factory):
    # With a quarter of the largest working set as SRAM (grown until tiling
    # works), ops split into row tiles (with halo) or output-channel tiles; the
    # emitted program verifies and its tiles, run one by one, give quantized.bc.
    quantized, batches, hbm, program, limit, largest = _tiny_sram_program(
        name, tmp_path_factory
    )
    code = program.functions[0]
    assert code.sram_peak_bytes <= limit < largest
    assert len(code.instructions) > len(hbm["forward"].code.instructions)
    tiled = hbir.Hbm(program)
    for inputs in batches[:5]:
        want = _reference(quantized["forward"], inputs)
        got = _feed(tiled["forward"], inputs)
        assert all(np.array_equal(got[k], w) for k, w in want.items())


def test_channel_tiles_with_equal_inputs_share_one_sums_call(
    tmp_path_factory, monkeypatch
):
    # Output-channel tiles of a conv load the same input: the simulator sums all
    # their channels at the first tile and each tile requantizes its own. A tile
    # whose input is loaded from elsewhere must not join the group.
    from torch import nn
    from zoo_stages import validated

    from hbir.hbm import HbmFunction
    from hbir.quantization import export
    from hbir.runtime import npu_merge

    torch.manual_seed(0)  # weights much larger than activations: channel tiles
    net = nn.Sequential(
        nn.Conv2d(8, 96, 3, padding=1), nn.ReLU(), nn.Conv2d(96, 96, 3, padding=1)
    )
    inputs = [torch.randn(1, 8, 6, 6) for _ in range(4)]
    qat = validated(net, inputs, tmp_path_factory.mktemp("tiles"))
    quantized = hbir.convert(export(qat, (inputs[0],)), "nash-e")
    program, _, _ = _tiny_sram(quantized)
    batches = [(torch.randn(1, 8, 6, 6).numpy(),) for _ in range(3)]
    for inputs in batches:  # the tiled program is still quantized.bc
        want = _reference(quantized["forward"], inputs)
        got = _feed(hbir.Hbm(program)["forward"], inputs)
        assert all(np.array_equal(got[k], w) for k, w in want.items())
    code = program.functions[0]
    sim = HbmFunction(code)._sim
    tiles = [i for i, s in enumerate(sim.steps) if s.run is npu_merge.run_tile]
    firsts = [i for i in tiles if sim.steps[i].extra[1]]
    assert firsts and len(tiles) > len(firsts)
    for inputs in batches[:3]:  # the grouped run against every step on its own
        fast = sim.run(inputs)
        monkeypatch.setattr(npu_merge, "group_channel_tiles", lambda sim: [])
        alone = HbmFunction(code)._sim.run(inputs)
        monkeypatch.undo()
        assert all(np.array_equal(a, b) for a, b in zip(fast, alone, strict=True))

    # the second tile of a group loads another value of the same shape
    second = next(i for i in tiles if not sim.steps[i].extra[1])
    x = code.instructions[second].operands[0]
    load = max(
        j for j in range(second) if x in code.instructions[j].results
    )  # fmt: skip
    source = code.buffers[code.instructions[load].operands[0]]
    other = next(
        b.id for b in code.buffers.values()
        if (b.space, b.shape, b.dtype) == (source.space, source.shape, source.dtype)
        and b.id != source.id
    )  # fmt: skip
    instructions = list(code.instructions)
    ins = instructions[load]
    instructions[load] = type(ins)(**{**ins.__dict__, "operands": (other,)})
    changed = FunctionCode(**{**code.__dict__, "instructions": instructions})
    broken = HbmFunction(changed)._sim
    group = sim.steps[second].extra[0]
    alone_step = broken.steps[second]  # not a tile of that group any more
    assert alone_step.run is not npu_merge.run_tile or alone_step.extra[0] is not group
    monkeypatch.setattr(npu_merge, "group_channel_tiles", lambda sim: [])
    truth = HbmFunction(changed)._sim
    monkeypatch.undo()
    for inputs in batches[:2]:
        got, want = broken.run(inputs), truth.run(inputs)
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def _tiny_sram_program(name, tmp_path_factory):
    """(quantized.bc, batches, its Hbm, the program compiled for a quarter of its
    largest working set as SRAM (grown until tiling works), that SRAM, the
    largest working set)."""
    quantized, batches, hbm, _ = _compiled(name, tmp_path_factory)
    return quantized, batches, hbm, *_tiny_sram(quantized)


def _tiny_sram(quantized):
    passes = compile_passes("nash-e")
    at = [p.name for p in passes].index("npu-tile")
    fused = quantized.clone()
    run_passes(fused, passes[:at])
    largest = max(
        npu.working_set(op, 16) for op in fused.module.op.walk() if npu.is_compute(op)
    )
    limit = largest // 4
    while True:
        module = quantized.clone()
        tiny = [*passes[:at], NpuTilePass(sram_bytes=limit), *passes[at + 1 :]]
        try:
            run_passes(module, tiny)
            break
        except hbir.HbirError:
            limit = limit * 5 // 4
    program = emit(module, quantized)

    def fail(place, what):
        raise AssertionError(f"{place}: {what}")

    verify.verify_program(program, fail)
    return program, limit, largest


@pytest.mark.parametrize("name", ["transpose", "slice", "concat"])
def test_an_instruction_reads_its_operands_before_it_writes(name):
    # A result placed over its own operand (a hostile or wrong memory plan):
    # the instruction still computes from the operand as it was, as if it
    # read it whole before writing (the simulator then does not let the
    # kernel write its result's bytes while reading).
    from hbir.runtime.hbm_opcodes import BY_NAME
    from hbir.runtime.hbm_program import DebugEntry, Instruction, TensorDesc
    from hbir.runtime.npu_sim import FunctionSim

    x = np.arange(2 * 3 * 4 * 8, dtype=np.int8).reshape(2, 3, 4, 8)
    fields, result, want = {
        "transpose": ({"perm": (0, 2, 3, 1)}, (2, 4, 8, 3), x.transpose(0, 2, 3, 1)),
        "slice": (
            {"begin": (0, 1, 0, 0), "end": (2, 3, 4, 8), "step": (1, 1, 1, 1)},
            (2, 2, 4, 8),
            x[:, 1:],
        ),
        "concat": ({"dim": 3}, (2, 3, 4, 16), np.concatenate([x, x], axis=3)),
    }[name]
    operands = (2, 2) if name == "concat" else (2,)
    size = x.size * 2
    buffers = {  # the input written straight into the SRAM (no load)
        2: Buffer(2, "sram", 0, x.size, x.shape, "int8"),
        3: Buffer(3, "sram", 0, size, result, "int8"),  # over its operand
        4: Buffer(4, "ddr", 0, size, result, "int8"),
    }
    instructions = [
        Instruction(BY_NAME[name].number, operands, (3,), fields, "view"),
        Instruction(BY_NAME["dma_store"].number, (3,), (4,), {}, "dma"),
    ]
    code = FunctionCode(
        "f",
        (TensorDesc("x", x.shape, "int8"),),
        (TensorDesc("y", result, "int8"),),
        buffers,
        (2,),
        (4,),
        instructions,
        [DebugEntry((), "", "")] * 2,
        ddr_peak_bytes=size,
        sram_peak_bytes=size,
    )
    sim = FunctionSim(code, [])
    for observer in (None, lambda *_: None):
        (got,) = sim.run([x], on_instruction=observer)
        assert np.array_equal(got, want)


@pytest.mark.parametrize("name", ["resnet", "multi_io"])
def test_the_write_index_answers_as_a_scan_of_the_program(name, tmp_path_factory):
    # runtime/npu_writes.py: next and last writes of a buffer's bytes from an
    # index, checked against a scan of the instructions with the simulator's
    # own overlap rule, on the program as compiled and tiled for a tiny SRAM
    # (where buffers overlap everywhere).
    from hbir.runtime.npu_writes import Writes

    _, _, hbm, program, _, _ = _tiny_sram_program(name, tmp_path_factory)
    for sim in (hbm["forward"]._sim, hbir.Hbm(program)["forward"]._sim):
        code, writes = sim.code, Writes(sim.code)
        n, keys = len(code.instructions), sorted(code.buffers)

        def scan(steps, key, code=code, sim=sim):
            results = code.instructions
            return [
                j
                for j in steps
                if any(sim._overlap(r, key) for r in results[j].results)
            ]

        for i in range(0, n, max(1, n // 15)):
            for key in keys:
                after = scan(range(i + 1, n), key)
                assert writes.next_write(i, key) == (after[0] if after else n)
                before = scan(range(i), key)
                assert writes.last_write(i, key) == (before[-1] if before else -1)
