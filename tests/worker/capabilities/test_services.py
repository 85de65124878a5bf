"""staal.worker.capabilities.services in this process: what a worker keeps
across the runs it serves (`Kept`), with a real PostgreSQL connection and
with stand-in databases for what a real one does not do."""

from __future__ import annotations

from typing import Any

from staal.manifest.model import NetConfig
from staal.worker.capabilities.postgres import PostgresDatabase
from staal.worker.capabilities.services import Kept
from staal.worker.runs.actions import Performed

NET = NetConfig(timeout_ms=5000, connect_timeout_ms=5000)


class StandIn:
    """A database that records what it was asked, and fails on request."""

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails
        self.resets = 0
        self.closed = 0

    def query(self, sql: str, params: Any) -> Performed:
        return Performed(result=[])

    def execute(self, sql: str, params: Any) -> Performed:
        return Performed(result=0)

    def between_runs(self) -> None:
        self.resets += 1
        if self.fails:
            raise RuntimeError("cannot reset")

    def close(self) -> None:
        self.closed += 1
        if self.fails:
            raise RuntimeError("cannot close")


def test_close_closes_every_kept_connection_and_forgets_them(postgres_dsn):
    kept = Kept()
    databases = [PostgresDatabase(postgres_dsn, "DSN", NET, writes=w) for w in (False, True)]
    for n, database in enumerate(databases):
        assert database.query("SELECT 1 AS one", []).result == [{"one": 1}]
        kept.databases[(f"db{n}", "db.postgres.read", "")] = database
    conns = [database._conn for database in databases]

    kept.close()

    assert kept.databases == {}
    assert all(conn is not None and conn.closed for conn in conns)


def test_close_goes_on_past_a_database_that_fails_to_close():
    kept = Kept()
    failing, fine = StandIn(fails=True), StandIn()
    kept.databases.update({("a", "c", ""): failing, ("b", "c", ""): fine})

    kept.close()

    assert (failing.closed, fine.closed) == (1, 1)
    assert kept.databases == {}


def test_between_runs_resets_each_database_and_drops_one_that_cannot_be_reset():
    kept = Kept()
    failing, fine = StandIn(fails=True), StandIn()
    kept.databases.update({("a", "c", ""): failing, ("b", "c", ""): fine})

    kept.between_runs()

    assert (failing.resets, fine.resets) == (1, 1)
    assert failing.closed == 1 and fine.closed == 0
    assert kept.databases == {("b", "c", ""): fine}
