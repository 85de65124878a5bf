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
import functools
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

from staal.errors import RecordError
from staal.money import Money
from staal.records.decoders import dataclass_decoder
from staal.records.decoders import fields_of as _fields
from staal.records.decoders import hints_of as _hints

VERSION_KEY = "v"
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Pattern:
    regex: str
    what: str

    def check(self, value: str, path: str) -> None:
        if _compiled(self.regex).fullmatch(value) is None:
            raise RecordError(f"expected {self.what}, not {value[:80]!r}", path)


@dataclass(frozen=True, slots=True)
class AtLeast:
    minimum: int

    def check(self, value: int, path: str) -> None:
        if value < self.minimum:
            raise RecordError(f"expected at least {self.minimum}, not {value}", path)


@cache
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


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

    @functools.cached_property
    def _tags(self) -> Mapping[str, type[Record]]:
        return self.by_tag()

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
        record_type = self._tags.get(tag) if isinstance(tag, str) else None
        if record_type is None:
            known = ", ".join(sorted(self.by_tag()))
            raise RecordError(f"unknown {self.name} record type {tag!r} (known: {known})", self.tag)
        body = dict(data)  # both keys are there: the version matched and the tag named a type
        del body[VERSION_KEY], body[self.tag]
        # A plain `type` for the cache wrapper, as in _encode_fields.
        kind: type = record_type
        decoded: Record = dataclass_decoder(kind)(body, "")
        return decoded


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


# -- decoding (decoders.py) ----------------------------------------------------


# Made once per family and per record type, not per record decoded: the
# supervisor decodes every message a worker sends.
@cache
def _by_tag(types: tuple[type[Record], ...]) -> Mapping[str, type[Record]]:
    return MappingProxyType({t.TYPE: t for t in types})


def _decode_dataclass(cls: type[_T], data: Any, path: str) -> _T:
    kind: type = cls  # a plain `type` for the cache wrapper, as in _encode_fields
    decoded: _T = dataclass_decoder(kind)(data, path)
    return decoded
