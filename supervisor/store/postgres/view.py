"""The shared store seen without taking part (issue 27 item 1): the
`LedgerView` that `staal-supervisor status` and the console read, each of
its questions one query in one snapshot, so what a reader fetches does not
grow with the ledger. Kept apart from `PostgresLedger` because it registers
no instance, holds no lock and writes nothing.

Counts are aggregates (each caller's runs: GROUP BY), computed by the
database; lists come by index and limited: the unfinished runs by the
partial index of unfinished runs, a quota's window by its tool's or
caller's index of reserve times, the newest ended runs by the index of
reserve times (`staal_runs_time`, schema version 8) walked backwards for as
many as a page shows, the forgotten runs from `staal_forgets`, a run by its
key. A search of the runs compares each run's id, tool and state in the
database and fetches only the page.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg

from staal.manifest.model import QuotaConfig
from staal.supervisor.store.entries import RunEntry, WindowKey, WindowSums
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.postgres.connection import connect, one_row, reason, secrets_of
from staal.supervisor.store.postgres.decisions import SqlWindows
from staal.supervisor.store.postgres.events import entries_where, entry_where_run, stored_entry
from staal.supervisor.store.postgres.schema import check_version
from staal.supervisor.store.reads.view import (
    RELEASED,
    CallerCount,
    EndedRuns,
    Instance,
    LedgerView,
    StateView,
)
from staal.supervisor.store.state import LedgerState

# The oldest schema whose rows say each run's caller and whether it ended.
READABLE_FROM = 5
# The oldest whose rows say what each run counts in its windows.
SUMS_FROM = 9
# An ended run's state as `reads.view.ended_state` says it, in SQL (`e` its end).
ENDED_STATE = ("CASE WHEN e.kind = 'release' THEN %(released)s "
               "ELSE coalesce(e.event->>'outcome', 'settled') END")
# Whether a search's needle (lower case) is in a run's id, tool or state.
MATCH = f"strpos(lower(r.run || chr(10) || r.tool || chr(10) || {ENDED_STATE}), %(needle)s) > 0"
# The unfinished runs (no end, so no forget) and their owners, by the
# partial index of unfinished runs.
UNFINISHED = ("SELECT r.seq, r.event, NULL, NULL, r.owner FROM staal_runs r WHERE NOT r.ended "
              "ORDER BY r.reserved_ms, r.seq")
# Each caller's runs and unfinished runs, its profile as of its latest run,
# in the order of its first run.
CALLERS = (
    "SELECT c.caller, (SELECT l.event->>'profile' FROM staal_runs l WHERE l.caller = c.caller "
    "ORDER BY l.reserved_ms DESC, l.seq DESC LIMIT 1), c.runs, c.unsettled FROM ("
    "SELECT caller, count(*) AS runs, count(*) FILTER (WHERE NOT ended) AS unsettled, "
    "min(reserved_ms) AS first_ms, min(seq) AS first_seq FROM staal_runs "
    "WHERE caller IS NOT NULL GROUP BY caller) AS c ORDER BY c.first_ms, c.first_seq")


class PostgresView:
    """A `LedgerView` on one open snapshot (`open_view` makes it)."""

    def __init__(self, cur: psycopg.Cursor[Any], version: int) -> None:
        self._cur = cur
        self._version = version
        self._unsettled: tuple[tuple[RunEntry, str], ...] | None = None

    def latest_reserve_ms(self) -> int:
        self._cur.execute("SELECT coalesce(max(reserved_ms), 0) FROM staal_runs")
        return int(one_row(self._cur)[0])

    def run(self, run_id: str) -> RunEntry | None:
        return entry_where_run(self._cur, run_id)

    def _owned(self) -> tuple[tuple[RunEntry, str], ...]:
        """The unfinished runs with their owners, read once per snapshot."""
        if self._unsettled is None:
            self._cur.execute(UNFINISHED)
            self._unsettled = tuple((stored_entry(*row[:4]), str(row[4]))
                                    for row in self._cur.fetchall())
        return self._unsettled

    def unsettled(self) -> tuple[RunEntry, ...]:
        return tuple(entry for entry, _ in self._owned())

    def owners(self) -> Mapping[str, str]:
        return {entry.run: owner for entry, owner in self._owned()}

    def instances(self) -> tuple[Instance, ...]:
        self._cur.execute("SELECT instance, fence, started_ms, lease_until_ms, version "
                          "FROM staal_instances ORDER BY instance")
        return tuple(Instance(*row) for row in self._cur.fetchall())

    def in_window(self, key: WindowKey, window_ms: int, now_ms: int) -> list[RunEntry]:
        params: dict[str, Any] = {"from": now_ms - window_ms}
        if isinstance(key, str):
            where, params["tool"] = "r.tool = %(tool)s", key
        else:
            where, params["caller"] = "r.caller = %(caller)s", key[1]
            if len(key) > 2:
                where, params["tool"] = f"{where} AND r.tool = %(tool)s", key[2]
        return entries_where(self._cur, f"{where} AND r.reserved_ms >= %(from)s", params,
                             "r.reserved_ms, r.seq")

    def sums(self, key: WindowKey, quota: QuotaConfig, now_ms: int) -> WindowSums:
        """By one aggregate from version 9 (each run's derived counts), by
        the window's runs before it (a store no instance upgraded yet)."""
        if self._version >= SUMS_FROM:
            return SqlWindows(self._cur).sums(key, quota, now_ms)
        window = LedgerState.holding(self.in_window(key, quota.window.ms, now_ms))
        return window.sums(key, quota, now_ms)

    def callers(self) -> tuple[CallerCount, ...]:
        self._cur.execute(CALLERS)
        return tuple(CallerCount(str(caller), profile, int(runs), int(unsettled))
                     for caller, profile, runs, unsettled in self._cur.fetchall())

    def forgotten(self) -> tuple[RunEntry, ...]:
        return tuple(entries_where(self._cur, "f.run IS NOT NULL", {}, "r.reserved_ms, r.seq"))

    def ended_runs(self, needle: str, limit: int) -> EndedRuns:
        params = {"released": RELEASED, "needle": needle, "limit": limit}
        where = f"r.ended AND {MATCH}" if needle else "r.ended"
        if needle:
            self._cur.execute(f"SELECT count(*) FROM staal_runs r JOIN staal_ends e "
                              f"ON e.run = r.run WHERE {MATCH}", params)
        else:
            self._cur.execute("SELECT count(*) FROM staal_ends")
        matched = int(one_row(self._cur)[0])
        newest = entries_where(self._cur, where, params,
                               "r.reserved_ms DESC, r.run DESC LIMIT %(limit)s")
        return EndedRuns(matched, tuple(newest))


@contextmanager
def open_view(dsn: str) -> Iterator[LedgerView]:
    """The shared ledger's view, in one snapshot (a repeatable-read
    transaction, read only) until the block ends, without registering an
    instance or changing anything; no schema is an empty ledger."""
    try:
        with connect(dsn) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            with conn.transaction(), conn.cursor() as cur:
                # The snapshot stays open while its readers read journals and
                # waiting records beside it: not the serving connections'
                # bound on an idle transaction (it holds no lock, writes nothing).
                cur.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
                try:
                    cur.execute("SELECT version FROM staal_schema")
                except psycopg.errors.UndefinedTable:
                    yield StateView(LedgerState())
                    return
                version = one_row(cur)[0]
                check_version(version)
                if version < READABLE_FROM:
                    raise StoreError(
                        f"the PostgreSQL store's schema is version {version}, which status "
                        f"and the console cannot read (they need version {READABLE_FROM} or "
                        "later): start an instance of this staal on it once to upgrade it")
                yield PostgresView(cur, version)
    except psycopg.Error as exc:
        raise StoreError(f"the PostgreSQL store could not be read: "
                         f"{reason(exc, secrets_of(dsn))}") from None
