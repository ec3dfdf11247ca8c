"""hbir.visualize: the model as an offline HTML page with an inline SVG."""

import re

import pytest

import hbir

TEXT = """func.func @forward(%x: tensor<1x4xf32> {hbir.name = "img"}) -> tensor<1x4xf32> {
  %0 = hbir.relu %x : tensor<1x4xf32>
  %1 = hbir.add %0, %x : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x4xf32>
  func.return %1 : tensor<1x4xf32>
}
"""


def test_every_op_is_a_box_with_its_id_and_every_operand_an_edge(tmp_path):
    m = hbir.Module.parse(TEXT)
    page = hbir.visualize(m, html_file=tmp_path / "model.html")
    assert (tmp_path / "model.html").read_text() == page
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1
    # the boxes: the input, the two ops, the return (as get_asm numbers them)
    asm = m.module.get_asm()
    ids = re.findall(r"^\s*(%\d+) = \"(\S+)\"", asm, re.M)
    assert [i for i, _ in ids] == ["%0", "%1"]
    for op_id, name in ids:
        assert f"{op_id} {name}" in page
    assert page.count('<g class="op">') == 1 + len(ids) + 1
    assert "input img" in page and "return _output_0" in page
    # edges: relu <- x, add <- relu and x, return <- add
    assert page.count("<line ") == 4
    assert page.count("tensor&lt;1x4xf32&gt;") >= 3


def test_netron_is_refused_by_name():
    m = hbir.Module.parse(TEXT)
    with pytest.raises(hbir.HbirError, match="use_netron is not provided"):
        hbir.visualize(m, use_netron=True)


def test_a_path_is_refused_and_an_unwritable_page_is_located(tmp_path):
    with pytest.raises(hbir.ModelTypeError, match="load it first"):
        hbir.visualize("model.bc")
    m = hbir.Module.parse(TEXT)
    with pytest.raises(OSError, match="cannot write hbir.visualize's page"):
        hbir.visualize(m, html_file=tmp_path / "missing" / "m.html")


def test_the_module_import_leaves_the_function():
    import importlib

    module = importlib.import_module("hbir.visualize")
    assert hbir.visualize is module.visualize


def test_a_torch_model_is_refused_with_the_fix():
    import torch

    with pytest.raises(hbir.ModelTypeError, match="export it first"):
        hbir.visualize(torch.nn.Linear(2, 2))


def test_onnx_file_holds_every_op_with_its_id_types_and_edges(tmp_path):
    onnx = pytest.importorskip("onnx")
    m = hbir.Module.parse(TEXT)
    hbir.visualize(m, onnx_file=tmp_path / "model.onnx")
    model = onnx.load(tmp_path / "model.onnx")
    onnx.checker.check_model(model, full_check=True)
    g = model.graph
    # one node per op, named as the reference's dumps name ops, in program order
    asm = m.module.get_asm()
    ids = re.findall(r"^\s*%(\d+) = \"(\S+)\"", asm, re.M)
    assert [n.name for n in g.node] == [f"{name}_id_{i}" for i, name in ids]
    assert [(n.domain, n.op_type) for n in g.node] == [
        ("hbir", "relu"),
        ("hbir", "add"),
    ]
    ids_attr = [
        onnx.helper.get_attribute_value(a)
        for n in g.node
        for a in n.attribute
        if a.name == "op_id"
    ]
    assert ids_attr == [int(i) for i, _ in ids]
    # edges: relu <- img, add <- relu and img; the output is add's result
    assert [list(n.input) for n in g.node] == [["img"], ["%0", "img"]]
    assert [o.name for o in g.output] == ["%1"] and g.output[
        0
    ].doc_string == "output _output_0"
    # shapes and element types of every value
    typed = {v.name: v.type.tensor_type for v in [*g.input, *g.value_info, *g.output]}
    for name in ("img", "%0", "%1"):
        assert typed[name].elem_type == onnx.TensorProto.FLOAT
        assert [d.dim_value for d in typed[name].shape.dim] == [1, 4]


def test_onnx_file_of_a_converted_model_has_integer_types_and_properties(tmp_path):
    onnx = pytest.importorskip("onnx")
    text = """func.func @forward(%x: tensor<1x4xsi8>) -> tensor<1x4xsi16> {
  %0 = hbir.cast %x : tensor<1x4xsi8> -> tensor<1x4xsi16>
  %1 = hbir.clip %0 {min = -5.0 : f64, max = 5.0 : f64} : tensor<1x4xsi16>
  func.return %1 : tensor<1x4xsi16>
}
"""
    m = hbir.Module.parse(text)
    hbir.visualize(m, onnx_file=tmp_path / "m.onnx")
    g = onnx.load(tmp_path / "m.onnx").graph
    assert g.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT8
    assert g.output[0].type.tensor_type.elem_type == onnx.TensorProto.INT16
    clip = {a.name: onnx.helper.get_attribute_value(a) for a in g.node[1].attribute}
    assert clip["min"] == b"-5.000000e+00 : f64"
    assert clip["max"] == b"5.000000e+00 : f64"


def test_onnx_without_the_package_names_it(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx -> ImportError
    m = hbir.Module.parse(TEXT)
    with pytest.raises(hbir.HbirError, match="needs the 'onnx' package"):
        hbir.visualize(m, onnx_file=tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_onnx_file_of_an_nv12_quantized_model_checks_and_has_every_op(tmp_path):
    onnx = pytest.importorskip("onnx")
    from tests.compile_models import quantized

    model, _ = quantized("nv12", tmp_path, 1)
    hbir.visualize(model, onnx_file=tmp_path / "nv12.onnx")
    onnx_model = onnx.load(tmp_path / "nv12.onnx")
    onnx.checker.check_model(onnx_model, full_check=True)
    body = model.functions[0].op.body.block
    ops = [op for op in body.ops if op.name != "func.return"]
    nodes = onnx_model.graph.node
    assert [f"{n.domain}.{n.op_type}" for n in nodes] == [op.name for op in ops]
    assert {i.name for i in onnx_model.graph.input} == {"_input_0_y", "_input_0_uv"}
    assert [i.type.tensor_type.elem_type for i in onnx_model.graph.input] == [
        onnx.TensorProto.UINT8
    ] * 2
    # every node input is a graph input or an earlier node's output
    seen = {i.name for i in onnx_model.graph.input}
    for n in nodes:
        assert set(n.input) <= seen, n.name
        seen |= set(n.output)


def test_onnx_file_names_several_results_and_several_functions(tmp_path):
    onnx = pytest.importorskip("onnx")
    text = """builtin.module {
func.func @first(%x: tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>) {
  %s0, %s1 = hbir.split %x {sizes = array<i64: 3, 5>, dim = 1 : i64} : (tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>)
  func.return %s0, %s1 : tensor<2x3xf32>, tensor<2x5xf32>
}
func.func @second(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = hbir.relu %x : tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}
}
"""
    m = hbir.Module.parse(text)
    hbir.visualize(m, onnx_file=tmp_path / "two.onnx")
    model = onnx.load(tmp_path / "two.onnx")
    onnx.checker.check_model(model, full_check=True)
    g = model.graph
    assert [n.name for n in g.node] == [
        "@first/hbir.split_id_0",
        "@second/hbir.relu_id_0",
    ]
    assert list(g.node[0].output) == ["@first/%0#0", "@first/%0#1"]
    assert [i.name for i in g.input] == ["@first/_input_0", "@second/_input_0"]
    assert [o.name for o in g.output] == ["@first/%0#0", "@first/%0#1", "@second/%0"]
    shapes = [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in g.output]
    assert shapes == [[2, 3], [2, 5], [2, 8]]
