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


def test_onnx_and_netron_are_refused_by_name():
    m = hbir.Module.parse(TEXT)
    with pytest.raises(hbir.HbirError, match="ONNX export and netron"):
        hbir.visualize(m, onnx_file="m.onnx")
    with pytest.raises(hbir.HbirError, match="html_file="):
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
