"""`db.sqlite.read` and `db.sqlite.write`: the database file at the grant's
`path` (DESIGN.md section 4; shared behaviour in `sql`).

A read grant opens the file read-only (`mode=ro`), so a write through it
fails in SQLite itself. A write grant opens it read-write but never creates
it: a mistyped path is an error, not a new empty database. Its `query` runs
with `PRAGMA query_only` on, since a query is a read that is sent again when
in doubt; its `execute` is a statement committed when it ends (autocommit),
and one that leaves a transaction open (BEGIN, SAVEPOINT) is rolled back and
fails. A grant reaches its one file: ATTACH and DETACH are refused.

Waiting for a lock another connection holds is bounded by LOCK_TIMEOUT_S
(seed 000 section 3), after which the action fails; a statement itself has
no time limit. SQLite runs in this process, so a statement's outcome is
known when it returns, except after an I/O error, when whether the change
was committed is not: that write is in doubt.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from staal.caps import SqliteRead, SqliteWrite
from staal.worker.capabilities.sql import SqlBound, collect_rows
from staal.worker.runs.actions import Performed
from staal.worker.runs.resend import InDoubt

# At most this long waiting for a locked database (seed 000 section 3).
LOCK_TIMEOUT_S = 5

_SQLITE_IOERR = 10


def _authorize(action: int, arg1: Any, arg2: Any, database: Any, source: Any) -> int:
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _reason(exc: BaseException) -> str:
    name = getattr(exc, "sqlite_errorname", None)
    text = str(exc) or type(exc).__name__
    if text == "not authorized":
        text = "not authorized (a grant reaches its one database: ATTACH and DETACH are refused)"
    return f"{text} ({name})" if name else text


class SqliteDatabase:
    """One grant's connection, opened on first use (inside the broker)."""

    def __init__(self, path: Path, writes: bool) -> None:
        self.path = path
        self.writes = writes
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            if not self.path.is_file():
                raise sqlite3.OperationalError("there is no database file there (a grant "
                                               "never creates one)")
            uri = self.path.as_uri() + ("?mode=rw" if self.writes else "?mode=ro")
            conn = sqlite3.connect(uri, uri=True, timeout=LOCK_TIMEOUT_S, isolation_level=None)
            conn.set_authorizer(_authorize)
            self._conn = conn
        return self._conn

    def _open_transaction_refused(self, conn: sqlite3.Connection, action: str) -> Performed | None:
        if not conn.in_transaction:
            return None
        conn.rollback()
        return Performed(failure=f"{action} runs one statement that ends with it; a statement "
                         "that leaves a transaction open (BEGIN, SAVEPOINT) is rolled back")

    def query(self, sql: str, params: Any) -> Performed:
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            return Performed(failure=f"could not open {self.path}: {_reason(exc)}")
        try:
            if self.writes:
                conn.execute("PRAGMA query_only = ON")
            cursor = conn.cursor()
            try:
                cursor.execute(sql, params)
                columns = [d[0] for d in cursor.description or ()]
                done = collect_rows(columns, cursor, "db.sqlite")
            finally:
                cursor.close()
                if self.writes:
                    conn.execute("PRAGMA query_only = OFF")
        except (sqlite3.Error, sqlite3.Warning) as exc:
            if conn.in_transaction:
                conn.rollback()
            hint = ""
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_READONLY":
                hint = ("; query() only reads, even through a write grant: execute() writes"
                        if self.writes else "; a db.sqlite.read grant opens the database read-only")
            return Performed(failure=f"the query failed: {_reason(exc)}{hint}")
        return self._open_transaction_refused(conn, "query") or done

    def execute(self, sql: str, params: Any) -> Performed:
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            return Performed(failure=f"could not open {self.path}: {_reason(exc)}")
        cursor = conn.cursor()
        try:
            cursor.execute(sql, params)
            for _ in cursor:  # step to the end (RETURNING rows are not kept)
                pass
            changed = max(cursor.rowcount, 0)
        except (sqlite3.Error, sqlite3.Warning) as exc:
            if (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF == _SQLITE_IOERR:
                raise InDoubt(f"an I/O error while writing {self.path}: {_reason(exc)}") from exc
            if conn.in_transaction:
                conn.rollback()
            return Performed(failure=f"the statement failed: {_reason(exc)}")
        finally:
            cursor.close()
        return self._open_transaction_refused(conn, "execute") or Performed(result=changed)

    def between_runs(self) -> None:
        # Never kept (SqlBound.KEPT): a file opened in this process costs
        # next to nothing to open again, and a closed one holds no session.
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class SqliteReadCapability(SqlBound, SqliteRead):
    WRITES = False

    def _open(self) -> SqliteDatabase:
        path = self._state.grant.path
        if path is None:  # the manifest requires it of an sqlite grant
            self._ctx.refuse(f"'{self._state.cap}' names no database path")
        return SqliteDatabase(Path(path), writes=self.WRITES)


class SqliteWriteCapability(SqliteReadCapability, SqliteWrite):
    WRITES = True

    def execute(self, sql: str, params: Any = ()) -> int:
        return self._execute(sql, params)
