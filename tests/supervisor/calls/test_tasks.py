"""A task is its run (supervisor/calls/tasks.py): its status is decided in
one place, `task_view`, from how the run stands in the ledger and the
journal; and the caller-binding rule hides another caller's task. The
store is a fake here: a ledger of entries and a fixed run status."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from staal.manifest.durations import Duration
from staal.manifest.model import ServerConfig
from staal.protocol.mcp.cursors import CursorSigner
from staal.protocol.mcp.jsonrpc import RpcError
from staal.protocol.mcp.results import RunStatus
from staal.protocol.mcp.tasks import TaskPage, TaskRequest
from staal.supervisor.auth.callers import LOCAL
from staal.supervisor.calls import tasks as tasks_module
from staal.supervisor.calls.in_flight import Holder
from staal.supervisor.calls.tasks import TASKS_PAGE, Tasks, task_view
from staal.supervisor.store.caller_runs import page_in
from staal.supervisor.store.ledger import RunEntry

RUN = "a" * 32
SERVER = ServerConfig(name="shop", journals=Path("/nonexistent"), keep_days=7)
ENTRY = RunEntry(run=RUN, tool="refund", reserved_ms=1_000, calls=1)


def view(status: RunStatus, entry: RunEntry = ENTRY, server: ServerConfig = SERVER):
    return task_view(entry, status, server)


def test_a_running_run_is_a_working_task_that_says_it_runs():
    task = view(RunStatus(RUN, "running"))
    assert task is not None and task.status == "working" and task.result is None
    assert "is running" in task.message


def test_a_run_waiting_for_an_operator_is_working_and_says_what_is_in_doubt_and_not_to_call_again():
    task = view(RunStatus(RUN, "waiting_for_operator", op=2,
                          message="op 2 (stripe.refund) may or may not have happened"))
    assert task is not None and task.status == "working" and not task.terminal
    assert "waiting for an operator" in task.message and "stripe.refund" in task.message
    assert "do not call the tool again" in task.message


def test_a_done_run_is_completed_with_the_tools_result():
    task = view(RunStatus(RUN, "done", result={"refunded": 3}),
                replace(ENTRY, state="settled", ended_ms=5_000, outcome="done"))
    assert task is not None and task.status == "completed" and task.result is not None
    assert task.result.structured == {"result": {"refunded": 3}} and not task.result.is_error
    assert (task.created_ms, task.updated_ms) == (1_000, 5_000)


def test_a_failed_run_is_a_failed_task_whose_result_is_the_error():
    task = view(RunStatus(RUN, "failed", kind="action", message="card declined"),
                replace(ENTRY, state="settled", ended_ms=5_000, outcome="failed"))
    assert task is not None and task.status == "failed"
    assert task.result is not None and task.result.is_error and "card declined" in task.result.text


def test_a_run_refused_at_build_is_failed_with_its_error_kind():
    task = view(RunStatus(RUN, "failed", kind="input", message="order is required"),
                replace(ENTRY, state="settled", outcome="error"))
    assert task is not None and task.result is not None and task.result.text.startswith("input:")


def test_a_run_cancelled_is_a_cancelled_task_that_says_why():
    task = view(RunStatus(RUN, "failed", kind="cancelled",
                          message="the run's task was cancelled before op 2 could start"),
                replace(ENTRY, state="settled", ended_ms=5_000, outcome="failed"))
    assert task is not None and task.status == "cancelled" and task.terminal
    assert "was cancelled" in task.message and "before op 2" in task.message


def test_a_run_that_never_started_is_failed_and_says_nothing_was_done():
    task = view(RunStatus(RUN, "unknown"), replace(ENTRY, state="released", ended_ms=2_000))
    assert task is not None and task.status == "failed" and "nothing was done" in task.message


@pytest.mark.parametrize("status", ["unknown", "expired"])
def test_a_run_unknown_or_no_longer_kept_is_no_task(status):
    assert view(RunStatus(RUN, status)) is None


def test_the_ttl_is_what_retention_keeps_unless_task_ttl_says_less():
    assert view(RunStatus(RUN, "running")).ttl_ms == 7 * 86_400_000
    shorter = replace(SERVER, task_ttl=Duration.parse("1h"))
    assert view(RunStatus(RUN, "running"), server=shorter).ttl_ms == 3_600_000
    assert view(RunStatus(RUN, "running"), server=replace(SERVER, keep_days=None)).ttl_ms is None


def test_the_poll_interval_is_the_manifests():
    server = replace(SERVER, task_poll_interval=Duration.parse("5s"))
    assert view(RunStatus(RUN, "running"), server=server).poll_ms == 5_000


# -- the service over a fake store ----------------------------------------------


class FakeLedger:
    def __init__(self, entries):
        self.entries = list(entries)

    def run(self, run_id):
        return next((e for e in self.entries if e.run == run_id), None)

    def runs(self):
        return tuple(self.entries)

    def caller_runs(self, which):
        return page_in(reversed(self.entries), which)  # the file ledger's paging


class FakeNotes:
    """The store's cancels: which runs' cancels were recorded."""

    def __init__(self):
        self.cancels = []

    def cancel(self, files):
        self.cancels.append(files.run)

    def cancelled(self, files):
        return files.run in self.cancels


class FakePool:
    def __init__(self):
        self.cancelled = []
        self.asked = asyncio.Event()

    def cancel(self, run):
        self.cancelled.append(run)
        self.asked.set()


# How a run stands when a test says so; else as `service` says.
stand: dict[str, RunStatus] = {}


def service(entries, monkeypatch) -> Tasks:
    # Every unsettled run is running, every settled one done: the journal's
    # reading is outcomes.run_status's, tested with it.
    stand.clear()
    monkeypatch.setattr(tasks_module, "run_status", lambda entry, *_: stand.get(entry.run) or RunStatus(
        entry.run, "running" if entry.unsettled else "done", result=1))
    calls = SimpleNamespace(ledger=FakeLedger(entries), manifest=SimpleNamespace(server=SERVER),
                            files=lambda tool, run: SimpleNamespace(tool=tool, run=run),
                            waiting=SimpleNamespace(notes=FakeNotes()),
                            run_journals=None, pool=FakePool(), log=lambda *a, **k: None,
                            in_flight=SimpleNamespace(holder=lambda run: Holder.FREE))
    return Tasks(calls, CursorSigner(b"k" * 32))  # type: ignore[arg-type]


class Caller:
    def __init__(self, identity):
        self.identity = identity

    def owns(self, entry):
        return entry.caller == self.identity


def test_another_callers_task_is_answered_as_one_that_does_not_exist(monkeypatch):
    tasks = service([replace(ENTRY, caller="alice")], monkeypatch)
    assert tasks.view(RUN, Caller("alice")) is not None
    assert tasks.view(RUN, Caller("bob")) is None
    assert tasks.view(RUN, LOCAL) is None


def test_get_cancel_and_result_of_another_callers_task_are_the_unknown_tasks_error(monkeypatch):
    asyncio.run(_another_callers(monkeypatch))


async def _another_callers(monkeypatch):
    tasks = service([replace(ENTRY, caller="alice", state="settled", outcome="done")], monkeypatch)
    unknown = await tasks.answer(TaskRequest(1, "tasks/get", "2025-11-25", task_id="b" * 32))
    for method in ("tasks/get", "tasks/cancel", "tasks/result"):
        answer = await tasks.answer(TaskRequest(1, method, "2025-11-25", task_id=RUN),
                                    Caller("bob"))  # type: ignore[arg-type]
        assert isinstance(answer, RpcError)
        assert (answer.code, answer.message) == (unknown.code, unknown.message.replace("b" * 32, RUN))
    assert (await tasks.answer(TaskRequest(1, "tasks/result", "2025-11-25", task_id=RUN),
                               Caller("alice"))).status == "completed"  # type: ignore[arg-type, union-attr]


def test_tasks_list_pages_the_callers_tasks_newest_first_with_signed_cursors(monkeypatch):
    mine = [replace(ENTRY, run=f"{i:032x}", reserved_ms=i, caller="alice")
            for i in range(TASKS_PAGE + 3)]
    theirs = [replace(ENTRY, run="f" * 32, reserved_ms=10_000, caller="bob")]
    tasks = service(mine + theirs, monkeypatch)
    first = tasks.page(None, Caller("alice"))  # type: ignore[arg-type]
    assert isinstance(first, TaskPage) and len(first.views) == TASKS_PAGE
    assert first.views[0].task_id == mine[-1].run and first.next_cursor is not None
    second = tasks.page(first.next_cursor, Caller("alice"))  # type: ignore[arg-type]
    assert isinstance(second, TaskPage) and second.next_cursor is None
    assert [v.task_id for v in second.views] == [e.run for e in reversed(mine[:3])]
    forged = tasks.page(first.next_cursor[:-2] + "AA", Caller("alice"))  # type: ignore[arg-type]
    assert isinstance(forged, RpcError) and forged.code == -32602


def test_a_cancel_of_a_run_held_by_no_process_here_is_recorded_for_its_owner_and_no_worker_is_signalled(
        monkeypatch):
    asyncio.run(_not_held(monkeypatch))


async def _not_held(monkeypatch):
    tasks = service([ENTRY], monkeypatch)  # its run: another instance's, or not yet resumed
    modern = await tasks.answer(TaskRequest(2, "tasks/cancel", "2026-07-28", task_id=RUN))
    assert not isinstance(modern, RpcError) and modern.status == "working"
    assert tasks.calls.waiting.notes.cancels == [RUN]  # durable before the acknowledgement
    assert tasks.calls.pool.cancelled == [] and tasks.view(RUN).status == "working"


def test_a_released_run_whose_task_was_cancelled_is_a_cancelled_task_that_says_nothing_was_done():
    released = replace(ENTRY, state="released", ended_ms=2_000)
    task = view(RunStatus(RUN, "unknown"), released)
    assert task is not None and task.status == "failed"  # never started, not cancelled
    task = task_view(released, RunStatus(RUN, "unknown"), SERVER, cancelled=True)
    assert task is not None and task.status == "cancelled" and task.terminal
    assert "cancelled before it started: nothing was done" in task.message
    assert task.result is not None and "nothing was done" in task.result.text


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_an_ended_task_is_not_cancelled_and_its_pool_is_not_asked(monkeypatch, revision):
    asyncio.run(_ended(monkeypatch, revision))


async def _ended(monkeypatch, revision):
    tasks = service([replace(ENTRY, state="settled", ended_ms=2_000, outcome="done")], monkeypatch)
    tasks.calls.in_flight.holder = lambda run: Holder.CALL
    answer = await tasks.answer(TaskRequest(1, "tasks/cancel", revision, task_id=RUN))
    if revision == "2025-11-25":
        assert isinstance(answer, RpcError) and "already completed" in answer.message
    else:  # 2026-07-28 acknowledges an ended task's cancel alike
        assert not isinstance(answer, RpcError) and answer.status == "completed"
    assert tasks.calls.pool.cancelled == []


def test_a_2025_11_25_cancel_asks_the_pool_and_answers_once_the_run_ended_cancelled(monkeypatch):
    asyncio.run(_cancelled(monkeypatch))


async def _cancelled(monkeypatch):
    tasks = service([ENTRY], monkeypatch)
    tasks.calls.in_flight.holder = lambda run: Holder.CALL
    waiting = asyncio.ensure_future(tasks.answer(TaskRequest(1, "tasks/cancel", "2025-11-25",
                                                             task_id=RUN)))
    await asyncio.wait_for(tasks.calls.pool.asked.wait(), 30)  # it records the cancel off the loop first
    assert tasks.calls.pool.cancelled == [RUN] and not waiting.done()
    assert tasks.calls.waiting.notes.cancels == [RUN]
    stand[RUN] = RunStatus(RUN, "failed", kind="cancelled", message="cancelled before op 2")
    tasks.changed(RUN)  # the run's end reached this process
    answer = await asyncio.wait_for(waiting, 30)
    assert not isinstance(answer, RpcError) and answer.status == "cancelled"


def test_a_result_still_waiting_is_answered_when_the_server_stops(monkeypatch):
    asyncio.run(_stops(monkeypatch))


async def _stops(monkeypatch):
    tasks = service([ENTRY], monkeypatch)  # unsettled: working for ever here
    started = asyncio.Event()

    class Watched(dict):
        def setdefault(self, key, default=None):  # the result begins to wait for the run's end
            started.set()
            return super().setdefault(key, default)

    tasks._changes = Watched()
    waiting = asyncio.ensure_future(tasks.answer(TaskRequest(1, "tasks/result", "2025-11-25",
                                                             task_id=RUN)))
    await asyncio.wait_for(started.wait(), 30)
    assert not waiting.done()
    tasks.stopping.set()
    answer = await asyncio.wait_for(waiting, 30)
    assert isinstance(answer, RpcError) and "stopping" in answer.message
    assert tasks.view(RUN).status == "working"  # type: ignore[union-attr]


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_a_cancel_of_a_task_waiting_for_an_operator_never_settles_the_doubt(monkeypatch, revision):
    asyncio.run(_waiting(monkeypatch, revision))


async def _waiting(monkeypatch, revision):
    tasks = service([ENTRY], monkeypatch)
    stand[RUN] = RunStatus(RUN, "waiting_for_operator", op=2,
                          message="op 2 (stripe.refund) may or may not have happened")
    answer = await tasks.answer(TaskRequest(1, "tasks/cancel", revision, task_id=RUN))
    assert tasks.calls.pool.cancelled == []  # nothing runs: an operator settles the doubt
    if revision == "2025-11-25":  # it cannot answer the task cancelled: refused, nothing recorded
        assert isinstance(answer, RpcError) and "waits for an operator" in answer.message
        assert "recorded" not in answer.message and tasks.calls.waiting.notes.cancels == []
    else:  # acknowledged and recorded: once settled, the resumed run stops before its next action
        assert not isinstance(answer, RpcError) and answer.status == "working"
        assert tasks.calls.waiting.notes.cancels == [RUN]
