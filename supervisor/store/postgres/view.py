"""The shared store seen without taking part: the ledger, each run's owner
and the instances, read in one snapshot by `staal-supervisor status` and
the console. Kept apart from `PostgresLedger` because it registers no
instance, holds no lock and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psycopg

from staal.supervisor.store.postgres.connection import connect, one_row
from staal.supervisor.store.postgres.events import RUN_ROWS, stored_entry
from staal.supervisor.store.postgres.schema import check_version
from staal.supervisor.store.state import LedgerState


@dataclass(frozen=True, slots=True)
class Instance:
    """One instance as the shared store knows it."""

    instance: str
    fence: int
    started_ms: int
    lease_until_ms: int | None
    version: str


@dataclass(frozen=True, slots=True)
class SharedView:
    """The shared ledger, who owns each run, and the instances."""

    state: LedgerState
    owners: Mapping[str, str]
    instances: tuple[Instance, ...]


def read_postgres(dsn: str) -> SharedView:
    """The shared ledger, read in one snapshot without registering an
    instance or changing anything (for `staal-supervisor status` and the
    console); no schema is an empty ledger."""
    with connect(dsn) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.transaction(), conn.cursor() as cur:
            try:
                cur.execute("SELECT version FROM staal_schema")
            except psycopg.errors.UndefinedTable:
                return SharedView(LedgerState(), {}, ())
            check_version(one_row(cur)[0])
            cur.execute(f"{RUN_ROWS} ORDER BY r.seq")
            rows = cur.fetchall()
            state = LedgerState.holding(stored_entry(*row[:4]) for row in rows)
            cur.execute("SELECT run, owner FROM staal_runs")
            owners = {str(run): str(owner) for run, owner in cur.fetchall()}
            cur.execute("SELECT instance, fence, started_ms, lease_until_ms, version "
                        "FROM staal_instances ORDER BY instance")
            instances = tuple(Instance(*row) for row in cur.fetchall())
    return SharedView(state, owners, instances)
