"""`db.postgres.read` and `db.postgres.write` over psycopg 3 (DESIGN.md
section 4; shared behaviour in `sql`).

The DSN is the secret the grant names (`dsn: {"env": NAME}`), read before
anything is journaled, so a missing one is refused with nothing done; its
value never appears in a message (a DSN may hold a password).

Every wait is bounded (seed 000 section 3): connecting by
`net.connect_timeout_ms` (libpq counts whole seconds, at least 2), each
statement by `net.timeout_ms` as the connection's `statement_timeout`, and a
peer that goes silent by TCP keepalives. The connection is in autocommit
mode. `query` runs its one statement in a read-only transaction that is
then rolled back, on read and write grants alike (a query is a read, sent
again when in doubt); a read grant's connection also makes every
transaction read-only by default. `execute` runs one statement that commits
when it ends. A statement the server refused failed for certain; one whose
connection was lost while it ran may have committed: that write is in
doubt and the run stops for an operator.

A worker that serves many runs keeps the connection across them
(services.Kept, `KEPT`). Between runs, `between_runs` rolls back a
transaction left open and runs `DISCARD ALL`, which drops what a run left in
the session (SET values, temporary tables, advisory locks, LISTEN, prepared
statements) and resets settings to the session's defaults: those of the
startup options, so `statement_timeout` and a read grant's read-only default
stay. A connection that cannot be reset is closed, and one that the server
closed while it sat idle is found before its next use (it has something to
read: the server's farewell, or an error): either way the next run opens a
new one, and no statement is sent on a connection known to be gone.
"""

from __future__ import annotations

import math
import select
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from staal.caps import PostgresRead, PostgresWrite
from staal.manifest.model import NetConfig
from staal.records.runconfig import SCRIPT_NET
from staal.runtime.redaction import redact
from staal.worker.capabilities.sql import SqlBound, collect_rows
from staal.worker.errors import WorkerError
from staal.worker.runs.actions import Performed
from staal.worker.runs.refusal import broker_section
from staal.worker.runs.resend import InDoubt

# Rows fetched per round trip while streaming a query (libpq 17 and later;
# older ones fetch row by row).
_CHUNK = 256 if pq.version() >= 170000 else 1


class Unusable(WorkerError):
    """The DSN cannot be used; the message never holds its value."""

    kind = "dsn_unusable"


def _flat(text: str) -> str:
    return " ".join(text.split())


class PostgresDatabase:
    """One grant's connection, opened on first use (inside the broker)."""

    def __init__(self, dsn: str, env: str, net: NetConfig, writes: bool) -> None:
        self._dsn = dsn
        self.env = env
        self.net = net
        self.writes = writes
        self._conn: psycopg.Connection | None = None
        self._hide: tuple[str, ...] = (dsn,)
        # Whether the connection was used since it was last reset (or opened).
        self._used = False

    # -- messages ------------------------------------------------------

    def _reason(self, exc: BaseException) -> str:
        diag = getattr(exc, "diag", None)
        primary = getattr(diag, "message_primary", None) if diag is not None else None
        text = _flat(primary or str(exc) or type(exc).__name__)
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate:
            text = f"{text} (SQLSTATE {sqlstate})"
        return redact(text, self._hide)

    # -- the connection --------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken and (
                self._used or not _gone_while_idle(conn)):
            self._used = True
            return conn
        if conn is not None:
            conn.close()
            self._conn = None
        try:
            params = conninfo_to_dict(self._dsn)
        except Exception:  # noqa: BLE001 - its message may quote the DSN
            raise Unusable(f"the DSN in ${self.env} is not a valid PostgreSQL connection "
                           "string") from None
        password = params.get("password")
        if isinstance(password, str) and len(password) >= 4:
            self._hide = (self._dsn, password)
        options = [str(params.get("options") or ""), f"-c statement_timeout={self.net.timeout_ms}"]
        if not self.writes:
            options.append("-c default_transaction_read_only=on")
        seconds = max(1, math.ceil(self.net.connect_timeout_ms / 1000))
        try:
            conn = psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=seconds,
                options=" ".join(o for o in options if o),
                keepalives=1, keepalives_idle=seconds, keepalives_interval=seconds,
                keepalives_count=3,
            )
        except psycopg.Error as exc:
            raise Unusable(f"could not connect to PostgreSQL (the DSN in ${self.env}): "
                           f"{self._reason(exc)}") from None
        self._conn = conn
        self._used = True
        return conn

    def between_runs(self) -> None:
        """Leave nothing of this run's session to the next run: roll back a
        transaction left open (a run cut off mid-statement) and, if the
        connection was used, `DISCARD ALL`. Closed when that fails or the
        connection is not usable: the next use opens a new one."""
        conn, used, self._used = self._conn, self._used, False
        if conn is None:
            return
        # Inside the broker, as every use of the connection is: closing and
        # resetting are the broker's own work.
        with broker_section():
            if conn.closed or conn.broken:
                self.close()
                return
            try:
                status = conn.info.transaction_status
                if status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
                    conn.rollback()
                elif status != pq.TransactionStatus.IDLE:  # a statement still running, or unknown
                    self.close()
                    return
                if used:
                    conn.execute("DISCARD ALL", prepare=False)  # autocommit: outside a transaction
            except psycopg.Error:
                self.close()

    # -- the actions -----------------------------------------------------

    def query(self, sql: str, params: Any) -> Performed:
        try:
            conn = self._connect()
        except Unusable as exc:
            return Performed(failure=str(exc))
        try:
            conn.execute("BEGIN READ ONLY", prepare=False)
            try:
                with conn.cursor() as cursor:
                    rows = cursor.stream(sql, params or None, size=_CHUNK)
                    try:
                        done = self._collect(cursor, rows)
                    finally:
                        # psycopg types stream() an Iterator; it is a generator.
                        rows.close()  # type: ignore[attr-defined]  # cancels a query left unread
            finally:
                if not conn.broken and not conn.closed:
                    conn.rollback()
        except psycopg.Error as exc:
            if "didn't produce a result" in str(exc):
                return Performed(failure="query() runs a statement that returns rows; this one "
                                 "returns none")
            hint = ""
            if getattr(exc, "sqlstate", None) == "25006":  # read_only_sql_transaction
                hint = ("; query() only reads, even through a write grant: execute() writes"
                        if self.writes else "; a db.postgres.read grant runs read-only transactions")
            return Performed(failure=f"the query failed: {self._reason(exc)}{hint}")
        return done

    @staticmethod
    def _collect(cursor: psycopg.Cursor, rows: Any) -> Performed:
        first = next(rows, None)
        if first is None:
            return Performed(result=[])
        columns = [c.name for c in cursor.description or ()]

        def all_rows() -> Any:
            yield first
            yield from rows

        return collect_rows(columns, all_rows(), "db.postgres")

    def execute(self, sql: str, params: Any) -> Performed:
        try:
            conn = self._connect()
        except Unusable as exc:
            return Performed(failure=str(exc))
        try:
            with conn.cursor() as cursor:
                # The extended protocol (binary=True forces it; the rows a
                # RETURNING gives are never loaded): one statement, never
                # several in one string. Unnamed, so poolers need no support
                # for prepared statements.
                cursor.execute(sql, params or None, prepare=False, binary=True)
                changed = max(cursor.rowcount, 0)
        except psycopg.Error as exc:
            if conn.broken or conn.closed or (
                    isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None):
                raise InDoubt("the connection to PostgreSQL was lost while the statement "
                              f"ran: {self._reason(exc)}") from None
            hint = ""
            if "multiple commands" in str(exc):
                hint = "; execute() runs one statement at a time"
            return Performed(failure=f"the statement failed: {self._reason(exc)}{hint}")
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            conn.rollback()
            return Performed(failure="execute runs one statement that commits when it ends; a "
                             "statement that leaves a transaction open (BEGIN) is rolled back")
        return Performed(result=changed)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _gone_while_idle(conn: psycopg.Connection) -> bool:
    """Whether an idle connection has something to read. The server sends
    nothing unasked to an idle session (DISCARD ALL ended any LISTEN) but its
    farewell when it ends one (an administrator's pg_terminate_backend, a
    restart, idle_session_timeout), and a socket whose peer is gone or whose
    keepalives failed reads as ready too. One poll, no round trip (poll, not
    select: a worker's descriptor may be past select's limit of 1024)."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class PostgresReadCapability(SqlBound, PostgresRead):
    WRITES = False
    KEPT = True

    def _ready(self) -> None:
        self._dsn = self._secret(self._secret_env(self._state.grant.dsn, "dsn"))

    def _identity(self) -> str:
        return self._dsn

    def _open(self) -> PostgresDatabase:
        config = self._services.config
        net = config.net if config is not None else SCRIPT_NET
        env = self._secret_env(self._state.grant.dsn, "dsn")
        return PostgresDatabase(self._dsn, env, net, writes=self.WRITES)


class PostgresWriteCapability(PostgresReadCapability, PostgresWrite):
    WRITES = True

    def execute(self, sql: str, params: Any = ()) -> int:
        return self._execute(sql, params)
