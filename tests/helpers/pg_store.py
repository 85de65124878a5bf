"""A PostgreSQL store of its own for each test: a schema named
`issue_store_<random>` on the test server (STAAL_TEST_POSTGRES_DSN, started
if it is the local one: tests/helpers/services.py), reached through a DSN whose
search_path names it, and dropped afterwards."""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo


@dataclass(frozen=True)
class PgStore:
    server_dsn: str
    schema: str

    @property
    def dsn(self) -> str:
        return f"{self.server_dsn} options='-csearch_path={self.schema}'"

    def rows(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Any = None) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql, params)

    def at_version(self, version: int) -> None:
        """The schema as an older staal left it: its migrations up to
        `version`, and that version recorded."""
        from staal.supervisor.store.postgres.schema import MIGRATIONS, migrate

        with psycopg.connect(self.dsn) as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("CREATE TABLE staal_schema (one boolean PRIMARY KEY DEFAULT true "
                        "CHECK (one), version integer NOT NULL CHECK (version >= 0))")
            cur.execute("INSERT INTO staal_schema (version) VALUES (%s)", (version,))
            for steps in MIGRATIONS[:version]:
                migrate(cur, steps)


@pytest.fixture
def pg_store(postgres_dsn: str) -> Iterator[PgStore]:
    store = PgStore(postgres_dsn, f"issue_store_{uuid.uuid4().hex[:12]}")
    with psycopg.connect(postgres_dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"CREATE SCHEMA {store.schema}")
    try:
        yield store
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP SCHEMA {store.schema} CASCADE")


class CommitCutter:
    """A TCP proxy between a client and the test's PostgreSQL server that,
    once armed, passes the client's next COMMIT (or statement: `cut_next_commit`)
    to the server and then cuts
    the connection before the server's answer reaches the client: a commit
    that happened, but whose answer was lost (a failover, a cable). Only
    for DSNs with sslmode=disable, so the proxy can see the COMMIT."""

    def __init__(self, store: PgStore) -> None:
        params = conninfo_to_dict(store.server_dsn)
        self._upstream = (str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.dsn = make_conninfo(store.server_dsn, host="127.0.0.1", port=str(port),
                                 sslmode="disable", gssencmode="disable",
                                 options=f"-csearch_path={store.schema}")
        self._armed = threading.Event()
        self._marker = b"COMMIT"
        self._cutting = threading.Event()
        self.cut = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_next_commit(self, marker: bytes = b"COMMIT") -> None:
        """Cut after the next COMMIT, or after the next statement holding
        `marker` (one that is a transaction by itself, committed as it runs)."""
        self._marker = marker
        self.cut.clear()
        self._armed.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if from_client and self._armed.is_set() and self._marker in data:
                    self._armed.clear()
                    self._cutting.set()
                elif not from_client and self._cutting.is_set():
                    self._cutting.clear()
                    self.cut.set()
                    break  # the server's answer to COMMIT: dropped
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> CommitCutter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
