"""The shop's orders as read-only MCP resources (manifest `resources`):
`staal://staal-examples/orders/{id}` is one order and
`staal://staal-examples/orders{?limit,cursor}` a page of them, in id order.
Each read is a run with a read grant only, journaled like a tool call."""

from staal import Money
from staal.caps import SqliteRead

COLUMNS = "id, status, total_minor, currency, payment_intent"


def _record(row: dict) -> dict:
    return {"id": row["id"], "status": row["status"],
            "total": Money.from_minor(row["total_minor"], row["currency"]),
            "payment_intent": row["payment_intent"]}


def get_order(id: str, db: SqliteRead) -> dict | None:
    rows = db.query(f"SELECT {COLUMNS} FROM orders WHERE id = ?", [id])
    return _record(rows[0]) if rows else None


def list_orders(after: str | None, limit: int, db: SqliteRead) -> list[dict]:
    rows = db.query(f"SELECT {COLUMNS} FROM orders WHERE id > ? ORDER BY id LIMIT ?",
                    [after or "", limit])
    return [_record(row) for row in rows]
