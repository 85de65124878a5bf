"""The PostgreSQL store's schema (issue 15), versioned in `staal_schema`.

At start the schema is created or upgraded in one transaction under a
transaction-level advisory lock, so instances starting together never race
on DDL and a crash mid-upgrade leaves the old version whole (PostgreSQL's
DDL is transactional). A schema newer than this server refuses to start,
naming both versions: an older server could break invariants a newer one's
rows rely on.

The guarantees are the schema's, not only the code's (seed 000 section 6):
one reserve per run (`staal_runs` primary key), at most one settle or
release per run and none without a reserve (`staal_ends` primary key and
foreign key), at most one forget per run and none before its end
(`staal_forgets`), one holder per once key (`staal_once` primary key, the key
already the caller's own), every event's place in the ledger's order unique
(`seq`). Instances, their fencing tokens and each run's owner are in from
the first version, so leases and takeover (issue 15 item 3) add no column
that existing rows lack. Version 5 (issue 27) adds what decisions per key
read by index (each run's caller, whether it ended) and drops the head row;
version 6 indexes each caller's runs in the ledger's order, for their pages;
version 7 (issue 28) keeps each cancelled task's cancel (`staal_cancels`);
version 8 indexes every run by its reserve time, for status and the console;
version 9 keeps what each run counts in its quota windows (its calls and
money used), so a decision sums them instead of reading every run's events.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import staal
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.postgres.events import RUN_ROWS, stored_entry

if TYPE_CHECKING:  # the file store's call path imports StoreError, never psycopg
    from psycopg import Cursor
    from psycopg.rows import TupleRow

SCHEMA_VERSION = 9


def _backfill_used(cur: Cursor[TupleRow]) -> None:
    """Version 9's backfill: each run's calls and money used, computed from
    its stored events as `RunEntry.calls_used` and `money_used` count them,
    read through a cursor of the database's and written a batch at a time
    (each statement a batch: the session's statement timeout holds)."""
    with cur.connection.cursor(name="staal_backfill") as runs:
        runs.execute(f"{RUN_ROWS} ORDER BY r.seq")
        while batch := runs.fetchmany(BACKFILL_BATCH):
            used: tuple[list[str], list[int], list[str]] = ([], [], [])
            for entry in (stored_entry(*row) for row in batch):
                amounts = {"released": (), "settled": entry.charged}.get(entry.state,
                                                                         entry.money)
                used[0].append(entry.run)
                used[1].append(entry.calls_used())
                used[2].append(json.dumps({m.currency: entry.money_used(m.currency)
                                           for m in amounts}))
            cur.execute("UPDATE staal_runs r SET calls_used = u.calls, money_used = u.money::jsonb "
                        "FROM unnest(%s::text[], %s::bigint[], %s::text[]) AS u(run, calls, money) "
                        "WHERE r.run = u.run", used)


BACKFILL_BATCH = 5000

# A step of a migration: a statement, or a function of the upgrade's cursor.
Step = str | Callable[["Cursor[TupleRow]"], None]

# Migration i takes the schema from version i to i + 1.
MIGRATIONS: tuple[tuple[Step, ...], ...] = (
    (
        """CREATE TABLE staal_head (
            one boolean PRIMARY KEY DEFAULT true CHECK (one),
            last_ms bigint NOT NULL DEFAULT 0 CHECK (last_ms >= 0),
            generation bigint NOT NULL DEFAULT 0)""",
        "INSERT INTO staal_head DEFAULT VALUES",
        "CREATE SEQUENCE staal_event_seq",
        "CREATE SEQUENCE staal_fence_seq",
        """CREATE TABLE staal_instances (
            instance text PRIMARY KEY,
            fence bigint NOT NULL UNIQUE,
            started_ms bigint NOT NULL,
            lease_until_ms bigint,
            version text NOT NULL)""",
        """CREATE TABLE staal_runs (
            run text PRIMARY KEY,
            tool text NOT NULL,
            reserved_ms bigint NOT NULL,
            seq bigint NOT NULL UNIQUE,
            event jsonb NOT NULL,
            owner text NOT NULL REFERENCES staal_instances,
            fence bigint NOT NULL)""",
        """CREATE TABLE staal_ends (
            run text PRIMARY KEY REFERENCES staal_runs ON DELETE CASCADE,
            kind text NOT NULL CHECK (kind IN ('settle', 'release')),
            ended_ms bigint NOT NULL,
            seq bigint NOT NULL UNIQUE,
            event jsonb NOT NULL)""",
        """CREATE TABLE staal_once (
            tool text NOT NULL,
            key text NOT NULL,
            run text NOT NULL UNIQUE REFERENCES staal_runs ON DELETE CASCADE,
            PRIMARY KEY (tool, key))""",
    ),
    (
        # Version 2: run journals as rows (supervisor/store/postgres/journal_rows.py), one
        # per record in line order, and kept arguments; both go with their run.
        """CREATE TABLE staal_journal (
            run text NOT NULL REFERENCES staal_runs ON DELETE CASCADE,
            line integer NOT NULL CHECK (line >= 1),
            record jsonb NOT NULL,
            PRIMARY KEY (run, line))""",
        # A run's kept arguments, while it may be resumed (by any instance).
        """CREATE TABLE staal_inputs (
            run text PRIMARY KEY REFERENCES staal_runs ON DELETE CASCADE,
            arguments jsonb NOT NULL)""",
    ),
    (
        # Version 3: waiting records and run logs as rows (supervisor/store/notes.py),
        # shared by every instance; both go with their run. A run has one
        # waiting record, kept as first written (the primary key: a second
        # insert does nothing), naming the instance that wrote it.
        """CREATE TABLE staal_waiting (
            run text PRIMARY KEY REFERENCES staal_runs ON DELETE CASCADE,
            instance text NOT NULL,
            record jsonb NOT NULL)""",
        # A run's log, one row per line in order: for people, not authoritative.
        """CREATE TABLE staal_logs (
            run text NOT NULL REFERENCES staal_runs ON DELETE CASCADE,
            line integer NOT NULL CHECK (line >= 1),
            entry jsonb NOT NULL,
            PRIMARY KEY (run, line))""",
    ),
    (
        # Version 4: an operator's forget of an ended run's once key
        # (supervisor/recovery/forget.py), at most one per run and only after its
        # settle (the key: a settle's run); it goes with its run.
        """CREATE TABLE staal_forgets (
            run text PRIMARY KEY REFERENCES staal_ends ON DELETE CASCADE,
            forgotten_ms bigint NOT NULL,
            seq bigint NOT NULL UNIQUE,
            event jsonb NOT NULL)""",
    ),
    (
        # Version 5 (issue 27): decisions per key, read by indexed queries.
        # Each run says its caller and whether it ended, so a quota's window,
        # a caller's rate and the unfinished runs are index scans; the head
        # row every write once locked goes, and with it any instance of an
        # older staal still serving: its next write fails naming the table
        # (it would decide on a ledger copy no longer kept in step), and it
        # cannot start again on this schema (a newer version).
        "ALTER TABLE staal_runs ADD COLUMN caller text, "
        "ADD COLUMN ended boolean NOT NULL DEFAULT false",
        "UPDATE staal_runs SET caller = event->>'caller' WHERE event->>'caller' IS NOT NULL",
        "UPDATE staal_runs r SET ended = true FROM staal_ends e WHERE e.run = r.run",
        "CREATE INDEX staal_runs_tool_time ON staal_runs (tool, reserved_ms)",
        "CREATE INDEX staal_runs_caller_time ON staal_runs (caller, reserved_ms) "
        "WHERE caller IS NOT NULL",
        "CREATE INDEX staal_runs_caller_tool_time ON staal_runs (caller, tool, reserved_ms) "
        "WHERE caller IS NOT NULL",
        "CREATE INDEX staal_runs_owner ON staal_runs (owner, seq)",
        "CREATE INDEX staal_runs_unfinished ON staal_runs (seq) WHERE NOT ended",
        "DROP TABLE staal_head",
    ),
    (
        # Version 6 (issue 27): a caller's runs, newest first, by index: the
        # runs resources' and tasks/list's pages read the page alone
        # (supervisor/store/postgres/caller_runs.py). NULL is the local
        # client, so the index holds it too.
        "CREATE INDEX staal_runs_caller_seq ON staal_runs (caller, seq)",
    ),
    (
        # Version 7 (issue 28): a task's cancel, durable before it is
        # acknowledged (supervisor/store/notes.py), written by whichever
        # instance the client asked and read by the one that runs the run
        # (after each renewal) or resumes it (at start, a takeover). At most
        # one per run; it goes with its run.
        """CREATE TABLE staal_cancels (
            run text PRIMARY KEY REFERENCES staal_runs ON DELETE CASCADE,
            cancelled_ms bigint NOT NULL)""",
    ),
    (
        # Version 8 (issue 27): every run by its reserve time, newest first:
        # status's and the console's latest time and newest runs read the
        # index's end (supervisor/store/postgres/view.py), not every run.
        "CREATE INDEX staal_runs_time ON staal_runs (reserved_ms, run)",
    ),
    (
        # Version 9: what each run counts in its windows, kept by the
        # statements that write its reserve and its end (ledger_sql.py):
        # its calls (none once released) and its money by currency in minor
        # units (its worst case until settled, then its charges; none once
        # released). A decision sums them by its window's index, one
        # aggregate per key (decisions.py `SqlWindows`), and walks the
        # window's runs only to say when a refused call would fit.
        "ALTER TABLE staal_runs ADD COLUMN calls_used bigint NOT NULL DEFAULT 0, "
        "ADD COLUMN money_used jsonb NOT NULL DEFAULT '{}'",
        _backfill_used,
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


class SchemaNewer(StoreError):
    kind = "schema_newer"


def lock_key(purpose: str) -> str:
    """SQL for an advisory lock key, one per purpose and per schema (so two
    stores in one database never wait on each other)."""
    return f"hashtext('staal:{purpose}:' || current_schema())"


def key_lock(param: str) -> str:
    """SQL locking, until the transaction ends, the decision key the query
    parameter `param` names (a tool's quota, a caller's rate, a once key:
    supervisor/store/postgres/decisions.py), in this schema. Keys are 64-bit
    hashes: two keys that collide only wait for each other."""
    return f"pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || %({param})s, 0))"


def ensure_schema(cur: Cursor[TupleRow]) -> int:
    """Create or upgrade the schema to `SCHEMA_VERSION` in the caller's open
    transaction; the version found before. Raises `SchemaNewer` for a newer
    one, `StoreError` when the search path names no schema to create in."""
    cur.execute("SELECT current_schema()")
    if _first(cur) is None:
        raise StoreError("the PostgreSQL store's search_path names no existing schema to "
                         "create staal's tables in; create it, or set search_path in the DSN")
    cur.execute(f"SELECT pg_advisory_xact_lock({lock_key('schema')})")
    cur.execute("""CREATE TABLE IF NOT EXISTS staal_schema (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        version integer NOT NULL CHECK (version >= 0))""")
    cur.execute("INSERT INTO staal_schema (version) VALUES (0) ON CONFLICT (one) DO NOTHING")
    cur.execute("SELECT version FROM staal_schema")
    found = _first(cur)
    if not isinstance(found, int):
        raise StoreError("the PostgreSQL store's staal_schema table holds no version: "
                         "its schema is damaged")
    check_version(found)
    for steps in MIGRATIONS[found:]:
        migrate(cur, steps)
    cur.execute("UPDATE staal_schema SET version = %s", (SCHEMA_VERSION,))
    return found


def migrate(cur: Cursor[TupleRow], steps: tuple[Step, ...]) -> None:
    """One migration's steps, in order, in the caller's transaction."""
    for step in steps:
        if isinstance(step, str):
            cur.execute(step)
        else:
            step(cur)


def _first(cur: Cursor[TupleRow]) -> object:
    """The first column of a statement's one row (None: no row, or NULL)."""
    row = cur.fetchone()
    return None if row is None else row[0]


def check_version(found: int) -> None:
    if found > SCHEMA_VERSION:
        raise SchemaNewer(
            f"the PostgreSQL store's schema is version {found}, newer than version "
            f"{SCHEMA_VERSION}, the newest this server (staal {staal.__version__}) knows: "
            "upgrade staal on this instance, or point server.store at another database")
