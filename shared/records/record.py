"""Records as frozen dataclasses, written as versioned JSON objects and
validated field by field when read.

A family (ledger events, journal records, worker messages) names the key
that tells the record types apart and the version it writes. Reading a record
checks the version, the type, every field's type and that no field is unknown;
a problem raises `RecordError` naming the field path (`charged[0].amount`).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from staal.errors import MoneyError, RecordError
from staal.money import Money

VERSION_KEY = "v"
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Pattern:
    regex: str
    what: str

    def check(self, value: str, path: str) -> None:
        if re.fullmatch(self.regex, value) is None:
            raise RecordError(f"expected {self.what}, not {value[:80]!r}", path)


@dataclass(frozen=True, slots=True)
class AtLeast:
    minimum: int

    def check(self, value: int, path: str) -> None:
        if value < self.minimum:
            raise RecordError(f"expected at least {self.minimum}, not {value}", path)


RunId = Annotated[str, Pattern(r"[0-9a-f]{32}", "a run id (32 hexadecimal characters)")]
Sha256 = Annotated[str, Pattern(r"[0-9a-f]{64}", "a SHA-256 in hexadecimal")]
Count = Annotated[int, AtLeast(0)]
OpNumber = Annotated[int, AtLeast(1)]
# Wall-clock time in UTC milliseconds since 1970 (seed 000 section 6, "Time").
TimeMs = Annotated[int, AtLeast(0)]
Json = Any


class Record:
    """Base of every record type; `TYPE` is its tag within its family."""

    TYPE: ClassVar[str] = ""


@dataclass(frozen=True)
class Family:
    name: str
    tag: str
    version: int
    types: tuple[type[Record], ...]

    def by_tag(self) -> Mapping[str, type[Record]]:
        return _by_tag(self.types)

    def encode(self, record: Record) -> dict[str, Any]:
        if type(record) not in self.types:
            raise TypeError(f"{type(record).__name__} is not a {self.name} record")
        body = _encode_fields(record)
        return {VERSION_KEY: self.version, self.tag: record.TYPE, **body}

    def decode(self, data: Any) -> Record:
        if not isinstance(data, dict):
            raise RecordError(f"a {self.name} record is a JSON object, not {type(data).__name__}")
        version = data.get(VERSION_KEY)
        if version != self.version:
            raise RecordError(
                f"{self.name} format version {version!r} is not one this staal reads "
                f"({self.version})",
                VERSION_KEY,
            )
        tag = data.get(self.tag)
        record_type = self.by_tag().get(tag) if isinstance(tag, str) else None
        if record_type is None:
            known = ", ".join(sorted(self.by_tag()))
            raise RecordError(f"unknown {self.name} record type {tag!r} (known: {known})", self.tag)
        body = {k: v for k, v in data.items() if k not in (VERSION_KEY, self.tag)}
        return _decode_dataclass(record_type, body, "")


def encode_plain(record: object) -> dict[str, Any]:
    """A record kept outside any family, with no version or tag (a waiting
    record), as a JSON object; fields that are None are left out."""
    return _encode_fields(record)


def decode_plain(cls: type[_T], data: Any) -> _T:
    """A record kept outside any family, read and checked field by field as
    a family's are (`RecordError` names the field)."""
    return _decode_dataclass(cls, data, "")


# -- encoding ------------------------------------------------------------


_AS_IS = (str, int, bool)


@cache
def _encoding_plan(cls: type) -> tuple[tuple[str, bool], ...]:
    """Each field's name, and whether its value needs converting: a field of
    JSON or scalar type is written as it is, without walking it."""
    hints = _hints(cls)
    return tuple((f.name, not _written_as_is(hints[f.name])) for f in dataclasses.fields(cls))


def prepare_encoding(types: tuple[type, ...]) -> None:
    """Make the encoding plan of each of `types` and of every dataclass their
    fields can hold (a run's usage, a failure, a capability's result): a
    process forked after this (a worker, from its zygote) finds them made,
    instead of evaluating type hints for each on its first record."""
    seen: set[type] = set()
    pending = [t for t in types if dataclasses.is_dataclass(t)]
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        _encoding_plan(cls)
        _fields(cls)
        for tp in _hints(cls).values():
            pending.extend(_dataclasses_in(tp))


def _dataclasses_in(tp: Any) -> list[type]:
    """The dataclasses a type names, itself or inside its arguments."""
    found = [tp] if isinstance(tp, type) and dataclasses.is_dataclass(tp) else []
    for arg in get_args(tp):
        found.extend(_dataclasses_in(arg))
    return found


def _written_as_is(tp: Any) -> bool:
    origin = get_origin(tp)
    if tp is Any or tp in _AS_IS:
        return True
    if origin is Annotated:
        return _written_as_is(get_args(tp)[0])
    if origin is Literal:
        return True
    if origin in (Union, types.UnionType):
        return all(a is type(None) or _written_as_is(a) for a in get_args(tp))
    return False


def _encode_fields(obj: object) -> dict[str, Any]:
    out = {}
    # Annotated as a plain `type`: typeshed's cache wrapper takes Hashable
    # arguments, which mypy finds `type[X]` is not (its __hash__ is unbound).
    kind: type = type(obj)
    for name, convert in _encoding_plan(kind):
        value = getattr(obj, name)
        if value is None:
            continue
        out[name] = _encode_value(value) if convert else value
    return out


def _encode_value(value: Any) -> Any:
    kind = type(value)
    if kind is Money:
        return value.to_wire()
    if kind is tuple or kind is list:
        return [_encode_value(v) for v in value]
    if kind is dict:
        return {k: _encode_value(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value):
        return _encode_fields(value)
    if isinstance(value, collections.abc.Mapping):
        return {k: _encode_value(v) for k, v in value.items()}
    return value


# -- decoding ------------------------------------------------------------


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=True)


# Made once per family and per record type, not per record decoded: the
# supervisor decodes every message a worker sends.
@cache
def _by_tag(types: tuple[type[Record], ...]) -> Mapping[str, type[Record]]:
    return MappingProxyType({t.TYPE: t for t in types})


@cache
def _fields(cls: type) -> Mapping[str, dataclasses.Field[object]]:
    return MappingProxyType({f.name: f for f in dataclasses.fields(cls)})


def _decode_dataclass(cls: type[_T], data: Any, path: str) -> _T:
    if not isinstance(data, dict):
        raise RecordError(f"expected an object, not {_json_kind(data)}", path)
    plain: type = cls  # a plain `type` for the cache wrappers, as in _encode_fields
    hints = _hints(plain)
    fields = _fields(plain)
    for key in data:
        if key not in fields:
            raise RecordError("unknown field", _join(path, key))
    values = {}
    for name, f in fields.items():
        where = _join(path, name)
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError("is required", where)
            continue
        values[name] = _decode_value(hints[name], data[name], where)
    return cls(**values)


def _decode_value(tp: Any, value: Any, path: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Annotated:
        base, *checks = get_args(tp)
        decoded = _decode_value(base, value, path)
        for check in checks:
            check.check(decoded, path)
        return decoded
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if value is None and len(options) < len(get_args(tp)):
            return None
        return _decode_value(options[0], value, path)
    if origin is Literal:
        if not any(value == a and type(value) is type(a) for a in get_args(tp)):
            allowed = ", ".join(repr(a) for a in get_args(tp))
            raise RecordError(f"expected one of {allowed}, not {value!r}", path)
        return value
    if origin is tuple:
        item_type = get_args(tp)[0]
        if not isinstance(value, list):
            raise RecordError(f"expected a list, not {_json_kind(value)}", path)
        return tuple(_decode_value(item_type, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (dict, collections.abc.Mapping):
        _, item_type = get_args(tp)
        if not isinstance(value, dict):
            raise RecordError(f"expected an object, not {_json_kind(value)}", path)
        return {k: _decode_value(item_type, v, _join(path, k)) for k, v in value.items()}
    if tp is Money:
        try:
            return Money.from_wire(value)
        except MoneyError as exc:
            raise RecordError(exc.message, _join(path, exc.field or "")) from exc
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, value, path)
    return _decode_scalar(tp, value, path)


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
