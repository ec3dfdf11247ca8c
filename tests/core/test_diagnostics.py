"""hbir/diagnostics.py: ``TrackingParser`` keeps xDSL's dense-literal checks."""

import re

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


# ---- issue 16: every malformed text is one located HbirError


def body(line: str, signature: str = "") -> str:
    """A function whose second line is ``line``."""
    return f"func.func @f({signature}) {{\n  {line}\n  func.return\n}}\n"


@pytest.mark.parametrize(
    "text, where, message",
    [
        # VerifyException raised while the op is built
        (
            body(
                "%y = hbir.transpose %x {perm = [[1], 0]} : tensor<2x3xf32> -> tensor<3x2xf32>",
                "%x: tensor<2x3xf32>",
            ),
            "m.mlir:2:3",
            "should be of base attribute",
        ),
        # ValueError
        (
            body("%c = hbir.constant dense<128> : tensor<2xsi8>"),
            "m.mlir:2:3",
            "out of range",
        ),
        # OverflowError
        (
            "func.func @f() attributes {a = array<f16: 70000.0>} {\n  func.return\n}",
            "m.mlir:1:1",
            "float too large",
        ),
        (
            "func.func @f() attributes {a = 0x"
            + "f" * 400
            + " : i32} {\n  func.return\n}",
            "m.mlir:1:1",
            "Integer value",
        ),
        # RecursionError
        (
            "func.func @f() attributes {a = "
            + "[" * 1000
            + "]" * 1000
            + "} {\n  func.return\n}",
            "m.mlir:1:",
            "nesting too deep",
        ),
        # lexed in xDSL's constructor, outside its try
        ("^bb0", "m.mlir:1:1", "error"),
        ('"abc', "m.mlir:1:1", "string literal not closed"),
        # a blob that is not a whole number of elements
        (
            body('%c = hbir.constant dense<"0x010203040506070809"> : tensor<2xf32>'),
            "m.mlir:2:27",
            "dense data holds 9 bytes, its type tensor<2xf32> needs 8",
        ),
        # a splat that would expand to gigabytes
        (
            body("%c = hbir.constant dense<1.0> : tensor<100000x100000xf32>"),
            "m.mlir:2:",
            "at most 16777216 elements",
        ),
    ],
)
def test_malformed_text_is_a_located_parse_error(text, where, message):
    with pytest.raises(hbir.HbirParseError) as info:
        hbir.Module.parse(text, "m.mlir")
    assert str(info.value).startswith(where), str(info.value)
    assert message in str(info.value)


def test_nested_regions_are_a_located_error():
    text = "func.func @f() {\n" + '"hbir.x"() ({\n' * 300 + "}) : () -> ()\n" * 300
    text += "  func.return\n}\n"
    with pytest.raises(hbir.HbirError, match="m.mlir:"):
        hbir.Module.parse(text, "m.mlir")


def test_non_utf8_bytes_are_a_located_error():
    ctx = make_context()
    with pytest.raises(
        hbir.HbirParseError, match="m.mlir: error: not UTF-8 text at byte 3"
    ):
        diagnostics.parse_module(ctx, b"// \xff\n", "m.mlir")


def test_error_on_a_long_line_quotes_120_characters():
    # an 80 KB weight line (xDSL lexes ~20,000 numbers a second: a longer line
    # only costs time); the whole line quoted twice made the message ~160 KB
    weights = ", ".join(["1.5"] * 20_000)
    text = body(f"%c = hbir.constant dense<[{weights}]> : tensor<20000xf32> oops")
    with pytest.raises(hbir.HbirParseError) as info:
        hbir.Module.parse(text, "m.mlir")
    message = str(info.value)
    assert len(message) < 600
    line, caret = message.splitlines()[1:3]
    assert line.startswith("  ...") and len(line) <= 2 + 3 + 120 + 3
    assert line[caret.index("^") :].startswith("oops")


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
            "  %a = hbir.relu %b : tensor<2xf32>\n"
            "  %b = hbir.relu %x : tensor<2xf32>\n"
            "  func.return %a : tensor<2xf32>\n}",
            "m.mlir:2:3: error: 'hbir.relu' op operand 0 (%b) is used before it is defined",
        ),
        (
            "func.func private @f(%x: tensor<2xf32>) -> tensor<2xf32>",
            "'func.func' op @f is a declaration without a body",
        ),
        (
            "func.func @f(%x: tensor<0x2xf32>) {\n  func.return\n}",
            "tensor<0x2xf32> has a zero-size dimension",
        ),
        (
            "func.func @f(%x: tensor<?xf32>) {\n  func.return\n}",
            "tensor<?xf32> has a dynamic dimension",
        ),
        (
            'func.func @f(%x: tensor<2xf32> {hbir.name = "a"}, %y: tensor<2xf32> {hbir.name = "a"}) {\n  func.return\n}',
            "two inputs are named 'a'",
        ),
        (
            'func.func @f(%x: tensor<2xf32> {hbir.name = "_input_1"}, %y: tensor<2xf32>) {\n  func.return\n}',
            "two inputs are named '_input_1'",
        ),
        (
            'func.func @f(%x: tensor<2xf32>) -> (tensor<2xf32> {hbir.name = "o"}, tensor<2xf32> {hbir.name = "o"}) {\n  func.return %x, %x : tensor<2xf32>, tensor<2xf32>\n}',
            "two outputs are named 'o'",
        ),
    ]
    + [
        (
            f"func.func @f(%x: tensor<2x{t}>) {{\n  func.return\n}}",
            f"element type {t} is not supported",
        )
        for t in ("index", "si4", "f8E4M3FN", "complex<f32>")  # (i1: a mask input)
    ]
    + [
        (  # a mask made by an op that computes on values
            "func.func @f(%x: tensor<2xi1>) {\n  %y = hbir.relu %x : tensor<2xi1>\n"
            "  func.return\n}",
            "element type i1 is not supported",
        )
    ],
)
def test_verifier_refuses_what_feed_could_not_run(text, message):
    with pytest.raises(hbir.HbirVerifyError, match=re.escape(message)):
        hbir.Module.parse(text, "m.mlir")


def test_duplicate_input_names_no_longer_feed_the_first_twice():
    text = (
        'func.func @f(%x: tensor<1xf32> {hbir.name = "a"}, %y: tensor<1xf32> '
        '{hbir.name = "a"}) -> tensor<1xf32> {\n'
        "  %s = hbir.sub %x, %y : (tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>\n"
        "  func.return %s : tensor<1xf32>\n}"
    )
    with pytest.raises(hbir.HbirVerifyError, match="two inputs are named 'a'"):
        hbir.Module.parse(text)


def test_constants_of_any_element_type_still_parse():
    # dense_array reads i1 and index constants (tests/dialects/test_hbir.py)
    hbir.Module.parse(body("%c = hbir.constant dense<[true]> : tensor<1xi1>"))


def test_an_integer_type_of_2_to_the_64_bits_is_a_located_error():
    """xDSL computes the range of ``i18446744073709551616`` (a MemoryError):
    one located error instead, found by a hostile-input campaign."""
    text = (
        "func.func @f(%x: tensor<1xf32>) -> tensor<1xf32> {\n"
        "  %c = hbir.constant dense<1> : tensor<1xi18446744073709551616>\n"
        "  func.return %x : tensor<1xf32>\n}"
    )
    with pytest.raises(hbir.HbirError, match=r"x.mlir:\d+:\d+: error: a value too"):
        hbir.Module.parse(text, "x.mlir")
