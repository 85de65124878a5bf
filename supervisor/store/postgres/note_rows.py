"""Waiting records, run logs and tasks' cancels as rows of the PostgreSQL
store (issue 15, schema versions 3 and 7): the one writer and the one reader
of `staal_waiting`, `staal_logs` and `staal_cancels`, on the journal rows'
connection (supervisor/store/postgres/journal_rows.py).

A waiting record is written fenced, like a journal append: only the run's
owner under its current token writes it, and a run has one, kept as first
written (its primary key; a second insert does nothing), so an instance
that takes a waiting run over and sees it stop again keeps the first
instance's record and notifies no one again. A run's end is one statement,
a transaction by itself: its log lines written, its waiting record and its
kept arguments gone, in the one round trip the arguments' removal took
alone before. A cancel is not fenced: any instance a client asks records
it, and the run's owner reads it (it only ever reduces what the run does).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from staal.records.waiting import WaitingRecord
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.postgres.connection import connect, reason, secrets_of
from staal.supervisor.store.postgres.journal_rows import JournalRows

# The log lines go after the run's last (a run stopped, resumed and ended
# writes twice); a retry after a lost answer finds its last line there.
_LOG = ("INSERT INTO staal_logs (run, line, entry) "
        "SELECT %(run)s, (SELECT coalesce(max(line), 0) FROM staal_logs WHERE run = %(run)s) "
        "+ n, entry FROM jsonb_array_elements(%(entries)s) WITH ORDINALITY AS t(entry, n) "
        "WHERE NOT (%(again)s AND EXISTS (SELECT 1 FROM staal_logs WHERE run = %(run)s "
        "AND entry = %(last)s))")
_END = ("WITH inputs AS (DELETE FROM staal_inputs WHERE run = %(run)s), "
        "waiting AS (DELETE FROM staal_waiting WHERE run = %(run)s) " + _LOG)


class NoteRows:
    """The waiting records and logs of runs, on `rows`' connection."""

    def __init__(self, rows: JournalRows) -> None:
        self.rows = rows

    @property
    def instance(self) -> str:
        return self.rows.instance

    def wait(self, run: str, record: WaitingRecord) -> bool:
        """Keep the run's waiting record, fenced; False if it has one already
        (kept as first written). `Fenced` if the run is not this instance's."""
        def attempt(cur: psycopg.Cursor[Any], again: bool) -> bool:
            self.rows.check_owned(cur, run, "write the waiting record of")
            cur.execute("INSERT INTO staal_waiting (run, instance, record) VALUES (%s, %s, %s) "
                        "ON CONFLICT (run) DO NOTHING", (run, self.instance, Jsonb(record.to_json())))
            if cur.rowcount == 1:
                return True
            # A retry whose first try committed wrote this very record.
            return again and _record_of(cur, run) == record

        return self.rows.run(attempt)

    def waiting(self, run: str) -> WaitingRecord | None:
        """The run's waiting record (None: it waits for no one)."""
        return self.rows.run(lambda cur, again: _record_of(cur, run), alone=True)

    def all_waiting(self) -> dict[str, WaitingRecord]:
        """Every run's waiting record, whichever instance wrote it."""
        return self.rows.run(lambda cur, again: _all_of(cur), alone=True)

    def unwait(self, run: str) -> None:
        """The run waits no more (it was settled)."""
        self.rows.run(lambda cur, again: drop_waiting(cur, run), alone=True)

    def log(self, run: str, entries: list[dict[str, Any]]) -> None:
        """Append lines to the run's log."""
        self.rows.run(lambda cur, again: _write(cur, _LOG, run, entries, again), alone=True)

    def end(self, run: str, entries: list[dict[str, Any]]) -> None:
        """The run ended: its last log lines written, its waiting record and
        kept arguments removed, in one statement."""
        self.rows.run(lambda cur, again: _write(cur, _END, run, entries, again), alone=True)

    def cancel(self, run: str, time_ms: int) -> None:
        """Record that the run's task was cancelled (kept as first written)."""
        self.rows.run(lambda cur, again: cur.execute(
            "INSERT INTO staal_cancels (run, cancelled_ms) VALUES (%s, %s) "
            "ON CONFLICT (run) DO NOTHING", (run, time_ms)), alone=True)

    def cancelled(self, runs: list[str]) -> frozenset[str]:
        """Those of `runs` whose tasks were cancelled."""
        def query(cur: psycopg.Cursor[Any], again: bool) -> frozenset[str]:
            cur.execute("SELECT run FROM staal_cancels WHERE run = ANY(%s)", (runs,))
            return frozenset(str(row[0]) for row in cur.fetchall())

        return self.rows.run(query, alone=True) if runs else frozenset()

    def logged(self, run: str) -> list[dict[str, Any]]:
        """The run's log lines in order."""
        def query(cur: psycopg.Cursor[Any], again: bool) -> list[dict[str, Any]]:
            cur.execute("SELECT entry FROM staal_logs WHERE run = %s ORDER BY line", (run,))
            return [row[0] for row in cur.fetchall()]

        return self.rows.run(query, alone=True)


def _write(cur: psycopg.Cursor[Any], sql: str, run: str, entries: list[dict[str, Any]],
           again: bool) -> None:
    cur.execute(sql, {"run": run, "entries": Jsonb(entries), "again": again,
                      "last": Jsonb(entries[-1] if entries else None)})


def drop_waiting(cur: psycopg.Cursor[Any], run: str) -> None:
    """In the caller's transaction: the run waits no more (settled, or an
    operator answered it: `staal-supervisor resolve`)."""
    cur.execute("DELETE FROM staal_waiting WHERE run = %s", (run,))


def waiting_in(cur: psycopg.Cursor[Any], run: str) -> WaitingRecord | None:
    """In the caller's transaction: the run's waiting record (an operator's
    forget, which refuses a waiting run)."""
    return _record_of(cur, run)


def log_in(cur: psycopg.Cursor[Any], run: str, entries: list[dict[str, Any]]) -> None:
    """In the caller's transaction: lines appended to the run's log."""
    _write(cur, _LOG, run, entries, False)


def _record_of(cur: psycopg.Cursor[Any], run: str) -> WaitingRecord | None:
    cur.execute("SELECT record FROM staal_waiting WHERE run = %s", (run,))
    row = cur.fetchone()
    return None if row is None else WaitingRecord.from_json(row[0])


def _all_of(cur: psycopg.Cursor[Any]) -> dict[str, WaitingRecord]:
    cur.execute("SELECT run, record FROM staal_waiting")
    return {str(run): WaitingRecord.from_json(record) for run, record in cur.fetchall()}


def read_all_waiting(dsn: str) -> dict[str, WaitingRecord]:
    """Every waiting record in the store, read on a connection of its own
    (status and the console, beside the servers)."""
    try:
        with connect(dsn) as conn, conn.cursor() as cur:
            return _all_of(cur)
    except psycopg.Error as exc:
        raise StoreError(f"the PostgreSQL store failed to read the waiting records: "
                         f"{reason(exc, secrets_of(dsn))}") from None
