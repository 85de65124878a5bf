"""A tool's inputs: their types as data, the runtime's check of a call's
arguments, and the JSON form of the values it gives (the JSON Schema that
agrees with the check, and placeholders, are in `staal.inputs.schema`).

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

The rules, which `staal.inputs.schema.to_json_schema` states again so the
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

import re
from collections.abc import Iterable
from typing import Any

import orjson

from staal.errors import StaalError
from staal.money import AMOUNT_PATTERN
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
TYPE_KEYS: dict[str, frozenset[str]] = {
    **{name: frozenset({"type"}) for name in SCALAR_TYPES},
    "list": frozenset({"type", "items"}),
    "dict": frozenset({"type", "values"}),
    "optional": frozenset({"type", "of"}),
    "literal": frozenset({"type", "values"}),
    "record": frozenset({"type", "name", "fields", "required"}),
}
# The key holding the one type a container type is made of.
INNER = {"list": "items", "dict": "values", "optional": "of"}
DECIMAL_TEXT = re.compile(AMOUNT_PATTERN)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
BAD: Any = object()  # the value of an argument that was refused


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


def what_is(value: Any) -> str:
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


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def whole_of(value: Any) -> int | None:
    """A JSON number with no fraction as an int (`1.0` -> 1), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
