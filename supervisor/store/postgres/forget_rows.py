"""`staal-supervisor forget` on the PostgreSQL store (supervisor/recovery/forget.py
says what forgetting is): the `forget` event committed from any machine
with the DSN, while instances serve, in one transaction holding the
run's row and its once key, as a reserve with that key does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from staal.records.ledger_records import Forget
from staal.records.record import Json
from staal.records.waiting import WaitingRecord
from staal.runtime.clock import SYSTEM_CLOCK, Clock
from staal.supervisor.store.entries import RunEntry
from staal.supervisor.store.errors import StoreError, StoreRefused
from staal.supervisor.store.ledger import Stamper, checked_encoding, warn_on_stderr
from staal.supervisor.store.postgres.connection import connect, one_row, reason, secrets_of
from staal.supervisor.store.postgres.decisions import LATEST, lock_keys
from staal.supervisor.store.postgres.events import apply_stored
from staal.supervisor.store.postgres.note_rows import log_in, waiting_in
from staal.supervisor.store.postgres.schema import SCHEMA_VERSION, check_version, lock_key
from staal.supervisor.store.state import LedgerState

# Why a run may not be forgotten (its entry, the run, its waiting record, now), or None.
Refusal = Callable[[RunEntry | None, str, WaitingRecord | None, int], str | None]


def commit_forget(dsn: str, run: str, refusal: Refusal, log_line: dict[str, Json],
                    clock: Clock = SYSTEM_CLOCK) -> RunEntry:
    """The forget event committed in one transaction holding the run's row
    and its once key, the key's row and `log_line` in the run's log with it; `StoreRefused`
    with `refusal`'s words when the run may not be forgotten."""
    try:
        with connect(dsn) as conn, conn.transaction(), conn.cursor() as cur:
            return _forget_row(cur, run, refusal, log_line, clock)
    except psycopg.errors.UndefinedTable:
        raise StoreRefused(f"run {run} is not in the ledger: the PostgreSQL store holds no "
                            "staal ledger yet") from None
    except psycopg.Error as exc:
        raise StoreError(f"the PostgreSQL store failed: {reason(exc, secrets_of(dsn))}") from None


def _forget_row(cur: psycopg.Cursor[Any], run: str, refusal: Refusal, log_line: dict[str, Json],
                clock: Clock) -> RunEntry:
    _check_schema(cur)
    # Forgets commit one at a time, so their seq is their commit order (a
    # serving instance tells each once: supervisor/store/postgres/ledger.py).
    cur.execute(f"SELECT pg_advisory_xact_lock({lock_key('forget')})")
    cur.execute("SELECT tool, event->'once'->>'key' FROM staal_runs WHERE run = %s FOR UPDATE",
                (run,))
    found = cur.fetchone()
    if found is not None and found[1] is not None:
        # Its once key's reserves decide on the key's holder: not meanwhile.
        lock_keys(cur, [f"once:{found[0]}:{found[1]}"])
    state = _run_state(cur, run)
    cur.execute(LATEST, {"tool": found[0] if found else None, "caller": None})
    latest = one_row(cur)[0] or 0
    now = Stamper(clock, warn_on_stderr, "in the PostgreSQL store").stamp(
        max(state.last_ms, int(latest)))
    problem = refusal(state.run(run), run, waiting_in(cur, run), now)
    if problem is not None:
        raise StoreRefused(problem)
    event = Forget(run=run, time=now)
    entry = state.apply(event)
    cur.execute("INSERT INTO staal_forgets (run, forgotten_ms, seq, event) "
                "VALUES (%s, %s, nextval('staal_event_seq'), %s)",
                (run, now, Jsonb(checked_encoding(event))))
    cur.execute("DELETE FROM staal_once WHERE run = %s", (run,))  # it holds the key no more
    log_in(cur, run, [log_line])
    return entry


def _check_schema(cur: psycopg.Cursor[Any]) -> None:
    """An older schema has no forgets table, and instances of an older staal,
    which serve on it, would not see a forget: refused until an instance of
    this version has upgraded it at its start."""
    cur.execute("SELECT version FROM staal_schema")
    found = int(one_row(cur)[0])
    check_version(found)
    if found < SCHEMA_VERSION:
        raise StoreRefused(
            f"the PostgreSQL store's schema is version {found}; forget needs version "
            f"{SCHEMA_VERSION}: start an instance of this staal first (it upgrades the schema "
            "at start, keeping every row)")


def _run_state(cur: psycopg.Cursor[Any], run: str) -> LedgerState:
    """A ledger state of the run's own events, in ledger order."""
    cur.execute("SELECT seq, event FROM staal_runs WHERE run = %(run)s "
                "UNION ALL SELECT seq, event FROM staal_ends WHERE run = %(run)s "
                "UNION ALL SELECT seq, event FROM staal_forgets WHERE run = %(run)s "
                "ORDER BY seq", {"run": run})
    state = LedgerState()
    for seq, data in cur.fetchall():
        apply_stored(state, seq, data)  # as a serving instance reads them
    return state
