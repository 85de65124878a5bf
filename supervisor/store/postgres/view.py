"""The shared store seen without taking part: the ledger, each run's owner
and the instances, read in one snapshot by `staal-supervisor status` and
the console. Kept apart from `PostgresLedger` because it registers no
instance, holds no lock and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psycopg

from staal.supervisor.store.ledger import build_state
from staal.supervisor.store.postgres.connection import connect, one_row
from staal.supervisor.store.postgres.schema import EVENTS_SINCE, check_version
from staal.supervisor.store.state import LedgerState, decode_event


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
            cur.execute(EVENTS_SINCE, {"seq": 0})
            rows = cur.fetchall()
            state = build_state((decode_event(row[1]) for row in rows),
                                "the PostgreSQL store")
            cur.execute("SELECT last_ms FROM staal_head")
            state.last_ms = max(state.last_ms, one_row(cur)[0])
            cur.execute("SELECT instance, fence, started_ms, lease_until_ms, version "
                        "FROM staal_instances ORDER BY instance")
            instances = tuple(Instance(*row) for row in cur.fetchall())
    owners = {row[1]["run"]: row[2] for row in rows if row[2] is not None}
    return SharedView(state, owners, instances)
