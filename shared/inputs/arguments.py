"""A call's arguments checked against its tool's input types (types.py):
every problem found, each naming its argument path, or the values as the
program receives them; and those values' JSON form (what a journal and a
once key hold)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from decimal import Decimal, localcontext
from typing import Any

from staal.errors import MoneyError
from staal.inputs.types import (
    BAD,
    DECIMAL_MAX_LENGTH,
    DECIMAL_TEXT,
    INT_MAX,
    INT_MIN,
    SAFE_INTEGER,
    Description,
    InputError,
    is_number,
    join,
    show,
    what_is,
    whole_of,
)
from staal.money import Money
from staal.records.canonical import decimal_text
from staal.records.record import Json

# -- checking arguments -----------------------------------------------------


def check_arguments(desc: Description, arguments: Json,
                    capabilities: Iterable[str] = ()) -> dict[str, Any]:
    """The runtime's check of a call's arguments against an inputs
    description (one that passed `check_description`).

    Returns the values the program receives, defaults filled in; raises
    `InputError` with every problem at once.
    """
    if not isinstance(arguments, dict):
        raise InputError([f"the arguments must be a JSON object, not {what_is(arguments)}"])
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
        if value is not BAD:
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
        return BAD

    def value(self, type_desc: Description, value: Any, path: str) -> Any:
        read: Callable[[Description, Any, str], Any] = getattr(self, "_" + type_desc["type"])
        return read(type_desc, value, path)

    def _str(self, t: Description, value: Any, path: str) -> Any:
        if isinstance(value, str):
            return value
        return self.bad(path, f"expected a string, not {what_is(value)}")

    def _bool(self, t: Description, value: Any, path: str) -> Any:
        if isinstance(value, bool):
            return value
        return self.bad(path, f"expected true or false, not {what_is(value)}")

    def _int(self, t: Description, value: Any, path: str) -> Any:
        if not is_number(value):
            return self.bad(path, f"expected a whole number, not {what_is(value)}")
        whole = whole_of(value)
        if whole is None:
            return self.bad(path, f"{show(value)} is not a whole number")
        if not INT_MIN <= whole <= INT_MAX:
            return self.bad(path, f"{show(value)} is out of range ({INT_MIN} to {INT_MAX})")
        return whole

    def _decimal(self, t: Description, value: Any, path: str) -> Any:
        if isinstance(value, str):
            if len(value) > DECIMAL_MAX_LENGTH:
                return self.bad(path, f"is longer than {DECIMAL_MAX_LENGTH} characters")
            if not DECIMAL_TEXT.fullmatch(value):
                return self.bad(path, f"{show(value)} is not a decimal number such as \"12.50\"")
            return Decimal(value)
        if not is_number(value):
            return self.bad(path, f"expected a decimal string such as \"12.50\", not {what_is(value)}")
        whole = whole_of(value)
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
            return self.bad(path, f"expected a list, not {what_is(value)}")
        items = [self.value(t["items"], v, f"{path}[{i}]") for i, v in enumerate(value)]
        return BAD if any(v is BAD for v in items) else items

    def _dict(self, t: Description, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            return self.bad(path, f"expected an object, not {what_is(value)}")
        if not all(isinstance(k, str) for k in value):
            return self.bad(path, "object keys must be strings")
        items = {k: self.value(t["values"], v, join(path, k)) for k, v in value.items()}
        return BAD if any(v is BAD for v in items.values()) else items

    def _optional(self, t: Description, value: Any, path: str) -> Any:
        return None if value is None else self.value(t["of"], value, path)

    def _literal(self, t: Description, value: Any, path: str) -> Any:
        for allowed in t["values"]:
            if _same_json(value, allowed):
                return allowed
        options = ", ".join(show(v) for v in t["values"])
        expected = f"one of {options}" if len(t["values"]) > 1 else options
        return self.bad(path, f"expected {expected}, not {what_is(value)}")

    def _record(self, t: Description, value: Any, path: str) -> Any:
        fields = t["fields"]
        if not isinstance(value, dict):
            return self.bad(path, f"expected an object ({t['name']}), not {what_is(value)}")
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
            return BAD
        return out


def _same_json(value: Any, allowed: Any) -> bool:
    """Equality as JSON has it: true is not 1, 1.0 is 1."""
    if isinstance(allowed, bool) or isinstance(value, bool):
        return value is allowed
    if isinstance(allowed, int):
        return is_number(value) and value == allowed
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
