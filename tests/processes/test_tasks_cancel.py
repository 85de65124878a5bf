"""Cancelling a task whose run has started (issue 28 item 5; DESIGN.md
section 8): it works as a deadline does. The run's refund is held by the
fake payment service when the task is cancelled; once the service lets it
go, the refund completes (an action is never cut in half), the run's next
action never reaches the service, the journal ends `cancelled`, tasks/get
says `cancelled`, and the ledger settled the run once with the refund it
made. In 2025-11-25 the cancel is answered with the task cancelled once its
run has stopped, and a second cancel of the ended task is refused; in
2026-07-28 it is acknowledged at once, and again once the task has ended.
Another caller's cancel is answered as for a task that does not exist, and
its run goes on to complete. A task cancelled before its run is handed to a
worker runs nothing: its reservation is given back (the quota with it) and
it answers cancelled. A cancel is durable before it is acknowledged: the
server killed right after recording it resumes the run cancelled at its
next start, and the run's next action never starts."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from staal.journal.reader import read_journal
from staal.money import Money
from staal.protocol.mcp.revisions import CLIENT_CAPABILITIES_KEY
from staal.protocol.mcp.tasks import TASKS_EXTENSION
from staal.supervisor.store.ledger import read_ledger
from tests.helpers.http_servers import HttpServer
from tests.helpers.payments import Payments
from tests.helpers.recorder import WAIT
from tests.helpers.servers import RawServer, Site, stripe_refund_grant
from tests.processes.test_callers_http import ops, support
from tests.processes.test_tasks_http import NOBODYS, legacy, modern, tasks_site, unknown_alike

USD20 = {"amount": "20.00", "currency": "USD"}
WITH_TASKS = {"_meta": {CLIENT_CAPABILITIES_KEY: {"extensions": {TASKS_EXTENSION: {}}}}}
# A refund (held by the service in these tests), then a read of the order:
# the read is the action a cancel keeps from starting.
REFUND_THEN_READ = '''
from staal import Money
from staal.caps import StripeRefund


def main(order: str, amount: Money, pay: StripeRefund) -> dict:
    refund = pay.refund(order, amount, "requested_by_customer")
    order_now = pay.payment_intent(order)
    return {"refund": refund["id"], "received": order_now["amount_received"]}
'''


def cancel_site(tmp_path: Path, payments: Payments) -> Site:
    site = Site(tmp_path)
    (tmp_path / "refund_then_read.py").write_text(REFUND_THEN_READ)
    site.write([{"name": "refund_then_read", "program": "refund_then_read.py", "task": "optional",
                 "grants": {"pay": stripe_refund_grant(payments.base)}}])
    return site


@contextmanager
def held_task(tmp_path: Path, payments: Payments, modern: bool) -> Iterator[tuple[Site, RawServer, str]]:
    """A server with a task whose run's refund the service holds: the site,
    the server and the task's id."""
    site = cancel_site(tmp_path, payments)
    payments.fault("/v1/refunds", "hang")
    with RawServer(site, {"STRIPE_SECRET_KEY": payments.key}) as server:
        server.initialize()
        yield site, server, held_run(server, payments, modern)


def held_run(server: RawServer, payments: Payments, modern: bool) -> str:
    """A task whose run's refund the service holds now; its id."""
    order = payments.intent(amount=5000)["id"]
    params = {"name": "refund_then_read", "arguments": {"order": order, "amount": USD20}}
    if modern:
        created = server.call("tools/call", {**params, **WITH_TASKS}, modern=True)["result"]
        assert created["resultType"] == "task", created
        run = created["taskId"]
    else:
        run = server.call("tools/call", {**params, "task": {}})["result"]["task"]["taskId"]
    payments.wait("/v1/refunds", held=1)
    return run


def assert_cancelled_with_one_refund(site: Site, payments: Payments, run: str) -> None:
    end = read_journal(site.journal("refund_then_read", run)).end
    assert end is not None and end.outcome == "failed"
    assert end.failure is not None and end.failure.kind == "cancelled"
    # Stopped at the engine's check before op 2, or, when the cancel's wait
    # bound fires in the few lines of program between the two actions, there:
    # either way after the refund ended and before the read began.
    assert ("before op 2 could start" in end.failure.message
            or "outside any action" in end.failure.message), end.failure.message
    assert len(payments.refunds()) == 1  # the held refund finished: it was not cut
    assert payments.requests("POST", "/v1/refunds") != []
    assert payments.requests("GET") == []  # the read after it never reached the service
    (entry,) = read_ledger(site.ledger_path).runs()
    assert (entry.run, entry.state, entry.outcome) == (run, "settled", "failed")
    assert entry.charged == (Money.from_wire(USD20),)  # what it spent, settled


def test_a_2025_11_25_cancel_stops_the_run_before_its_next_action_and_answers_cancelled(
        tmp_path, payments):
    with held_task(tmp_path, payments, modern=False) as (site, server, run):
        cancelling = server.request("tasks/cancel", {"taskId": run})  # answered once it stopped
        server.stderr.wait_event("run_cancel_asked", run=run)
        payments.release()
        cancelled = server.answer(cancelling)["result"]
        assert (cancelled["taskId"], cancelled["status"]) == (run, "cancelled")
        got = server.call("tasks/get", {"taskId": run})["result"]
        assert got["status"] == "cancelled" and "cancelled" in got["statusMessage"]
        again = server.call("tasks/cancel", {"taskId": run})
        assert again["error"]["code"] == -32602 and "already cancelled" in again["error"]["message"]
    assert_cancelled_with_one_refund(site, payments, run)


def test_a_2026_07_28_cancel_is_acknowledged_and_the_run_ends_cancelled_before_its_next_action(
        tmp_path, payments):
    with held_task(tmp_path, payments, modern=True) as (site, server, run):
        ack = server.call("tasks/cancel", {"taskId": run, **WITH_TASKS}, modern=True)["result"]
        assert "taskId" not in ack and "status" not in ack
        working = server.call("tasks/get", {"taskId": run, **WITH_TASKS}, modern=True)["result"]
        assert working["status"] == "working"  # its refund is still in progress
        payments.release()
        server.stderr.wait_event("run_ended", run=run)
        got = server.call("tasks/get", {"taskId": run, **WITH_TASKS}, modern=True)["result"]
        assert got["status"] == "cancelled" and "result" not in got and "error" not in got
        again = server.call("tasks/cancel", {"taskId": run, **WITH_TASKS}, modern=True)["result"]
        assert "taskId" not in again  # an ended task's cancel: the same acknowledgement
    assert_cancelled_with_one_refund(site, payments, run)


def test_another_callers_cancel_of_a_running_task_is_answered_as_unknown_and_changes_nothing(
        tmp_path, service, authorization):
    site = tasks_site(tmp_path, service, authorization.issuer)
    site.set_tool("lookup", task="optional")
    hold = service.hold("/orders/1")
    with HttpServer(site) as http:
        owner, other = ops(http, authorization), support(http, authorization)
        created = modern(owner, "tools/call", {"name": "lookup",
                                               "arguments": {"url": service.base + "/orders/1"}})
        task_id = created["result"]["taskId"]
        assert hold.arrived.wait(WAIT), "the run's read never reached the service"
        nobodys = modern(other, "tasks/cancel", {"taskId": NOBODYS})
        assert unknown_alike(modern(other, "tasks/cancel", {"taskId": task_id}), nobodys, task_id)
        nobodys = legacy(other, "tasks/cancel", {"taskId": NOBODYS})
        assert unknown_alike(legacy(other, "tasks/cancel", {"taskId": task_id}), nobodys, task_id)
        hold.release.set()
        ended = legacy(owner, "tasks/result", {"taskId": task_id})["result"]
        assert ended["isError"] is False and ended["structuredContent"] == {"result": {"status": 200}}
        assert modern(owner, "tasks/get", {"taskId": task_id})["result"]["status"] == "completed"
        assert "run_cancel_asked" not in http.stderr.text


READ_THEN_WAIT = '''
import time

from staal.caps import StripeRefund


def main(order: str, pay: StripeRefund) -> dict:
    pay.payment_intent(order)
    time.sleep(120)  # outside any action: bounded by max_wait, or ended by a cancel
    return {"slept": True}
'''


def test_a_cancel_ends_a_wait_outside_the_runs_actions_at_once(tmp_path, payments):
    site = Site(tmp_path)
    (tmp_path / "read_then_wait.py").write_text(READ_THEN_WAIT)
    site.write([{"name": "read_then_wait", "program": "read_then_wait.py", "task": "optional",
                 "max_wait": "10m", "grants": {"pay": stripe_refund_grant(payments.base)}}])
    order = payments.intent(amount=5000)["id"]
    with RawServer(site, {"STRIPE_SECRET_KEY": payments.key}) as server:
        server.initialize()
        created = server.call("tools/call", {"name": "read_then_wait", "arguments": {"order": order},
                                             **WITH_TASKS}, modern=True)["result"]
        run = created["taskId"]
        payments.wait(f"/v1/payment_intents/{order}", requests=1)
        server.call("tasks/cancel", {"taskId": run, **WITH_TASKS}, modern=True)
        server.stderr.wait_event("run_ended", run=run)  # well before its max_wait of 10 minutes
        got = server.call("tasks/get", {"taskId": run, **WITH_TASKS}, modern=True)["result"]
        assert got["status"] == "cancelled"
    end = read_journal(site.journal("read_then_wait", run)).end
    assert end is not None and end.failure is not None and end.failure.kind == "cancelled"
    assert "outside any action" in end.failure.message  # the sleep was cut, not an action


def test_a_task_cancelled_before_its_run_is_sent_runs_nothing_and_gives_its_quota_back(
        tmp_path, payments):
    fifo = tmp_path / "pause"
    os.mkfifo(fifo)
    site = Site(tmp_path)
    (tmp_path / "refund_then_read.py").write_text(REFUND_THEN_READ)
    site.write([{"name": "refund_then_read", "program": "refund_then_read.py", "task": "optional",
                 "quota": {"window": "1h", "calls": 1},
                 "grants": {"pay": stripe_refund_grant(payments.base)}}])
    # The call waits once its run's reserve and arguments are durable, before
    # its run is handed to the worker it took.
    env = {"STRIPE_SECRET_KEY": payments.key, "STAAL_TEST_KILL_POINTS": "1",
           "STAAL_PAUSE_AT": "supervisor:inputs", "STAAL_PAUSE_FIFO": str(fifo)}
    order = payments.intent(amount=5000)["id"]
    params = {"name": "refund_then_read", "arguments": {"order": order, "amount": USD20}}
    with RawServer(site, env) as server:
        server.initialize()
        creating = server.request("tools/call", {**params, **WITH_TASKS}, modern=True)
        server.stderr.wait_for(lambda line: "paused at supervisor:inputs" in line, what="the pause")
        (entry,) = read_ledger(site.ledger_path).runs()
        run = entry.run
        ack = server.call("tasks/cancel", {"taskId": run, **WITH_TASKS}, modern=True)
        assert "result" in ack, ack
        with open(fifo, "wb"):
            pass  # the call goes on
        assert server.answer(creating)["result"]["taskId"] == run
        server.stderr.wait_event("run_ended", run=run, outcome="released")
        got = server.call("tasks/get", {"taskId": run, **WITH_TASKS}, modern=True)["result"]
        assert got["status"] == "cancelled" and "nothing was done" in got["statusMessage"]
        assert server.stderr.events("run_started", run=run) == []  # no worker was sent it
        assert not site.journal("refund_then_read", run).exists()
        assert payments.requests() == []
        (entry,) = read_ledger(site.ledger_path).runs()
        assert entry.state == "released"
        # Its quota of one call an hour was given back: the next call runs.
        again = server.call("tools/call", params)["result"]
        assert again["isError"] is False, again
    assert len(payments.refunds()) == 1  # the second call's


READ_WAIT_REFUND = '''
import time

from staal import Money
from staal.caps import StripeRefund


def main(order: str, amount: Money, pay: StripeRefund) -> dict:
    pay.payment_intent(order)
    print("read")
    time.sleep(120)  # outside any action: a cancel ends it
    refund = pay.refund(order, amount, "requested_by_customer")
    return {"refund": refund["id"]}
'''


def test_a_cancel_recorded_before_the_server_died_resumes_the_run_cancelled_at_the_next_start(
        tmp_path, payments):
    site = Site(tmp_path)
    (tmp_path / "read_wait_refund.py").write_text(READ_WAIT_REFUND)
    site.write([{"name": "read_wait_refund", "program": "read_wait_refund.py", "task": "optional",
                 "max_wait": "10m", "grants": {"pay": stripe_refund_grant(payments.base)}}])
    order = payments.intent(amount=5000)["id"]
    params = {"name": "read_wait_refund", "arguments": {"order": order, "amount": USD20}}
    env = {"STRIPE_SECRET_KEY": payments.key}
    # Killed once the cancel is durable, before it reaches the worker or is answered.
    server = RawServer(site, {**env, "STAAL_TEST_KILL_POINTS": "1",
                              "STAAL_KILL_AT": "supervisor:cancel"})
    try:
        server.initialize()
        run = server.call("tools/call", {**params, **WITH_TASKS}, modern=True)["result"]["taskId"]
        server.stderr.wait_event("print", run=run)  # its read is journaled; it waits
        family = psutil.Process(server.process.pid).children(recursive=True)
        cancelling = server.request("tasks/cancel", {"taskId": run, **WITH_TASKS}, modern=True)
        assert server.wait_exit() == -signal.SIGKILL  # at its kill point
        for process in family:  # its zygote and its worker, still waiting
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        answers = [m for m in server.messages() if isinstance(m, dict) and m.get("id") == cancelling]
        assert answers == []  # never acknowledged
    finally:
        server.stop()
    with RawServer(site, env) as again:
        again.initialize()  # answered once recovery resumed the run to its end
        got = again.call("tasks/get", {"taskId": run, **WITH_TASKS}, modern=True)["result"]
        assert got["status"] == "cancelled", got
    end = read_journal(site.journal("read_wait_refund", run)).end
    assert end is not None and end.failure is not None and end.failure.kind == "cancelled"
    assert "outside any action" in end.failure.message  # its wait cut at once, as resumed
    assert len(payments.requests("GET", f"/v1/payment_intents/{order}")) == 1  # replayed
    assert payments.requests("POST") == []  # the refund after the wait never started
    (entry,) = read_ledger(site.ledger_path).runs()
    assert (entry.state, entry.outcome) == ("settled", "failed")
