"""Reading records: a decoder per type, made once from its type hints,
that reads a JSON value as that type and checks it as it goes (record.py's
families and plain records read through these).

The supervisor decodes every message a worker sends and checks every ledger
event it writes by decoding it; walking the hints with `get_origin` and
`get_args` for each value was most of that work, so each type's walk is
done once, into a chain of small functions.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
from collections.abc import Callable, Mapping
from functools import cache
from types import MappingProxyType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from staal.errors import MoneyError, RecordError
from staal.money import Money


@cache
def hints_of(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=True)


@cache
def fields_of(cls: type) -> Mapping[str, dataclasses.Field[object]]:
    return MappingProxyType({f.name: f for f in dataclasses.fields(cls)})


Decoder = Callable[[Any, str], Any]


def decoder(tp: Any) -> Decoder:
    """How to read a JSON value as `tp`: `decoder(tp)(value, path)`, a
    `RecordError` naming `path` (and below it) for a value that is not one."""
    try:
        return _cached_decoder(tp)
    except TypeError:  # a type whose metadata cannot be hashed: made each time
        return _make_decoder(tp)


@cache
def _cached_decoder(tp: Any) -> Decoder:
    return _make_decoder(tp)


def _as_is(value: Any, path: str) -> Any:
    return value


def _make_decoder(tp: Any) -> Decoder:
    origin = get_origin(tp)
    if tp is Any:
        return _as_is
    if origin is Annotated:
        return _annotated_decoder(tp)
    if origin in (Union, types.UnionType):
        return _union_decoder(tp)
    if origin is Literal:
        return _literal_decoder(tp)
    if origin is tuple:
        return _tuple_decoder(get_args(tp)[0])
    if origin in (dict, collections.abc.Mapping):
        return _mapping_decoder(get_args(tp)[1])
    if tp is Money:
        return _decode_money
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return dataclass_decoder(tp)
    return _scalar_decoder(tp)


def _annotated_decoder(tp: Any) -> Decoder:
    base, *checks = get_args(tp)
    inner = decoder(base)
    if len(checks) == 1:
        check = checks[0].check

        def annotated_once(value: Any, path: str) -> Any:
            decoded = inner(value, path)
            check(decoded, path)
            return decoded

        return annotated_once

    def annotated(value: Any, path: str) -> Any:
        decoded = inner(value, path)
        for check in checks:
            check.check(decoded, path)
        return decoded

    return annotated


def _union_decoder(tp: Any) -> Decoder:
    options = [a for a in get_args(tp) if a is not type(None)]
    takes_none = len(options) < len(get_args(tp))
    inner = decoder(options[0])

    def union(value: Any, path: str) -> Any:
        if value is None and takes_none:
            return None
        return inner(value, path)

    return union


def _literal_decoder(tp: Any) -> Decoder:
    allowed = get_args(tp)

    def literal(value: Any, path: str) -> Any:
        if not any(value == a and type(value) is type(a) for a in allowed):
            listed = ", ".join(repr(a) for a in allowed)
            raise RecordError(f"expected one of {listed}, not {value!r}", path)
        return value

    return literal


def _tuple_decoder(item_type: Any) -> Decoder:
    item = decoder(item_type)

    def sequence(value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise RecordError(f"expected a list, not {_json_kind(value)}", path)
        return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

    return sequence


def _mapping_decoder(item_type: Any) -> Decoder:
    item = decoder(item_type)

    def mapping(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise RecordError(f"expected an object, not {_json_kind(value)}", path)
        return {k: item(v, _join(path, k)) for k, v in value.items()}

    return mapping


def _decode_money(value: Any, path: str) -> Any:
    try:
        return Money.from_wire(value)
    except MoneyError as exc:
        raise RecordError(exc.message, _join(path, exc.field or "")) from exc


def _decode_str(value: Any, path: str) -> Any:
    if isinstance(value, str):
        return value
    raise RecordError(f"expected str, not {_json_kind(value)}", path)


def _decode_int(value: Any, path: str) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise RecordError(f"expected int, not {_json_kind(value)}", path)


def _scalar_decoder(tp: Any) -> Decoder:
    if tp is str:
        return _decode_str
    if tp is int:
        return _decode_int

    def scalar(value: Any, path: str) -> Any:
        return _decode_scalar(tp, value, path)

    return scalar


@cache
def dataclass_decoder(cls: type) -> Decoder:
    """A dataclass's decoder; its fields' decoders are made at its first
    use, so a dataclass that holds itself (through a tuple, say) is no
    endless recursion."""
    fields = fields_of(cls)
    plan: tuple[tuple[str, Decoder, bool], ...] | None = None

    def make_plan() -> tuple[tuple[str, Decoder, bool], ...]:
        hints = hints_of(cls)
        return tuple((name, decoder(hints[name]),
                      f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                     for name, f in fields.items())

    def dataclass_(data: Any, path: str) -> Any:
        nonlocal plan
        if not isinstance(data, dict):
            raise RecordError(f"expected an object, not {_json_kind(data)}", path)
        if plan is None:
            plan = make_plan()
        for key in data:
            if key not in fields:
                raise RecordError("unknown field", _join(path, key))
        values = {}
        for name, decode, required in plan:
            if name not in data:
                if required:
                    raise RecordError("is required", _join(path, name))
                continue
            values[name] = decode(data[name], f"{path}.{name}" if path else name)
        try:
            return cls(**values)
        except RecordError as exc:  # its own check: named under where it was read
            if not path:
                raise
            raise RecordError(exc.reason, _join(path, exc.path)) from None

    return dataclass_


def _decode_scalar(tp: type, value: Any, path: str) -> Any:
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is str:
        ok = isinstance(value, str)
    else:
        raise TypeError(f"records cannot hold {tp!r}")
    if not ok:
        raise RecordError(f"expected {tp.__name__}, not {_json_kind(value)}", path)
    return value


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "true/false", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _join(path: str, key: str) -> str:
    if not key:
        return path
    return f"{path}.{key}" if path else key
