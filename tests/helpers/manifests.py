"""Building manifests for tests: a valid one, and ways to break it."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from staal.errors import ManifestError
from staal.manifest.check import check

STRIPE_GRANT: dict[str, Any] = {
    "cap": "payments.stripe.refund",
    "each": {"amount": "50.00", "currency": "USD"},
    "uses": 1,
    "needs": {
        "get": {"cap": "net.http.get", "only": ["https://api.stripe.com/v1/payment_intents/*"]},
        "post": {"cap": "net.http.post", "only": ["https://api.stripe.com/v1/refunds"],
                 "idempotency_key": True},
        "key": {"env": "STRIPE_SECRET_KEY"},
    },
}

# Seed 000 section 2's example, with the program a Python file and the
# connect timeout every tool must give.
SEED_EXAMPLE: dict[str, Any] = {
    "server": {"name": "shop-actions", "journals": "journals", "keep": 90,
               "max_concurrent_runs": 8, "notify": ["/bin/true"],
               "notify_env": ["SLACK_WEBHOOK_URL"]},
    "model": {"provider": "anthropic", "model": "claude-sonnet-5-5",
              "api_key": {"env": "ANTHROPIC_API_KEY"}, "timeout_ms": 60000, "retries": 2},
    "tools": [
        {
            "name": "refund_order",
            "title": "Refund an order",
            "description": "Refund part of an order to the customer's original payment.",
            "program": "refund.py",
            "entry": "main",
            "grants": {"pay": STRIPE_GRANT},
            "net": {"timeout_ms": 10000, "connect_timeout_ms": 2000},
            "deadline": "120s",
            "max_concurrent_runs": 2,
            "once": {"by": ["order"], "keep": "30d"},
            "quota": {"window": "24h", "calls": 100,
                      "money": {"amount": "500.00", "currency": "USD"}},
        }
    ],
}


def write_programs(directory: Path, *names: str) -> None:
    """The files a test manifest names: its programs, and the (empty)
    database `shop.db` a SQLite grant may name, which must exist."""
    for name in names or ("refund.py",):
        (directory / name).write_text("def main(order: str) -> dict:\n    return {}\n")
    (directory / "shop.db").touch()


def seed_example() -> dict[str, Any]:
    return copy.deepcopy(SEED_EXAMPLE)


def problems_of(directory: Path, data: Any) -> list[str]:
    """Every problem the manifest check finds in `data` (none: an empty list)."""
    try:
        check(data, directory / "manifest.json")
    except ManifestError as exc:
        return list(exc.problems)
    return []


def broken(directory: Path, change: Callable[[dict], Any]) -> list[str]:
    data = seed_example()
    change(data)
    return problems_of(directory, data)


def write_manifest(directory: Path, data: Any) -> Path:
    path = directory / "manifest.json"
    path.write_text(json.dumps(data, indent=2))
    return path
