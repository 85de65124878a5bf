"""What the SQLite and PostgreSQL capabilities share (DESIGN.md section 4).

`query(sql, params)` is one journaled read: it returns the rows as a list
of dicts, column name to JSON value, and is sent again if found in doubt on
resume, so it runs where it cannot write (a read-only transaction, or
SQLite's `query_only`), even through a write grant. `execute(sql, params)`
is one journaled write (write grants only): it returns how many rows the
statement changed, commits when it ends, and is never sent again if its
outcome was lost: the run stops and waits for an operator.

One statement per call. `params` is a list or tuple (positional) or a dict
(named) of JSON scalars, in the driver's own placeholder style (SQLite `?`
and `:name`, PostgreSQL `%s` and `%(name)s`).

A row's keys are in sorted order, the order a row replayed from the journal
has, so a program sees the same row live and on resume. Values: numbers,
strings, booleans and null as they are; a decimal as its string; a date, time
or datetime as ISO 8601; bytes as hex; a UUID as its string; a PostgreSQL
array or json value as the JSON it holds. Anything else is refused, naming
the column: convert it in SQL (for example `CAST(x AS text)`).
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import hashlib
import math
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import orjson

from staal.records.record import Json
from staal.worker.capabilities import Bound
from staal.worker.errors import WorkerError
from staal.worker.runs.actions import ActionSpec, Performed

if TYPE_CHECKING:
    from staal.worker.capabilities.services import Database, DatabaseKey, Services

MAX_ROWS = 10_000
MAX_RESULT_BYTES = 8 * 1024 * 1024
_INT_RANGE = (-(2**63), 2**63 - 1)


class NotJson(WorkerError):
    """A value a row holds that has no JSON form here."""

    kind = "not_json"


# -- params --------------------------------------------------------------------


def checked_params(refuse: Callable[[str], None], params: Any) -> list[Any] | dict[str, Any]:
    """The params as JSON (a list or a dict of scalars), or a refusal."""
    if isinstance(params, (list, tuple)):
        for i, value in enumerate(params):
            _check_scalar(refuse, value, f"params[{i}]")
        return list(params)
    if isinstance(params, dict):
        for name, value in params.items():
            if not isinstance(name, str):
                refuse(f"params: a named parameter's name is a string, not {name!r}")
            _check_scalar(refuse, value, f"params[{name!r}]")
        return dict(params)
    refuse("params are a list or tuple (positional) or a dict (named) of JSON scalars, "
           f"not {type(params).__name__}")
    raise AssertionError("refuse() raises")


def _check_scalar(refuse: Callable[[str], None], value: Any, where: str) -> None:
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            refuse(f"{where}: {value} is outside 64-bit integers")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            refuse(f"{where}: {value} has no JSON form")
        return
    refuse(f"{where}: a parameter is a JSON scalar (string, number, boolean or None), "
           f"not {type(value).__name__}")


def checked_sql(refuse: Callable[[str], NoReturn], sql: Any) -> str:
    if not isinstance(sql, str) or not sql.strip():
        refuse(f"sql is a statement as a non-empty string, not {sql!r:.60}")
    return sql


# -- rows ------------------------------------------------------------------------


def json_value(value: Any) -> Any:
    """A column's value as JSON; NotJson if it has none."""
    if value is None or isinstance(value, (bool, str, int)):
        if isinstance(value, int) and not isinstance(value, bool) and not (
                _INT_RANGE[0] <= value <= 2**64 - 1):
            raise NotJson(f"the integer {value} is too large for JSON here")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson(f"the number {value} has no JSON form")
        return value
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: json_value(v) for k, v in value.items()}
    raise NotJson(f"a {type(value).__name__} value, which has no JSON form here")


def collect_rows(columns: Sequence[str], rows: Iterable[Sequence[Any]], what: str) -> Performed:
    """At most MAX_ROWS rows of at most MAX_RESULT_BYTES, as sorted dicts."""
    seen = set()
    for name in columns:
        if name in seen:
            return Performed(failure=f"the query returns more than one column named {name!r}; "
                             "give each column its own name (AS ...)")
        seen.add(name)
    order = sorted(range(len(columns)), key=lambda i: columns[i])
    out: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        if len(out) == MAX_ROWS:
            return Performed(failure=f"the query returned more than {MAX_ROWS} rows; a {what} "
                             f"query returns at most {MAX_ROWS} (add a LIMIT)")
        item = {}
        for i in order:
            try:
                item[columns[i]] = json_value(row[i])
            except NotJson as exc:
                return Performed(failure=f"column {columns[i]!r} holds {exc}; convert it in "
                                 "the query (for example CAST(... AS text))")
        size += len(orjson.dumps(item))
        if size > MAX_RESULT_BYTES:
            return Performed(failure=f"the query's rows come to more than {MAX_RESULT_BYTES} "
                             f"bytes of JSON; a {what} query returns at most that")
        out.append(item)
    return Performed(result=out)


# -- an operator's --result ----------------------------------------------------------


def check_sql_result(action: str, result: Json) -> None:
    if action == "query":
        if not (isinstance(result, list) and all(
                isinstance(row, dict) and all(isinstance(k, str) for k in row) for row in result)):
            raise ValueError('a query\'s result is its rows: a list of objects, '
                             'e.g. [{"id": 1, "name": "x"}]')
    elif action == "execute":
        if isinstance(result, bool) or not isinstance(result, int) or result < 0:
            raise ValueError("an execute's result is the number of rows it changed: "
                             "an integer, 0 or more")
    else:
        raise ValueError(f"no action {action!r} here")


# -- one connection per grant: per run, or kept across a worker's runs ----------------


def connections(services: Services, kept: bool = False) -> dict[DatabaseKey, Database]:
    """The open database connections, by key (services.DatabaseKey). A
    capability whose connections may be `kept`, in a worker that keeps them
    (`services.kept`), gets the worker's: they outlive the run and the worker
    resets and closes them. Otherwise the run's own: closed when the run's
    services go away or the process exits."""
    if kept and services.kept is not None:
        return services.kept.databases
    pool = services.databases
    if pool is None:
        pool = services.databases = {}
        weakref.finalize(services, close_all, pool)
    return pool


def close_all(pool: dict[DatabaseKey, Database]) -> None:
    for database in pool.values():
        with contextlib.suppress(Exception):  # closing is best effort at the end
            database.close()
    pool.clear()


# -- the capability ----------------------------------------------------------------


class SqlBound(Bound):
    """`query` for every grant, `_execute` for the write ones. A subclass
    gives `_open()`: the database (opened lazily, inside the broker) whose
    `query(sql, params)` and `execute(sql, params)` return `Performed`."""

    WHAT = ""
    # Whether a worker that serves many runs keeps this capability's
    # connections across them (services.Kept); a kept database must leave
    # nothing of one run's session to the next (its between_runs).
    KEPT = False

    @staticmethod
    def check_result(action: str, result: Json) -> None:
        check_sql_result(action, result)

    def _database(self) -> Database:
        root = self._state.chain()[-1]
        pool = connections(self._services, self.KEPT)
        key = (root.param, root.cap, hashlib.sha256(self._identity().encode()).hexdigest())
        database = pool.get(key)
        if database is None:
            # The grant's secret changed since its connection was opened:
            # that connection is never used again.
            for old in [k for k in pool if k[:2] == key[:2]]:
                with contextlib.suppress(Exception):
                    pool.pop(old).close()
            database = pool[key] = self._open()
        return database

    def _identity(self) -> str:
        """The secret value the database is opened with (a DSN), known once
        `_ready()` ran; "" when there is none."""
        return ""

    def _open(self) -> Database:
        raise NotImplementedError

    def _ready(self) -> None:
        """What must hold before anything is journaled (e.g. a secret)."""

    def _act(self, action: Literal["query", "execute"], sql: Any, params: Any) -> Any:
        sql = checked_sql(self._ctx.refuse, sql)
        params = checked_params(self._ctx.refuse, params)
        self._ready()
        spec = ActionSpec(self._state.cap, action, {"sql": sql, "params": params},
                          resend="always" if action == "query" else "never")

        def perform(key: str | None) -> Performed:
            database = self._database()
            if action == "query":
                return database.query(sql, params)
            return database.execute(sql, params)

        return self._ctx.act(self._state, spec, perform)

    def query(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._act("query", sql, params)  # collect_rows made them
        return rows

    def _execute(self, sql: str, params: Any = ()) -> int:
        changed: int = self._act("execute", sql, params)  # a row count, or --result's checked one
        return changed
