"""A tool's inputs: their types as data, the runtime's check of a call's
arguments, and the JSON form of the values it gives (the JSON Schema that
agrees with the check, and placeholders, are in `staal.runtime.input_schema`).

The worker describes a program's input parameters as plain JSON
(`staal.worker.runs.annotations`); the supervisor checks a call's arguments
against that description without importing the program.

A type description is one of

    {"type": "str"} {"type": "int"} {"type": "bool"} {"type": "decimal"}
    {"type": "money"} {"type": "json"}                      (any JSON value)
    {"type": "list", "items": T}    {"type": "dict", "values": T}
    {"type": "optional", "of": T}                            (null or T)
    {"type": "literal", "values": [...]}                     (str, int, bool)
    {"type": "record", "name": "Address", "fields": {"street": T},
     "required": ["street"]}                                 (a TypedDict)

and an inputs description is `{"inputs": [{"name": ..., "type": T,
"default": <JSON>}, ...]}` in parameter order; an input with a default is
optional and the default is filled in.

The rules, which `staal.runtime.input_schema.to_json_schema` states again so the
two agree:

- int: a JSON integer from -2**63 to 2**63-1, never true/false. A JSON number
  with a zero fraction (`1.0`) is an integer too: JSON Schema says so
  ("any number with a zero fractional part") and its validators cannot tell
  `1.0` from `1`, so the runtime reads it as the whole number.
- decimal: a string of digits with an optional `.` and fraction (at most 100
  characters), or a JSON integer within +-(2**53-1), the range where every
  whole JSON number is exact (beyond it, JavaScript clients have already
  rounded it). A number with a fraction is refused: it may have lost digits.
- money: exactly what `Money.from_wire` reads. The one disagreement with the
  schema: an amount too large to hold exactly is refused here and accepted
  by the schema, which cannot compare digit strings as numbers.
- literal: JSON equality, as JSON Schema's `enum` has it: `1` is not `true`,
  and `1.0` is `1`.
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Callable, Iterable
from decimal import Decimal, localcontext
from typing import Any

import orjson

from staal.errors import MoneyError, RecordError, StaalError
from staal.money import AMOUNT_PATTERN, Money
from staal.records.canonical import decimal_text
from staal.records.record import Json

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
# The largest whole number every JSON implementation holds exactly.
SAFE_INTEGER = 2**53 - 1
DECIMAL_MAX_LENGTH = 100
# Nesting of type descriptions; real programs stay far below it.
MAX_DEPTH = 32
# A refusal lists at most this many problems, then says how many more.
MAX_PROBLEMS = 100

# A type description or an inputs description: the JSON above, whose shape
# is checked at run time (check_description, check_type), not known to mypy.
Description = dict[str, Json]

SCALAR_TYPES = ("str", "int", "bool", "decimal", "money", "json")
_TYPE_KEYS: dict[str, frozenset[str]] = {
    **{name: frozenset({"type"}) for name in SCALAR_TYPES},
    "list": frozenset({"type", "items"}),
    "dict": frozenset({"type", "values"}),
    "optional": frozenset({"type", "of"}),
    "literal": frozenset({"type", "values"}),
    "record": frozenset({"type", "name", "fields", "required"}),
}
# The key holding the one type a container type is made of.
_INNER = {"list": "items", "dict": "values", "optional": "of"}
_DECIMAL = re.compile(AMOUNT_PATTERN)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BAD: Any = object()  # the value of an argument that was refused


class InputError(StaalError):
    """A call's arguments that do not fit the tool's inputs: every problem,
    each `path: reason`, path naming the argument (`items[2]`,
    `amount.amount`, `address.street`)."""

    kind = "input"

    def __init__(self, problems: Iterable[str]) -> None:
        listed = list(problems)
        if len(listed) > MAX_PROBLEMS:
            more = len(listed) - MAX_PROBLEMS
            listed = [*listed[:MAX_PROBLEMS], f"... and {more} more problems"]
        self.problems: tuple[str, ...] = tuple(listed)
        super().__init__("\n".join(self.problems))


# -- small helpers -------------------------------------------------------


def show(value: Json) -> str:
    """A value as JSON, cut short, for a message."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _what(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return show(value)


def join(path: str, key: str) -> str:
    """`path.key`, or `path["odd key"]` for a key that is not a plain name."""
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}" if path else key
    quoted = show(key) if len(key) <= 40 else show(key[:37] + "...")
    return f"{path}[{quoted}]" if path else quoted


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> int | None:
    """A JSON number with no fraction as an int (`1.0` -> 1), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


# -- checking a description -------------------------------------------------


def check_description(desc: Json) -> None:
    """Check an inputs description that crossed a process boundary; raise
    `RecordError` naming the path of the first malformed part."""
    _keys(desc, frozenset({"inputs"}), "")
    inputs = desc["inputs"]
    if not isinstance(inputs, list):
        raise RecordError(f"expected a list, not {_what(inputs)}", "inputs")
    seen: set[str] = set()
    for i, item in enumerate(inputs):
        path = f"inputs[{i}]"
        _keys(item, frozenset({"name", "type"}), path, optional=frozenset({"default"}))
        name = item["name"]
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise RecordError(f"expected a parameter name, not {_what(name)}", f"{path}.name")
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
        raise RecordError(f"expected a type description object, not {_what(type_desc)}", path)
    name = type_desc.get("type")
    if not isinstance(name, str) or name not in _TYPE_KEYS:
        known = ", ".join(_TYPE_KEYS)
        raise RecordError(f"unknown type {show(name)} (known: {known})", join(path, "type"))
    _keys(type_desc, _TYPE_KEYS[name], path)
    inner = _INNER.get(name)
    if inner is not None:
        check_type(type_desc[inner], join(path, inner), depth + 1)
    elif name == "literal":
        _check_literal(type_desc["values"], join(path, "values"))
    elif name == "record":
        _check_record(type_desc, path, depth)


def _keys(obj: Any, required: frozenset[str], path: str,
          optional: frozenset[str] = frozenset()) -> None:
    if not isinstance(obj, dict):
        raise RecordError(f"expected an object, not {_what(obj)}", path)
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
                              f"not {_what(value)}", where)
        key = (type(value).__name__, value)
        if key in seen:
            raise RecordError(f"{show(value)} is listed twice", where)
        seen.add(key)


def _check_record(type_desc: Description, path: str, depth: int) -> None:
    name, fields, required = type_desc["name"], type_desc["fields"], type_desc["required"]
    if not isinstance(name, str) or not name:
        raise RecordError(f"expected a record name, not {_what(name)}", join(path, "name"))
    if not isinstance(fields, dict):
        raise RecordError(f"expected an object of fields, not {_what(fields)}", join(path, "fields"))
    for key, field in fields.items():
        if not isinstance(key, str):
            raise RecordError("field names are strings", join(path, "fields"))
        check_type(field, join(join(path, "fields"), key), depth + 1)
    where = join(path, "required")
    if not isinstance(required, list):
        raise RecordError(f"expected a list of field names, not {_what(required)}", where)
    for i, key in enumerate(required):
        if not isinstance(key, str) or key not in fields:
            raise RecordError(f"{show(key)} is not a field of {name}", f"{where}[{i}]")
        if key in required[:i]:
            raise RecordError(f"{show(key)} is listed twice", f"{where}[{i}]")


# -- checking arguments -----------------------------------------------------


def check_arguments(desc: Description, arguments: Json,
                    capabilities: Iterable[str] = ()) -> dict[str, Any]:
    """The runtime's check of a call's arguments against an inputs
    description (one that passed `check_description`).

    Returns the values the program receives, defaults filled in; raises
    `InputError` with every problem at once.
    """
    if not isinstance(arguments, dict):
        raise InputError([f"the arguments must be a JSON object, not {_what(arguments)}"])
    checker = _Checker()
    values: dict[str, Any] = {}
    names = [item["name"] for item in desc["inputs"]]
    for item in desc["inputs"]:
        name = item["name"]
        if name in arguments:
            value = checker.value(item["type"], arguments[name], name)
        elif "default" in item:
            value = checker.value(item["type"], item["default"], name)
        else:
            value = checker.bad(name, "is required")
        if value is not _BAD:
            values[name] = value
    granted = set(capabilities)
    for name in arguments:
        if name in names:
            continue
        if name in granted:
            checker.bad(join("", name), "is a capability the operator grants, not an argument")
        else:
            listed = ", ".join(names) or "none"
            checker.bad(join("", str(name)), f"not an input of this tool (inputs: {listed})")
    if checker.problems:
        raise InputError(checker.problems)
    return values


def check_value(type_desc: Description, value: Json, path: str = "value") -> Any:
    """One JSON value read as one type, by the same rules; raises `InputError`."""
    checker = _Checker()
    result = checker.value(type_desc, value, path)
    if checker.problems:
        raise InputError(checker.problems)
    return result


class _Checker:
    """Reads JSON values as typed values, collecting every problem."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def bad(self, path: str, reason: str) -> Any:
        self.problems.append(f"{path}: {reason}" if path else reason)
        return _BAD

    def value(self, type_desc: Description, value: Any, path: str) -> Any:
        read: Callable[[Description, Any, str], Any] = getattr(self, "_" + type_desc["type"])
        return read(type_desc, value, path)

    def _str(self, t: Description, value: Any, path: str) -> Any:
        if isinstance(value, str):
            return value
        return self.bad(path, f"expected a string, not {_what(value)}")

    def _bool(self, t: Description, value: Any, path: str) -> Any:
        if isinstance(value, bool):
            return value
        return self.bad(path, f"expected true or false, not {_what(value)}")

    def _int(self, t: Description, value: Any, path: str) -> Any:
        if not _is_number(value):
            return self.bad(path, f"expected a whole number, not {_what(value)}")
        whole = _whole(value)
        if whole is None:
            return self.bad(path, f"{show(value)} is not a whole number")
        if not INT_MIN <= whole <= INT_MAX:
            return self.bad(path, f"{show(value)} is out of range ({INT_MIN} to {INT_MAX})")
        return whole

    def _decimal(self, t: Description, value: Any, path: str) -> Any:
        if isinstance(value, str):
            if len(value) > DECIMAL_MAX_LENGTH:
                return self.bad(path, f"is longer than {DECIMAL_MAX_LENGTH} characters")
            if not _DECIMAL.fullmatch(value):
                return self.bad(path, f"{show(value)} is not a decimal number such as \"12.50\"")
            return Decimal(value)
        if not _is_number(value):
            return self.bad(path, f"expected a decimal string such as \"12.50\", not {_what(value)}")
        whole = _whole(value)
        if whole is None:
            return self.bad(path, f"{show(value)} is a JSON number with a fraction, which may "
                                  "have lost digits: write it as a string")
        if abs(whole) > SAFE_INTEGER:
            return self.bad(path, f"{show(value)} is too large to be an exact JSON number "
                                  f"(at most {SAFE_INTEGER}): write it as a string")
        return Decimal(whole)

    def _money(self, t: Description, value: Any, path: str) -> Any:
        try:
            return Money.from_wire(value)
        except MoneyError as exc:
            return self.bad(join(path, exc.field) if exc.field else path, exc.message)

    def _json(self, t: Description, value: Any, path: str) -> Any:
        problem = _not_json(value)
        return value if problem is None else self.bad(path, problem)

    def _list(self, t: Description, value: Any, path: str) -> Any:
        if not isinstance(value, list):
            return self.bad(path, f"expected a list, not {_what(value)}")
        items = [self.value(t["items"], v, f"{path}[{i}]") for i, v in enumerate(value)]
        return _BAD if any(v is _BAD for v in items) else items

    def _dict(self, t: Description, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            return self.bad(path, f"expected an object, not {_what(value)}")
        if not all(isinstance(k, str) for k in value):
            return self.bad(path, "object keys must be strings")
        items = {k: self.value(t["values"], v, join(path, k)) for k, v in value.items()}
        return _BAD if any(v is _BAD for v in items.values()) else items

    def _optional(self, t: Description, value: Any, path: str) -> Any:
        return None if value is None else self.value(t["of"], value, path)

    def _literal(self, t: Description, value: Any, path: str) -> Any:
        for allowed in t["values"]:
            if _same_json(value, allowed):
                return allowed
        options = ", ".join(show(v) for v in t["values"])
        expected = f"one of {options}" if len(t["values"]) > 1 else options
        return self.bad(path, f"expected {expected}, not {_what(value)}")

    def _record(self, t: Description, value: Any, path: str) -> Any:
        fields = t["fields"]
        if not isinstance(value, dict):
            return self.bad(path, f"expected an object ({t['name']}), not {_what(value)}")
        before = len(self.problems)
        for key in value:
            if key not in fields:
                listed = ", ".join(fields) or "no fields"
                self.bad(join(path, str(key)), f"unknown field ({t['name']} has {listed})")
        for key in t["required"]:
            if key not in value:
                self.bad(join(path, key), "is required")
        out = {k: self.value(fields[k], v, join(path, k)) for k, v in value.items() if k in fields}
        if len(self.problems) > before:
            return _BAD
        return out


def _same_json(value: Any, allowed: Any) -> bool:
    """Equality as JSON has it: true is not 1, 1.0 is 1."""
    if isinstance(allowed, bool) or isinstance(value, bool):
        return value is allowed
    if isinstance(allowed, int):
        return _is_number(value) and value == allowed
    return isinstance(value, str) and value == allowed


def _not_json(value: Any) -> str | None:
    """Why a value is not JSON, or None. Iterative: JSON may nest deeply."""
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, (str, bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{item} is not a JSON number"
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return "object keys must be strings"
            stack.extend(item.values())
        else:
            return f"a {type(item).__name__} is not JSON"
    return None


# -- the JSON form of checked values ------------------------------------------


def arguments_to_json(values: dict[str, Any]) -> dict[str, Any]:
    """The JSON form of checked values, which `check_arguments` reads back
    to the same values (money in its wire form, decimals as plain digits)."""
    return {name: value_to_json(value) for name, value in values.items()}


def value_to_json(value: Any) -> Any:
    if isinstance(value, Money):
        return value.to_wire()
    if isinstance(value, Decimal):
        return _decimal_text(value)
    if isinstance(value, dict):
        return {k: value_to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [value_to_json(v) for v in value]
    return value


def _decimal_text(value: Decimal) -> str:
    # decimal_text normalizes in the current context, which keeps 28 digits;
    # a decimal input may have up to 100, so give it room for every one.
    with localcontext() as context:
        context.prec = max(context.prec, len(value.as_tuple().digits))
        return decimal_text(value)
