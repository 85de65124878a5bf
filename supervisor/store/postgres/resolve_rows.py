"""An operator's answer for an op in doubt, committed on the PostgreSQL
store (supervisor/recovery/resolve.py says how it is checked): the run's
next journal row, not fenced by an instance (an operator is none) but by
the journal itself, and its waiting record removed in the same transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from staal.records.record import Json
from staal.supervisor.store.errors import StoreError, StoreRefused
from staal.supervisor.store.postgres.connection import connect, reason, secrets_of
from staal.supervisor.store.postgres.note_rows import drop_waiting

# The answer's Resolved record, made of the run's journal rows.
Check = Callable[[list[dict[str, Json]]], dict[str, Json]]


def answer_in_store(dsn: str, run: str, check: Check) -> str:
    """Commit the answer `check` makes of the run's journal rows (its
    Resolved record, or its own refusal) as the run's next row, removing
    its waiting record; the run's owner. `StoreRefused` when the run takes
    no answer, or its journal moved on meanwhile (the line is taken)."""
    try:
        with connect(dsn) as conn, conn.transaction(), conn.cursor() as cur:
            return _answer(cur, run, check)
    except psycopg.errors.UniqueViolation:
        raise StoreRefused(f"run {run}: its journal changed while the answer was checked "
                           "(its instance is resuming it); look again and resolve then") from None
    except psycopg.Error as exc:
        raise StoreError(f"the PostgreSQL store failed: {reason(exc, secrets_of(dsn))}") from None


def _answer(cur: psycopg.Cursor[Any], run: str, check: Check) -> str:
    cur.execute("SELECT r.owner, e.run FROM staal_runs r LEFT JOIN staal_ends e USING (run) "
                "WHERE r.run = %s FOR SHARE OF r", (run,))
    found = cur.fetchone()
    if found is None:
        raise StoreRefused(f"run {run} is not in the shared store's ledger")
    if found[1] is not None:
        raise StoreRefused(f"run {run} has ended; nothing is in doubt")
    cur.execute("SELECT record FROM staal_journal WHERE run = %s ORDER BY line", (run,))
    rows = [row[0] for row in cur.fetchall()]
    if not rows:
        raise StoreRefused(f"run {run} has no journal: it never started")
    record = check(rows)
    cur.execute("INSERT INTO staal_journal (run, line, record) VALUES (%s, %s, %s)",
                (run, len(rows) + 1, Jsonb(record)))
    drop_waiting(cur, run)  # answered: if it stops again, at a later op, that is a new record
    return str(found[0])
