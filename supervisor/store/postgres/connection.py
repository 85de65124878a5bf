"""Connections to the PostgreSQL store, shared by everything that uses it
(the ledger, the journal rows, the notes, `resolve`, `status`): one place
says which settings every session runs with, what a store must promise
before staal trusts it, and how a database error is told without the DSN
or its password.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from staal.runtime.redaction import redact
from staal.supervisor.store.errors import StoreError

CONNECT_TIMEOUT_S = 10
# Connections one instance's ledger uses at once (docs/operators.md counts
# them in max_connections): its calls on different keys run side by side.
POOL_SIZE = 8
# Every session's settings: commits durable on return; a session idle inside
# a transaction (its process paused or wedged while it holds a key's lock)
# is ended by the server, so it cannot stop the calls on that key; no
# statement, lock waits included, runs for ever.
SESSION = {"synchronous_commit": "on", "idle_in_transaction_session_timeout": "10000",
           "statement_timeout": "120000"}


class ConnectionLost(StoreError):
    """The connection broke during a transaction: whether it committed is
    not known until the ledger is read again."""


def connect(dsn: str) -> psycopg.Connection[Any]:
    """A connection with `SESSION`'s settings whatever the DSN or the
    server's defaults say (given last, they win)."""
    hide = secrets_of(dsn)
    try:
        given = str(conninfo_to_dict(dsn).get("options") or "")
    except psycopg.Error:
        raise StoreError("the DSN server.store.postgres.dsn names is not a valid PostgreSQL "
                         "connection string") from None
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                               options=" ".join([given, *(f"-c {k}={v}" for k, v in
                                                          SESSION.items())]).strip())
    except psycopg.Error as exc:
        raise StoreError(f"could not connect to the PostgreSQL store: "
                         f"{reason(exc, hide)}") from None


def usable(conn: psycopg.Connection[Any] | None, dsn: str) -> psycopg.Connection[Any]:
    """`conn` if it can still be used, else a new connection (the old one closed)."""
    if conn is not None and not conn.closed and not conn.broken:
        return conn
    if conn is not None:
        conn.close()
    return connect(dsn)


def reason(exc: BaseException, hide: tuple[str, ...]) -> str:
    """One line for a database error, with the DSN and password cut out."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    text = " ".join((primary or str(exc) or type(exc).__name__).split())
    sqlstate = getattr(exc, "sqlstate", None)
    return redact(f"{text} (SQLSTATE {sqlstate})" if sqlstate else text, hide)


def secrets_of(dsn: str) -> tuple[str, ...]:
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        password = None
    return (dsn, password) if isinstance(password, str) and password else (dsn,)


def check_settings(cur: psycopg.Cursor[Any]) -> None:
    """The guarantees need a commit to be on disk: refuse a server that
    does not write it there."""
    cur.execute("SHOW fsync")
    if one_row(cur)[0] != "on":
        raise StoreError("the PostgreSQL server runs with fsync off: a committed event could "
                         "be lost in a crash, so staal does not use it (set fsync = on)")


def one_row(cur: psycopg.Cursor[Any]) -> TupleRow:
    """The row of a statement that always yields one (SHOW, RETURNING, a
    one-row table's SELECT). A store without it is damaged."""
    row: TupleRow | None = cur.fetchone()
    if row is None:
        raise StoreError("the PostgreSQL store returned no row where it always keeps one: "
                         "its schema is damaged")
    return row


class Pool:
    """An instance's connections to the store, up to POOL_SIZE in use at
    once, each by one thread at a time; one broken or closed is dropped."""

    def __init__(self, dsn: str, first: psycopg.Connection[Any], size: int = POOL_SIZE) -> None:
        self.dsn = dsn
        self._idle = [first]
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(size)

    @property
    def last(self) -> psycopg.Connection[Any] | None:
        """The connection used last (None: none kept)."""
        with self._lock:
            return self._idle[-1] if self._idle else None

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self._slots:
            conn = self._take()
            try:
                yield conn
            finally:
                if conn.closed or conn.broken:
                    conn.close()
                else:
                    with self._lock:
                        self._idle.append(conn)

    def _take(self) -> psycopg.Connection[Any]:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and not conn.broken:
                    return conn
                conn.close()
        return connect(self.dsn)

    def drain(self) -> list[psycopg.Connection[Any]]:
        """Every idle connection, the pool left empty (closing the ledger)."""
        with self._lock:
            conns, self._idle = self._idle, []
        return conns
