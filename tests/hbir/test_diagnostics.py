"""hbir/diagnostics.py: ``TrackingParser`` keeps xDSL's dense-literal checks."""

import pytest
from xdsl.parser import Parser

import hbir
from hbir import diagnostics
from hbir.dialects import make_context

DENSE = """func.func @f() -> tensor<2x2xsi8> {
  %c = hbir.constant dense<[[1, -2], [3, 4]]> : tensor<2x2xsi8>
  func.return %c : tensor<2x2xsi8>
}"""


def test_dense_literals_parse_as_with_xdsls_parser():
    ours = diagnostics.TrackingParser(make_context(), DENSE).parse_module()
    theirs = Parser(make_context(), DENSE).parse_module()
    assert ours.is_structurally_equivalent(theirs)


@pytest.mark.parametrize(
    "ty, message",
    [
        ("i32", "Expected memref, vector or tensor type of integer"),
        ("tensor<?xf32>", "Dense literal attribute should have a static shape."),
    ],
)
def test_bad_dense_literal_types_are_located_errors(ty, message):
    text = f"func.func @f() {{\n  %c = hbir.constant dense<1> : {ty}\n  func.return\n}}"
    with pytest.raises(hbir.HbirParseError, match=message):
        hbir.Module.parse(text, "m.mlir")
