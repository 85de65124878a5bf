"""Resources, sans I/O (issue 16; seed 002 "Resources"): what staal lists,
the URI templates it serves, and what a `staal://<server>/...` URI refers
to, down to its page limit and the position its cursor holds.

    staal://<server>/runs{?limit,cursor}          the caller's runs, newest first
    staal://<server>/runs/{run}                   what staal_run_status answers
    staal://<server>/runs/{run}/journal{?cursor}  the run's records, as data
    staal://<server>/<segment>{?limit,cursor}     an operator's records, by id
    staal://<server>/<segment>/{id}               one of them

Reading one is the application's (`ReadResource`, answered with `Contents`
or an error): here a URI is only judged. A URI that names nothing served,
a malformed part, or a cursor this server did not make is invalid params
(-32602) with `data.uri`, before anything is read or run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from staal.protocol.errors import BadValue
from staal.protocol.mcp.cursors import CursorSigner
from staal.protocol.mcp.jsonrpc import INVALID_PARAMS, RequestId, RpcError
from staal.records.record import Json
from staal.runtime.ids import is_run_id

SCHEME = "staal"
MIME = "application/json"
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
# A journal is read a fixed number of records at a time.
JOURNAL_PAGE = 100
RUNS = "runs"
MAX_URI = 2048
MAX_ID = 256
# An ended run never changes: a client may keep what it read for a day.
ENDED_TTL_MS = 86_400_000
CacheScope = Literal["public", "private"]


# -- what a URI refers to --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunsPage:
    limit: int
    after: str | None = None  # the position the cursor holds


@dataclass(frozen=True, slots=True)
class RunItem:
    run: str


@dataclass(frozen=True, slots=True)
class JournalPage:
    run: str
    after: str | None = None


@dataclass(frozen=True, slots=True)
class RecordItem:
    segment: str
    id: str


@dataclass(frozen=True, slots=True)
class RecordsPage:
    segment: str
    limit: int
    after: str | None = None


@dataclass(frozen=True, slots=True)
class RecordIds:
    """A completion from a collection's record ids starting with `prefix`
    (completion/complete: one run of its `list` entry, read as a page is)."""

    segment: str
    prefix: str


ResourceRef = RunsPage | RunItem | JournalPage | RecordItem | RecordsPage | RecordIds


@dataclass(frozen=True, slots=True)
class ReadResource:
    """A resources/read for the application to answer (`Dispatcher.read_result`)."""

    request_id: RequestId
    uri: str
    ref: ResourceRef
    revision: str


@dataclass(frozen=True, slots=True)
class Contents:
    """What a read found: JSON `data`, and how long (and for whom) a
    2026-07-28 client may keep it."""

    data: Json
    ttl_ms: int = 0
    cache_scope: CacheScope = "private"


ReadAnswer = Contents | RpcError


@dataclass(frozen=True, slots=True)
class Collection:
    """An operator-declared collection of records (manifest `resources`)."""

    segment: str
    description: str
    max_page_size: int = MAX_LIMIT
    # The ids the operator lists for completions (none: a run reads them).
    ids: tuple[str, ...] = ()


def unknown_resource(uri: Json, why: str) -> RpcError:
    shown = uri[:200] if isinstance(uri, str) else uri
    return RpcError(INVALID_PARAMS, f"unknown resource {shown!r}: {why}",
                    {"uri": uri if isinstance(uri, str) else None})


def cursor_collection(ref: RunsPage | JournalPage | RecordsPage) -> str:
    """What a cursor is bound to: one cursor never pages another collection."""
    if isinstance(ref, RunsPage):
        return RUNS
    if isinstance(ref, JournalPage):
        return f"{RUNS}/{ref.run}/journal"
    return ref.segment


# -- the catalogue ---------------------------------------------------------------------


class ResourceCatalogue:
    def __init__(self, server_name: str, collections: Iterable[Collection],
                 signer: CursorSigner) -> None:
        self.base = f"{SCHEME}://{server_name}"
        self.collections = {c.segment: c for c in collections}
        if RUNS in self.collections:
            raise BadValue(f"'{RUNS}' is staal's own collection")
        self.signer = signer

    def templates(self) -> list[dict[str, Json]]:
        base = self.base
        listed = [
            _template(f"{base}/runs{{?limit,cursor}}", "runs",
                      "Your runs, newest first: run id, tool, state and times."),
            _template(f"{base}/runs/{{run}}", "run",
                      "One run's status and result, as staal_run_status answers."),
            _template(f"{base}/runs/{{run}}/journal{{?cursor}}", "run-journal",
                      "What one run did: its ops, capabilities, outcomes, any stop and the "
                      "operator's answer (hashes of arguments, never their values)."),
        ]
        for c in self.collections.values():
            listed.append(_template(f"{base}/{c.segment}{{?limit,cursor}}", c.segment,
                                    f"{c.description} A page of records in id order."))
            listed.append(_template(f"{base}/{c.segment}/{{id}}", f"{c.segment}-record",
                                    f"{c.description} One record by its id."))
        return listed

    def resources(self) -> list[dict[str, Json]]:
        listed = [{"uri": f"{self.base}/runs", "name": "runs", "mimeType": MIME,
                   "description": "Your runs, newest first (the first page)."}]
        listed += [{"uri": f"{self.base}/{c.segment}", "name": c.segment, "mimeType": MIME,
                    "description": f"The first page of: {c.description}"}
                   for c in self.collections.values()]
        return listed

    def next_cursor(self, ref: RunsPage | JournalPage | RecordsPage, position: str) -> str:
        return self.signer.make(cursor_collection(ref), position)

    def reference(self, uri: Json) -> ResourceRef | RpcError:
        """What `uri` refers to, or why it refers to nothing served."""
        if not isinstance(uri, str) or not uri:
            return unknown_resource(uri, "resources/read needs the resource's uri (a string)")
        if len(uri) > MAX_URI:
            return unknown_resource(uri, f"a resource URI is at most {MAX_URI} characters")
        prefix = self.base + "/"
        if not uri.startswith(prefix):
            return unknown_resource(uri, f"this server's resources are under {prefix}")
        if "#" in uri:
            return unknown_resource(uri, "a resource URI has no fragment")
        path_text, _, query_text = uri[len(self.base):].partition("?")
        query = _query(query_text)
        if isinstance(query, str):
            return unknown_resource(uri, query)
        path = [_unquote(p) for p in path_text.split("/")[1:]]
        if None in path:
            return unknown_resource(uri, "its path has a malformed %-escape")
        ref = self._path(path, query)  # type: ignore[arg-type]
        if isinstance(ref, str):
            return unknown_resource(uri, ref)
        return ref

    def _path(self, path: list[str], query: dict[str, str]) -> ResourceRef | str:
        head, rest = path[0], path[1:]
        if head == RUNS:
            return self._runs(rest, query)
        collection = self.collections.get(head)
        if collection is None:
            known = ", ".join([RUNS, *self.collections])
            return f"no collection {head[:80]!r} (this server serves {known})"
        if not rest:
            if (extra := _extra(query, ("limit", "cursor"))) is not None:
                return extra
            limit = _limit(query.get("limit"), collection.max_page_size)
            return limit if isinstance(limit, str) else self._paged(
                RecordsPage(collection.segment, limit), query)
        if len(rest) == 1 and rest[0] and len(rest[0]) <= MAX_ID:
            return _extra(query, ()) or RecordItem(collection.segment, rest[0])
        return f"a record is {self.base}/{collection.segment}/{{id}} (an id of 1 to {MAX_ID} characters)"

    def _runs(self, rest: list[str], query: dict[str, str]) -> ResourceRef | str:
        if not rest:
            if (extra := _extra(query, ("limit", "cursor"))) is not None:
                return extra
            limit = _limit(query.get("limit"), MAX_LIMIT)
            return limit if isinstance(limit, str) else self._paged(RunsPage(limit), query)
        run = rest[0]
        if not is_run_id(run):
            return f"{run[:80]!r} is not a run id"
        if len(rest) == 1:
            return _extra(query, ()) or RunItem(run)
        if rest[1:] == ["journal"]:
            return _extra(query, ("cursor",)) or self._paged(JournalPage(run), query)
        return f"a run's resources are {self.base}/runs/{{run}} and {self.base}/runs/{{run}}/journal"

    def _paged(self, ref: RunsPage | JournalPage | RecordsPage,
               query: dict[str, str]) -> ResourceRef | str:
        cursor = query.get("cursor")
        if cursor is None:
            return ref
        position = self.signer.read(cursor_collection(ref), cursor)
        if position is None:
            return ("cursor: not a cursor this server gave for this collection (pass back "
                    "nextCursor exactly as it came)")
        return type(ref)(**{**_fields(ref), "after": position})


def _fields(ref: Any) -> dict[str, Json]:
    return {name: getattr(ref, name) for name in ref.__slots__}


def _template(uri: str, name: str, description: str) -> dict[str, Json]:
    return {"uriTemplate": uri, "name": name, "description": description, "mimeType": MIME}


_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
MAX_QUERY_FIELDS = 8


def _unquote(text: str) -> str | None:
    """RFC 3986 percent-decoding (UTF-8); None for a stray % or bytes that
    are not UTF-8. Written here because protocol/ stays clear of urllib."""
    raw = text.encode()
    if raw.count(b"%") != len(_ESCAPE.findall(raw)):
        return None
    try:
        return _ESCAPE.sub(lambda m: bytes([int(m[1], 16)]), raw).decode()
    except UnicodeDecodeError:
        return None


def _query(text: str) -> dict[str, str] | str:
    """A query's parameters, each given once, both sides percent-decoded."""
    query: dict[str, str] = {}
    if not text:
        return query
    fields = text.split("&")
    if len(fields) > MAX_QUERY_FIELDS:
        return f"its query has more than {MAX_QUERY_FIELDS} parameters"
    for field in fields:
        raw_key, equals, raw_value = field.partition("=")
        key, value = _unquote(raw_key), _unquote(raw_value)
        if not equals or not key or key is None or value is None:
            return "its query is not key=value pairs joined by &"
        if key in query:
            return f"query parameter {key[:40]!r} is given twice"
        query[key] = value
    return query


def _extra(query: dict[str, str], allowed: tuple[str, ...]) -> str | None:
    extra = sorted(set(query) - set(allowed))
    if not extra:
        return None
    takes = f"takes only {', '.join(allowed)}" if allowed else "takes no query"
    return f"query parameter {extra[0][:40]!r} is not served: this resource {takes}"


def _limit(text: str | None, cap: int) -> int | str:
    """The page size: 50 unless given, clamped (never refused) at `cap`."""
    if text is None:
        return min(DEFAULT_LIMIT, cap)
    if not text.isascii() or not text.isdigit() or int(text[:12]) < 1:
        return f"limit: {text[:40]!r} is not a whole number of at least 1"
    return min(int(text[:12]), cap)


# -- answers ---------------------------------------------------------------------------


def contents_result(uri: str, contents: Contents) -> dict[str, Json]:
    """A resources/read result before a revision adds its own fields."""
    text = orjson.dumps(contents.data, option=orjson.OPT_SORT_KEYS).decode()
    return {"contents": [{"uri": uri, "mimeType": MIME, "text": text}]}

