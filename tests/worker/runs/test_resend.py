"""A keyed request sent again until its answer is known (worker/runs/resend.py):
the decision after each attempt, on a fake clock whose waits pass at once,
alone and through the run context (journal, deadline, resume); and the
server's run whose worker is killed while the fake payment service holds
its refund."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from staal.journal.reader import read_journal
from staal.program import ActionFailed
from staal.runtime.clock import FixedClock
from staal.supervisor.store.ledger import read_ledger
from staal.worker.runs.actions import Performed, RunStopped
from staal.worker.runs.resend import (
    NEXT,
    RESEND_WINDOW_MS,
    Attempted,
    InDoubt,
    NotSent,
    ResendBound,
    Step,
    resend_bound,
    send_keyed,
)
from tests.helpers.killer import zygote
from tests.helpers.servers import RawServer, Site, stripe_refund_grant
from tests.worker.runs.test_engine import RUN, T0, Run, Service, in_doubt_journal

IN_USE = "POST /v1/refunds answered 409 (idempotency_key_in_use): still being processed"
DONE = {"id": "re_1", "status": "succeeded"}


@pytest.fixture(autouse=True)
def no_kill_points(monkeypatch):
    monkeypatch.delenv("STAAL_TEST_KILL_POINTS", raising=False)
    monkeypatch.delenv("STAAL_KILL_AT", raising=False)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def journal(tmp_path):
    return tmp_path / "runs" / "run.journal"


class Service409:
    """A service still processing the key's first request for `busy_ms` on
    the clock: 409 in use until then, then the saved answer. Records when
    each attempt started."""

    def __init__(self, clock: FixedClock, busy_ms: int | None) -> None:
        self.clock = clock
        self.until = None if busy_ms is None else clock.now_ms() + busy_ms
        self.started: list[int] = []

    def __call__(self, key: str | None = None) -> Performed:
        self.started.append(self.clock.now_ms())
        if self.until is None or self.clock.now_ms() < self.until:
            raise InDoubt(IN_USE)
        return Performed(result=DONE)


def sleeper(clock: FixedClock, waits: list[float]) -> Callable[[float], None]:
    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(round(seconds * 1000))
    return sleep


def send(clock: FixedClock, attempt: Callable[[], Any], doubt: str | None = None,
         until_ms: int = 60_000) -> tuple[Any, list[float]]:
    waits: list[float] = []
    bound = ResendBound(T0 + until_ms, "the run's deadline (60000 ms from its start) passed")
    return send_keyed(attempt, doubt, bound, clock, sleeper(clock, waits)), waits


# -- the decision, alone ----------------------------------------------------------


def test_every_earlier_doubt_and_attempt_has_a_next_step_and_only_nothing_sent_ever_fails():
    assert set(NEXT) == set(itertools.product((False, True), Attempted))
    failing = {rule for rule, step in NEXT.items() if step is Step.FAIL}
    assert failing == {(False, Attempted.NOT_SENT), (False, Attempted.REFUSED)}
    assert NEXT[(False, Attempted.THROTTLED)] is Step.AGAIN
    assert all(NEXT[(doubt, Attempted.STUCK)] is Step.STOP for doubt in (False, True))


def test_a_key_in_use_is_sent_again_with_backoff_until_the_service_answers(clock):
    service = Service409(clock, busy_ms=3_000)
    result, waits = send(clock, service)
    assert result == Performed(result=DONE)
    assert waits[:5] == [0.0, 0.2, 0.4, 0.8, 1.6]
    assert all(wait <= 2.0 for wait in waits)
    assert service.started[-1] >= T0 + 3_000


def test_a_key_still_in_use_at_the_deadline_stops_in_doubt_and_no_attempt_starts_past_it(clock):
    service = Service409(clock, busy_ms=None)
    with pytest.raises(InDoubt) as caught:
        send(clock, service, until_ms=10_000)
    assert caught.value.resendable is False
    message = str(caught.value)
    assert message.startswith(IN_USE)
    assert "no further attempt may start: the run's deadline (60000 ms from its start) passed" in message
    assert len(service.started) > 5
    assert all(started < T0 + 10_000 for started in service.started)


def test_an_answer_sending_again_cannot_change_stops_at_once(clock):
    calls = []

    def saved_500() -> Performed:
        calls.append(1)
        raise InDoubt("POST /v1/refunds answered 500 (api_error)", resendable=False)

    with pytest.raises(InDoubt) as caught:
        send(clock, saved_500)
    assert len(calls) == 1 and "sending it again cannot settle it" in str(caught.value)


def test_a_first_attempt_that_never_left_is_the_actions_failure_at_once(clock):
    calls = []

    def refused() -> Performed:
        calls.append(1)
        raise NotSent("POST /v1/refunds could not be sent: ConnectError")

    with pytest.raises(NotSent):
        send(clock, refused)
    assert len(calls) == 1


def test_a_429_is_sent_again_and_at_the_bound_with_nothing_else_sent_is_the_actions_failure(clock):
    answers = iter([NotSent("answered 429 (rate_limit)", Attempted.THROTTLED), None])

    def throttled_once() -> Performed:
        answer = next(answers)
        if answer is not None:
            raise answer
        return Performed(result=DONE)

    assert send(clock, throttled_once)[0] == Performed(result=DONE)

    def throttled() -> Performed:
        raise NotSent("answered 429 (rate_limit)", Attempted.THROTTLED)

    with pytest.raises(NotSent):
        send(clock, throttled, until_ms=5_000)


def test_after_an_attempt_that_may_have_happened_no_connection_is_no_failure_and_is_retried(clock):
    answers = iter([NotSent("could not be sent: ConnectError"),
                    NotSent("could not be sent: ConnectError"), None])

    def comes_back() -> Performed:
        answer = next(answers)
        if answer is not None:
            raise answer
        return Performed(result=DONE)

    result, waits = send(clock, comes_back, doubt="the attempt sent before the run stopped "
                                                  "may have happened")
    assert result == Performed(result=DONE) and len(waits) == 2


def test_after_an_attempt_that_may_have_happened_a_401_keeps_it_in_doubt_at_once(clock):
    calls = []

    def unauthorized() -> Performed:
        calls.append(1)
        raise NotSent("POST /v1/refunds answered 401", Attempted.REFUSED)

    with pytest.raises(InDoubt) as caught:
        send(clock, unauthorized, doubt="the attempt sent before the run stopped may have happened")
    assert len(calls) == 1
    assert str(caught.value).startswith("the attempt sent before the run stopped may have happened; "
                                        "then POST /v1/refunds answered 401")


def test_a_service_that_never_answers_stays_in_doubt_once_the_bound_comes(clock):
    def unreachable() -> Performed:
        raise NotSent("could not be sent: ConnectError")

    with pytest.raises(InDoubt) as caught:
        send(clock, unreachable, doubt="the attempt sent before the run stopped may have happened",
             until_ms=5_000)
    assert "then could not be sent" in str(caught.value) and "deadline" in str(caught.value)


def test_the_bound_is_the_deadline_or_max_wait_and_never_past_the_keys_window():
    with_deadline = resend_bound(T0, T0, T0 + 30_000, 30_000, 300_000)
    assert with_deadline.until_ms == T0 + 30_000 and "deadline (30000 ms" in with_deadline.why
    without = resend_bound(T0 + 5_000, T0, None, None, 300_000)
    assert without.until_ms == T0 + 305_000 and "max_wait (300 s)" in without.why
    late = resend_bound(T0 + RESEND_WINDOW_MS - 1_000, T0, None, None, 300_000)
    assert late.until_ms == T0 + RESEND_WINDOW_MS and "24-hour window" in late.why


# -- through the run context --------------------------------------------------------


def test_a_resumed_keyed_op_still_in_use_is_sent_again_until_done_and_nothing_waits(journal, clock):
    in_doubt_journal(journal, clock, "keyed")
    resumed = Run(journal, clock, deadline_ms=60_000)
    service = Service409(clock, busy_ms=3_000)
    assert resumed.post(service, {"n": 1}) == DONE
    assert len(service.started) > 2
    assert resumed.finish({"ok": True}).outcome == "done"
    state = read_journal(journal)
    assert state.ops[1].settled and state.stopped is None


def test_a_keyed_op_in_use_when_the_deadline_passes_stops_and_waits_for_an_operator(journal, clock):
    in_doubt_journal(journal, clock, "keyed")
    resumed = Run(journal, clock, deadline_ms=20_000)
    service = Service409(clock, busy_ms=None)
    with pytest.raises(RunStopped) as caught:
        resumed.post(service, {"n": 1})
    assert all(started < T0 + 20_000 for started in service.started)
    assert "may or may not have happened" in str(caught.value)
    assert "the run's deadline (20000 ms from its start) passed" in str(caught.value)
    outcome = resumed.finish({"ignored": True})
    assert (outcome.outcome, outcome.op) == ("stopped", 1)
    state = read_journal(journal)
    assert state.in_doubt() == [1] and state.stopped.op == 1 and state.end is None


def test_a_keyed_post_whose_answer_is_lost_is_sent_again_under_its_key_in_the_same_run(
        journal, clock):
    def answer(call: int) -> Performed:
        if call == 1:
            raise InDoubt("POST https://api.example.com/v1/customers/cus_1 was sent and its "
                          "answer was lost: ReadTimeout")
        return Performed(result={"status": 201})

    run = Run(journal, clock)
    service = Service(journal, answer=answer)
    assert run.post(service, {"n": 1}) == {"status": 201}
    assert service.keys == [f"{RUN}-1", f"{RUN}-1"]
    assert read_journal(journal).ops[1].outcome.ok


def test_a_resumed_keyed_post_that_cannot_connect_is_not_recorded_as_failed(journal, clock):
    in_doubt_journal(journal, clock, "keyed")
    resumed = Run(journal, clock, deadline_ms=10_000)

    def unreachable(key: str | None) -> Performed:
        raise NotSent("POST https://api.example.com/v1/customers/cus_1 could not be sent")

    with pytest.raises(RunStopped):
        resumed.post(unreachable, {"n": 1})
    assert read_journal(journal).in_doubt() == [1]


def test_a_first_keyed_post_that_cannot_connect_fails_as_action_at_once(journal, clock):
    run = Run(journal, clock)
    calls = []

    def unreachable(key: str | None) -> Performed:
        calls.append(key)
        raise NotSent("POST https://api.example.com/v1/customers/cus_1 could not be sent")

    with pytest.raises(ActionFailed) as caught:
        run.post(unreachable, {"n": 1})
    assert caught.value.kind == "action" and "could not be sent" in caught.value.message
    assert len(calls) == 1 and run.waits == []
    assert read_journal(journal).ops[1].outcome.ok is False


# -- through the server: a worker killed while the service holds its refund ---------

REFUND = """
from staal import Money
from staal.caps import StripeRefund

def main(order: str, amount: Money, pay: StripeRefund) -> dict:
    refund = pay.refund(order, amount, "requested_by_customer")
    return {"refund": refund["id"], "status": refund["status"]}
"""


def worker_talking_to(manifest: Path, port: int) -> psutil.Process:
    """The worker (a child of the manifest's zygote) with a connection open
    to `port`: the one whose request the service holds."""
    for worker in zygote(manifest).children():
        if any(c.raddr and c.raddr.port == port for c in worker.net_connections(kind="tcp")):
            return worker
    raise AssertionError(f"no worker has a connection to port {port}")


def status_json(manifest: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status", str(manifest),
                           "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_worker_killed_while_its_refund_is_held_is_resumed_and_done_with_one_refund_and_no_wait(
        tmp_path, payments):
    """The service holds the refund 3 s; the worker is SIGKILLed meanwhile.
    The run resumes in a new worker, whose re-send under the same key is
    answered 409 idempotency_key_in_use until the first is done, then with
    its refund: the call is answered, and nothing waits for an operator."""
    site = Site(tmp_path)
    site.program("refund.py", REFUND)
    site.write([{"name": "refund", "program": "refund.py",
                 "grants": {"pay": stripe_refund_grant(payments.base)}}])
    intent = payments.intent(amount=5000)
    payments.fault("/v1/refunds", "hang", hold_ms=3000)
    port = int(payments.base.rsplit(":", 1)[1])
    with RawServer(site, env={"STRIPE_SECRET_KEY": payments.key}) as server:
        server.initialize()
        call = server.request("tools/call", {"name": "refund", "arguments": {
            "order": intent["id"], "amount": {"amount": "20", "currency": "USD"}}})
        payments.wait("/v1/refunds", held=1)
        os.kill(worker_talking_to(site.manifest, port).pid, signal.SIGKILL)
        answer = server.answer(call, timeout=120)["result"]
        (lost,) = server.stderr.events("worker_lost")
        run = lost["run"]
        assert status_json(site.manifest)["runs"] == []
        server.close_stdin()
        assert server.wait_exit() == 0
    [refund] = payments.refunds()
    assert answer["isError"] is False, answer
    assert answer["structuredContent"] == {"result": {"refund": refund["id"], "status": "succeeded"}}
    posts = payments.requests("POST")
    assert len(posts) >= 2  # the first, and the resumed run's re-sends
    assert {p["headers"]["idempotency-key"] for p in posts} == {f"{run}-1"}
    assert not site.waiting_record(run).exists()
    assert server.stderr.events("run_waits_for_operator") == []
    assert [r["type"] for r in site.journal_records("refund", run) if r["type"] == "stopped"] == []
    assert read_ledger(site.ledger_path).run(run).state == "settled"
