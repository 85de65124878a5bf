"""A PostgreSQL store of its own for each test: a schema named
`issue_store_<random>` on the test server (STAAL_TEST_POSTGRES_DSN, started
if it is the local one: tests/services.py), reached through a DSN whose
search_path names it, and dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest


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
