"""Canonical JSON and the hashes built on it.

One form for every value staal hashes or writes to disk: keys sorted at every
depth, no whitespace, UTF-8, money as the runtime writes it (`"35.00"` USD),
decimals as plain digits. Two values that the runtime reads as equal have the
same canonical bytes, which is what makes a `once` key find a repeated call.

orjson writes it and sets the limits: string keys only, integers from -2**63
to 2**64-1, at most 254 levels of nesting, no lone surrogates. The one thing
orjson would let through is a non-finite float, which it writes as null; such
values are refused.
"""

from __future__ import annotations

import decimal
import hashlib
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import orjson

from staal.errors import CanonicalError
from staal.money import Money

_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def decimal_text(value: Decimal) -> str:
    """A decimal as plain digits, trailing zeros removed: 1.50 -> "1.5"."""
    if not value.is_finite():
        raise CanonicalError(f"{value} has no JSON form")
    if value == 0:
        return "0"
    # normalize() rounds to the context's precision; never lose a digit.
    with decimal.localcontext() as context:
        context.prec = max(context.prec, len(value.as_tuple().digits))
        return format(value.normalize(), "f")


def _written_form(value: Any) -> Any:
    if isinstance(value, Money):
        return value.to_wire()
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return dict(value)
    raise TypeError(f"{type(value).__name__} has no canonical JSON form")


def _refuse_non_finite(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise CanonicalError(f"{item} has no JSON form")
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def canonical_json(value: Any) -> bytes:
    try:
        text = orjson.dumps(value, default=_written_form, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, CanonicalError) else None
        raise CanonicalError(cause.message if cause else f"no canonical JSON form: {exc}") from exc
    if b"null" in text:
        _refuse_non_finite(value)
    return text


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arguments_hash(arguments: Mapping[str, Any]) -> str:
    """SHA-256 of a call's whole arguments, as the runtime read them."""
    return sha256_hex(canonical_json(arguments))


def once_key(tool: str, arguments: Mapping[str, Any], by: tuple[str, ...] | list[str]) -> str:
    """The `once` key of a call: SHA-256 of the canonical JSON of
    `[tool name, {each named argument: its value}]` (seed 000 section 5).

    An argument named by `by` but absent (an optional one left out, with no
    default) is keyed as null.
    """
    named = {name: arguments.get(name) for name in by}
    return sha256_hex(canonical_json([tool, named]))
