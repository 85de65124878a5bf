"""An instance of the fleet on the PostgreSQL store: its name, and its
registration, which hands it a new fencing token (DESIGN.md section 8)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import psycopg

import staal
from staal.supervisor.store.postgres.connection import one_row


def instance_name(journals: Path) -> str:
    """An instance is its host and journal directory: the directory holds
    its runs' journals and one server at a time (ServerLock), so a restart
    is the same instance and recovers its own runs."""
    return f"{socket.gethostname()}:{journals.resolve()}"


def register_instance(cur: psycopg.Cursor[Any], instance: str, now: int, lease_ms: int) -> int:
    cur.execute(
        "INSERT INTO staal_instances (instance, fence, started_ms, lease_until_ms, version) "
        "VALUES (%s, nextval('staal_fence_seq'), %s, %s, %s) ON CONFLICT (instance) DO UPDATE "
        "SET fence = EXCLUDED.fence, started_ms = EXCLUDED.started_ms, "
        "lease_until_ms = EXCLUDED.lease_until_ms, version = EXCLUDED.version RETURNING fence",
        (instance, now, now + lease_ms, staal.__version__))
    return int(one_row(cur)[0])
