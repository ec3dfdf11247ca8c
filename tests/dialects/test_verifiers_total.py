"""Every verifier is total: an hbir, qnt or npu op with a mutated property or
result type (rank 0, an empty or over-long array, zero, negative or huge values,
another dtype, a property dropped) parses to a verified module or to one located
``HbirError``; never another exception.

The ops come from real models (the zoo's qat.bc, quantized.bc and compiled npu
program); one thing is changed at a time, the module printed and parsed back as a
user's file would be. Fixed seed, bounded."""

import numpy as np
import pytest
from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    FloatAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    i1,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region
from zoo_stages import calibrated

import hbir
import hbir.files
from hbir.compile import lower_to_npu
from hbir.errors import HbirError
from hbir.quantization import export

CASES = 400  # per module, each op in a module of its own


def _integer(attr: IntegerAttr, value: int) -> IntegerAttr:
    return IntegerAttr(value, attr.type)


def _property_mutants(attr):
    """Attributes of the same kind as ``attr`` with hostile values."""
    if isinstance(attr, IntegerAttr) and attr.type == i1:  # a BoolAttr
        return [BoolAttr.from_bool(not attr.value.data)]
    if isinstance(attr, IntegerAttr):
        return [_integer(attr, v) for v in (0, -1, 2**31 - 1, -(2**31))]
    if isinstance(attr, FloatAttr):
        return [FloatAttr(v, attr.type) for v in (0.0, -1.0, float("inf"))]
    if isinstance(attr, StringAttr):
        return [StringAttr(""), StringAttr("nope")]
    if isinstance(attr, DenseArrayBase):
        values = list(attr.get_values())
        integer = not isinstance(values[0], float) if values else True
        extreme = [0, -1, 2**40] if integer else [0.0, -1.0, float("nan")]
        out = [DenseArrayBase.from_list(attr.elt_type, [])]
        out.append(DenseArrayBase.from_list(attr.elt_type, values + values[:1]))
        for v in extreme:
            out.append(
                DenseArrayBase.from_list(attr.elt_type, [v] * max(len(values), 1))
            )
        return out
    return []


def _type_mutants(t: TensorType):
    shape = list(t.get_shape())
    out = [TensorType(t.element_type, [])]  # rank 0
    if shape:
        out.append(TensorType(t.element_type, shape[:-1]))
        out.append(TensorType(t.element_type, [*shape[:-1], shape[-1] + 1]))
    for element in ("si8", "si32", "f32"):
        ty = hbir.Module.parse(
            f"func.func @f(%x: tensor<1x{element}>) -> tensor<1x{element}> "
            "{\n  func.return %x : tensor<1x" + element + ">\n}"
        )["f"].op.function_type.inputs.data[0]
        if ty.element_type != t.element_type:
            out.append(TensorType(ty.element_type, shape))
    return out


def _mutations(module: hbir.Module):
    """(op index, what, apply) for every op with properties or tensor results."""
    ops = [
        op
        for op in module.module.op.walk()
        if op.dialect_name() in {"hbir", "qnt", "npu"}
    ]
    for i, op in enumerate(ops):
        for name, attr in op.properties.items():
            yield i, f"{op.name} drops {name}", ("drop", name, None)
            for new in _property_mutants(attr):
                yield i, f"{op.name}.{name} = {new}", ("prop", name, new)
        for r, result in enumerate(op.results):
            if isinstance(result.type, TensorType):
                for new in _type_mutants(result.type):
                    yield i, f"{op.name} result {r}: {new}", ("type", r, new)


def _alone(module: hbir.Module, op) -> ModuleOp:
    """``op`` in a function of its own: its operands are the arguments, its
    results returned (the module's attributes kept: the march)."""
    block = Block(arg_types=[v.type for v in op.operands])
    clone = op.clone(value_mapper=dict(zip(op.operands, block.args, strict=True)))
    block.add_op(clone)
    block.add_op(ReturnOp(*clone.results))
    types = ([v.type for v in op.operands], [r.type for r in op.results])
    alone = ModuleOp([FuncOp("f", types, Region(block))])
    alone.attributes.update(module.module.op.attributes)
    return alone


def _apply(module: hbir.Module, index: int, change, whole: bool = False) -> str:
    """The text of the op changed, alone in a module (or ``whole``: in its own
    module, where the marks of its neighbours read it)."""
    if whole:
        module = module.clone()
    ops = [
        op
        for op in module.module.op.walk()
        if op.dialect_name() in {"hbir", "qnt", "npu"}
    ]
    if whole:
        op, container = ops[index], module.module.op
    else:
        container = _alone(module, ops[index])
        op = container.body.block.first_op.body.block.first_op
    kind, key, new = change
    if kind == "drop":
        del op.properties[key]
    elif kind == "prop":
        op.properties[key] = new
    else:
        op.results[key]._type = new  # the value's type, as a file would spell it
        if not whole:
            ret, fn = op.next_op, container.body.block.first_op
            outputs = [v.type for v in ret.operands]
            inputs = fn.function_type.inputs.data
            fn.function_type = FunctionType.from_lists(inputs, outputs)
    return hbir.files.print_module(container)


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    out = {}
    for name in ("transformer", "multi_io"):
        qat, example = calibrated(name, tmp_path_factory.mktemp(name))
        qat_bc = export(qat, example)
        quantized = hbir.convert(qat_bc, "nash-e")
        out[f"{name} qat.bc"] = qat_bc
        out[f"{name} quantized.bc"] = quantized
        out[f"{name} npu"] = lower_to_npu(quantized, "nash-e")
    return out


def _check(module, which: str, cases: int, whole: bool) -> None:
    mutations = list(_mutations(module))
    rng = np.random.default_rng(20261202)
    chosen = rng.choice(len(mutations), size=min(cases, len(mutations)), replace=False)
    refused = 0
    for k in chosen:
        index, what, change = mutations[k]
        try:
            text = _apply(module, index, change, whole)
        except Exception:  # the printer cannot spell it: no file could hold it
            continue
        try:
            hbir.Module.parse(text, "mutant.bc")
        except HbirError as e:
            assert "mutant.bc" in str(e), (what, str(e))
            refused += 1
        except Exception as e:  # a verifier that crashed
            pytest.fail(f"{which}: {what}: {type(e).__name__}: {e}")
    assert refused > len(chosen) // 4


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
def test_a_mutated_op_among_its_neighbours_is_a_located_error(modules):
    """In the whole module: a mark (``qnt.exact``) reads the fake quantizations
    around its op, which the mutation may have broken."""
    _check(modules["multi_io qat.bc"], "multi_io qat.bc", 60, whole=True)


@pytest.mark.slow  # not in the fast tier (docs/testing.md)
@pytest.mark.parametrize(
    "which",
    [
        f"{m} {s}"
        for m in ("transformer", "multi_io")
        for s in ("qat.bc", "quantized.bc", "npu")
    ],
)
def test_a_mutated_op_is_verified_or_a_located_error(modules, which):
    _check(modules[which], which, CASES, whole=False)
