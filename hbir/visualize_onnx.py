"""``visualize(m, onnx_file=...)``: the model's graph as an ONNX file, for netron.

The reference writes its HBIR as ONNX so that netron can draw it; so does this,
where the ``onnx`` package is installed. The file describes the graph, it is not
an ONNX model to run: each op of a function's top level is one node whose
``domain`` and ``op_type`` are the op's dialect and name (``hbir`` / ``conv2d``),
named as the reference's dumps name ops (``hbir.conv2d_id_3``: the op ID that
``get_asm()`` prints), with the op's properties as string attributes, its ID and
its torch origin; every value is typed with its shape and element type (the
function's inputs by their names, op results as ``%N`` or ``%N#k``). Constants'
values are not copied: the file stays small whatever the weights.

A module with several functions gives one graph holding each, its names prefixed
by ``@function/``.
"""

from __future__ import annotations

import os

from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import ReturnOp
from xdsl.ir import Attribute, Operation, SSAValue

from hbir.dialects.hbir import numpy_dtype
from hbir.errors import HbirError, HbirOutputError
from hbir.visualize import op_origin

# a property printed longer than this is cut (a constant's values, a table)
ATTRIBUTE_CHARS = 200


class OnnxExportError(HbirError):
    """The ONNX view cannot be written (no ``onnx`` package, a type ONNX lacks)."""


def _onnx():
    try:
        import onnx
    except ImportError:
        raise OnnxExportError(
            "hbir.visualize: onnx_file= needs the 'onnx' package (pip install "
            "onnx); visualize(m, html_file='model.html') needs nothing"
        ) from None
    return onnx


def _elem_type(onnx, t: Attribute, what: str) -> int:
    if not isinstance(t, TensorType):
        raise OnnxExportError(f"hbir.visualize: {what} has type {t}, not a tensor")
    return onnx.helper.np_dtype_to_tensor_dtype(numpy_dtype(t.element_type))


def _value_info(onnx, name: str, t: Attribute, what: str):
    shape = list(t.get_shape()) if isinstance(t, TensorType) else None
    return onnx.helper.make_tensor_value_info(name, _elem_type(onnx, t, what), shape)


def _text(attr: Attribute) -> str:
    s = str(attr)
    return s if len(s) <= ATTRIBUTE_CHARS else s[: ATTRIBUTE_CHARS - 3] + "..."


def _function_graph(onnx, function, prefix: str):
    """(nodes, inputs, outputs, value infos) of one function."""
    from hbir.dialects.op_ids import op_ids

    ids = {op: n for n, op in op_ids(function.op).items()}
    block = function.op.body.block
    names: dict[SSAValue, str] = {}
    inputs = []
    for arg, argument in zip(block.args, function.inputs, strict=True):
        names[arg] = prefix + argument.name
        inputs.append(_value_info(onnx, names[arg], arg.type, argument.name))
    nodes, infos, outputs = [], [], []
    for op in block.ops:
        if isinstance(op, ReturnOp):
            for value, argument in zip(op.operands, function.outputs, strict=True):
                info = _value_info(onnx, names[value], value.type, argument.name)
                info.doc_string = f"output {argument.name}"
                outputs.append(info)
            continue
        nodes.append(_node(onnx, op, ids.get(op), prefix, names))
        infos += [
            _value_info(onnx, names[r], r.type, names[r])
            for r in op.results
            if isinstance(r.type, TensorType)
        ]
    return nodes, inputs, outputs, infos


def _node(onnx, op: Operation, op_id: int | None, prefix: str, names: dict):
    for k, r in enumerate(op.results):
        suffix = f"#{k}" if len(op.results) > 1 else ""
        names[r] = f"{prefix}%{op_id}{suffix}"
    domain, _, op_type = op.name.partition(".")
    attributes = {k: _text(v) for k, v in sorted(op.properties.items())}
    attributes.update(
        {"op_id": -1 if op_id is None else op_id, "origin": op_origin(op)}
    )
    return onnx.helper.make_node(
        op_type,
        [names.get(v, "") for v in op.operands],  # "": a value from a region
        [names[r] for r in op.results],
        name=f"{prefix}{op.name}_id_{op_id}" if op_id is not None else op.name,
        domain=domain,
        **attributes,
    )


def write_onnx(m, path: str | os.PathLike) -> None:
    """Write module ``m``'s graph (see the module docstring) to ``path``."""
    onnx = _onnx()
    nodes, inputs, outputs, infos = [], [], [], []
    several = len(m.functions) > 1
    for f in m.functions:
        graph = _function_graph(onnx, f, f"@{f.name}/" if several else "")
        nodes += graph[0]
        inputs += graph[1]
        outputs += graph[2]
        infos += graph[3]
    domains = sorted({n.domain for n in nodes})
    graph = onnx.helper.make_graph(
        nodes,
        m.functions[0].name if not several else "module",
        inputs,
        outputs,
        value_info=infos,
    )
    model = onnx.helper.make_model(
        graph,
        producer_name="hbir",
        opset_imports=[onnx.helper.make_opsetid("", 17)]
        + [onnx.helper.make_opsetid(d, 1) for d in domains],
    )
    if m.march:
        onnx.helper.set_model_props(model, {"march": m.march})
    try:
        onnx.save(model, os.fspath(path))
    except OSError as e:
        raise HbirOutputError(path, "hbir.visualize's ONNX file", e) from None
