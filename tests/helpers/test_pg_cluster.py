"""The deployment tests' private PostgreSQL cluster (`tests/helpers/pg_cluster.py`):
it starts on a port of its own with the settings the ledger's guarantees
need, keeps a committed row across a clean restart and across a crash
(an immediate stop, recovered from the write-ahead log), refuses
connections while it is down, and leaves the shared server alone."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import psycopg
import pytest

from tests.helpers.pg_cluster import PgCluster, private_cluster

SHARED_PORT = 5432  # the machine's shared server


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    with private_cluster("fleettest") as own:
        yield own


def setting(dsn: str, name: str) -> str:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(f"SHOW {name}").fetchone()[0]


def test_the_cluster_runs_on_its_own_port_with_fsync_and_synchronous_commit_on(cluster):
    assert cluster.port != SHARED_PORT
    assert f"port={cluster.port}" in cluster.dsn
    assert setting(cluster.dsn, "fsync") == "on"
    assert setting(cluster.dsn, "synchronous_commit") == "on"
    assert setting(cluster.dsn, "full_page_writes") == "on"
    assert setting(cluster.dsn, "port") == str(cluster.port)
    assert setting(cluster.dsn, "data_directory") == str(cluster.data)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_committed_row_survives_a_restart_clean_or_crashed(cluster, mode):
    with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS kept (mode text PRIMARY KEY)")
        conn.execute("INSERT INTO kept VALUES (%s)", (mode,))
    cluster.stop(mode)
    assert not cluster.running()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(cluster.dsn, connect_timeout=5)
    cluster.start()
    assert cluster.running()
    with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=5) as conn:
        kept = {row[0] for row in conn.execute("SELECT mode FROM kept")}
    assert mode in kept
    if mode == "immediate":
        assert "database system was not properly shut down" in cluster.log_text()


def test_restarting_the_cluster_cuts_open_sessions_and_takes_new_ones(cluster):
    before = psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=5)
    try:
        cluster.restart("fast")
        with pytest.raises(psycopg.OperationalError):
            before.execute("SELECT 1")
    finally:
        before.close()
    with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=5) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_the_shared_server_is_not_the_clusters(cluster, postgres_dsn):
    with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=5) as conn:
        own = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0]
    with psycopg.connect(postgres_dsn, autocommit=True, connect_timeout=5) as conn:
        theirs = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0]
    assert own != theirs


def test_a_port_taken_before_the_first_start_is_traded_for_a_free_one():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        other = PgCluster("fleettaken", port=port)
        try:
            other.init()
            assert other.port != port and other.running()
            assert setting(other.dsn, "port") == str(other.port)
        finally:
            other.destroy()
