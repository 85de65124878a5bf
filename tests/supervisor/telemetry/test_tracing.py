"""Traces (issue 17): the span of a call in the supervisor, its run's in the
forked worker, and each action's, checked with the SDK's in-memory exporter
against the real server (ledger, zygote, workers) run in this process."""

from __future__ import annotations

import hashlib
import json
import os

from opentelemetry.trace import StatusCode

from staal.protocol.mcp.results import Done, Failed, Refused, Stopped
from staal.runtime.tracecontext import TraceParent
from staal.supervisor.auth.callers import Admitted
from staal.supervisor.auth.principal import Principal
from tests.helpers.payments import Payments
from tests.helpers.servers import NET, Closer, Site, stripe_refund_grant
from tests.helpers.traced import CLIENT, Traced, a_call, run_traced

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


def one_refund(tmp_path, payments: Payments, amount: str,
               tracestate: str | None = None) -> tuple[Traced, Done, dict]:
    """A refund tool's one call of `amount` against a paid intent: its
    spans, its (done) outcome and the intent."""
    site = Site(tmp_path)
    refund_site(site, payments)
    intent = payments.intent(amount=5000)
    traced = run_traced(site.manifest, [a_call("refund", {"order": intent["id"],
                                                          "amount": usd(amount)},
                                               tracestate=tracestate)],
                        tmp_path / "server.log")
    [outcome] = traced.outcomes
    assert isinstance(outcome, Done), outcome
    return traced, outcome, intent


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
    traced, outcome, intent = one_refund(tmp_path, payments, "35.00", tracestate="vendor=7")
    [call] = traced.named("tools/call")
    assert call.name == "tools/call refund"
    # The client's trace is continued: same trace, the client's span as parent.
    assert f"{call.context.trace_id:032x}" == CLIENT.trace_id
    assert f"{call.parent.span_id:016x}" == CLIENT.span_id and call.parent.is_remote
    assert dict(call.context.trace_state) == {"vendor": "7"}  # the client's tracestate, passed on
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


def outcome_of(traced: Traced, call_span) -> tuple:
    """A call span's outcome, its run span's and its actions' outcomes."""
    runs = traced.children_of(call_span)
    run = runs[0] if runs else None
    actions = [] if run is None else sorted(
        traced.children_of(run), key=lambda s: s.attributes["staal.action.op"])
    return (call_span.attributes["staal.call.outcome"],
            None if run is None else run.attributes["staal.run.outcome"],
            [a.attributes["staal.action.outcome"] for a in actions])


def test_spans_say_ok_failed_refused_and_stopped_with_the_kind_and_never_the_message(
        tmp_path, payments, monkeypatch):
    monkeypatch.setenv("STRIPE_SECRET_KEY", payments.key)
    closer = Closer()
    closer_base = closer.base
    try:
        site = Site(tmp_path)
        site.program("refund.py", REFUND)
        site.program("send.py", SEND)
        site.write([
            {"name": "refund", "program": "refund.py",
             "grants": {"pay": stripe_refund_grant(payments.base)},
             "net": {"timeout_ms": 20000, "connect_timeout_ms": 2000}},
            {"name": "send", "program": "send.py",
             "grants": {"post": {"cap": "net.http.post", "only": [closer.base + "/*"]}},
             "net": NET},
        ])
        intent = payments.intent(amount=5000)
        order = intent["id"]
        calls = [
            # failed: the program's own fail() after its first action
            a_call("refund", {"order": order, "amount": usd("80.00")}, request_id=1),
            # refused action: the grant allows one refund, the program asks for two
            a_call("refund", {"order": order, "amount": usd("10.00"), "twice": True}, request_id=2),
            # stopped: an unkeyed POST whose answer never came is in doubt
            a_call("send", {"url": closer.base + "/pay"}, request_id=3),
            # refused call: the arguments are wrong; no run, no worker span
            a_call("refund", {"order": order}, request_id=4),
        ]
        traced = run_traced(site.manifest, calls, tmp_path / "server.log")
    finally:
        closer.stop()
    failed, refused, stopped, bad = traced.outcomes
    assert isinstance(failed, Failed) and failed.kind == "validation"
    assert isinstance(refused, Failed) and refused.kind == "capability"
    assert isinstance(stopped, Stopped)
    assert isinstance(bad, Refused) and bad.kind == "arguments"
    by_run = {s.attributes.get("staal.run.id"): s for s in traced.named("tools/call")}
    assert outcome_of(traced, by_run[failed.run]) == ("failed", "failed", ["ok"])
    assert by_run[failed.run].attributes["staal.failure.kind"] == "validation"
    assert by_run[failed.run].status.status_code is StatusCode.ERROR
    assert outcome_of(traced, by_run[refused.run]) == ("failed", "failed", ["ok", "ok", "refused"])
    assert by_run[refused.run].attributes["staal.failure.kind"] == "capability"
    assert outcome_of(traced, by_run[stopped.run]) == ("stopped", "stopped", ["stopped"])
    assert outcome_of(traced, by_run[None]) == ("refused", None, [])
    assert by_run[None].attributes["staal.refusal.kind"] == "arguments"
    # Only one refund happened (the second was refused before it was sent),
    # and the messages, which quote amounts and URLs, are in no span.
    assert len(payments.refunds()) == 1
    text = every_text(traced)
    for value in (failed.message, refused.message, stopped.message, bad.message, "80.00", "10.00",
                  closer_base, order, payments.key):
        assert value not in text, value


def test_a_malformed_traceparent_starts_a_new_trace_and_the_call_still_runs(tmp_path):
    site = Site(tmp_path)
    site.program("echo.py", "def main(text: str) -> dict:\n    return {'echo': text}\n")
    site.write([{"name": "echo", "program": "echo.py"}])
    bad = TraceParent("0" * 32, CLIENT.span_id)  # the all-zero trace id is invalid
    from staal.protocol.mcp.revisions import trace_of
    parent, _ = trace_of({"_meta": {"traceparent": bad.header()}})
    assert parent is None
    traced = run_traced(site.manifest, [a_call("echo", {"text": "hello"}, trace=parent)],
                        tmp_path / "server.log")
    [outcome] = traced.outcomes
    assert isinstance(outcome, Done) and outcome.result == {"echo": "hello"}
    [call] = traced.named("tools/call")
    assert call.parent is None
    assert f"{call.context.trace_id:032x}" not in (CLIENT.trace_id, "0" * 32)
    [run] = traced.children_of(call)
    assert run.attributes["staal.run.outcome"] == "done"
    assert traced.children_of(run) == []  # no action: no action span


def test_a_parent_that_is_not_sampled_records_nothing_in_the_worker(tmp_path):
    site = Site(tmp_path)
    site.program("echo.py", "def main(text: str) -> dict:\n    return {'echo': text}\n")
    site.write([{"name": "echo", "program": "echo.py"}])
    unsampled = TraceParent(CLIENT.trace_id, CLIENT.span_id, sampled=False)
    traced = run_traced(site.manifest, [a_call("echo", {"text": "hi"}, trace=unsampled)],
                        tmp_path / "server.log")
    assert isinstance(traced.outcomes[0], Done)
    assert traced.spans == []
    # The run message carried no traceparent: the worker recorded no spans.
    log = [json.loads(line) for line in (tmp_path / "server.log").read_text().splitlines()]
    assert any(e["event"] == "run_ended" for e in log)


def test_an_authenticated_callers_span_carries_the_ledgers_hash_of_it_never_the_subject(tmp_path):
    site = Site(tmp_path)
    site.program("echo.py", "def main(text: str) -> dict:\n    return {'echo': text}\n")
    site.write([{"name": "echo", "program": "echo.py"}])
    principal = Principal("https://issuer.example.com", "alice@example.com", "client-7")
    traced = run_traced(site.manifest, [a_call("echo", {"text": "hi"})], tmp_path / "server.log",
                        admitted=Admitted(principal, None))
    [call] = traced.named("tools/call")
    assert call.attributes["staal.caller.hash"] == principal.identity
    [reserve] = [e for e in site.ledger_events() if e["event"] == "reserve"]
    assert reserve["caller"] == principal.identity  # the same hash the ledger keeps
    text = every_text(traced)
    for value in ("alice@example.com", "client-7", "issuer.example.com"):
        assert value not in text, value


def test_a_run_resumed_after_its_worker_died_has_a_resumed_run_span_and_a_replayed_action(
        tmp_path, payments, monkeypatch):
    monkeypatch.setenv("STRIPE_SECRET_KEY", payments.key)
    # The first worker dies right after op 1's outcome (the zygote passes
    # the kill switches to its workers); its spans die with it.
    monkeypatch.setenv("STAAL_TEST_KILL_POINTS", "1")
    monkeypatch.setenv("STAAL_KILL_AT", "worker:outcome")
    monkeypatch.setenv("STAAL_KILL_ONCE", str(tmp_path / "killed-once"))
    traced, _, _ = one_refund(tmp_path, payments, "20.00")
    assert (tmp_path / "killed-once").exists()  # a worker did die
    [call] = traced.named("tools/call")
    [run] = traced.children_of(call)
    assert run.attributes["staal.run.resumed"] is True
    actions = sorted(traced.children_of(run), key=lambda s: s.attributes["staal.action.op"])
    assert [(a.attributes["staal.action.op"], a.attributes["staal.action.replayed"],
             a.attributes["staal.action.outcome"]) for a in actions] == [
        (1, True, "ok"), (2, False, "ok")]
    assert len(payments.refunds()) == 1
