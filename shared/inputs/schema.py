"""A tool's inputs as a client sees them: the JSON Schema (Draft 2020-12)
of a call's arguments, which states again the runtime's check in
`staal.inputs.types` so the two agree (its module text gives the rules and the one
place they differ), and placeholder arguments that pass that check (`staal
config`, the start-up check of every tool)."""

from __future__ import annotations

from staal.currencies import MINOR_UNITS
from staal.inputs.types import DECIMAL_MAX_LENGTH, INT_MAX, INT_MIN, SAFE_INTEGER, SCALAR_TYPES, Description
from staal.records.record import Json

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def to_json_schema(desc: Description) -> dict[str, Json]:
    """The JSON Schema (Draft 2020-12) of a call's arguments object."""
    properties: dict[str, Json] = {}
    required: list[str] = []
    for item in desc["inputs"]:
        schema = type_schema(item["type"])
        if "default" in item:
            schema = {**schema, "default": item["default"]}
        else:
            required.append(item["name"])
        properties[item["name"]] = schema
    return {
        "$schema": SCHEMA_DIALECT,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _pattern(fraction: str) -> str:
    # `$(?!\n)`: in ECMA-262 `$` is the end of the text; Python's `re`, which
    # Python validators use, also lets `$` match before a final newline.
    return r"^-?[0-9]+" + fraction + r"$(?!\n)"


DECIMAL_SCHEMA_PATTERN = _pattern(r"(\.[0-9]+)?")


def money_schema() -> dict[str, Json]:
    """Money's wire form, with at most as many decimals as each currency has."""
    branches = []
    for exponent in sorted(set(MINOR_UNITS.values())):
        codes = sorted(c for c, e in MINOR_UNITS.items() if e == exponent)
        fraction = "" if exponent == 0 else rf"(\.[0-9]{{1,{exponent}}})?"
        branches.append({
            "properties": {
                "amount": {"type": "string", "pattern": _pattern(fraction)},
                "currency": {"enum": codes},
            },
        })
    return {
        "type": "object",
        "description": 'money: {"amount": "<decimal string>", "currency": "<ISO 4217 code>"}, '
                       "with no more decimals than the currency has",
        "properties": {"amount": {"type": "string"}, "currency": {"type": "string"}},
        "required": ["amount", "currency"],
        "additionalProperties": False,
        "anyOf": branches,
    }


def _scalar_schema(name: str) -> dict[str, Json]:
    schemas: dict[str, dict[str, Json]] = {
        "str": {"type": "string"},
        "int": {"type": "integer", "minimum": INT_MIN, "maximum": INT_MAX},
        "bool": {"type": "boolean"},
        "decimal": {"anyOf": [
            {"type": "string", "pattern": DECIMAL_SCHEMA_PATTERN, "maxLength": DECIMAL_MAX_LENGTH},
            {"type": "integer", "minimum": -SAFE_INTEGER, "maximum": SAFE_INTEGER},
        ], "description": 'a decimal number as a string, e.g. "12.50"'},
        "json": {},
    }
    return schemas[name]


def type_schema(type_desc: Description) -> dict[str, Json]:
    """The JSON Schema of one type description."""
    name = type_desc["type"]
    if name == "money":
        return money_schema()
    if name in SCALAR_TYPES:
        return _scalar_schema(name)
    if name == "list":
        return {"type": "array", "items": type_schema(type_desc["items"])}
    if name == "dict":
        return {"type": "object", "additionalProperties": type_schema(type_desc["values"])}
    if name == "optional":
        return {"anyOf": [{"type": "null"}, type_schema(type_desc["of"])]}
    if name == "literal":
        return {"enum": list(type_desc["values"])}
    return {
        "type": "object",
        "title": type_desc["name"],
        "properties": {k: type_schema(t) for k, t in type_desc["fields"].items()},
        "required": list(type_desc["required"]),
        "additionalProperties": False,
    }


# -- placeholders ------------------------------------------------------------


def placeholder_arguments(desc: Description) -> dict[str, Json]:
    """Arguments that pass the check: a placeholder for every required input,
    the default for every optional one (for `staal config`)."""
    return {
        item["name"]: item["default"] if "default" in item else placeholder(item["type"])
        for item in desc["inputs"]
    }


def placeholder(type_desc: Description) -> Json:
    """The simplest JSON value of a type."""
    name = type_desc["type"]
    if name == "literal":
        return type_desc["values"][0]
    if name == "record":
        return {key: placeholder(type_desc["fields"][key]) for key in type_desc["required"]}
    simple = {"str": "", "int": 0, "bool": False, "decimal": "0", "json": None, "optional": None,
              "money": {"amount": "0.00", "currency": "USD"}, "list": [], "dict": {}}
    return simple[name]
