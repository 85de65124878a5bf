"""A tool's inputs: the runtime's check of arguments and the JSON Schema that
agrees with it on every case (DESIGN.md section 3, seed 000 section 4)."""

from __future__ import annotations

import copy
import keyword
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from staal.currencies import MINOR_UNITS
from staal.errors import RecordError, StaalError
from staal.inputs.arguments import arguments_to_json, check_arguments, check_value
from staal.inputs.descriptions import check_description
from staal.inputs.schema import placeholder_arguments, to_json_schema
from staal.inputs.types import INT_MAX, INT_MIN, MAX_PROBLEMS, SAFE_INTEGER, SCALAR_TYPES, InputError
from staal.money import Money
from tests.helpers.input_cases import (
    ADDRESS,
    CASES,
    DECIMAL,
    GAP,
    INT,
    JSON,
    MONEY,
    STR,
    dict_of,
    list_of,
    literal,
    optional,
    record,
)

TOO_LARGE = "too large to hold exactly"


def one_input(type_desc: dict) -> dict:
    return {"inputs": [{"name": "x", "type": type_desc}]}


def runtime_accepts(desc: dict, arguments: dict) -> bool:
    try:
        check_arguments(desc, arguments)
    except InputError:
        return False
    return True


def schema_accepts(desc: dict, arguments: dict) -> bool:
    return Draft202012Validator(to_json_schema(desc)).is_valid(arguments)


def refusal(desc: dict, arguments: Any, capabilities: tuple[str, ...] = ()) -> InputError:
    with pytest.raises(InputError) as caught:
        check_arguments(desc, arguments, capabilities)
    return caught.value


def paths(error: InputError) -> list[str]:
    return [problem.split(": ", 1)[0] for problem in error.problems]


REFUND = {"inputs": [
    {"name": "order", "type": STR},
    {"name": "amount", "type": MONEY},
    {"name": "reason", "type": STR, "default": "requested_by_customer"},
]}


# -- the shared table ---------------------------------------------------------


@pytest.mark.parametrize(("type_desc", "value", "accepted", "note"), CASES,
                         ids=[f"{c[0]['type']}-{c[3]}" for c in CASES])
def test_the_runtime_and_the_schema_agree_on_every_case_of_the_table(
        type_desc, value, accepted, note):
    desc = one_input(type_desc)
    check_description(desc)
    runtime, schema = runtime_accepts(desc, {"x": value}), schema_accepts(desc, {"x": value})
    if note.startswith(GAP):
        assert (runtime, schema) == (False, True)
        assert all(TOO_LARGE in p for p in refusal(desc, {"x": value}).problems)
    else:
        assert (runtime, schema) == (accepted, accepted)


def test_the_table_covers_every_type_accepted_and_refused():
    covered = {(c[0]["type"], c[2]) for c in CASES}
    every = {*SCALAR_TYPES, "list", "dict", "optional", "literal", "record"}
    assert {t for t, ok in covered if ok} == every
    assert {t for t, ok in covered if not ok} == every - {"json"}
    assert any(c[3].startswith(GAP) for c in CASES)


# -- what the check returns ----------------------------------------------------


def test_checked_values_are_the_python_values_the_program_receives():
    desc = {"inputs": [
        {"name": "s", "type": STR}, {"name": "n", "type": INT}, {"name": "d", "type": DECIMAL},
        {"name": "m", "type": MONEY}, {"name": "o", "type": optional(INT)},
        {"name": "a", "type": ADDRESS}, {"name": "c", "type": literal(1, 2)},
    ]}
    values = check_arguments(desc, {
        "s": "x", "n": 3.0, "d": "1.50", "m": {"amount": "35", "currency": "USD"}, "o": None,
        "a": {"street": "s", "city": "c"}, "c": 2.0,
    })
    assert values == {"s": "x", "n": 3, "d": Decimal("1.50"), "m": Money("35.00", "USD"),
                      "o": None, "a": {"street": "s", "city": "c"}, "c": 2}
    assert type(values["n"]) is int and type(values["c"]) is int
    assert isinstance(values["d"], Decimal) and str(values["d"]) == "1.50"


def test_a_record_holds_only_the_fields_given():
    values = check_arguments(one_input(ADDRESS), {"x": {"street": "s", "city": "c"}})
    assert values["x"] == {"street": "s", "city": "c"}


def test_defaults_are_filled_in_and_converted_like_arguments():
    desc = {"inputs": [
        {"name": "limit", "type": MONEY, "default": {"amount": "5", "currency": "JPY"}},
        {"name": "rate", "type": DECIMAL, "default": "0.10"},
        {"name": "tags", "type": list_of(STR), "default": []},
    ]}
    values = check_arguments(desc, {})
    assert values == {"limit": Money("5", "JPY"), "rate": Decimal("0.10"), "tags": []}
    assert isinstance(values["limit"], Money) and isinstance(values["rate"], Decimal)
    values["tags"].append("changed")
    assert check_arguments(desc, {})["tags"] == []
    assert check_arguments(desc, {"rate": 2})["rate"] == Decimal(2)


# -- refusals ------------------------------------------------------------------


def test_a_problem_names_the_path_of_the_refused_value():
    desc = {"inputs": [
        {"name": "amount", "type": MONEY}, {"name": "items", "type": list_of(INT)},
        {"name": "address", "type": ADDRESS}, {"name": "tags", "type": dict_of(INT)},
    ]}
    error = refusal(desc, {
        "amount": {"amount": "5O.00", "currency": "USD"}, "items": [1, 2, "3"],
        "address": {"street": 1, "city": "c", "floor": 2}, "tags": {"ok": 1, "a b": "x"},
    })
    assert sorted(paths(error)) == sorted([
        "amount.amount", "items[2]", "address.floor", "address.street", 'tags["a b"]'])
    assert 'amount.amount: "5O.00" is not a decimal amount' in error.problems


def test_money_problems_name_the_field_of_the_wire_form():
    desc = one_input(MONEY)
    assert paths(refusal(desc, {"x": {"amount": "1", "currency": "usd"}})) == ["x.currency"]
    assert paths(refusal(desc, {"x": {"amount": "1", "currency": "USD", "y": 1}})) == ["x.y"]
    assert paths(refusal(desc, {"x": {"currency": "USD"}})) == ["x.amount"]
    assert paths(refusal(desc, {"x": "1 USD"})) == ["x"]


def test_every_problem_is_reported_at_once():
    error = refusal(REFUND, {"amount": {"amount": 5, "currency": "USD"}, "reason": None,
                             "extra": 1, "pay": {}}, capabilities=("pay",))
    assert error.kind == "input"
    assert sorted(paths(error)) == ["amount.amount", "extra", "order", "pay", "reason"]
    assert error.message == "\n".join(error.problems)


def test_a_missing_required_input_is_refused_by_name():
    assert refusal(REFUND, {"amount": {"amount": "1", "currency": "USD"}}).problems == (
        "order: is required",)


def test_an_argument_that_is_not_an_input_is_refused_listing_the_inputs():
    error = refusal(REFUND, {"order": "o", "amount": {"amount": "1", "currency": "USD"}, "x": 1})
    assert error.problems == ("x: not an input of this tool (inputs: order, amount, reason)",)


def test_an_argument_named_like_a_capability_is_refused_as_one():
    error = refusal(REFUND, {"order": "o", "amount": {"amount": "1", "currency": "USD"},
                             "pay": "sk_live"}, capabilities=("pay",))
    assert error.problems == ("pay: is a capability the operator grants, not an argument",)


def test_arguments_that_are_not_an_object_are_refused():
    for arguments in (None, [], "order", 1):
        error = refusal(REFUND, arguments)
        assert error.kind == "input" and len(error.problems) == 1


def test_a_literal_refusal_lists_the_allowed_values():
    error = refusal(one_input(literal("red", "blue")), {"x": "green"})
    assert error.problems == ('x: expected one of "red", "blue", not "green"',)


def test_a_flood_of_problems_is_cut_short_saying_how_many_more():
    error = refusal(one_input(list_of(INT)), {"x": ["a"] * (MAX_PROBLEMS + 50)})
    assert len(error.problems) == MAX_PROBLEMS + 1
    assert "50 more" in error.problems[-1]


def test_an_input_error_is_a_staal_error_of_kind_input():
    error = InputError(["a: b"])
    assert isinstance(error, StaalError)
    assert error.to_data() == {"kind": "input", "message": "a: b"}


def test_a_single_value_is_checked_by_the_same_rules():
    assert check_value(MONEY, {"amount": "1", "currency": "JPY"}) == Money("1", "JPY")
    with pytest.raises(InputError) as caught:
        check_value(list_of(INT), [1, True], "default")
    assert paths(caught.value) == ["default[1]"]


# -- descriptions ------------------------------------------------------------


def _input(t: Any, **extra: Any) -> dict:
    return {"inputs": [{"name": "x", "type": t, **extra}]}


MALFORMED = [
    ([], ""),
    ({}, "inputs"),
    ({"inputs": {}}, "inputs"),
    ({"inputs": [], "x": 1}, "x"),
    ({"inputs": [{"type": STR}]}, "inputs[0].name"),
    ({"inputs": [{"name": "1x", "type": STR}]}, "inputs[0].name"),
    ({"inputs": [{"name": "class", "type": STR}]}, "inputs[0].name"),
    ({"inputs": [{"name": "x", "type": STR}, {"name": "x", "type": INT}]}, "inputs[1].name"),
    ({"inputs": [{"name": "x", "type": STR, "doc": ""}]}, "inputs[0].doc"),
    (_input({"type": "float"}), "inputs[0].type.type"),
    (_input({"kind": "str"}), "inputs[0].type.type"),
    (_input("str"), "inputs[0].type"),
    (_input({"type": "str", "items": STR}), "inputs[0].type.items"),
    (_input({"type": "list"}), "inputs[0].type.items"),
    (_input(list_of({"type": "set"})), "inputs[0].type.items.type"),
    (_input(optional(dict_of(None))), "inputs[0].type.of.values"),
    (_input(literal()), "inputs[0].type.values"),
    (_input(literal("a", "a")), "inputs[0].type.values[1]"),
    (_input(literal(1.5)), "inputs[0].type.values[0]"),
    (_input(literal(None)), "inputs[0].type.values[0]"),
    (_input(literal(2**63)), "inputs[0].type.values[0]"),
    (_input({"type": "literal", "values": "ab"}), "inputs[0].type.values"),
    (_input(record("", {}, [])), "inputs[0].type.name"),
    (_input(record("R", [], [])), "inputs[0].type.fields"),
    (_input(record("R", {"a": STR}, ["b"])), "inputs[0].type.required[0]"),
    (_input(record("R", {"a": STR}, ["a", "a"])), "inputs[0].type.required[1]"),
    (_input(record("R", {"a": {"type": "x"}}, [])), "inputs[0].type.fields.a.type"),
    (_input(record("R", {1: STR}, [])), "inputs[0].type.fields"),
    (_input(MONEY, default={"amount": "1.001", "currency": "USD"}), "inputs[0].default"),
    (_input(INT, default=True), "inputs[0].default"),
    (_input(STR, default=None), "inputs[0].default"),
]


@pytest.mark.parametrize(("desc", "path"), MALFORMED, ids=[p or "top" for _, p in MALFORMED])
def test_a_malformed_description_is_refused_naming_its_path(desc, path):
    with pytest.raises(RecordError) as caught:
        check_description(desc)
    assert caught.value.path == path


def test_literals_of_equal_python_value_but_different_json_are_not_duplicates():
    one = _input(literal(1, True, "1"))
    check_description(one)
    check_description(_input(literal(0, False)))
    assert to_json_schema(one)["properties"]["x"] == {"enum": [1, True, "1"]}
    # Each is its own value: checked, it keeps its JSON type.
    assert [type(check_arguments(one, {"x": v})["x"]) for v in (1, True, "1")] == [int, bool, str]
    assert paths(refusal(one, {"x": 2})) == ["x"]


def test_a_description_nested_too_deeply_is_refused():
    deep: dict = STR
    for _ in range(200):
        deep = list_of(deep)
    with pytest.raises(RecordError) as caught:
        check_description(_input(deep))
    assert caught.value.reason == "types nested more than 32 deep"
    assert caught.value.path == "inputs[0].type" + ".items" * 33  # the first one past 32


# -- generated descriptions and values ------------------------------------------

names = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n))
literal_values = st.one_of(st.text(max_size=4), st.integers(INT_MIN, INT_MAX), st.booleans())
literals = st.lists(literal_values, min_size=1, max_size=4,
                    unique_by=lambda v: (type(v).__name__, v)).map(lambda vs: literal(*vs))
leaves = st.sampled_from(SCALAR_TYPES).map(lambda n: {"type": n}) | literals


def records(inner: st.SearchStrategy) -> st.SearchStrategy:
    def with_required(fields: dict) -> st.SearchStrategy:
        chosen = st.lists(st.sampled_from(sorted(fields)), unique=True) if fields else st.just([])
        return st.tuples(names, chosen).map(lambda nr: record(nr[0].title(), fields, nr[1]))
    return st.dictionaries(names, inner, max_size=3).flatmap(with_required)


types = st.recursive(
    leaves,
    lambda inner: st.one_of(inner.map(list_of), inner.map(dict_of), inner.map(optional),
                            records(inner)),
    max_leaves=6,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(INT_MIN, INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["amount", "currency", "a", "x"]) | st.text(max_size=3),
                      inner, max_size=3),
    max_leaves=8,
)
currencies = st.sampled_from(sorted(MINOR_UNITS))
wire_money = st.builds(lambda minor, code: Money.from_minor(minor, code).to_wire(),
                       st.integers(-(10**15), 10**15), currencies)
near_money = st.fixed_dictionaries({
    "amount": st.from_regex(r"-?[0-9]{1,22}(\.[0-9]{0,5})?", fullmatch=True) | json_values,
    "currency": currencies | currencies.map(str.lower) | json_values,
})


def values_of(t: dict) -> st.SearchStrategy:
    """Valid JSON values of a type."""
    name = t["type"]
    simple = {
        "str": st.text(max_size=6), "bool": st.booleans(), "json": json_values, "money": wire_money,
        "int": st.integers(INT_MIN, INT_MAX) | st.just(1.0),
        "decimal": st.from_regex(r"-?[0-9]{1,50}(\.[0-9]{1,48})?", fullmatch=True)
        | st.integers(-SAFE_INTEGER, SAFE_INTEGER),
    }
    if name in simple:
        return simple[name]
    if name == "list":
        return st.lists(values_of(t["items"]), max_size=3)
    if name == "dict":
        return st.dictionaries(st.text(max_size=4), values_of(t["values"]), max_size=3)
    if name == "optional":
        return st.none() | values_of(t["of"])
    if name == "literal":
        return st.sampled_from(t["values"])
    required = {k: values_of(f) for k, f in t["fields"].items() if k in t["required"]}
    others = {k: values_of(f) for k, f in t["fields"].items() if k not in t["required"]}
    return st.fixed_dictionaries(required, optional=others)


@st.composite
def descriptions(draw) -> dict:
    inputs = []
    for name in draw(st.lists(names, unique=True, max_size=4)):
        item = {"name": name, "type": draw(types)}
        if draw(st.booleans()):
            item["default"] = draw(values_of(item["type"]))
        inputs.append(item)
    return {"inputs": inputs}


@st.composite
def descriptions_and_arguments(draw) -> tuple[dict, dict]:
    desc = draw(descriptions())
    arguments = {}
    for item in desc["inputs"]:
        if "default" not in item or draw(st.booleans()):
            arguments[item["name"]] = draw(values_of(item["type"]))
    return desc, arguments


@given(descriptions())
def test_generated_descriptions_pass_their_own_check(desc):
    before = copy.deepcopy(desc)
    check_description(desc)  # raises RecordError on a description it refuses
    assert desc == before  # checked, not rewritten


@given(descriptions())
def test_placeholder_arguments_pass_the_check_and_the_schema(desc):
    arguments = placeholder_arguments(desc)
    check_arguments(desc, arguments)
    assert schema_accepts(desc, arguments)
    assert set(arguments) == {item["name"] for item in desc["inputs"]}


def test_placeholders_are_the_simplest_values_and_defaults():
    desc = {"inputs": [
        {"name": "s", "type": STR}, {"name": "n", "type": INT}, {"name": "m", "type": MONEY},
        {"name": "d", "type": DECIMAL}, {"name": "j", "type": JSON},
        {"name": "c", "type": literal("red", "blue")}, {"name": "a", "type": ADDRESS},
        {"name": "r", "type": STR, "default": "why"},
    ]}
    assert placeholder_arguments(desc) == {
        "s": "", "n": 0, "m": {"amount": "0.00", "currency": "USD"}, "d": "0", "j": None,
        "c": "red", "a": {"street": "", "city": ""}, "r": "why",
    }


@given(descriptions())
def test_every_schema_is_a_valid_draft_2020_12_schema(desc):
    schema = to_json_schema(desc)
    Draft202012Validator.check_schema(schema)
    assert orjson.loads(orjson.dumps(schema)) == schema
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    assert schema["required"] == [i["name"] for i in desc["inputs"] if "default" not in i]


def test_the_schema_states_defaults_and_which_inputs_are_required():
    schema = to_json_schema(REFUND)
    assert schema["required"] == ["order", "amount"]
    assert schema["properties"]["reason"]["default"] == "requested_by_customer"


@given(descriptions_and_arguments())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_checked_values_written_as_json_read_back_to_the_same_values(case):
    desc, arguments = case
    values = check_arguments(desc, arguments)
    written = arguments_to_json(values)
    assert check_arguments(desc, written) == values
    assert schema_accepts(desc, written)


def test_long_decimals_keep_every_digit_when_written():
    digits = "1234567890" * 5 + "." + "0987654321" * 4 + "50"
    values = check_arguments(one_input(DECIMAL), {"x": digits})
    assert arguments_to_json(values) == {"x": digits[:-1]}


@given(types, st.data())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_the_runtime_and_the_schema_agree_on_generated_values(type_desc, data):
    value = data.draw(values_of(type_desc) | json_values | near_money)
    desc = one_input(type_desc)
    runtime, schema = runtime_accepts(desc, {"x": value}), schema_accepts(desc, {"x": value})
    if runtime != schema:
        assert (runtime, schema) == (False, True)
        assert all(TOO_LARGE in p for p in refusal(desc, {"x": value}).problems)


# -- garbage descriptions ------------------------------------------------------

VOCABULARY = ["inputs", "name", "type", "default", "items", "values", "of", "fields",
              "required", *SCALAR_TYPES, "list", "dict", "optional", "literal", "record", "x"]
garbage = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
    | st.sampled_from(VOCABULARY),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(VOCABULARY) | st.integers(), inner, max_size=4)
    | st.tuples(inner) | st.frozensets(st.integers(), max_size=2),
    max_leaves=12,
)


def _slots(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a description, to corrupt one."""
    found = []
    stack = [value]
    while stack:
        item = stack.pop()
        keys = list(item) if isinstance(item, dict) else range(len(item)) \
            if isinstance(item, list) else []
        for key in keys:
            found.append((item, key))
            stack.append(item[key])
    return found


@st.composite
def corrupted(draw) -> Any:
    desc = copy.deepcopy(draw(descriptions()))
    slots = _slots(desc)
    assume(slots)
    container, key = draw(st.sampled_from(slots))
    how = draw(st.sampled_from(["replace", "delete", "add"]))
    if how == "replace" or not isinstance(container, dict):
        container[key] = draw(garbage)
    elif how == "delete":
        del container[key]
    else:  # a new key, beside a value that fits where it stands
        container[draw(st.integers() | st.sampled_from(VOCABULARY))] = container[key]
    return desc


def _usable(desc: Any) -> None:
    """What a description that passed its check must support."""
    arguments = placeholder_arguments(desc)
    check_arguments(desc, arguments)
    Draft202012Validator.check_schema(to_json_schema(desc))
    assert schema_accepts(desc, arguments)


@given(garbage | st.fixed_dictionaries({"inputs": garbage}) | corrupted())
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_a_garbage_description_raises_nothing_but_a_record_error(desc):
    try:
        check_description(desc)
    except RecordError:
        return
    _usable(desc)
