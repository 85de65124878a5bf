"""Look up an order in the shop's database: a read-only tool.

The result says where the order stands, what it cost (as Money) and the
payment intent it was paid with, which is what `refund_order` refunds.
"""

from staal import Money, fail
from staal.caps import SqliteRead


def main(order: str, db: SqliteRead) -> dict:
    rows = db.query("SELECT status, total_minor, currency, payment_intent FROM orders "
                    "WHERE id = ?", [order])             # a journaled read of shop.db
    if not rows:
        fail("validation", f"there is no order {order!r}")
    row = rows[0]
    return {
        "order": order,
        "status": row["status"],
        "total": Money.from_minor(row["total_minor"], row["currency"]),
        "payment_intent": row["payment_intent"],
    }
