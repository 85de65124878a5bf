"""A tool's input types as data, checked: the description a worker returns
at start (worker/runs/annotations.py makes it from the program's annotations)
is checked here, each problem naming its path, before anything trusts it."""

from __future__ import annotations

import keyword
from typing import Any

from staal.errors import RecordError
from staal.inputs.arguments import check_value
from staal.inputs.types import (
    INNER,
    INT_MAX,
    INT_MIN,
    MAX_DEPTH,
    TYPE_KEYS,
    Description,
    InputError,
    join,
    show,
    what_is,
)
from staal.records.record import Json

# -- checking a description -------------------------------------------------


def check_description(desc: Json) -> None:
    """Check an inputs description that crossed a process boundary; raise
    `RecordError` naming the path of the first malformed part."""
    _keys(desc, frozenset({"inputs"}), "")
    inputs = desc["inputs"]
    if not isinstance(inputs, list):
        raise RecordError(f"expected a list, not {what_is(inputs)}", "inputs")
    seen: set[str] = set()
    for i, item in enumerate(inputs):
        path = f"inputs[{i}]"
        _keys(item, frozenset({"name", "type"}), path, optional=frozenset({"default"}))
        name = item["name"]
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise RecordError(f"expected a parameter name, not {what_is(name)}", f"{path}.name")
        if name in seen:
            raise RecordError(f"input {name} is listed twice", f"{path}.name")
        seen.add(name)
        check_type(item["type"], f"{path}.type")
        if "default" in item:
            _check_default(item["type"], item["default"], f"{path}.default")


def _check_default(type_desc: Description, default: Any, path: str) -> None:
    try:
        check_value(type_desc, default, path)
    except InputError as exc:
        raise RecordError(f"the default does not fit its type ({exc.problems[0]})", path) from None


def check_type(type_desc: Json, path: str = "type", depth: int = 0) -> None:
    """Check one type description; raise `RecordError` naming the path."""
    if depth > MAX_DEPTH:
        raise RecordError(f"types nested more than {MAX_DEPTH} deep", path)
    if not isinstance(type_desc, dict):
        raise RecordError(f"expected a type description object, not {what_is(type_desc)}", path)
    name = type_desc.get("type")
    if not isinstance(name, str) or name not in TYPE_KEYS:
        known = ", ".join(TYPE_KEYS)
        raise RecordError(f"unknown type {show(name)} (known: {known})", join(path, "type"))
    _keys(type_desc, TYPE_KEYS[name], path)
    inner = INNER.get(name)
    if inner is not None:
        check_type(type_desc[inner], join(path, inner), depth + 1)
    elif name == "literal":
        _check_literal(type_desc["values"], join(path, "values"))
    elif name == "record":
        _check_record(type_desc, path, depth)


def _keys(obj: Any, required: frozenset[str], path: str,
          optional: frozenset[str] = frozenset()) -> None:
    if not isinstance(obj, dict):
        raise RecordError(f"expected an object, not {what_is(obj)}", path)
    for key in obj:
        if key not in required and key not in optional:
            raise RecordError("unknown key", join(path, str(key)))
    for key in sorted(required):
        if key not in obj:
            raise RecordError("is required", join(path, key))


def _check_literal(values: Any, path: str) -> None:
    if not isinstance(values, list) or not values:
        raise RecordError("expected a non-empty list of values", path)
    seen = set()
    for i, value in enumerate(values):
        where = f"{path}[{i}]"
        if isinstance(value, int) and not isinstance(value, bool):
            if not INT_MIN <= value <= INT_MAX:
                raise RecordError(f"{value} is out of range for an int", where)
        elif not isinstance(value, (str, bool)):
            raise RecordError(f"a literal is a string, a whole number or true/false, "
                              f"not {what_is(value)}", where)
        key = (type(value).__name__, value)
        if key in seen:
            raise RecordError(f"{show(value)} is listed twice", where)
        seen.add(key)


def _check_record(type_desc: Description, path: str, depth: int) -> None:
    name, fields, required = type_desc["name"], type_desc["fields"], type_desc["required"]
    if not isinstance(name, str) or not name:
        raise RecordError(f"expected a record name, not {what_is(name)}", join(path, "name"))
    if not isinstance(fields, dict):
        raise RecordError(f"expected an object of fields, not {what_is(fields)}", join(path, "fields"))
    for key, field in fields.items():
        if not isinstance(key, str):
            raise RecordError("field names are strings", join(path, "fields"))
        check_type(field, join(join(path, "fields"), key), depth + 1)
    where = join(path, "required")
    if not isinstance(required, list):
        raise RecordError(f"expected a list of field names, not {what_is(required)}", where)
    for i, key in enumerate(required):
        if not isinstance(key, str) or key not in fields:
            raise RecordError(f"{show(key)} is not a field of {name}", f"{where}[{i}]")
        if key in required[:i]:
            raise RecordError(f"{show(key)} is listed twice", f"{where}[{i}]")
