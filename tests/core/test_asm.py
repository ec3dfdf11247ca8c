"""get_asm's default text follows the reference toolchain's dumps, and parses back."""

import re

import pytest
from xdsl.dialects.builtin import (
    DenseArrayBase,
    FileLineColLoc,
    IntAttr,
    NameLoc,
    StringAttr,
)
from zoo_stages import calibrated

import hbir
from hbir.dialects.op_ids import op_ids
from hbir.quantization import export

OP_LINE = re.compile(r'^    %(\d+)(:\d+)? = "([a-z_0-9]+\.[a-z_0-9]+)"\(([^)]*)\)(.*)$')


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A small exported model (two inputs) and its converted form."""
    qat, example = calibrated("multi_io", tmp_path_factory.mktemp("multi_io"))
    qat_bc = export(qat, example)
    return qat_bc, hbir.convert(qat_bc, "nash-e")


def _sorted_keys(text: str) -> list[str]:
    """The top-level keys of a printed ``{a = ..., b = ...}``, in order."""
    keys, depth = [], 0
    for m in re.finditer(r"[{}\[\]<>()]|(?:^|, )([\w.]+) = ", text):
        if m[1] is not None and depth == 0:
            keys.append(m[1])
        elif m[0] in "{[<(":
            depth += 1
        elif m[0] in "}]>)":
            depth -= 1
    return keys


@pytest.mark.parametrize("stage", ["qat.bc", "quantized.bc"])
def test_default_text_follows_the_reference_conventions(exported, stage):
    m = exported[stage == "quantized.bc"]
    text = m.module.get_asm()
    lines = text.splitlines()
    # module attributes {...}, sorted, not builtin.module
    head = re.fullmatch(r"module attributes \{(.*)\} \{", lines[0])
    assert head, lines[0]
    keys = _sorted_keys(head[1])
    assert keys == sorted(keys) and "hbir.legacy_round" in keys
    # block arguments %arg0..., then one number per op from %0, in order
    assert lines[1].startswith("  func.func @forward(%arg0: tensor<")
    assert "%arg1: tensor<" in lines[1]
    ops = [OP_LINE.match(line) for line in lines[2:-3]]
    assert all(ops), [line for line in lines[2:-3] if not OP_LINE.match(line)]
    assert [int(op[1]) for op in ops] == list(range(len(ops)))
    ids = op_ids(m["forward"].op)
    assert [op[3] for op in ops] == [ids[n].name for n in range(len(ids))]
    # generic syntax, properties in <{...}> sorted by name
    for op in ops:
        props = re.match(r" <\{(.*)\}> : ", op[5])
        if props:
            keys = _sorted_keys(props[1])
            assert keys == sorted(keys), op[0]
    assert re.fullmatch(r"    return %\d+(, %\d+)* : .*", lines[-3])
    assert lines[-2:] == ["  }", "}"]
    if stage == "qat.bc":
        # per-tensor min/max as the reference prints them: one-element lists
        fq = next(op[0] for op in ops if op[3] == "qnt.const_fake_quant")
        assert re.search(r"max = \[[-\d.e+]+\], min = \[-[\d.e+]+\]", fq), fq


@pytest.mark.parametrize("stage", ["qat.bc", "quantized.bc"])
def test_default_text_parses_back_to_the_same_model(exported, stage):
    m = exported[stage == "quantized.bc"]
    for debug in (False, True):
        text = m.module.get_asm(enable_debug_info=debug)
        again = hbir.Module.parse(text)
        assert again.module.get_asm(enable_debug_info=debug) == text
        assert again.module.op.is_structurally_equivalent(m.module.op)


def test_the_other_forms_stay_available(exported):
    qat_bc, _ = exported
    pretty = qat_bc.module.get_asm(pretty=True)
    assert pretty.startswith("builtin.module attributes {")
    assert "qnt.const_fake_quant %0 {min = array<f64: " in pretty
    generic = qat_bc.module.get_asm(generic=True)
    assert generic.startswith('"builtin.module"() ({')
    for text in (pretty, generic):
        assert hbir.Module.parse(text).module.get_asm() == qat_bc.module.get_asm()


# ---- what MLIR's own printers write


MLIR_DEBUG_OUTPUT = """\
#loc = loc(unknown)
module {
  func.func @forward(%arg0: tensor<1x3x4x4xf32> loc(#loc1)) -> tensor<1x4x4x4xf32> {
    %0 = "qnt.const_fake_quant"(%arg0) <{bits = 8 : i64, max = [1.270000e+01], min = [-1.280000e+01], narrowRange = false}> : (tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32> loc(#loc3)
    %1 = "hbir.constant"() <{value = dense<1.000000e+00> : tensor<4x3x3x3xf32>}> : () -> tensor<4x3x3x3xf32> loc(#loc4)
    %2 = "hbir.conv2d"(%0, %1) <{dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [1, 1]}> : (tensor<1x3x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32> loc(#loc4)
    return %2 : tensor<1x4x4x4xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc1 = loc("net.py":3:0)
#loc2 = loc("net.py":9:17)
#loc3 = loc("quant|QuantStub#0"(#loc2))
#loc4 = loc(fused[#loc3, "conv|Conv2d#0"])
"""


def _file_loc(name: str, line: int, column: int) -> FileLineColLoc:
    return FileLineColLoc(StringAttr(name), IntAttr(line), IntAttr(column))


def test_location_aliases_and_lists_as_mlir_opt_prints_them():
    m = hbir.Module.parse(MLIR_DEBUG_OUTPUT, "net.mlir")
    ops = op_ids(m["forward"].op)
    quant = ops[0].location
    assert isinstance(quant, NameLoc) and quant.desc.data == "quant|QuantStub#0"
    assert quant.location == _file_loc("net.py", 9, 17)
    assert m["forward"].op.body.block.args[0].location == _file_loc("net.py", 3, 0)
    debug = m.module.get_asm(enable_debug_info=True)
    assert 'loc(fused["quant|QuantStub#0"("net.py":9:17), "conv|Conv2d#0"])' in debug
    assert isinstance(ops[0].min, DenseArrayBase)
    assert list(ops[2].stride.get_values()) == [1, 1]
    assert hbir.Module.parse(debug).module.get_asm(enable_debug_info=True) == debug


def test_an_undefined_location_alias_is_a_located_error():
    text = MLIR_DEBUG_OUTPUT.replace("#loc4 = ", "#loc9 = ")
    with pytest.raises(hbir.HbirParseError) as e:
        hbir.Module.parse(text, "net.mlir")
    first = str(e.value).splitlines()[0]
    column = text.splitlines()[4].index("#loc4") + 1  # its first use
    assert first == f"net.mlir:5:{column}: error: undefined location alias '#loc4'"


def test_a_list_where_the_op_holds_no_array_still_fails_verification():
    text = MLIR_DEBUG_OUTPUT.replace("bits = 8 : i64", "bits = [8]")
    with pytest.raises(hbir.HbirVerifyError, match="bits"):
        hbir.Module.parse(text, "net.mlir")
