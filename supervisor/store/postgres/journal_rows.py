"""Run journals as rows of the PostgreSQL store (issue 15): the one writer
and the one reader of `staal_journal` and of `staal_inputs` (kept
arguments, removed at the run's end in the statement that writes its log:
supervisor/store/postgres/note_rows.py), and the takeover of a dead instance's runs; the
schema is `pg_schema.py`'s.

A record is durable when its row is committed (synchronous_commit on, as
every session of the store): that commit is "durable before anything
depends on it", and the supervisor acknowledges the worker only after it.
Every append is fenced: its transaction first locks the run's row, and the
row of the instance that owns it, on the condition that this instance owns
the run and still holds its instance's fencing token. An instance whose run
was taken over, or that was replaced by a restart, finds no such row and
writes nothing (`Fenced`); the lock keeps a takeover from changing the
owner between the check and the insert.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from staal.journal.reader import JournalState, journal_of
from staal.journal.records import JOURNAL
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.postgres.connection import ConnectionLost, reason, secrets_of, usable
from staal.supervisor.store.postgres.ledger import Fenced
from staal.supervisor.store.postgres.schema import lock_key

T = TypeVar("T")

_OWNED = ("SELECT 1 FROM staal_runs r JOIN staal_instances i ON i.instance = r.owner "
          "WHERE r.run = %s AND r.owner = %s AND i.fence = %s "
          "FOR SHARE OF r FOR KEY SHARE OF i")

# The run's next line, only while this instance owns the run under its token
# (`_OWNED`'s locks, held to the commit): no row if it does not.
_APPEND = (
    "WITH owned AS (SELECT r.run FROM staal_runs r JOIN staal_instances i "
    "ON i.instance = r.owner WHERE r.run = %(run)s AND r.owner = %(me)s AND i.fence = %(fence)s "
    "FOR SHARE OF r FOR KEY SHARE OF i) INSERT INTO staal_journal (run, line, record) "
    "SELECT run, coalesce((SELECT max(line) FROM staal_journal WHERE run = %(run)s), 0) + 1, "
    "%(record)s FROM owned RETURNING line")


class JournalRows:
    """The journals of the runs this instance owns, on its own connection
    (a record's commit never waits behind a ledger decision of this
    instance), used by one thread at a time."""

    def __init__(self, dsn: str, instance: str, fence: int) -> None:
        self._dsn = dsn
        self._hide = secrets_of(dsn)
        self.instance = instance
        self.fence = fence
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def append(self, run: str, record: dict[str, Any]) -> int:
        """Commit `record` (the journal family's encoding, checked by
        decoding it) as the run's next line; its line number. `Fenced` if
        the run is not this instance's under its current token, nothing
        written; `StoreError` if the store failed."""
        JOURNAL.decode(record)  # a record the reader would refuse is not written

        lost: list[bool] = []

        def alone(cur: psycopg.Cursor[Any], again: bool) -> int | None:
            if again:  # the statement's answer was lost: look, as below
                lost.append(again)
                return None
            cur.execute(_APPEND, {"run": run, "me": self.instance, "fence": self.fence,
                                  "record": Jsonb(record)})
            row = cur.fetchone()
            return None if row is None else int(row[0])

        def attempt(cur: psycopg.Cursor[Any], again: bool) -> int:
            again = again or bool(lost)
            self.check_owned(cur, run, "journal")
            cur.execute("SELECT line, record FROM staal_journal WHERE run = %s "
                        "ORDER BY line DESC LIMIT 1", (run,))
            last = cur.fetchone()
            if again and last is not None and last[1] == record:
                return int(last[0])  # the first try committed; its answer was lost
            line = 1 if last is None else int(last[0]) + 1
            cur.execute("INSERT INTO staal_journal (run, line, record) VALUES (%s, %s, %s)",
                        (run, line, Jsonb(record)))
            return line

        # The common case is one statement; when it wrote nothing (not this
        # instance's run) or its answer was lost, a transaction says why.
        line = self.run(alone, alone=True)
        return line if line is not None else self.run(attempt)

    def keep_inputs(self, run: str, arguments: dict[str, Any]) -> None:
        """Keep the run's arguments (fenced as an append), for a resume on
        any instance; kept as first written."""
        def attempt(cur: psycopg.Cursor[Any], again: bool) -> None:
            self.check_owned(cur, run, "keep the arguments of")
            cur.execute("INSERT INTO staal_inputs (run, arguments) VALUES (%s, %s) "
                        "ON CONFLICT (run) DO NOTHING", (run, Jsonb(arguments)))

        self.run(attempt)

    def inputs(self, run: str) -> dict[str, Any] | None:
        """The run's kept arguments (None: none are kept)."""
        def query(cur: psycopg.Cursor[Any], again: bool) -> dict[str, Any] | None:
            cur.execute("SELECT arguments FROM staal_inputs WHERE run = %s", (run,))
            row = cur.fetchone()
            return None if row is None else row[0]

        return self.run(query)

    def take_over(self, now_ms: int, held: Collection[str] = ()) -> list[tuple[str, str, str]]:
        """Take over, in one transaction under this instance's current token,
        the unfinished runs of every other instance whose lease expired
        before `now_ms`: each becomes this instance's, so the dead one's
        appends and ends are refused from here on. Only an instance whose
        own lease is live takes over, one at a time (an advisory lock).

        Never one of `held`: a run this process still runs (its call, or its
        recovery), taken from it while it was paused. Taking it back would
        let that call append behind the records its taker wrote, as if they
        were its own, and perform an op in doubt again (the lease model's
        finding, docs/lease-model.md); left to its taker, the call's next
        append or end is fenced, and a later takeover takes the run once
        the call let it go, its op in doubt planned as at start.
        The runs taken, as (run, tool, from whom)."""
        def attempt(cur: psycopg.Cursor[Any], again: bool) -> list[tuple[str, str, str]]:
            cur.execute(f"SELECT pg_advisory_xact_lock({lock_key('takeover')})")
            cur.execute("SELECT 1 FROM staal_instances WHERE instance = %s AND fence = %s "
                        "AND lease_until_ms >= %s FOR SHARE", (self.instance, self.fence, now_ms))
            if cur.fetchone() is None:
                return []  # not live itself: it takes nothing
            cur.execute(
                "WITH dead AS (SELECT instance FROM staal_instances WHERE instance <> %(me)s "
                "AND lease_until_ms IS NOT NULL AND lease_until_ms < %(now)s FOR UPDATE) "
                "UPDATE staal_runs r SET owner = %(me)s, fence = %(fence)s FROM dead "
                "WHERE r.owner = dead.instance AND NOT EXISTS "
                "(SELECT 1 FROM staal_ends e WHERE e.run = r.run) "
                "AND NOT (r.run = ANY(%(held)s)) "
                "RETURNING r.run, r.tool, dead.instance",
                {"me": self.instance, "now": now_ms, "fence": self.fence, "held": list(held)})
            return [(str(run), str(tool), str(dead)) for run, tool, dead in cur.fetchall()]

        return self.run(attempt)

    def check_owned(self, cur: psycopg.Cursor[Any], run: str, what: str) -> None:
        """In the caller's transaction: the run is this instance's under its
        current token, and stays so until the commit; else `Fenced`."""
        cur.execute(_OWNED, (run, self.instance, self.fence))
        if cur.fetchone() is None:
            raise Fenced(f"run {run} is not this instance's to {what} (instance "
                         f"{self.instance}, fencing token {self.fence}): another instance "
                         "took it over, or this one restarted")

    def records(self, run: str) -> list[dict[str, Any]]:
        """The run's journal rows in line order (any instance's run)."""
        def query(cur: psycopg.Cursor[Any], again: bool) -> list[dict[str, Any]]:
            cur.execute("SELECT record FROM staal_journal WHERE run = %s ORDER BY line", (run,))
            return [row[0] for row in cur.fetchall()]

        return self.run(query)

    def read(self, run: str) -> JournalState | None:
        """The run's journal as a story (None: it has no rows, so its run
        never started); `LogDamaged` names the row that does not fit."""
        rows = self.records(run)
        if not rows:
            return None
        return journal_of([JOURNAL.decode(row) for row in rows], f"staal_journal run {run}")

    def run(self, attempt: Callable[[psycopg.Cursor[Any], bool], T], alone: bool = False) -> T:
        """`attempt` in one transaction on this connection, tried again once
        (told so) if the connection was lost. `alone`: it is one statement,
        a transaction by itself (one round trip, no BEGIN and COMMIT)."""
        with self._lock:
            try:
                return self._once(attempt, False, alone)
            except ConnectionLost:
                return self._once(attempt, True, alone)

    def _once(self, attempt: Callable[[psycopg.Cursor[Any], bool], T], again: bool,
              alone: bool) -> T:
        try:
            conn = self._connection()
            if alone:
                with conn.cursor() as cur:
                    return attempt(cur, again)
            with conn.transaction(), conn.cursor() as cur:
                return attempt(cur, again)
        except psycopg.Error as exc:
            lost = self._conn is None or self._conn.broken or self._conn.closed
            raise (ConnectionLost if lost else StoreError)(
                f"the PostgreSQL store failed to write a journal record: "
                f"{reason(exc, self._hide)}") from None

    def _connection(self) -> psycopg.Connection[Any]:
        self._conn = usable(self._conn, self._dsn)
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
