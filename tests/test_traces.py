"""Traces (issue 17): the span of a call in the supervisor, its run's in the
forked worker, and each action's, checked with the SDK's in-memory exporter
against the real server (ledger, zygote, workers) run in this process."""

from __future__ import annotations

import hashlib
import json
import os

from opentelemetry.trace import StatusCode

from staal.protocol.results import Done, Failed, Refused, Stopped
from staal.tracecontext import TraceParent
from tests.payments import Payments
from tests.servers import NET, Closer, Site, stripe_refund_grant
from tests.traced import CLIENT, Traced, a_call, run_traced

REFUND = """
from staal import Money, fail
from staal.caps import StripeRefund

def main(order: str, amount: Money, pay: StripeRefund, twice: bool = False) -> dict:
    intent = pay.payment_intent(order)
    if amount > Money.from_minor(intent["amount_received"], intent["currency"]):
        fail("validation", "refund exceeds what was paid")
    refund = pay.refund(order, amount, "requested_by_customer")
    if twice:
        pay.refund(order, amount, "requested_by_customer")
    return {"refund": refund["id"], "status": refund["status"]}
"""

SEND = """
from staal.caps import HttpPost

def main(url: str, post: HttpPost) -> dict:
    return {"status": post.post(url, json={"pay": 1}).status_code}
"""


def usd(amount: str) -> dict:
    return {"amount": amount, "currency": "USD"}


def refund_site(site: Site, payments: Payments) -> None:
    site.program("refund.py", REFUND)
    site.write([{"name": "refund", "program": "refund.py",
                 "grants": {"pay": stripe_refund_grant(payments.base)},
                 "net": {"timeout_ms": 20000, "connect_timeout_ms": 2000}}])


def every_text(traced: Traced) -> str:
    """Every exported span's name, attribute names and values, and status
    description, as one text to search."""
    parts = []
    for span in traced.spans:
        parts.append(span.name)
        parts.append(span.status.description or "")
        for key, value in (span.attributes or {}).items():
            parts.append(f"{key}={value}")
        for key, value in span.resource.attributes.items():
            parts.append(f"{key}={value}")
    return "\n".join(parts)


def test_a_call_its_run_and_each_action_are_spans_of_the_clients_trace_across_three_processes(
        tmp_path, payments, monkeypatch):
    monkeypatch.setenv("STRIPE_SECRET_KEY", payments.key)
    site = Site(tmp_path)
    refund_site(site, payments)
    intent = payments.intent(amount=5000)
    traced = run_traced(site.manifest, [a_call("refund", {"order": intent["id"],
                                                          "amount": usd("35.00")})],
                        tmp_path / "server.log")
    [outcome] = traced.outcomes
    assert isinstance(outcome, Done)
    [call] = traced.named("tools/call")
    assert call.name == "tools/call refund"
    # The client's trace is continued: same trace, the client's span as parent.
    assert f"{call.context.trace_id:032x}" == CLIENT.trace_id
    assert f"{call.parent.span_id:016x}" == CLIENT.span_id and call.parent.is_remote
    assert call.attributes["staal.tool"] == "refund"
    assert call.attributes["staal.call.outcome"] == "ok"
    assert call.attributes["staal.run.id"] == outcome.run
    assert "staal.caller.hash" not in call.attributes  # the local stdio client has no identity
    [run] = traced.children_of(call)
    assert run.name == "staal.run refund"
    assert run.context.trace_id == call.context.trace_id
    assert run.attributes["staal.run.id"] == outcome.run
    assert run.attributes["staal.run.outcome"] == "done"
    # Timed in the forked worker, not in this process.
    assert run.attributes["process.pid"] != os.getpid()
    assert call.start_time <= run.start_time <= run.end_time <= call.end_time
    actions = sorted(traced.children_of(run), key=lambda s: s.attributes["staal.action.op"])
    assert [(a.attributes["staal.action.op"], a.attributes["staal.action.name"],
             a.attributes["staal.action.outcome"]) for a in actions] == [
        (1, "payment_intent", "ok"), (2, "refund", "ok")]
    assert all(a.attributes["staal.action.capability"] == "payments.stripe.refund" for a in actions)
    # The keyed POST's idempotency key appears only as its SHA-256.
    key = f"{outcome.run}-2"
    assert actions[1].attributes["staal.action.idempotency_key_sha256"] == \
        hashlib.sha256(key.encode()).hexdigest()
    assert "staal.action.idempotency_key_sha256" not in actions[0].attributes
    [sent] = [r for r in payments.requests("POST", "/v1/refunds")]
    assert sent["headers"]["idempotency-key"] == key
    # Nothing exported holds the secret, an argument value, the key itself or a result.
    text = every_text(traced)
    for value in (payments.key, intent["id"], "35.00", "3500", key, outcome.result["refund"],
                  payments.base, "127.0.0.1"):
        assert value not in text, value
