"""`staal-supervisor status` and the console on a read replica
(docs/operators.md, "The ceiling: what one PostgreSQL serves"): they only
read, so a hot standby of the shared store serves them.

A private primary and its streaming standby (tests/helpers/pg_cluster.py);
about 20 s on a loaded two-core machine, most of it initdb and the
base backup."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from staal.manifest.check import load_manifest
from staal.runtime.clock import SYSTEM_CLOCK
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.supervisor.views.status import collect
from tests.helpers.pg_cluster import PgCluster, private_cluster
from tests.helpers.serving import tool, write_manifest

VAR = "STAAL_TEST_STANDBY_DSN"


@pytest.fixture
def primary() -> Iterator[PgCluster]:
    with private_cluster("statusprimary") as own:
        yield own


def test_status_and_the_console_read_the_shared_store_from_a_hot_standby(
        primary: PgCluster, tmp_path, monkeypatch) -> None:
    with PostgresLedger.open(primary.dsn, "elsewhere:/journals", SYSTEM_CLOCK) as ledger:
        unfinished = ledger.reserve_call("noop", None, 1, (), None)
        ended = ledger.reserve_call("noop", None, 1, (), None)
        ledger.settle(ended.run, "done", ())  # type: ignore[union-attr]
    # Taken after those commits, so the standby holds them once it accepts
    # connections (no waiting for its replay); it stays in recovery, streaming.
    standby = primary.standby()
    try:
        with psycopg.connect(standby.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)

        (tmp_path / "noop.py").write_text("def main() -> dict:\n    return {}\n")
        manifest = write_manifest(tmp_path, [tool("noop", "noop.py")],
                                  store={"postgres": {"dsn": {"env": VAR}}})
        monkeypatch.setenv(VAR, standby.dsn)
        report = collect(load_manifest(manifest))  # what status prints and the console shows

        assert [run.run for run in report.runs] == [unfinished.run]  # type: ignore[union-attr]
        assert report.runs[0].owner == "elsewhere:/journals"
        assert [i.instance for i in report.instances or ()] == ["elsewhere:/journals"]
        assert report.instances[0].lease == "released"  # type: ignore[index]
    finally:
        standby.destroy()
