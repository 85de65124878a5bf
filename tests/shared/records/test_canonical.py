"""Canonical JSON: the one form staal hashes and writes."""

from __future__ import annotations

import json
from decimal import Decimal

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from staal.errors import CanonicalError
from staal.money import Money
from staal.records.canonical import arguments_hash, canonical_json, once_key

json_scalars = (st.none() | st.booleans() | st.text() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
                | st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def _shuffled(value, rnd):
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(json_values, st.randoms())
def test_key_order_never_changes_the_canonical_form(value, rnd):
    assert canonical_json(_shuffled(value, rnd)) == canonical_json(value)


@given(json_values)
def test_keys_are_sorted_at_every_depth_and_the_value_survives(value):
    text = canonical_json(value)
    parsed = orjson.loads(text)
    assert parsed == value
    assert canonical_json(parsed) == text  # the canonical form is a fixed point
    stack = [parsed]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            assert list(item) == sorted(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def test_without_floats_the_form_is_the_standard_librarys_sorted_compact_json():
    value = {"z": [1, {"b": None, "a": "é"}], "a": True}
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert canonical_json(value) == expected


def test_money_is_written_as_the_runtime_writes_it():
    assert canonical_json({"amount": Money("35", "USD")}) == b'{"amount":{"amount":"35.00","currency":"USD"}}'


def test_null_and_finite_floats_are_kept():
    assert canonical_json({"a": None, "b": 1.5}) == b'{"a":null,"b":1.5}'


def test_read_only_mappings_are_written_as_objects():
    from types import MappingProxyType

    assert canonical_json(MappingProxyType({"b": 1, "a": 2})) == b'{"a":2,"b":1}'


def test_decimals_are_written_as_plain_digits():
    assert canonical_json([Decimal("1.50"), Decimal("1E+2"), Decimal("-0.0")]) == b'["1.5","100","0"]'


def test_long_decimals_keep_every_digit():
    long = "1.234567890123456789012345678901234"
    assert canonical_json(Decimal(long)) == f'"{long}"'.encode()
    assert canonical_json(Decimal(long)) != canonical_json(Decimal(long[:-1] + "5"))


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), [1, {"a": float("-inf")}], {1: "x"}, {"a": {1, 2}}, 2**64,
              -(2**63) - 1, object(), Decimal("NaN"), "\ud800", {"\udfff": 1}]
)
def test_values_without_an_exact_json_form_are_refused(value):
    with pytest.raises(CanonicalError) as caught:
        canonical_json(value)
    assert caught.value.kind == "canonical"


def test_values_nested_too_deep_are_refused():
    value: list = []
    for _ in range(253):  # 254 nested lists: the deepest orjson writes
        value = [value]
    assert canonical_json(value).startswith(b"[[[")
    with pytest.raises(CanonicalError):
        canonical_json([value])


def test_the_once_key_depends_only_on_the_tool_and_the_named_arguments():
    a = {"order": "pi_1", "amount": Money("35", "USD")}
    b = {"order": "pi_1", "amount": Money("35.00", "USD")}
    c = {"order": "pi_1", "amount": Money("36", "USD")}
    assert once_key("refund", a, ["order"]) == once_key("refund", c, ["order"])
    assert once_key("refund", a, ["order", "amount"]) == once_key("refund", b, ["order", "amount"])
    assert once_key("refund", a, ["order", "amount"]) != once_key("refund", c, ["order", "amount"])
    assert once_key("refund", a, ["order"]) != once_key("refund_v2", a, ["order"])
    assert len(once_key("refund", a, ["order"])) == 64


def test_the_once_key_is_sha256_of_the_tool_and_named_arguments_in_canonical_form():
    import hashlib

    expected = hashlib.sha256(b'["refund",{"order":"pi_1"}]').hexdigest()
    assert once_key("refund", {"order": "pi_1", "reason": "x"}, ["order"]) == expected


def test_the_arguments_hash_sees_every_argument():
    assert arguments_hash({"a": 1, "b": 2}) == arguments_hash({"b": 2, "a": 1})
    assert arguments_hash({"a": 1, "b": 2}) != arguments_hash({"a": 1, "b": 3})
