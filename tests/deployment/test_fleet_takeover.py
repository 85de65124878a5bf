"""Issue 15 item 5's takeover cases on the deployment: three `serve --http`
instances behind HAProxy (`tests/helpers/fleet.py`), each with its own journal
directory, on one PostgreSQL database in the tests' private cluster, with
the fake payment service (examples/fake_payments.py) as the refunds' API.

- An instance SIGKILLed (with its zygote and workers: the machine gone)
  mid-flood of refunds, while refunds of its runs are held at the service:
  another instance takes its unfinished runs over within the lease and
  resumes them (a refund sent again carries the run's idempotency key, so
  the service answers it from the first); every payment is refunded
  exactly once, every run has one reserve and at most one settle or
  release, and no run of the dead instance is left unfinished. One of its
  runs is a task (issue 28 item 6), created through it directly and polled
  through another instance while its refund is held: once the run is taken
  over, tasks/get through an instance that neither created nor finished it
  answers `completed` with the refund, made once.
- An instance SIGSTOPped past its lease while its refund is held, then
  SIGCONTed once another took the run over and finished it: its next
  journal record is refused (fenced), its call is answered as an internal
  failure naming the run, it sends nothing more, and the run ends once.

The instances hold a short lease (`server.store.postgres.lease_s`, 6 s
instead of 15 s, renewed every 2 s), so a dead or paused instance's runs are
taken over sooner, and every wait below is bounded by that lease.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from staal.protocol.mcp.revisions import CLIENT_CAPABILITIES_KEY
from staal.protocol.mcp.tasks import TASKS_EXTENSION
from staal.supervisor.recovery.lease import LeaseTiming
from tests.deployment import test_fleet_shared
from tests.helpers.fleet import Fleet, Instance, ManifestWriter, first_event, fleet
from tests.helpers.flood import (
    Answer,
    Flood,
    call_request,
    classify,
    ledger_holds,
    refunded_exactly_once,
    store_events,
)
from tests.helpers.payments import Payments
from tests.helpers.recorder import WAIT
from tests.helpers.servers import Site, stripe_refund_grant
from tests.supervisor.store.test_journals import kill_family, pause_family, wake_family

ENV = test_fleet_shared.ENV
LEASE = LeaseTiming(6000)
STORE = {"postgres": {"dsn": {"env": ENV}, "lease_s": LEASE.lease_ms / 1000}}
# A dead instance's runs are taken over within a lease and a renewal; the
# rest is room for a loaded machine.
TAKEOVER_BOUND_S = LEASE.takeover_bound_s + WAIT * 3
REFUNDS = "/v1/refunds"
# The fixtures of the shared-ledger tests: a private cluster for the
# module, a database of its own in it for each test.
cluster = test_fleet_shared.cluster
dsn = test_fleet_shared.dsn
# A refund program as the other refund tests have it: a read of the payment
# intent, then the refund (POST, `Idempotency-Key: <run>-<op>`). `once` by
# order: a call whose answer was lost with its instance is asked again and
# answered from the run's end, never refunded again.
REFUND = """
from staal import Money
from staal.caps import StripeRefund

def main(order: str, pay: StripeRefund) -> dict:
    pay.payment_intent(order)
    return {"refund": pay.refund(order, Money("20", "USD"), "requested_by_customer")["id"]}
"""
HELD_MS = 300_000  # the service holds a refund until the test releases it
# Generous: a refund held while an instance is killed, or past a lease,
# must not time out into doubt on a loaded machine before it is released.
NET = {"timeout_ms": 180_000, "connect_timeout_ms": 10_000}
# A 2026-07-28 request that declares the tasks extension: the refund tool
# (`"task": "optional"`) answers it as a task.
WITH_TASKS = {CLIENT_CAPABILITIES_KEY: {"extensions": {TASKS_EXTENSION: {}}}}


def refund_site(root: Path, payments: Payments) -> ManifestWriter:
    """Every instance names the same program file: a run taken over is
    resumed only with the program and config it began with."""
    program = root / "refund.py"
    program.write_text(REFUND)

    def write(site: Site, server: dict[str, Any]) -> None:
        site.write([{"name": "refund", "program": str(program), "once": {"by": ["order"], "keep": "1h"},
                     "grants": {"pay": stripe_refund_grant(payments.base)}, "net": NET,
                     "task": "optional"}],
                   max_concurrent_runs=16, store=STORE, **server)
    return write


def rows(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        return conn.execute(sql, params).fetchall()


def owner_of(running: Fleet, owner: str) -> Instance:
    """The instance a store row's owner names (its journal directory ends it)."""
    return next(i for i in running.instances if owner.endswith(str(i.site.journals)))


def held_runs(payments: Payments) -> list[str]:
    """The runs whose refunds the service has received (from their keys)."""
    return [r["headers"]["idempotency-key"].rsplit("-", 1)[0]
            for r in payments.requests("POST", REFUNDS)]


def leases_held_for(dsn: str) -> list[int]:
    """How far ahead of now each instance's lease runs, in ms (at most its
    length: renewed at some moment before now, for the lease's length)."""
    now = int(time.time() * 1000)
    return [until - now for (until,) in rows(dsn, "SELECT lease_until_ms FROM staal_instances")]


def ask(running: Fleet, index: int, order: str, timeout: float) -> Answer:
    body, headers = call_request(index, "refund", {"order": order}, "2025-11-25")
    with httpx.Client(timeout=timeout, trust_env=False) as http:
        answer = http.post(running.url, content=body, headers={**headers, **running.headers})
    return classify(index, answer.status_code, answer.content)


def task_request(instance: Instance, running: Fleet, method: str,
                 params: dict[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 tasks request sent to `instance` directly (not through
    the balancer), as the fleet's caller: its JSON-RPC result."""
    answer = instance.server.modern(method, params, headers=running.headers, **WITH_TASKS)
    assert answer.status_code == 200, answer.text
    message = answer.json()
    assert "result" in message, message
    result: dict[str, Any] = message["result"]
    return result


def test_an_instance_sigkilled_mid_flood_has_its_runs_and_its_task_resumed_by_another_refunding_once(
        tmp_path, payments, dsn, authorization):
    intents = [payments.intent(amount=5000)["id"] for _ in range(30)]
    task_intent = payments.intent(amount=5000)["id"]
    payments.fault(REFUNDS, "hang", times=3, hold_ms=HELD_MS)
    env = {ENV: dsn, "STRIPE_SECRET_KEY": payments.key}
    with fleet(3, refund_site(tmp_path, payments), authorization, env=env,
               root=tmp_path / "fleet") as running:
        # The task, created through i1 itself: its refund is the first held.
        creator, poller = running.instances[0], running.instances[1]
        created = task_request(creator, running, "tools/call",
                               {"name": "refund", "arguments": {"order": task_intent}})
        assert created["resultType"] == "task" and created["status"] == "working", created
        task_id = created["taskId"]
        payments.wait(REFUNDS, held=1, timeout=TAKEOVER_BOUND_S)
        # Mid-run (its refund held at the service), polled through i2, which never ran it.
        polled = task_request(poller, running, "tasks/get", {"taskId": task_id})
        flood = Flood(running.url, "refund", lambda i: {"order": intents[i]},
                      calls=len(intents), clients=6, timeout=TAKEOVER_BOUND_S * 2,
                      headers=running.headers)
        answers: list[Answer] = []
        sender = threading.Thread(target=lambda: answers.extend(flood.run()), daemon=True)
        sender.start()
        try:
            # Three refunds are held at the service: their runs are in flight.
            payments.wait(REFUNDS, held=3, timeout=TAKEOVER_BOUND_S)
            assert held_runs(payments)[0] == task_id
            ((owner,),) = rows(dsn, "SELECT owner FROM staal_runs WHERE run = %s", (task_id,))
            victim = owner_of(running, owner)
            kill_family(victim.server)
            owned = [run for (run,) in rows(dsn, "SELECT run FROM staal_runs WHERE owner = %s",
                                            (owner,))]
            unfinished = [run for (run,) in rows(
                dsn, "SELECT r.run FROM staal_runs r LEFT JOIN staal_ends e USING (run) "
                "WHERE r.owner = %s AND e.run IS NULL", (owner,))]
        finally:
            payments.release()
        sender.join(TAKEOVER_BOUND_S * 3)
        assert not sender.is_alive() and len(answers) == len(intents)
        live = [i for i in running.instances if i is not victim]
        for run in unfinished:
            taker, taken = first_event(live, "taken_over", TAKEOVER_BOUND_S, run=run)
            assert taken["instance"] == owner
            # Resumed, or released if it never started.
            recovered = taker.server.stderr.wait_event("recovered", TAKEOVER_BOUND_S, run=run)
            if recovered["rule"] == "resuming":
                taker.server.stderr.wait_event("recovered", TAKEOVER_BOUND_S, run=run,
                                               rule="resumed")
        # The calls whose answers were lost with the victim, asked again, are
        # answered from their runs' ends (or, never reserved, run now).
        again = {a.index: ask(running, 100 + a.index, intents[a.index], TAKEOVER_BOUND_S)
                 for a in answers if a.kind != "done"}
        # The task, asked through the live instance that did not finish it.
        task_taker, _ = first_event(live, "recovered", TAKEOVER_BOUND_S, run=task_id,
                                    rule="resumed")
        (bystander,) = [i for i in live if i is not task_taker]
        task_done = task_request(bystander, running, "tasks/get", {"taskId": task_id})
        ((task_owner,),) = rows(dsn, "SELECT owner FROM staal_runs WHERE run = %s", (task_id,))
        left = rows(dsn, "SELECT r.run, r.owner FROM staal_runs r LEFT JOIN staal_ends e "
                    "USING (run) WHERE e.run IS NULL")
        events = store_events(dsn)
    assert unfinished, "the victim had no run in flight when it was killed"
    # The task: created by i1, working while i1 ran it, completed by its taker.
    assert victim is creator and task_id in unfinished
    assert polled["status"] == "working" and polled["taskId"] == task_id, polled
    assert owner_of(running, task_owner) is task_taker
    assert task_done["status"] == "completed", task_done
    assert task_done["result"]["isError"] is False
    assert {a.kind for a in again.values()} <= {"done"}, [a.text for a in again.values()][:3]
    done = [a for a in answers if a.kind == "done"] + list(again.values())
    assert len(done) == len(intents)
    refunds = refunded_exactly_once(payments, [*intents, task_intent])
    assert {a.result["refund"] for a in done} | {
        task_done["result"]["structuredContent"]["result"]["refund"]} == {
        r["id"] for r in refunds.values()}
    assert task_done["result"]["structuredContent"]["result"]["refund"] == refunds[task_intent]["id"]
    runs = ledger_holds(events)
    assert set(owned) <= set(runs)
    # Every run the victim owned is ended; none is left unfinished (nor a
    # live instance's: every refund was answered).
    assert not left, left
    assert all(runs[run] in (["reserve", "settle"], ["reserve", "release"]) for run in unfinished)
    assert any(runs[run] == ["reserve", "settle"] for run in unfinished), "none was resumed"


def test_an_instance_sigstopped_past_its_lease_is_fenced_when_it_wakes_and_sends_nothing_more(
        tmp_path, payments, dsn, authorization):
    intent = payments.intent(amount=5000)["id"]
    payments.fault(REFUNDS, "hang", times=1, hold_ms=HELD_MS)
    env = {ENV: dsn, "STRIPE_SECRET_KEY": payments.key}
    with fleet(3, refund_site(tmp_path, payments), authorization, env=env,
               root=tmp_path / "fleet") as running:
        ahead = leases_held_for(dsn)
        answers: list[Answer] = []
        calling = threading.Thread(target=lambda: answers.append(
            ask(running, 1, intent, TAKEOVER_BOUND_S * 3)), daemon=True)
        calling.start()
        paused = None
        try:
            payments.wait(REFUNDS, held=1, timeout=TAKEOVER_BOUND_S)
            (run,) = held_runs(payments)
            ((owner,),) = rows(dsn, "SELECT owner FROM staal_runs WHERE run = %s", (run,))
            paused = owner_of(running, owner)
            pause_family(paused.server)
            live = [i for i in running.instances if i is not paused]
            taker, taken = first_event(live, "taken_over", TAKEOVER_BOUND_S, run=run)
            # The held refund goes on (its answer waits in the paused
            # instance's socket); the taker's, under the same key, is
            # answered from it.
            payments.release()
            taker.server.stderr.wait_event("recovered", TAKEOVER_BOUND_S, run=run, rule="resumed")
            before_wake = payments.requests()
            wake_family(paused.server)
            paused.server.stderr.wait_event("internal_error", TAKEOVER_BOUND_S, run=run)
            calling.join(TAKEOVER_BOUND_S * 3)
        finally:
            payments.release()
            if paused is not None:
                wake_family(paused.server)
        after_wake = payments.requests()
        paused_log = paused.server.stderr.records()
        events = store_events(dsn)
        ends = rows(dsn, "SELECT kind FROM staal_ends WHERE run = %s", (run,))
        ((now_owner,),) = rows(dsn, "SELECT owner FROM staal_runs WHERE run = %s", (run,))
    # Each instance holds the manifest's lease, not the default 15 s one.
    assert len(ahead) == 3 and all(ms <= LEASE.lease_ms for ms in ahead), ahead
    assert taken["instance"] == owner and owner_of(running, now_owner) is not paused
    assert owner_of(running, now_owner) is taker
    (answer,) = answers
    assert answer.kind == "failed" and run in answer.text, answer
    refused = [e for e in paused_log if e.get("event") == "journal_refused" and e.get("run") == run]
    assert refused and all(e["kind"] == "fenced" for e in refused)
    # It sent nothing after it woke; every refund request was the run's one key.
    assert len(after_wake) == len(before_wake)
    keys = {r["headers"]["idempotency-key"] for r in after_wake if r["method"] == "POST"}
    assert len(keys) == 1 and keys.pop().startswith(run + "-")
    refunded_exactly_once(payments, [intent])
    # One reserve and one settle: the run ended once, on the taker.
    assert ledger_holds(events) == {run: ["reserve", "settle"]}
    assert ends == [("settle",)]
