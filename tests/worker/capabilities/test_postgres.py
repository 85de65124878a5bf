"""staal.worker.capabilities.postgres in this process: the connections a
worker keeps across the runs it serves (services.Kept), against a real
PostgreSQL server (issue 26, item 2).

Runs go through staal.worker.runs.run.start with the program prepared as the
zygote prepares it and one `Kept` handed to each run, as a warm worker does;
between runs the test calls `kept.between_runs()` where the worker would.
The confinement tripwire is never installed here. The server is
`STAAL_TEST_POSTGRES_DSN`, else the local one (tests/helpers/services.py).
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from staal.manifest.model import Grant, NetConfig, SecretRef
from staal.records.runconfig import RunConfig
from staal.worker.capabilities.postgres import PostgresDatabase
from staal.worker.capabilities.services import Kept
from staal.worker.runs.run import Prepared, RunRequest, load, start

ENV = "SHOP_DSN"
NET = NetConfig(timeout_ms=4321, connect_timeout_ms=5000)
STARTUP_TIMEOUT = "4321ms"  # SHOW statement_timeout of NET's

PROGRAM = """
from staal.caps import CLASS

BACKEND = "SELECT pg_backend_pid() AS pid, backend_start::text AS since FROM pg_stat_activity " \\
          "WHERE pid = pg_backend_pid()"


def main(step: str, db: CLASS, lock: int = 0) -> dict:
    if step == "dirty":
        db.execute("SET search_path TO staal_kept_elsewhere")
        db.execute("SET statement_timeout TO 0")
        db.query("SELECT true AS locked FROM (SELECT pg_advisory_lock(%s)) AS l", [lock])
        db.execute("CREATE TEMP TABLE scratch (x integer)")
        db.execute("LISTEN staal_kept")
    if step == "write":
        db.execute("SELECT 1")
    seen = db.query(
        "SELECT current_setting('search_path') AS search_path, "
        "current_setting('statement_timeout') AS statement_timeout, "
        "current_setting('default_transaction_read_only') AS read_only, "
        "(SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema() "
        " AND relname = 'scratch') AS temp_tables, "
        "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
        " AND pid = pg_backend_pid()) AS advisory_locks, "
        "(SELECT count(*) FROM pg_listening_channels()) AS listening")[0]
    return {**db.query(BACKEND)[0], **seen}
"""


@pytest.fixture(autouse=True)
def own_modules_and_path(monkeypatch):
    """Each test's program leaves sys.modules and sys.path as they were."""
    monkeypatch.delenv("STAAL_TEST_KILL_POINTS", raising=False)
    monkeypatch.delenv("STAAL_KILL_AT", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.fixture
def kept() -> Iterator[Kept]:
    kept = Kept()
    try:
        yield kept
    finally:
        kept.close()


class Worker:
    """Runs of one tool and grant, in this process, as a warm worker runs them."""

    def __init__(self, folder: Path, dsn: str, cap: str = "db.postgres.write") -> None:
        path = folder / "prog.py"
        kind = "PostgresWrite" if cap == "db.postgres.write" else "PostgresRead"
        path.write_text(textwrap.dedent(PROGRAM).replace("CLASS", kind))
        grant = Grant(cap=cap, dsn=SecretRef(ENV))
        self.config = RunConfig(tool="t", program=path, entry="main", grants={"db": grant}, net=NET)
        loaded = load(self.config, {ENV: dsn})
        assert isinstance(loaded, Prepared), loaded
        self.prepared = loaded
        self.folder = folder
        self.runs = 0

    def run(self, kept: Kept | None, step: str = "look", **arguments: Any) -> dict[str, Any]:
        self.runs += 1
        outcome = start(RunRequest(config=self.config, arguments={"step": step, **arguments},
                                   journal=self.folder / f"run{self.runs}.journal",
                                   prepared=self.prepared, fresh=self.runs > 1, kept=kept))
        assert outcome.outcome == "done", outcome
        assert isinstance(outcome.result, dict)
        return outcome.result

    def use_dsn(self, dsn: str) -> None:
        self.prepared = dataclasses.replace(self.prepared, secrets={ENV: dsn})


def backend(seen: dict[str, Any]) -> tuple[int, str]:
    """A server process, told apart from a later one that got its pid."""
    return seen["pid"], seen["since"]


def the_database(kept: Kept) -> PostgresDatabase:
    database, = kept.databases.values()
    assert isinstance(database, PostgresDatabase)
    return database


def terminate(dsn: str, pid: int) -> None:
    """End a backend as an administrator would, and wait (bounded) until it
    has: its farewell is then on its way to the client."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        ended = conn.execute("SELECT pg_terminate_backend(%s, 5000)", [pid]).fetchone()
    assert ended == (True,)


def test_ten_runs_sharing_what_the_worker_keeps_are_served_by_one_postgres_backend(
        tmp_path, postgres_dsn, kept):
    worker = Worker(tmp_path, postgres_dsn)
    backends = set()
    for _ in range(10):
        backends.add(backend(worker.run(kept)))
        kept.between_runs()

    assert len(backends) == 1
    assert len(kept.databases) == 1


def test_a_run_leaves_nothing_of_its_session_to_the_next_but_the_grants_startup_settings(
        tmp_path, postgres_dsn, kept):
    worker = Worker(tmp_path, postgres_dsn)
    lock = 260_000_000 + uuid.uuid4().int % 1_000_000  # no other test's advisory lock
    fresh = worker.run(kept)
    kept.between_runs()
    dirty = worker.run(kept, "dirty", lock=lock)
    assert (dirty["search_path"], dirty["statement_timeout"]) == ("staal_kept_elsewhere", "0")
    assert (dirty["temp_tables"], dirty["advisory_locks"], dirty["listening"]) == (1, 1, 1)
    # A run cut off mid-statement (its deadline) can leave a transaction open;
    # the capability itself never does, so the test opens one.
    conn = the_database(kept)._conn
    assert conn is not None
    conn.execute("BEGIN")
    conn.execute("SELECT 1")

    kept.between_runs()

    assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    with psycopg.connect(postgres_dsn, autocommit=True, connect_timeout=5) as outside:
        held = outside.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                               "AND classid = 0 AND objid = %s", [lock]).fetchone()
    assert held == (0,)
    after = worker.run(kept)
    assert backend(after) == backend(dirty)
    assert after == fresh
    assert after["statement_timeout"] == STARTUP_TIMEOUT
    assert (after["temp_tables"], after["advisory_locks"], after["listening"]) == (0, 0, 0)


def test_a_read_grants_connection_still_makes_transactions_read_only_after_a_reset(
        tmp_path, postgres_dsn, kept):
    worker = Worker(tmp_path, postgres_dsn, cap="db.postgres.read")
    first = worker.run(kept)
    kept.between_runs()

    second = worker.run(kept)

    assert backend(second) == backend(first)
    assert (second["read_only"], second["statement_timeout"]) == ("on", STARTUP_TIMEOUT)


def test_a_changed_dsn_opens_a_new_connection_and_closes_the_one_of_the_old_value(
        tmp_path, postgres_dsn, kept):
    worker = Worker(tmp_path, postgres_dsn)
    first = worker.run(kept)
    old = the_database(kept)
    kept.between_runs()

    worker.use_dsn(f"{postgres_dsn} application_name=staal_kept_changed")
    second = worker.run(kept)

    assert backend(second) != backend(first)
    assert the_database(kept) is not old
    assert old._conn is None


@pytest.mark.parametrize("when", ["before the reset", "after the reset"])
def test_a_connection_the_server_ended_between_runs_is_replaced_and_the_next_run_writes(
        tmp_path, postgres_dsn, kept, when):
    worker = Worker(tmp_path, postgres_dsn)
    first = worker.run(kept)
    if when == "after the reset":
        kept.between_runs()
    terminate(postgres_dsn, first["pid"])
    if when == "before the reset":
        kept.between_runs()

    # A write on the dead connection would be in doubt and stop the run:
    # the run is done only if the statement went out on a new one.
    second = worker.run(kept, "write")

    assert backend(second) != backend(first)
    kept.between_runs()
    assert backend(worker.run(kept)) == backend(second)


def test_without_kept_connections_each_run_opens_its_own(tmp_path, postgres_dsn):
    worker = Worker(tmp_path, postgres_dsn)

    backends = {backend(worker.run(None)) for _ in range(3)}

    assert len(backends) == 3


def test_between_runs_of_a_connection_never_opened_or_already_closed_does_nothing(postgres_dsn):
    database = PostgresDatabase(postgres_dsn, ENV, NET, writes=False)
    database.between_runs()
    assert database.query("SELECT 1 AS one", []).result == [{"one": 1}]
    database.close()

    database.between_runs()

    assert database._conn is None
