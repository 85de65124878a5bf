"""What `staal config` writes for a program: a run config whose grants and
inputs are placeholders the operator edits (and which pass the checks as
they are)."""

from __future__ import annotations

from typing import Any

from staal.records.runconfig import DEFAULT_CPU_MS, DEFAULT_MAX_STEPS, SCRIPT_NET

_STRIPE_NEEDS = {
    "get": {"cap": "net.http.get", "only": ["https://api.stripe.com/v1/payment_intents/*"]},
    "post": {"cap": "net.http.post", "only": ["https://api.stripe.com/v1/refunds"],
             "idempotency_key": True},
    "key": {"env": "STRIPE_SECRET_KEY"},
}

PLACEHOLDER_GRANTS: dict[str, dict[str, Any]] = {
    "net.http.get": {"only": ["https://example.com/**"], "uses": 10},
    "net.http.post": {"only": ["https://example.com/**"], "uses": 1, "idempotency_key": True},
    "payments.stripe.refund": {"each": {"amount": "10.00", "currency": "USD"}, "uses": 1,
                               "needs": _STRIPE_NEEDS},
    "model.complete": {"uses": 1},
    "db.sqlite.read": {"path": "data.db"},
    "db.sqlite.write": {"path": "data.db", "uses": 1},
    "db.postgres.read": {"dsn": {"env": "DATABASE_URL"}},
    "db.postgres.write": {"dsn": {"env": "DATABASE_URL"}, "uses": 1},
    "clock.now": {"uses": 10},
    "random.bytes": {"uses": 10},
    "ffi.c": {"library": "libc.so.6"},
}


def placeholder_config(program: str, entry: str, capabilities: dict[str, str],
                       inputs: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "program": program,
        "entry": entry,
        "grants": {name: {"cap": cap, **PLACEHOLDER_GRANTS[cap]}
                   for name, cap in capabilities.items()},
        "net": {"timeout_ms": SCRIPT_NET.timeout_ms,
                "connect_timeout_ms": SCRIPT_NET.connect_timeout_ms},
        "limits": {"max_steps": DEFAULT_MAX_STEPS, "cpu_ms": DEFAULT_CPU_MS},
        "inputs": inputs,
    }
    if "model.complete" in capabilities.values():
        config["model"] = {"provider": "anthropic", "model": "claude-sonnet-4-5",
                           "api_key": {"env": "ANTHROPIC_API_KEY"}, "timeout_ms": 60000,
                           "retries": 2}
    return config
