"""Refund part of an order, within the operator's limits (DESIGN.md section 3)."""

from staal import Money, fail
from staal.caps import StripeRefund


def main(order: str, amount: Money, pay: StripeRefund,
         reason: str = "requested_by_customer") -> dict:
    intent = pay.payment_intent(order)            # a journaled GET
    if amount > Money.from_minor(intent["amount_received"], intent["currency"]):
        fail("validation", "refund exceeds what was paid")
    refund = pay.refund(order, amount, reason)    # a journaled, idempotent POST, checked by the broker
    print("refunded", refund["id"])               # journaled, goes to stderr, never to the client
    return {"refund": refund["id"], "status": refund["status"]}
