"""The official SDK's `MCPServer` whose tools each run a DBOS workflow of one
step (`dbos` on PyPI; not a staal dependency: `pip install -e '.[bench]'`),
on a SQLite system database in the directory given as the one argument, over
stdio. The steps are `ref_tools.py`'s no-op and GET.

Durability: DBOS's SQLite engine (`dbos/_sys_db_sqlite.py`) sets only
`busy_timeout`, `foreign_keys` and IMMEDIATE transactions, leaving the
journal mode (rollback journal, DELETE) and `synchronous` at SQLite's
defaults. Every SQLite connection this process opens, DBOS's included, gets
`PRAGMA synchronous=FULL` as it connects (a `connect` listener on all
SQLAlchemy engines, registered before DBOS makes its engine), read back at
once; each connection's setting before and after, and its journal mode, are
written to `durability.json` in the directory, for the benchmark to report.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import ref_tools
import sqlalchemy
from dbos import DBOS
from mcp.server.mcpserver import MCPServer

DIRECTORY = Path(sys.argv[1])
SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
connections: list[dict[str, Any]] = []
lock = threading.Lock()  # DBOS connects from several threads


@sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "connect")
def synchronous_full(dbapi_connection: Any, _record: Any) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    before = dbapi_connection.execute("PRAGMA synchronous").fetchone()[0]
    dbapi_connection.execute("PRAGMA synchronous=FULL")
    after = dbapi_connection.execute("PRAGMA synchronous").fetchone()[0]
    mode = dbapi_connection.execute("PRAGMA journal_mode").fetchone()[0]
    with lock:
        connections.append({"synchronous_default": SYNCHRONOUS.get(before, before),
                            "synchronous": SYNCHRONOUS.get(after, after), "journal_mode": mode,
                            "sqlite": sqlite3.sqlite_version})
        written = DIRECTORY / "durability.json.new"
        written.write_text(json.dumps(connections))
        os.replace(written, DIRECTORY / "durability.json")


DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{DIRECTORY / 'dbos.sqlite'}",
             "log_level": "WARNING"})


@DBOS.step()
async def noop_step(x: int) -> int:
    return ref_tools.noop(x)


@DBOS.workflow()
async def noop_workflow(x: int) -> int:
    return await noop_step(x)


@DBOS.step()
async def get_step(url: str) -> int:
    return await ref_tools.get(url)


@DBOS.workflow()
async def get_workflow(url: str) -> int:
    return await get_step(url)


server = MCPServer("bench")


@server.tool()
async def noop(x: int) -> int:
    """Return x."""
    return await noop_workflow(x)


@server.tool()
async def get(url: str) -> int:
    """GET url once; return the x it answers."""
    return await get_workflow(url)


if __name__ == "__main__":
    DBOS.launch()
    server.run("stdio")
