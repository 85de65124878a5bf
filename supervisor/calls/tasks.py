"""Tasks (DESIGN.md section 8): a task is its run. The task id is the run id
(unguessable, as run ids are); the task exists from the run's reserve, which
is durable before a task-augmented call is answered; how it stands is read
from the ledger and the journal by `task_view`, the one place that decides
a task's status, through the reader staal_run_status and the runs resources
use (`outcomes.run_status`). Nothing about a task is kept in memory: a
restarted server answers for its tasks as it answers staal_run_status.

Who sees a task is the caller-binding rule of staal_run_status
(`Admitted.owns`): another caller's task is answered exactly as one that
never existed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from staal.manifest.model import ServerConfig
from staal.protocol.mcp.cursors import CursorSigner
from staal.protocol.mcp.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from staal.protocol.mcp.results import Done, Errored, Failed, RunStatus, Stopped, shape_outcome
from staal.protocol.mcp.revisions import LEGACY
from staal.protocol.mcp.tasks import (
    TaskAnswer,
    TaskPage,
    TaskRequest,
    TaskStatus,
    TaskView,
    no_such_task,
    not_cancellable,
)
from staal.records.outcomes import CANCELLED, ERROR_KINDS
from staal.runtime.backoff import Backoff
from staal.runtime.killpoints import kill_point
from staal.supervisor.auth.callers import LOCAL, Admitted
from staal.supervisor.calls.in_flight import Holder
from staal.supervisor.calls.off_loop import off_loop
from staal.supervisor.calls.outcomes import CANCELLED_UNSTARTED, run_status
from staal.supervisor.calls.pipeline import Calls
from staal.supervisor.store.caller_runs import CallerRuns
from staal.supervisor.store.ledger import RunEntry

# Tasks on one page of tasks/list: each one past the running ones reads its
# journal's end.
TASKS_PAGE = 20
CURSOR_COLLECTION = "tasks"
# How tasks/result re-reads a task it waits for when no end is seen in this
# process (a run resumed by another instance, or resolved by an operator):
# soon at first, then every few seconds.
RESULT_POLL = Backoff(first=0.05, cap=5.0, at_once=0)
NEVER_STARTED = "its run never started: nothing was done"


def task_view(entry: RunEntry, status: RunStatus, server: ServerConfig,
              cancelled: bool = False) -> TaskView | None:
    """How the task of run `entry` stands, from how its run stands (None:
    no such task: its run is unknown, or no longer kept). `working` while
    the run runs and while it waits for an operator (the message says which,
    and for a waiting run what is in doubt and that the tool must not be
    called again); `completed` with the tool's result; `failed` when the
    run's result is an error (2025-11-25: a tool result with isError true
    fails the task; the 2026-07-28 writer answers it completed) or when the
    run never started; `cancelled` when its task was cancelled (the run
    failed as `cancelled`, stopped before its next action), or `cancelled`
    (read only for a released run) says it was cancelled before it started."""
    if status.status in ("unknown", "expired") and entry.state != "released":
        return None

    def view(state: TaskStatus, message: str, outcome: Done | Failed | Errored | None = None,
             ) -> TaskView:
        internal = isinstance(outcome, Failed) and outcome.kind == "internal"
        return TaskView(entry.run, state, message, entry.reserved_ms,
                        entry.ended_ms or entry.reserved_ms, server.task_ttl_ms,
                        server.task_poll_interval.ms,
                        None if outcome is None else shape_outcome(outcome), internal,
                        waiting=status.status == "waiting_for_operator")

    if entry.state == "released" and cancelled:
        return view("cancelled", f"Run {entry.run} was cancelled before it started: nothing was done.",
                    Failed(entry.run, CANCELLED, CANCELLED_UNSTARTED))
    if entry.state == "released":
        return view("failed", f"Run {entry.run} failed: {NEVER_STARTED}.",
                    Failed(entry.run, "internal", NEVER_STARTED))
    if status.status == "running":
        return view("working", f"Run {entry.run} is running.")
    if status.status == "waiting_for_operator":
        assert status.op is not None  # a waiting status names its op
        stopped = Stopped(entry.run, status.op, status.message or f"op {status.op} is in doubt")
        return view("working", shape_outcome(stopped).text)
    if status.status == "done":
        return view("completed", f"Run {entry.run} is done.", Done(entry.run, status.result))
    assert status.kind is not None and status.message is not None  # failed says how
    if status.kind == CANCELLED:
        return view("cancelled", f"Run {entry.run} was cancelled: {status.message}.",
                    Failed(entry.run, status.kind, status.message))
    failure: Failed | Errored = (Errored(entry.run, status.kind, status.message)
                                 if status.kind in ERROR_KINDS
                                 else Failed(entry.run, status.kind, status.message))
    return view("failed", f"Run {entry.run} failed ({status.kind}).", failure)


class Tasks:
    """Answers tasks/get, tasks/result, tasks/list and tasks/cancel for the
    caller `admitted`, from the store through `calls`' readers."""

    def __init__(self, calls: Calls, signer: CursorSigner) -> None:
        self.calls = calls
        self.signer = signer
        # Set when a run of this process reaches an answer: a tasks/result
        # waiting for it re-reads at once instead of at its next poll.
        self._changes: dict[str, asyncio.Event] = {}
        # Set when the server stops taking calls (Server sets it to its own):
        # a tasks/result still waiting is answered then, so serving can end.
        self.stopping = asyncio.Event()

    @property
    def server(self) -> ServerConfig:
        return self.calls.manifest.server

    def view(self, task_id: str | None, admitted: Admitted = LOCAL) -> TaskView | None:
        """The caller's task `task_id`; None for any other (its existence is
        not revealed)."""
        entry = None if task_id is None else self.calls.ledger.run(task_id)
        if entry is None or not admitted.owns(entry):
            return None
        return self._view_of(entry)

    def _view_of(self, entry: RunEntry) -> TaskView | None:
        calls = self.calls
        files = calls.files(entry.tool, entry.run)
        status = run_status(entry, files, calls.waiting.notes, calls.run_journals)
        cancelled = entry.state == "released" and calls.waiting.notes.cancelled(files)
        return task_view(entry, status, self.server, cancelled)

    def created(self, run: str, reserved_ms: int) -> TaskView:
        """The task of a run just reserved: working, and nothing read."""
        return TaskView(run, "working", f"Run {run} is running.", reserved_ms, reserved_ms,
                        self.server.task_ttl_ms, self.server.task_poll_interval.ms)

    def changed(self, run: str) -> None:
        """Run `run` reached an answer in this process (an end or a stop)."""
        event = self._changes.pop(run, None)
        if event is not None:
            event.set()

    async def follow(self, view: TaskView, admitted: Admitted = LOCAL) -> AsyncIterator[TaskView]:
        """The caller's task as it changes, for a listen stream: `view`, then
        each new way it stands, read from the store when its run reaches an
        answer in this process (`changed`) or at a bounded poll (a run
        another instance resumed, or an operator resolved), until it ends,
        is no longer the caller's to see, or the server stops."""
        backoff = Backoff(RESULT_POLL.first, RESULT_POLL.cap, at_once=RESULT_POLL.at_once)
        last = view
        yield last
        while not last.terminal and not self.stopping.is_set():
            # Taken before the read: a change after it sets this event.
            event = self._changes.setdefault(last.task_id, asyncio.Event())
            now = await off_loop(self.view, last.task_id, admitted)
            if now is None:
                return
            if now != last:
                last = now
                yield last
                continue
            await self._changed_or_polled(event, backoff)

    async def _changed_or_polled(self, event: asyncio.Event, backoff: Backoff) -> None:
        """Until the run's answer reaches this process (`event`), the server
        stops, or the next poll is due (a change elsewhere: another
        instance, an operator)."""
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self.stopping.wait())]
        try:
            await asyncio.wait(waits, timeout=backoff.strike(time.monotonic()),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def answer(self, request: TaskRequest, admitted: Admitted = LOCAL) -> TaskAnswer:
        if request.method == "tasks/list":
            return await off_loop(self.page, request.cursor, admitted)
        if request.method == "tasks/result":
            return await self.result(request.task_id, admitted)
        view = await off_loop(self.view, request.task_id, admitted)
        if view is None:
            return no_such_task(request.task_id)
        if request.method == "tasks/cancel":
            return await self.cancel(request, view, admitted)
        return view  # tasks/update: acknowledged (staal never asks for input)

    async def cancel(self, request: TaskRequest, view: TaskView, admitted: Admitted) -> TaskAnswer:
        """Cancel the task's run as its deadline would end it: the action in
        progress finishes, no new one starts, and the run ends `cancelled`
        (supervisor/workers/pool_states.py `Cancels`); one not yet handed to
        a worker is never sent, its reservation given back. The cancel is
        durable first (supervisor/store/notes.py): a run resumed at start or
        by a takeover resumes cancelled, and the instance that runs it learns
        it after its next renewal when another instance was asked. A cancel
        never settles a doubt: a run waiting for an operator takes a
        2026-07-28 cancel (cooperative: acknowledged, recorded) and stops
        before its next action once the operator has settled it, as a
        resumed run does; 2025-11-25 must answer with the task cancelled, so
        it refuses one waiting (nothing recorded) or an ended one, and
        answers once the run has stopped."""
        run = view.task_id
        legacy = request.revision == LEGACY
        stoppable = not view.terminal and not (view.waiting and legacy)
        if stoppable:
            await off_loop(self._record_cancel, run)
            kill_point("supervisor", "cancel")
            if self.calls.in_flight.holder(run) is not Holder.FREE:
                self.calls.pool.cancel(run)
            self.calls.log("run_cancel_asked", run=run)
        if not legacy:
            return view
        if not stoppable:
            return not_cancellable(view)
        ended = await self.result(run, admitted, until=lambda v: v.terminal or v.waiting)
        if isinstance(ended, TaskView) and ended.status != "cancelled":
            # It ended first, or stopped in doubt before it saw the cancel:
            # recorded, the cancel then stops it once the doubt is settled.
            return not_cancellable(ended, recorded=True)
        return ended

    def _record_cancel(self, run: str) -> None:
        entry = self.calls.ledger.run(run)
        assert entry is not None  # its view was just read
        self.calls.waiting.notes.cancel(self.calls.files(entry.tool, run))

    async def result(self, task_id: str | None, admitted: Admitted,
                     until: Callable[[TaskView], bool] = lambda view: view.terminal,
                     ) -> TaskAnswer:
        """The task once it has ended (`until`): waits while it is working (a
        run waiting for an operator included), re-reading the store as its
        end arrives in this process or at a bounded poll."""
        backoff = Backoff(RESULT_POLL.first, RESULT_POLL.cap, at_once=RESULT_POLL.at_once)
        while True:
            view = await off_loop(self.view, task_id, admitted)
            if view is None:
                return no_such_task(task_id)
            if until(view):
                return view
            if self.stopping.is_set():
                return RpcError(INTERNAL_ERROR, f"the server is stopping while task {view.task_id} "
                                "is still working; ask again (tasks/get tells how it stands)")
            event = self._changes.setdefault(view.task_id, asyncio.Event())
            await self._changed_or_polled(event, backoff)

    def page(self, cursor: str | None, admitted: Admitted) -> TaskAnswer:
        """The caller's tasks, newest first, TASKS_PAGE at a time; the cursor
        (signed, as the resources' are) holds the last one's reserve time and id."""
        position = None if cursor is None else self.signer.read(CURSOR_COLLECTION, cursor)
        if cursor is not None and position is None:
            return no_cursor()
        # Every run the caller reserved (a released one's view is None), one
        # more than the page; on a shared store the ledger reads it alone.
        entries = self.calls.ledger.caller_runs(
            CallerRuns(admitted.identity, started=False, limit=TASKS_PAGE + 1, after=position))
        views = tuple(v for e in entries[:TASKS_PAGE] if (v := self._view_of(e)) is not None)
        next_cursor = None
        if len(entries) > TASKS_PAGE:
            last = entries[TASKS_PAGE - 1]
            next_cursor = self.signer.make(CURSOR_COLLECTION, f"{last.reserved_ms}:{last.run}")
        return TaskPage(views, next_cursor)


def no_cursor() -> RpcError:
    return RpcError(INVALID_PARAMS, "tasks/list params.cursor is not a cursor this server gave")
