"""The flood client (`tests/helpers/flood.py`): its classification of answers, read
from a real server's answers of each kind and from answers shaped as a
balancer or a stream gives them; a 1,000-call flood from 32 clients through
HAProxy on three instances with their own quotas; a flood of refunds
through the balancer, each payment refunded exactly once; and the checks
made afterwards, shown to catch what they are for."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from staal.protocol.mcp.revisions import LEGACY, MODERN
from tests.helpers.fleet import ManifestWriter, fleet
from tests.helpers.flood import (
    KINDS,
    Flood,
    by_instance,
    call_request,
    classify,
    ledger_holds,
    refunded_exactly_once,
    tally,
)
from tests.helpers.http_servers import HttpServer
from tests.helpers.payments import Payments
from tests.helpers.recorder import Recorder, serving
from tests.helpers.servers import WAIT, Site, stripe_refund_grant

COUNT = """
def main(n: int) -> dict:
    return {"n": n}
"""
HELD = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""
BROKEN = """
from staal import fail
def main(n: int) -> dict:
    fail("validation", "n is never right")
"""
REFUND = """
from staal import Money
from staal.caps import StripeRefund

def main(order: str, pay: StripeRefund) -> dict:
    pay.payment_intent(order)
    return {"refund": pay.refund(order, Money("20", "USD"), "requested_by_customer")["id"]}
"""
QUOTA = 40


@pytest.fixture
def service() -> Iterator[Recorder]:
    with serving("GET", "/held", 200, {"ok": True}) as recorder:
        yield recorder


def post(http: httpx.Client, url: str, i: int, tool: str, arguments: dict[str, Any],
         revision: str = LEGACY):
    body, headers = call_request(i, tool, arguments, revision)
    answer = http.post(url, content=body, headers=headers)
    return classify(i, answer.status_code, answer.content)


def test_each_kind_of_answer_from_a_real_server_is_classified_and_refusals_ran_nothing(
        tmp_path, service):
    site = Site(tmp_path)
    site.program("count.py", COUNT)
    site.program("held.py", HELD)
    site.program("broken.py", BROKEN)
    site.write([{"name": "count", "program": "count.py", "quota": {"window": "1h", "calls": 1}},
                {"name": "held", "program": "held.py", "max_concurrent_runs": 1,
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/*"]}}},
                {"name": "broken", "program": "broken.py"}])
    hold = service.hold("/held")
    with HttpServer(site) as server, httpx.Client(timeout=WAIT, trust_env=False) as http:
        done = post(http, server.url, 1, "count", {"n": 1})
        over = post(http, server.url, 2, "count", {"n": 2}, MODERN)
        failed = post(http, server.url, 3, "broken", {"n": 3})
        with httpx.Client(timeout=WAIT, trust_env=False) as other:
            body, headers = call_request(4, "held", {"url": service.base + "/held"}, LEGACY)
            pending = other.build_request("POST", server.url, content=body, headers=headers)
            first: list[httpx.Response] = []
            sender = threading.Thread(target=lambda: first.append(other.send(pending)))
            sender.start()
            assert hold.arrived.wait(WAIT)
            busy = post(http, server.url, 5, "held", {"url": service.base + "/held"})
            hold.release.set()
            sender.join(WAIT)
        held = classify(4, first[0].status_code, first[0].content)
    assert (done.kind, done.result) == ("done", {"n": 1})
    assert over.kind == "over_quota" and "is over its quota" in over.text
    assert failed.kind == "failed" and failed.text == "validation: n is never right"
    assert busy.kind == "busy" and "try again later" in busy.text
    assert (held.kind, held.result) == ("done", {"status": 200})
    # The refusals ran nothing: one count run, one held run (and its one
    # GET), one broken run; nothing reserved for the refused calls.
    runs = site.ledger_events()
    reserved = sorted(e["tool"] for e in runs if e["event"] == "reserve")
    assert reserved == ["broken", "count", "held"]
    assert len(service.seen("GET", "/held")) == 1


RESULT = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "{}"}],
                                                  "structuredContent": {"result": {"n": 7}},
                                                  "isError": False}}


def refusal(text: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 7, "result": {
        "content": [{"type": "text", "text": text}], "isError": True}})


def test_the_classification_reads_streams_errors_and_the_balancers_own_answers():
    progress = {"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 0, "message": "run x started"}}
    stream = (b"event: message\ndata: " + orjson.dumps(progress) + b"\n\n"
              b": keep-alive\n\nevent: message\ndata: " + orjson.dumps(RESULT) + b"\n\n")
    assert classify(7, 200, stream).result == {"n": 7}
    assert classify(7, 200, orjson.dumps(RESULT)).kind == "done"
    no_server = classify(7, 503, b"<html><body><h1>503 Service Unavailable</h1></body></html>")
    assert no_server.kind == "failed" and no_server.text.startswith("HTTP 503")
    rpc = orjson.dumps({"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "x"}})
    assert classify(7, 200, rpc).kind == "failed"
    bare = {**RESULT, "result": {"content": [], "isError": False}}
    assert classify(7, 200, orjson.dumps(bare)).kind == "failed"
    assert classify(7, 200, b"not json").kind == "failed"
    assert classify(7, 200, refusal("the server is busy: 4 runs are in progress")).kind == "busy"
    # The forms must open the text: a failure that mentions them is a failure.
    assert classify(7, 200, refusal("validation: the server is busy: said the shop")).kind == "failed"
    quota = "tool 'count' is over its quota: 1 of 1 calls per 1h are used; it frees up at x"
    assert classify(7, 200, refusal(quota)).kind == "over_quota"
    assert classify(7, 200, refusal("this caller is over its rate limit: 5 of 5")).kind == "over_quota"
    assert set(KINDS) == {"done", "over_quota", "busy", "failed"}


def count_site(site: Site, server: dict[str, Any]) -> None:
    site.program("count.py", COUNT)
    site.write([{"name": "count", "program": "count.py",
                 "quota": {"window": "1h", "calls": QUOTA}}],
               max_concurrent_runs=32, **server)


def test_a_thousand_calls_from_32_clients_through_the_balancer_run_exactly_each_instances_quota(
        tmp_path, authorization):
    with fleet(3, count_site, authorization, root=tmp_path) as running:
        answers = Flood(running.url, "count", lambda i: {"n": i}, headers=running.headers).run()
        served = running.lb.wait_served(1000)
        ledgers = [i.site.ledger_events() for i in running.instances]
    kinds = tally(answers)
    # Busy only if a loaded machine left a call without a worker for 10 s:
    # nothing was reserved for it, and the quota went to later calls.
    assert kinds["done"] == 3 * QUOTA and kinds["failed"] == 0, [
        a for a in answers if a.kind == "failed"][:5]
    assert kinds["over_quota"] + kinds["busy"] == 1000 - 3 * QUOTA
    # Each done answer is its own call's, none twice.
    assert all(a.result == {"n": a.index} for a in answers if a.kind == "done")
    # Each instance ran exactly its quota; round robin gave each a third.
    assert by_instance(answers, "done") == {"i1": QUOTA, "i2": QUOTA, "i3": QUOTA}
    assert set(served) == {"i1", "i2", "i3"} and max(served.values()) - min(served.values()) <= 1
    for ledger in ledgers:
        runs = ledger_holds(ledger)
        assert len(runs) == QUOTA and all(seen == ["reserve", "settle"] for seen in runs.values())


def refund_site(payments: Payments) -> ManifestWriter:
    def write(site: Site, server: dict[str, Any]) -> None:
        site.program("refund.py", REFUND)
        site.write([{"name": "refund", "program": "refund.py",
                     "grants": {"pay": stripe_refund_grant(payments.base)}}],
                   max_concurrent_runs=16, **server)
    return write


def test_a_flood_of_refunds_through_the_balancer_refunds_each_payment_exactly_once(
        tmp_path, payments, authorization):
    intents = [payments.intent(amount=5000)["id"] for _ in range(48)]
    with fleet(3, refund_site(payments), authorization, env={"STRIPE_SECRET_KEY": payments.key},
               root=tmp_path) as running:
        answers = Flood(running.url, "refund", lambda i: {"order": intents[i]},
                        calls=len(intents), clients=8, headers=running.headers).run()
    assert tally(answers) == {"done": len(intents)}, [a.text for a in answers if a.kind != "done"][:3]
    refunds = refunded_exactly_once(payments, intents)
    assert {a.result["refund"] for a in answers} == {r["id"] for r in refunds.values()}
    assert set(by_instance(answers)) == {"i1", "i2", "i3"}


def test_the_exactly_once_check_fails_on_a_second_refund_or_a_missing_one(payments):
    first, second = payments.intent(amount=5000)["id"], payments.intent(amount=5000)["id"]
    with httpx.Client(base_url=payments.base, timeout=WAIT, trust_env=False,
                      headers={"Authorization": f"Bearer {payments.key}"}) as http:
        for amount in (1000, 1000):
            assert http.post("/v1/refunds", data={"payment_intent": first,
                                                  "amount": str(amount)}).status_code == 200
    with pytest.raises(AssertionError, match="refunded more than once"):
        refunded_exactly_once(payments, [first])
    payments.reset()
    with pytest.raises(AssertionError, match="asked but not refunded"):
        refunded_exactly_once(payments, [second])


def test_the_ledger_check_fails_on_a_second_reserve_or_a_second_settle():
    good = [{"event": "reserve", "run": "a"}, {"event": "settle", "run": "a"},
            {"event": "reserve", "run": "b"}, {"event": "release", "run": "b"},
            {"event": "reserve", "run": "c"}]
    assert ledger_holds(good) == {"a": ["reserve", "settle"], "b": ["reserve", "release"],
                                  "c": ["reserve"]}
    with pytest.raises(AssertionError, match="run a"):
        ledger_holds([*good, {"event": "reserve", "run": "a"}])
    with pytest.raises(AssertionError, match="more than one settle or release"):
        ledger_holds([*good, {"event": "release", "run": "a"}])
    with pytest.raises(AssertionError, match="run d"):
        ledger_holds([{"event": "settle", "run": "d"}])
