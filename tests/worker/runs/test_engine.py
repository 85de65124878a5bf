"""staal.worker.runs.engine.RunContext in this process: every action is checked,
journaled before and after it happens, replayed on resume, and stopped for
an operator when it cannot be known whether it happened (DESIGN.md
sections 4 and 5).

The "service" is the `perform` callable a capability hands the context; a
test counts its calls. The confinement tripwire is never installed here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from staal.journal.reader import JournalState, read_journal
from staal.journal.records import JOURNAL, Header, Print, Resolved
from staal.journal.writer import JournalWriter
from staal.manifest.model import Grant
from staal.money import Money
from staal.program import ActionFailed, CapabilityRefused, RunFailed
from staal.records.appendlog import read_log
from staal.records.outcomes import Usage
from staal.runtime.clock import FixedClock
from staal.worker.runs.actions import ActionSpec, Performed, RunStopped
from staal.worker.runs.broker import GrantState
from staal.worker.runs.engine import RunContext
from staal.worker.runs.resend import RESEND_WINDOW_MS, InDoubt

RUN = "0123456789abcdef0123456789abcdef"
SHA = "ab" * 32
T0 = 1_760_000_000_000
HOUR_MS = 3_600_000
URL = "https://api.example.com/v1/customers/cus_1"
SECRET = "sk_live_51SECRETvalue"


@pytest.fixture(autouse=True)
def no_kill_points(monkeypatch):
    monkeypatch.delenv("STAAL_TEST_KILL_POINTS", raising=False)
    monkeypatch.delenv("STAAL_KILL_AT", raising=False)


class Crash(BaseException):
    """The worker died while the action was under way: no outcome is written."""


class Service:
    """A fake service: counts its calls and, at each, reads the journal as it
    is on disk at that moment."""

    def __init__(self, path: Path, answer: Callable[[int], Performed] | Performed | None = None,
                 raises: BaseException | None = None) -> None:
        self.path = path
        self.answer = answer
        self.raises = raises
        self.keys: list[str | None] = []
        self.journal_at_call: list[JournalState] = []

    @property
    def calls(self) -> int:
        return len(self.keys)

    def __call__(self, key: str | None) -> Performed:
        self.keys.append(key)
        self.journal_at_call.append(read_journal(self.path))
        if self.raises is not None:
            raise self.raises
        if callable(self.answer):
            return self.answer(self.calls)
        if self.answer is not None:
            return self.answer
        return Performed(result={"status": 200, "call": self.calls})


class Run:
    """One process's go at a run: a context over the journal at `path`,
    new or resumed from what the journal holds."""

    def __init__(self, path: Path, clock: FixedClock, grants: dict[str, Grant] | None = None,
                 deadline_ms: int | None = None, secrets: tuple[str, ...] = ()) -> None:
        self.path = path
        self.clock = clock
        self.printed: list[str] = []
        if path.exists():
            self.replay: JournalState | None = read_journal(path)
            self.writer = JournalWriter.reopen(path, clock)
            started = self.replay.header.time
        else:
            self.replay = None
            started = clock.now_ms()
            self.writer = JournalWriter.create(path, Header(
                run=RUN, tool="t", program="/srv/p.py", program_sha256=SHA, config_sha256=SHA,
                inputs_sha256=SHA, runtime="staal 0.1.0", time=started), clock)
        # A keyed request is sent again after waits: they pass on the fake clock.
        self.waits: list[float] = []
        self.ctx = RunContext(RUN, self.writer, clock, started, deadline_ms=deadline_ms,
                              replay=self.replay, secrets=secrets, on_print=self.printed.append,
                              sleep=self.wait)
        grants = grants or {"fetch": Grant(cap="net.http.get"),
                            "send": Grant(cap="net.http.post", idempotency_key=True)}
        self.states = {name: GrantState.for_param(name, grant) for name, grant in grants.items()}
        self.ctx.params.update(self.states)

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(round(seconds * 1000))

    def get(self, service: Callable[[str | None], Performed], url: str = URL,
            param: str = "fetch") -> Any:
        spec = ActionSpec("net.http.get", "get", {"url": url, "headers": {}}, resend="always")
        return self.ctx.act(self.states[param], spec, service)

    def post(self, service: Callable[[str | None], Performed], body: Any = None,
             resend: str = "keyed", url: str = URL, param: str = "send") -> Any:
        spec = ActionSpec("net.http.post", "post", {"url": url, "headers": {}, "json": body},
                          resend=resend, keyed=resend == "keyed")
        return self.ctx.act(self.states[param], spec, service)

    def crash(self) -> None:
        self.writer.close()

    def finish(self, returned: Any = None, error: BaseException | None = None):
        try:
            return self.ctx.finish(returned, error)
        finally:
            self.writer.close()


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def journal(tmp_path) -> Path:
    return tmp_path / "runs" / "run.journal"


def in_doubt_journal(journal: Path, clock: FixedClock, resend: str) -> None:
    """A run that wrote the intent of a POST as op 1 and died during it: in
    doubt, unless it is safe to send again whatever happened (resend always)."""
    run = Run(journal, clock)
    with pytest.raises(Crash):
        run.post(Service(journal, raises=Crash()), {"n": 1}, resend=resend)
    run.crash()
    state = read_journal(journal)
    assert state.ops[1].outcome is None
    assert state.in_doubt() == ([] if resend == "always" else [1])


def resolve(journal: Path, op: int, happened: bool, result: Any = None,
            charged: tuple[Money, ...] = ()) -> None:
    """What `staal resolve` appends."""
    writer = JournalWriter.reopen(journal)
    writer.write(Resolved(op=op, happened=happened, time=T0, result=result, charged=charged))
    writer.close()


def journal_text(journal: Path) -> str:
    return journal.read_text()


# -- a new action -------------------------------------------------------


def test_a_new_action_is_journaled_as_intent_before_it_is_performed_and_outcome_after(
        journal, clock):
    run = Run(journal, clock)
    service = Service(journal)
    assert run.get(service) == {"status": 200, "call": 1}
    assert service.calls == 1
    at_call = service.journal_at_call[0]
    # The intent was written when the service was called; a read, it is never in doubt.
    assert at_call.ops[1].intent is not None and at_call.ops[1].outcome is None
    assert at_call.ops[1].intent.read is True and at_call.in_doubt() == []
    assert at_call.ops[1].intent.cap == "net.http.get"
    assert at_call.ops[1].intent.param == "fetch"
    after = read_journal(journal)
    assert after.ops[1].outcome.result == {"status": 200, "call": 1}
    assert after.in_doubt() == []


def test_ops_are_numbered_in_the_order_the_program_acts(journal, clock):
    run = Run(journal, clock)
    service = Service(journal)
    run.get(service)
    run.post(service, {"n": 1})
    run.get(service)
    state = read_journal(journal)
    assert [state.ops[op].intent.action for op in (1, 2, 3)] == ["get", "post", "get"]


def test_a_keyed_action_is_performed_with_the_run_id_and_op_as_its_key(journal, clock):
    run = Run(journal, clock)
    service = Service(journal)
    run.get(service)
    run.post(service, {"n": 1})
    run.post(service, {"n": 1}, resend="never")
    assert service.keys == [None, f"{RUN}-2", None]
    assert read_journal(journal).ops[2].intent.idempotency_key == f"{RUN}-2"


def test_an_action_that_failed_for_certain_is_journaled_and_raised_as_action_failed(
        journal, clock):
    run = Run(journal, clock)
    with pytest.raises(ActionFailed) as caught:
        run.get(Service(journal, Performed(failure="GET could not be sent")))
    assert caught.value.kind == "action"
    outcome = read_journal(journal).ops[1].outcome
    assert not outcome.ok and outcome.failure.kind == "action"


def test_an_answer_lost_mid_action_stops_the_run_with_the_op_in_doubt(journal, clock):
    run = Run(journal, clock)
    service = Service(journal, raises=InDoubt("the answer was lost"))
    with pytest.raises(RunStopped):
        run.post(service, {"n": 1}, resend="never")
    assert service.calls == 1  # a write with no key is never sent again
    state = read_journal(journal)
    assert state.in_doubt() == [1]
    assert state.stopped.op == 1
    outcome = run.finish()
    assert outcome.outcome == "stopped" and outcome.op == 1
    assert outcome.usage["send"].actions == 1


def test_an_unexpected_error_from_a_write_stops_the_run_with_the_op_in_doubt(journal, clock):
    run = Run(journal, clock)
    service = Service(journal, raises=UnicodeEncodeError("ascii", "\u20ac", 0, 1, "no"))
    with pytest.raises(RunStopped):
        run.post(service, {"n": 1})
    # Even if the program swallows it, nothing more happens, and the journal stays readable.
    with pytest.raises(RunStopped):
        run.get(Service(journal))
    assert run.finish().outcome == "stopped"
    assert read_journal(journal).in_doubt() == [1]


def test_an_unexpected_error_from_a_read_fails_the_action(journal, clock):
    run = Run(journal, clock)
    with pytest.raises(ActionFailed):
        run.get(Service(journal, raises=ValueError("no such header value")))
    assert run.get(Service(journal)) == {"status": 200, "call": 1}
    outcome = run.finish("ok")
    assert outcome.outcome == "done"
    state = read_journal(journal)
    assert state.ops[1].outcome.failure.kind == "action"
    assert state.end is not None


# -- replay -------------------------------------------------------------


def test_a_resumed_run_replays_journaled_results_without_performing_them(journal, clock):
    first = Run(journal, clock)
    service = Service(journal)
    first.get(service)
    first.post(service, {"n": 1})
    first.crash()

    second = Run(journal, clock)
    again = Service(journal)
    assert second.get(again) == {"status": 200, "call": 1}
    assert second.post(again, {"n": 1}) == {"status": 200, "call": 2}
    assert again.calls == 0
    outcome = second.finish({"ok": True})
    assert outcome.outcome == "done"
    assert outcome.usage == {"fetch": Usage(actions=1), "send": Usage(actions=1)}
    assert read_journal(journal).end.usage == outcome.usage


def test_the_journal_read_back_gives_the_usage_the_run_ended_with(journal, clock):
    """The supervisor computes a run's usage from its journal when no worker
    can (it gives up on the run): it must be the engine's, op for op."""
    grants = {"fetch": Grant(cap="net.http.get"),
              "send": Grant(cap="net.http.post", idempotency_key=True),
              "now": Grant(cap="clock.now"), "idle": Grant(cap="net.http.get")}
    first = Run(journal, clock, grants)
    first.get(Service(journal))
    first.ctx.value(first.states["now"], lambda: 1234)
    with pytest.raises(Crash):
        first.post(Service(journal, raises=Crash()), {"n": 1}, resend="never")
    first.crash()
    resolve(journal, 3, True, {"id": "re_1"}, charged=(Money("20.00", "USD"),))

    second = Run(journal, clock, grants)
    service = Service(journal, Performed(result={}, charged=(Money("5", "USD"),)))
    second.get(service)
    second.ctx.value(second.states["now"], lambda: 9999)
    assert second.post(service, {"n": 1}, resend="never") == {"id": "re_1"}
    second.post(service, {"n": 2})
    outcome = second.finish("ok")
    assert outcome.usage == {
        "fetch": Usage(actions=1), "now": Usage(actions=1), "idle": Usage(actions=0),
        "send": Usage(actions=2, charged=(Money("25.00", "USD"),))}
    state = read_journal(journal)
    assert state.usage(grants) == outcome.usage == state.end.usage


def test_a_replayed_failure_is_raised_again(journal, clock):
    first = Run(journal, clock)
    with pytest.raises(ActionFailed):
        first.get(Service(journal, Performed(failure="refused")))
    first.crash()
    second = Run(journal, clock)
    again = Service(journal)
    with pytest.raises(ActionFailed):
        second.get(again)
    assert again.calls == 0


def test_a_resumed_run_performs_the_ops_after_the_journal_as_new(journal, clock):
    first = Run(journal, clock)
    first.get(Service(journal))
    first.crash()
    second = Run(journal, clock)
    service = Service(journal)
    second.get(service)
    second.post(service, {"n": 2})
    assert service.calls == 1
    assert service.keys == [f"{RUN}-2"]
    assert second.finish().usage["fetch"] == Usage(actions=1)


def test_replayed_money_counts_against_the_grant(journal, clock):
    grants = {"fetch": Grant(cap="net.http.get"),
              "send": Grant(cap="net.http.post", uses=1)}
    first = Run(journal, clock, grants)
    first.post(Service(journal, Performed(result={}, charged=(Money("5", "USD"),))), {})
    first.crash()
    second = Run(journal, clock, grants)
    second.post(Service(journal), {})
    with pytest.raises(CapabilityRefused):
        second.post(Service(journal), {"n": 2})
    outcome = second.finish()
    assert outcome.outcome == "failed" and outcome.failure.kind == "capability"
    assert outcome.usage["send"] == Usage(actions=1, charged=(Money("5.00", "USD"),))


# -- an op in doubt -----------------------------------------------------


def test_a_read_in_doubt_is_sent_again(journal, clock):
    first = Run(journal, clock)
    with pytest.raises(Crash):
        first.get(Service(journal, raises=Crash()))
    first.crash()
    second = Run(journal, clock)
    service = Service(journal)
    assert second.get(service) == {"status": 200, "call": 1}
    assert service.calls == 1
    assert read_journal(journal).ops[1].settled


def test_resend_always_performs_an_op_in_doubt_again(journal, clock):
    in_doubt_journal(journal, clock, "always")
    clock.advance(30 * 24 * HOUR_MS)
    service = Service(journal)
    Run(journal, clock).post(service, {"n": 1}, resend="always")
    assert service.calls == 1


def test_a_keyed_op_in_doubt_is_sent_again_with_the_same_key_within_24_hours(journal, clock):
    in_doubt_journal(journal, clock, "keyed")
    clock.advance(RESEND_WINDOW_MS - 60_000)
    second = Run(journal, clock)
    service = Service(journal)
    assert second.post(service, {"n": 1}) == {"status": 200, "call": 1}
    assert service.keys == [f"{RUN}-1"]
    assert second.finish().outcome == "done"
    assert read_journal(journal).ops[1].settled


@pytest.mark.parametrize("late_ms", [RESEND_WINDOW_MS, RESEND_WINDOW_MS + 60_000])
def test_a_keyed_op_in_doubt_past_24_hours_stops_the_run(journal, clock, late_ms):
    in_doubt_journal(journal, clock, "keyed")
    clock.advance(late_ms)
    second = Run(journal, clock)
    service = Service(journal)
    with pytest.raises(RunStopped) as caught:
        second.post(service, {"n": 1})
    assert service.calls == 0
    assert "op 1" in str(caught.value)
    state = read_journal(journal)
    assert state.stopped.op == 1
    outcome = second.finish({"ignored": True})
    assert outcome.outcome == "stopped" and outcome.op == 1
    assert read_journal(journal).end is None


def test_resend_never_stops_the_run_at_an_op_in_doubt(journal, clock):
    in_doubt_journal(journal, clock, "never")
    second = Run(journal, clock)
    service = Service(journal)
    with pytest.raises(RunStopped):
        second.post(service, {"n": 1}, resend="never")
    assert service.calls == 0
    outcome = second.finish()
    assert (outcome.outcome, outcome.op) == ("stopped", 1)
    assert outcome.to_json()["outcome"] == "stopped"
    state = read_journal(journal)
    assert state.stopped.op == 1 and state.end is None
    assert outcome.usage["send"].actions == 1


def test_a_stopped_run_stays_stopped_even_if_the_program_swallows_it(journal, clock):
    in_doubt_journal(journal, clock, "never")
    second = Run(journal, clock)
    with pytest.raises(RunStopped):
        second.post(Service(journal), {"n": 1}, resend="never")
    service = Service(journal)
    with pytest.raises(RunStopped):
        second.get(service)
    assert service.calls == 0
    assert second.finish("done anyway").outcome == "stopped"


def test_stopping_again_at_the_same_op_writes_no_second_stop(journal, clock):
    in_doubt_journal(journal, clock, "never")
    for _ in range(2):
        run = Run(journal, clock)
        with pytest.raises(RunStopped):
            run.post(Service(journal), {"n": 1}, resend="never")
        run.finish()
    stops = [line for line in journal_text(journal).splitlines() if '"type":"stopped"' in line]
    assert len(stops) == 1


def test_an_op_resolved_as_happened_returns_the_operators_result_without_performing(
        journal, clock):
    in_doubt_journal(journal, clock, "never")
    resolve(journal, 1, True, {"status": 201, "text": "from the operator"})
    second = Run(journal, clock)
    service = Service(journal)
    assert second.post(service, {"n": 1}, resend="never") == {
        "status": 201, "text": "from the operator"}
    assert service.calls == 0
    outcome = second.finish("ok")
    assert outcome.outcome == "done"
    assert outcome.usage["send"].actions == 1


def test_an_op_resolved_as_not_happened_is_performed(journal, clock):
    in_doubt_journal(journal, clock, "never")
    resolve(journal, 1, False)
    second = Run(journal, clock)
    service = Service(journal)
    assert second.post(service, {"n": 1}, resend="never") == {"status": 200, "call": 1}
    assert service.calls == 1
    assert second.finish("ok").outcome == "done"
    state = read_journal(journal)
    assert state.ops[1].settled and state.end is not None


def test_an_op_resolved_as_not_happened_whose_retry_is_lost_is_in_doubt_again(journal, clock):
    in_doubt_journal(journal, clock, "never")
    resolve(journal, 1, False)
    second = Run(journal, clock)
    with pytest.raises(Crash):  # the retry was under way when the worker died
        second.post(Service(journal, raises=Crash()), {"n": 1}, resend="never")
    second.crash()
    assert read_journal(journal).in_doubt() == [1]

    third = Run(journal, clock)
    service = Service(journal)
    with pytest.raises(RunStopped):
        third.post(service, {"n": 1}, resend="never")
    assert service.calls == 0  # never sent a third time without an operator's answer
    third.finish()

    resolve(journal, 1, True, {"status": 200})
    fourth = Run(journal, clock)
    assert fourth.post(Service(journal), {"n": 1}, resend="never") == {"status": 200}


def test_an_op_resolved_as_not_happened_whose_retry_answer_is_lost_stops_again(journal, clock):
    in_doubt_journal(journal, clock, "never")
    resolve(journal, 1, False)
    second = Run(journal, clock)
    with pytest.raises(RunStopped):
        second.post(Service(journal, raises=InDoubt("lost again")), {"n": 1}, resend="never")
    second.finish()
    third = Run(journal, clock)
    service = Service(journal)
    with pytest.raises(RunStopped):
        third.post(service, {"n": 1}, resend="never")
    assert service.calls == 0


# -- journal mismatch ---------------------------------------------------


@pytest.mark.parametrize("differs", ["cap", "action", "args", "param"])
def test_a_resumed_program_asking_for_another_action_stops_naming_the_op(
        journal, clock, differs):
    first = Run(journal, clock)
    first.get(Service(journal))
    first.get(Service(journal), url=URL + "/a")
    first.crash()

    second = Run(journal, clock)
    second.get(Service(journal))
    service = Service(journal)
    spec = {
        "cap": ActionSpec("net.http.post", "get", {"url": URL + "/a", "headers": {}}),
        "action": ActionSpec("net.http.get", "head", {"url": URL + "/a", "headers": {}}),
        "args": ActionSpec("net.http.get", "get", {"url": URL + "/b", "headers": {}}),
        "param": ActionSpec("net.http.get", "get", {"url": URL + "/a", "headers": {}}),
    }[differs]
    state = second.states["send" if differs == "param" else "fetch"]
    with pytest.raises(RunStopped) as caught:
        second.ctx.act(state, spec, service)
    assert "op 2" in str(caught.value)
    assert service.calls == 0
    outcome = second.finish()
    assert (outcome.outcome, outcome.op) == ("stopped", 2)
    assert read_journal(journal).stopped.op == 2
    if differs == "args":  # said once, not as the same thing twice
        assert str(caught.value).endswith(
            "the journal has net.http.get get through 'fetch'; the program now asks for the "
            "same with other arguments (their SHA-256 differs from the journal's)")


def test_a_resumed_program_that_ends_before_the_journals_last_op_stops(journal, clock):
    first = Run(journal, clock)
    first.get(Service(journal))
    first.get(Service(journal), url=URL + "/a")
    first.crash()

    second = Run(journal, clock)
    second.get(Service(journal))
    outcome = second.finish({"short": True})
    assert (outcome.outcome, outcome.op) == ("stopped", 2)
    state = read_journal(journal)
    assert state.stopped.op == 2 and state.end is None


def test_a_resumed_program_that_fails_before_an_op_in_doubt_stops_at_that_op(journal, clock):
    first = Run(journal, clock)
    first.get(Service(journal))
    with pytest.raises(Crash):
        first.post(Service(journal, raises=Crash()), {"n": 1}, resend="never")
    first.crash()

    second = Run(journal, clock)
    second.get(Service(journal))
    outcome = second.finish(error=ValueError("this time it went another way"))
    assert (outcome.outcome, outcome.op) == ("stopped", 2)
    state = read_journal(journal)  # still a coherent story: no end over an op in doubt
    assert state.in_doubt() == [2] and state.end is None


# -- deadline -----------------------------------------------------------


def test_a_new_action_past_the_deadline_fails_the_run_and_is_not_performed(journal, clock):
    run = Run(journal, clock, deadline_ms=5_000)
    run.get(Service(journal))
    clock.advance(5_000)
    service = Service(journal)
    with pytest.raises(RunFailed) as caught:
        run.post(service, {"n": 1})
    assert caught.value.kind == "deadline"
    assert service.calls == 0
    assert 2 not in read_journal(journal).ops


def test_a_caught_deadline_still_fails_the_run_and_later_actions_too(journal, clock):
    run = Run(journal, clock, deadline_ms=5_000)
    clock.advance(6_000)
    with pytest.raises(RunFailed):
        run.get(Service(journal))
    service = Service(journal)
    with pytest.raises(RunFailed) as caught:
        run.get(service)
    assert caught.value.kind == "deadline"
    assert service.calls == 0
    outcome = run.finish({"pretend": "done"})
    assert outcome.outcome == "failed" and outcome.failure.kind == "deadline"
    assert read_journal(journal).end.failure.kind == "deadline"


def test_a_cancelled_run_starts_no_new_action_and_ends_cancelled_even_if_caught(journal, clock):
    run = Run(journal, clock)
    asked = [False]
    run.ctx.cancelled = lambda: asked[0]
    run.get(Service(journal))
    asked[0] = True
    service = Service(journal)
    with pytest.raises(RunFailed) as caught:
        run.post(service, {"n": 1})
    assert caught.value.kind == "cancelled" and service.calls == 0
    assert 2 not in read_journal(journal).ops
    outcome = run.finish({"pretend": "done"})  # the program caught it and returned
    assert outcome.outcome == "failed" and outcome.failure.kind == "cancelled"
    assert read_journal(journal).end.failure.kind == "cancelled"


def test_a_run_cancelled_during_its_last_action_finishes_it_and_ends_cancelled(journal, clock):
    run = Run(journal, clock)
    asked = [False]
    service = Service(journal)

    def cancelled_meanwhile(key: str | None) -> Performed:
        asked[0] = True  # the cancel comes while the action is in progress
        return service(key)

    run.ctx.cancelled = lambda: asked[0]
    assert run.get(cancelled_meanwhile)["status"] == 200  # not cut: it completes
    outcome = run.finish({"refund": "re_1"})
    assert outcome.failure.kind == "cancelled"
    state = read_journal(journal)
    assert state.ops[1].outcome is not None and state.end.failure.kind == "cancelled"


def test_the_deadline_counts_from_the_runs_start_even_when_resumed(journal, clock):
    first = Run(journal, clock, deadline_ms=5_000)
    first.get(Service(journal))
    first.crash()
    clock.advance(5_000)
    second = Run(journal, clock, deadline_ms=5_000)
    second.get(Service(journal))  # replayed: not an action that starts now
    with pytest.raises(RunFailed) as caught:
        second.get(Service(journal), url=URL + "/new")
    assert caught.value.kind == "deadline"


def test_an_action_before_the_deadline_is_performed(journal, clock):
    run = Run(journal, clock, deadline_ms=5_000)
    clock.advance(4_999)
    service = Service(journal)
    run.get(service)
    assert service.calls == 1


# -- refusals -----------------------------------------------------------


def test_a_refusal_fails_the_run_as_capability_even_when_the_program_swallows_it(journal, clock):
    run = Run(journal, clock)
    try:
        run.ctx.refuse("headers are a mapping of strings to strings")
    except CapabilityRefused:
        pass  # the program caught it
    service = Service(journal)
    with pytest.raises(CapabilityRefused) as caught:
        run.get(service)
    assert caught.value.kind == "capability"
    assert service.calls == 0
    outcome = run.finish({"all": "fine"})
    assert outcome.outcome == "failed"
    assert outcome.failure.kind == "capability"
    assert read_journal(journal).end.failure.kind == "capability"


def test_a_grant_refusal_fails_the_run_and_writes_no_intent(journal, clock):
    run = Run(journal, clock, {"fetch": Grant(cap="net.http.get", uses=1)})
    service = Service(journal)
    run.get(service)
    with pytest.raises(CapabilityRefused) as caught:
        run.get(service)
    assert caught.value.message == "'net.http.get' allows 1 action per run; this would be action 2"
    assert service.calls == 1
    assert sorted(read_journal(journal).ops) == [1]
    outcome = run.finish(error=None)
    assert outcome.failure.kind == "capability"
    assert outcome.usage["fetch"] == Usage(actions=1)


def test_a_url_outside_only_is_refused_before_its_intent(journal, clock):
    run = Run(journal, clock, {"fetch": Grant(cap="net.http.get",
                                              only=("https://api.example.com/v1/charges/*",))})
    service = Service(journal)
    with pytest.raises(CapabilityRefused):
        run.get(service)
    assert service.calls == 0
    assert read_journal(journal).ops == {}


# -- prints -------------------------------------------------------------


def test_prints_are_journaled_in_order_and_shown(journal, clock):
    run = Run(journal, clock)
    run.ctx.print_line("looking up the order")
    run.get(Service(journal))
    run.ctx.print_line("refunded re_1")
    assert run.printed == ["looking up the order", "refunded re_1"]
    records = read_log(journal, decode=JOURNAL.decode).records
    prints = [(r.seq, r.text) for r in records if isinstance(r, Print)]
    assert prints == [(1, "looking up the order"), (2, "refunded re_1")]


def test_prints_already_journaled_are_neither_shown_nor_journaled_again_on_replay(
        journal, clock):
    first = Run(journal, clock)
    first.ctx.print_line("one")
    first.get(Service(journal))
    first.ctx.print_line("two")
    first.crash()

    second = Run(journal, clock)
    second.ctx.print_line("one")
    second.get(Service(journal))
    second.ctx.print_line("two")
    second.ctx.print_line("three")
    assert second.printed == ["three"]
    second.finish()
    assert read_journal(journal).prints == 3


# -- finish -------------------------------------------------------------


def test_finish_gives_done_with_the_json_result_and_writes_the_end(journal, clock):
    run = Run(journal, clock)
    run.get(Service(journal))
    outcome = run.finish({"refund": "re_1", "amount": Money("35", "USD"), "n": [1, 2]})
    assert outcome.outcome == "done"
    assert outcome.run == RUN
    assert outcome.result == {"refund": "re_1", "amount": {"amount": "35.00", "currency": "USD"},
                              "n": [1, 2]}
    end = read_journal(journal).end
    assert end.outcome == "done" and end.result == outcome.result
    assert end.usage == {"fetch": Usage(actions=1), "send": Usage(actions=0)}
    assert outcome.to_json()["result"] == outcome.result


def test_finish_gives_failed_value_for_an_exception_that_escaped(journal, clock):
    run = Run(journal, clock)
    outcome = run.finish(error=ValueError("no such order"))
    assert outcome.outcome == "failed"
    assert outcome.failure.kind == "value"
    assert outcome.failure.message.startswith("ValueError")
    assert read_journal(journal).end.failure == outcome.failure


def test_finish_gives_failed_action_for_an_action_failure_that_escaped(journal, clock):
    run = Run(journal, clock)
    outcome = run.finish(error=ActionFailed("HTTP 402"))
    assert outcome.failure.kind == "action"


def test_finish_gives_the_kind_the_program_failed_with(journal, clock):
    run = Run(journal, clock)
    outcome = run.finish(error=RunFailed("validation", "refund exceeds what was paid"))
    assert (outcome.outcome, outcome.failure.kind) == ("failed", "validation")


@pytest.mark.parametrize("returned", [{1, 2}, float("nan"), {"k": object()}, {1: "x"}])
def test_finish_gives_failed_value_for_a_result_with_no_json_form(journal, clock, returned):
    run = Run(journal, clock)
    outcome = run.finish(returned)
    assert outcome.outcome == "failed" and outcome.failure.kind == "value"
    assert read_journal(journal).end.failure.kind == "value"


def test_finish_writes_no_end_for_a_stopped_run(journal, clock):
    run = Run(journal, clock)
    with pytest.raises(RunStopped):
        run.post(Service(journal, raises=InDoubt("lost")), {"n": 1})
    assert run.finish().outcome == "stopped"
    assert read_journal(journal).end is None
    assert '"type":"end"' not in journal_text(journal)


# -- secrets ------------------------------------------------------------


def test_a_secret_in_an_actions_result_is_redacted_in_the_journal_and_the_program(
        journal, clock):
    run = Run(journal, clock, secrets=(SECRET,))
    answer = Performed(result={"text": f"Bearer {SECRET} accepted",
                               "headers": {SECRET: [SECRET, 1]}})
    result = run.get(Service(journal, answer))
    assert result == {"text": "Bearer [redacted] accepted",
                      "headers": {"[redacted]": ["[redacted]", 1]}}
    assert read_journal(journal).ops[1].outcome.result == result
    assert SECRET not in journal_text(journal)


def test_a_secret_in_an_action_failure_is_redacted(journal, clock):
    run = Run(journal, clock, secrets=(SECRET,))
    with pytest.raises(ActionFailed) as caught:
        run.get(Service(journal, Performed(failure=f"401: key {SECRET} is revoked")))
    assert SECRET not in caught.value.message and "[redacted]" in caught.value.message
    outcome = run.finish(error=caught.value)
    assert SECRET not in outcome.failure.message and "[redacted]" in outcome.failure.message
    assert SECRET not in journal_text(journal)


def test_a_secret_in_an_escaping_exception_or_the_result_is_redacted(journal, clock, tmp_path):
    run = Run(journal, clock, secrets=(SECRET,))
    outcome = run.finish(error=RuntimeError(f"leaked {SECRET}"))
    assert "[redacted]" in outcome.failure.message and SECRET not in outcome.failure.message
    assert SECRET not in journal_text(journal)

    other = tmp_path / "other.journal"
    run = Run(other, clock, secrets=(SECRET,))
    outcome = run.finish({"key": SECRET})
    assert outcome.result == {"key": "[redacted]"}
    assert SECRET not in journal_text(other)


def test_a_secret_in_a_print_is_redacted_where_shown_and_journaled(journal, clock):
    run = Run(journal, clock, secrets=(SECRET,))
    run.ctx.print_line(f"using {SECRET}")
    assert run.printed == ["using [redacted]"]
    assert SECRET not in journal_text(journal)
    assert "using [redacted]" in journal_text(journal)


def test_a_secret_in_a_lost_answer_is_redacted_in_the_stop(journal, clock):
    run = Run(journal, clock, secrets=(SECRET,))
    with pytest.raises(RunStopped) as caught:
        run.post(Service(journal, raises=InDoubt(f"reset while sending {SECRET}")), {"n": 1})
    assert SECRET not in str(caught.value)
    outcome = run.finish()
    assert SECRET not in outcome.message
    assert SECRET not in journal_text(journal)


def test_a_secret_in_a_refusal_is_redacted(journal, clock):
    run = Run(journal, clock, secrets=(SECRET,))
    with pytest.raises(CapabilityRefused) as caught:
        run.ctx.refuse(f"header {SECRET} is not allowed")
    assert SECRET not in caught.value.message
    outcome = run.finish()
    assert SECRET not in outcome.failure.message
    assert SECRET not in journal_text(journal)


# -- values ---------------------------------------------------------------


def test_a_value_is_journaled_and_the_same_value_is_replayed(journal, clock):
    grants = {"now": Grant(cap="clock.now")}
    first = Run(journal, clock, grants)
    assert first.ctx.value(first.states["now"], clock.now_ms) == T0
    first.crash()
    clock.advance(1_000)
    second = Run(journal, clock, grants)
    produced: list[int] = []
    assert second.ctx.value(second.states["now"], lambda: produced.append(1) or 0) == T0
    assert produced == []
    assert second.finish().usage["now"] == Usage(actions=1)
