"""staal.worker.capabilities.sql in this process: which connections a run
uses, its own or those its worker keeps (services.Kept)."""

from __future__ import annotations

import sqlite3
import sys

import pytest

from staal.manifest.model import Grant, SecretRef
from staal.records.runconfig import RunConfig
from staal.worker.capabilities.services import Kept
from staal.worker.runs.run import Prepared, RunRequest, load, start

PROGRAM = """
from staal.caps import PostgresRead, SqliteWrite


def main(notes: SqliteWrite, shop: PostgresRead) -> int:
    notes.execute("INSERT INTO notes (text) VALUES (?)", ["seen"])
    count = notes.query("SELECT count(*) AS n FROM notes")[0]["n"]
    return count + shop.query("SELECT 0 AS zero")[0]["zero"]
"""


@pytest.fixture(autouse=True)
def own_modules_and_path(monkeypatch):
    """Each test's program leaves sys.modules and sys.path as they were."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_a_worker_keeps_its_postgres_connections_but_never_its_sqlite_ones(tmp_path, postgres_dsn):
    database = tmp_path / "notes.db"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    (tmp_path / "prog.py").write_text(PROGRAM)
    grants = {"notes": Grant(cap="db.sqlite.write", path=database),
              "shop": Grant(cap="db.postgres.read", dsn=SecretRef("SHOP_DSN"))}
    config = RunConfig(tool="t", program=tmp_path / "prog.py", entry="main", grants=grants)
    prepared = load(config, {"SHOP_DSN": postgres_dsn})
    assert isinstance(prepared, Prepared), prepared
    kept = Kept()
    try:
        outcomes = []
        for n in range(2):
            outcomes.append(start(RunRequest(config=config, arguments={}, prepared=prepared,
                                             journal=tmp_path / f"run{n}.journal", kept=kept)))
            kept.between_runs()

        assert [(o.outcome, o.result) for o in outcomes] == [("done", 1), ("done", 2)]
        assert [key[:2] for key in kept.databases] == [("shop", "db.postgres.read")]
    finally:
        kept.close()
