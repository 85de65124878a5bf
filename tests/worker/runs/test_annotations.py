"""From a program's annotations to input type descriptions (DESIGN.md
section 3): every supported type described, everything else refused by name.

This module uses `from __future__ import annotations` on purpose: the
TypedDicts below then hold their annotations as strings, the case where
Python 3.11's `__required_keys__` misses `Required`/`NotRequired`.
"""

# Optional[...], Union[...] and Literal[None] are spelled as programs spell them.
# ruff: noqa: UP007, UP045
from __future__ import annotations

import dataclasses
import enum
import inspect
import typing
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Literal, NotRequired, Optional, Required, TypedDict

import orjson
import pytest

from staal import Json, Money
from staal.caps import StripeRefund
from staal.errors import RecordError
from staal.inputs.descriptions import check_description, check_type
from staal.worker.runs.annotations import BadDefault, UnsupportedType, describe, describe_default

STR = {"type": "str"}
INT = {"type": "int"}


class Address(TypedDict):
    street: str
    city: str
    zip: NotRequired[str | None]


class Patch(TypedDict, total=False):
    note: str
    id: Required[int]


class Line(TypedDict):
    sku: str
    price: Money
    qty: int


class Order(TypedDict):
    lines: list[Line]
    ship_to: Address
    extra: Json


class Base(TypedDict):
    a: int


class Extended(Base, total=False):
    b: str


class Node(TypedDict):
    children: list[Node]


class Bad(TypedDict):
    rate: float


class Deep(TypedDict):
    inner: Bad


class Unresolved(TypedDict):
    x: NoSuchType  # noqa: F821


# Built at run time, so its annotations are objects, not strings.
Functional = TypedDict("Functional", {"odd key": int, "maybe": NotRequired[str]})


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int


def address_desc() -> dict:
    return {"type": "record", "name": "Address",
            "fields": {"street": STR, "city": STR,
                       "zip": {"type": "optional", "of": STR}},
            "required": ["street", "city"]}


SUPPORTED = [
    (str, STR),
    (int, INT),
    (bool, {"type": "bool"}),
    (Decimal, {"type": "decimal"}),
    (Money, {"type": "money"}),
    (Json, {"type": "json"}),
    (list[int], {"type": "list", "items": INT}),
    (list[str], {"type": "list", "items": STR}),
    (dict[str, Money], {"type": "dict", "values": {"type": "money"}}),
    (dict[str, list[Json]],
     {"type": "dict", "values": {"type": "list", "items": {"type": "json"}}}),
    (int | None, {"type": "optional", "of": INT}),
    (None | int, {"type": "optional", "of": INT}),
    (Optional[list[str]], {"type": "optional", "of": {"type": "list", "items": STR}}),
    (typing.Union[Decimal, None], {"type": "optional", "of": {"type": "decimal"}}),
    (Optional[Json], {"type": "optional", "of": {"type": "json"}}),
    (Literal["red", "blue"], {"type": "literal", "values": ["red", "blue"]}),
    (Literal[1, True, "1"], {"type": "literal", "values": [1, True, "1"]}),
    (Optional[Literal["a"]], {"type": "optional",
                              "of": {"type": "literal", "values": ["a"]}}),
    (Address, address_desc()),
    (Patch, {"type": "record", "name": "Patch", "fields": {"note": STR, "id": INT},
             "required": ["id"]}),
    (Extended, {"type": "record", "name": "Extended", "fields": {"a": INT, "b": STR},
                "required": ["a"]}),
    (Functional, {"type": "record", "name": "Functional",
                  "fields": {"odd key": INT, "maybe": STR}, "required": ["odd key"]}),
    (Order, {"type": "record", "name": "Order", "fields": {
        "lines": {"type": "list", "items": {
            "type": "record", "name": "Line",
            "fields": {"sku": STR, "price": {"type": "money"}, "qty": INT},
            "required": ["sku", "price", "qty"]}},
        "ship_to": address_desc(),
        "extra": {"type": "json"},
    }, "required": ["lines", "ship_to", "extra"]}),
]


@pytest.mark.parametrize(("annotation", "expected"), SUPPORTED,
                         ids=[str(i) for i in range(len(SUPPORTED))])
def test_every_supported_annotation_is_described(annotation, expected):
    described = describe(annotation)
    assert described == expected
    check_type(described)
    assert orjson.loads(orjson.dumps(described)) == described


# (annotation, the part the refusal names)
UNSUPPORTED = [
    (float, "float"),
    (set[int], "set[int]"),
    (frozenset[str], "frozenset[str]"),
    (tuple[int, str], "tuple[int, str]"),
    (tuple[int, ...], "tuple[int, ...]"),
    (bytes, "bytes"),
    (Any, "Any"),
    (object, "object"),
    (inspect.Parameter.empty, "(no annotation)"),
    (None, "None"),
    (type(None), "None"),
    (int | str, "int | str"),
    (Optional[int | str], "int | str | None"),
    (list, "list"),
    (dict, "dict"),
    (dict[int, str], "dict[int, str]"),
    (list[float], "float"),
    (dict[str, set[int]], "set[int]"),
    (Optional[list[bytes]], "bytes"),
    (Literal[None], "Literal[None]"),
    (Literal[Colour.RED], "Literal[<Colour.RED: 'red'>]"),
    (Literal[2**64], f"Literal[{2**64}]"),
    (Colour, "Colour"),
    (Point, "Point"),
    (StripeRefund, "StripeRefund"),
    (list[StripeRefund], "StripeRefund"),
    (typing.Annotated[int, "positive"], "Annotated[int, 'positive']"),
    (typing.Annotated[Any, "not staal.Json"], "Annotated[Any, 'not staal.Json']"),
    ("int", "'int'"),
    (list["Later"], "'Later'"),  # noqa: F821
    (Callable[[int], str], "Callable[[int], str]"),
    (typing.Sequence[int], "Sequence[int]"),
    (Node, "Node"),
    (Bad, "float"),
    (Deep, "float"),
    (Unresolved, "Unresolved"),
]


@pytest.mark.parametrize(("annotation", "part"), UNSUPPORTED,
                         ids=[p for _, p in UNSUPPORTED])
def test_every_unsupported_annotation_is_refused_naming_the_part(annotation, part):
    with pytest.raises(UnsupportedType) as caught:
        describe(annotation)
    assert caught.value.part == part
    assert part in str(caught.value)
    assert isinstance(caught.value, TypeError)


def test_a_float_refusal_suggests_decimal_or_money():
    with pytest.raises(UnsupportedType) as caught:
        describe(float)
    assert "decimal.Decimal" in caught.value.message and "staal.Money" in caught.value.message


@pytest.mark.parametrize("annotation", [Any, object, inspect.Parameter.empty],
                         ids=["Any", "object", "missing"])
def test_any_json_refusals_suggest_staal_json(annotation):
    with pytest.raises(UnsupportedType) as caught:
        describe(annotation)
    assert "staal.Json" in caught.value.message


def test_a_refusal_inside_a_record_names_the_field():
    with pytest.raises(UnsupportedType) as caught:
        describe(list[Deep])
    assert caught.value.where == "list[Deep], field Bad.rate"
    assert "Bad.rate" in caught.value.message


def test_a_record_that_contains_itself_is_refused_not_looped_over():
    with pytest.raises(UnsupportedType) as caught:
        describe(Optional[Node])
    assert caught.value.part == "Node"


# -- defaults -----------------------------------------------------------------


@pytest.mark.parametrize(("annotation", "default", "expected"), [
    (str, "requested_by_customer", "requested_by_customer"),
    (int, 3, 3),
    (bool, False, False),
    (Decimal, Decimal("0.10"), "0.1"),
    (Decimal, 2, "2"),
    (Money, Money("35", "USD"), {"amount": "35.00", "currency": "USD"}),
    (Optional[Money], None, None),
    (list[str], [], []),
    (list[int], (1, 2), [1, 2]),
    (dict[str, Money], {"a": Money("5", "JPY")}, {"a": {"amount": "5", "currency": "JPY"}}),
    (Address, {"street": "s", "city": "c"}, {"street": "s", "city": "c"}),
    (Literal["a", "b"], "b", "b"),
    (Json, {"any": [1.5, None]}, {"any": [1.5, None]}),
], ids=lambda v: repr(v)[:30])
def test_a_default_is_written_in_its_json_form(annotation, default, expected):
    type_desc = describe(annotation)
    written = describe_default(type_desc, default)
    assert written == expected
    check_description({"inputs": [{"name": "x", "type": type_desc, "default": written}]})


@pytest.mark.parametrize(("annotation", "default"), [
    (int, "3"),
    (int, True),
    (str, None),
    (Decimal, 1.5),
    (Decimal, Decimal("NaN")),
    (Money, {"amount": "1.001", "currency": "USD"}),
    (Money, Money("1", "JPY").minor),
    (list[int], [1, "2"]),
    (Literal["a", "b"], "c"),
    (Address, {"street": "s"}),
    (Json, {1, 2}),
    (Json, float("nan")),
], ids=lambda v: repr(v)[:30])
def test_a_default_that_does_not_fit_its_type_is_refused(annotation, default):
    with pytest.raises(BadDefault) as caught:
        describe_default(describe(annotation), default)
    # Names the default as written and why it does not fit.
    assert caught.value.message.startswith(f"the default {default!r} ")
    assert "does not fit the parameter's type: default" in caught.value.message \
        or caught.value.message.endswith("has no JSON form (NaN has no JSON form)")


def test_a_refused_default_says_what_does_not_fit():
    with pytest.raises(BadDefault) as caught:
        describe_default(describe(list[int]), [1, "2"])
    assert "default[1]" in caught.value.message


def test_a_description_with_a_bad_default_would_not_pass_its_check_either():
    with pytest.raises(RecordError) as caught:
        check_description({"inputs": [{"name": "x", "type": INT, "default": "3"}]})
    assert caught.value.path == "inputs[0].default"
    assert caught.value.reason == ('the default does not fit its type '
                                   '(inputs[0].default: expected a whole number, not "3")')
