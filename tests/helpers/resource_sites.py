"""A site serving resources: a tool (`note`), and a collection of 120
orders (`orders`) kept in SQLite and read through `db.sqlite.read`, for the
resource tests over stdio and HTTP."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from tests.helpers.servers import NET, SERVER_NAME, Site

NOTE = """
def main(order: str, text: str) -> dict:
    return {"noted": order, "text": text}
"""

ORDERS = """
from staal.caps import SqliteRead

def get_order(id: str, db: SqliteRead) -> dict | None:
    rows = db.query("SELECT id, total FROM orders WHERE id = ?", [id])
    return rows[0] if rows else None

def list_orders(after: str | None, limit: int, db: SqliteRead) -> list[dict]:
    rows = db.query("SELECT id, total FROM orders WHERE id > ? ORDER BY id LIMIT ?",
                    [after or "", limit])
    return rows
"""
RECORDS = 120
BASE = f"staal://{SERVER_NAME}"


def order_id(i: int) -> str:
    return f"o{i:04d}"


def orders_collection(**fields: Any) -> dict[str, Any]:
    return {"name": "orders", "description": "The shop's orders.", "program": "orders.py",
            "get": "get_order", "list": "list_orders",
            "grants": {"db": {"cap": "db.sqlite.read", "path": "shop.db"}}, "net": NET, **fields}


def resource_site(site: Site, collections: list[dict[str, Any]] | None = None) -> Site:
    """`site` with the note tool, the orders collection (unless others are
    given) and a database of RECORDS orders."""
    site.program("note.py", NOTE)
    site.program("orders.py", ORDERS)
    with sqlite3.connect(site.root / "shop.db") as db:
        db.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)")
        db.executemany("INSERT INTO orders VALUES (?, ?)",
                       [(order_id(i), 100 + i) for i in range(RECORDS)])
    site.write([{"name": "note", "program": "note.py"}])
    data = json.loads(site.manifest.read_text())
    data["resources"] = [orders_collection()] if collections is None else collections
    site.manifest.write_text(json.dumps(data, indent=2))
    return site
