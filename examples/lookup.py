"""Look up a payment intent: a read-only tool."""

from staal.caps import HttpGet

BASE = "http://127.0.0.1:8765/v1/payment_intents/"


def main(order: str, get: HttpGet) -> dict:
    intent = get.get(BASE + order).json()
    return {
        "order": intent["id"],
        "amount_received": intent["amount_received"],
        "currency": intent["currency"],
        "status": intent["status"],
    }
