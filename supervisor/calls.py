"""A tool call's seven steps (seed 000 section 5), in order; a call refused
at one step does none of the later ones.

1. find the tool (the protocol connection answers an unknown name -32602);
2. check the arguments by the runtime's own rules, from the type description
   the start-up check returned (the supervisor never imports a program);
3. find an earlier call with the same `once` key; then, for a tool or a
   caller with a quota, read whether the ledger already refuses the call
   over quota (step 5's decision read early: a flood of over-quota calls is
   answered so at once, never queued for a worker and answered busy);
4. take a concurrency slot (busy at once, never queued), and a worker
   (waited for a bounded time; busy if none comes, with nothing reserved);
5. reserve in the ledger (quota, and the once key, in one durable event);
6. keep the arguments, then run in the worker;
7. settle, then answer from the outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from staal.budgets import message_of, own_limit
from staal.errors import StaalError
from staal.inputs import InputError, arguments_to_json, check_arguments
from staal.journal_records import End
from staal.killpoints import kill_point
from staal.manifest import Manifest, Tool
from staal.messages import Ended, JournalAppend, PrintLine, Run, RunSpans, Started, StoppedMsg
from staal.messages import Progress as ProgressMsg
from staal.money import Money
from staal.outcomes import Failure
from staal.protocol.results import CallOutcome, Failed, Refused, RunStatus, Stopped
from staal.runconfig import Limits, config_key, from_tool
from staal.supervisor.callers import LOCAL, Admitted
from staal.supervisor.files import RunFiles, remove_never_started
from staal.supervisor.in_flight import RunsInFlight
from staal.supervisor.ledger import (
    Admission,
    Different,
    Existing,
    Ledger,
    LedgerUnusable,
    OverQuota,
    RunEntry,
    once_request,
)
from staal.supervisor.log import Log, log_file_line
from staal.supervisor.metrics import NO_METRICS, Observer
from staal.supervisor.outcomes import (
    answer_of_journal,
    charged_of,
    give_up,
    outcome_of_message,
    over_limit,
    run_status,
)
from staal.supervisor.pg_schema import StoreError
from staal.supervisor.pool import NoWorker, Pool, WorkerLost
from staal.supervisor.poolstate import Worker
from staal.supervisor.run_journals import FILE_JOURNALS, RunJournals
from staal.supervisor.tracing import NO_TRACING, Tracing
from staal.supervisor.waiting import Waiting
from staal.supervisor.zygote import run_secrets, secret_names

# A run whose worker dies is resumed in a new worker at most this many times.
MAX_RESUMES = 3


@dataclass
class ToolRuntime:
    tool: Tool
    inputs: dict[str, Any]
    schema: dict[str, Any]
    worst_case: tuple[Money, ...]
    running: int = 0

    @property
    def capabilities(self) -> tuple[str, ...]:
        return tuple(self.tool.grants)


def worst_case(tool: Tool, grants: str | None = None) -> tuple[Money, ...]:
    """One run's worst-case spend, per currency: over the money grants of
    its grant set, max, or each times uses (seed 000 section 6)."""
    totals: dict[str, Money] = {}
    walked = (inner for grant in tool.grant_set(grants).values() for inner in grant.walk())
    for grant in walked:
        if not grant.spec.money:
            continue
        worst = grant.worst_case()
        if worst is not None:
            totals[worst.currency] = totals.get(worst.currency, Money.zero(worst.currency)) + worst
    return tuple(totals[c] for c in sorted(totals))


@dataclass
class CallState:
    """What the server knows of a call in flight (for cancellation)."""

    cancelled: bool = False
    # The run id once the call holds a reservation: from then on the run may
    # act, so an error can never be answered as "busy, try again".
    run: str | None = None
    # The call's progress (value, message): value 0 when its run starts, then
    # each action's op number as it begins (the transport's notifications).
    progress: Callable[[int, str], None] | None = None
    # The call's span as a W3C traceparent, for its run's worker (None:
    # not traced).
    traceparent: str | None = None


@dataclass
class Calls:
    manifest: Manifest
    tools: dict[str, ToolRuntime]
    ledger: Ledger
    pool: Pool
    log: Log
    waiting: Waiting
    metrics: Observer = NO_METRICS
    running: int = 0
    # Spans (supervisor/tracing.py): the workers' are exported from here.
    tracing: Tracing = NO_TRACING
    states: dict[Any, CallState] = field(default_factory=dict)
    # Where the runs' journals are durable (the worker's file, or the store's rows).
    run_journals: RunJournals = FILE_JOURNALS
    # Runs whose journal record the store refused, and why (`commit_record`).
    cut_off: dict[str, str] = field(default_factory=dict)
    logs: dict[str, list[bytes]] = field(default_factory=dict)
    # The runs a call or recovery of this process is running (settling in
    # place touches no other: supervisor/in_flight.py).
    in_flight: RunsInFlight = field(default_factory=RunsInFlight)
    # Each tool's secrets by name: a run is handed the values of its own.
    secret_names: dict[str, tuple[str, ...]] = field(init=False)

    def __post_init__(self) -> None:
        self.secret_names = secret_names(self.manifest)

    @property
    def journals(self) -> Path:
        return self.manifest.server.journals

    def files(self, tool: str, run: str) -> RunFiles:
        return RunFiles(self.journals, tool, run)

    # -- a call ---------------------------------------------------------

    async def call_tool(self, call: Any, state: CallState,
                        admitted: Admitted = LOCAL) -> CallOutcome | None:
        runtime = self.tools[call.name]
        try:
            values = check_arguments(runtime.inputs, call.arguments, runtime.capabilities)
        except InputError as exc:
            return Refused("arguments", exc.message)
        once = once_request(runtime.tool, values, admitted.identity)
        if once is not None:
            holder = await asyncio.to_thread(self.ledger.once_holder, runtime.tool.name, once.key)
            if holder is not None:
                return self.answer_earlier(holder, once.args)
        over = await self.over_quota_already(runtime, admitted.admission(call.name))
        if over is not None:
            return over
        busy = self.busy(runtime)
        if busy is not None:
            return Refused("busy", busy)
        if state.cancelled:
            return None  # cancelled before anything was reserved: nothing happens
        self.running += 1
        runtime.running += 1
        try:
            try:
                worker = await self.pool.checkout()
            except NoWorker as exc:
                # Before the reservation: nothing is held and nothing ran, so
                # trying again later is the truth.
                self.log("no_worker", level="warning", tool=call.name, message=exc.message)
                return Refused("busy", f"the server is busy: {exc.message}; try again later")
            try:
                if state.cancelled:
                    return None  # cancelled while it waited for a worker: nothing happens
                return await self.reserve_and_run(runtime, values, once, call, state, worker,
                                                  admitted)
            finally:
                self.pool.give_back(worker)  # a call that ended before its run was sent
        finally:
            self.running -= 1
            runtime.running -= 1

    def busy(self, runtime: ToolRuntime) -> str | None:
        limit = self.manifest.server.max_concurrent_runs
        if self.running >= limit:
            return (f"the server is busy: {limit} runs are in progress, its limit; "
                    "try again later")
        tool_limit = runtime.tool.max_concurrent_runs
        if tool_limit is not None and runtime.running >= tool_limit:
            return (f"the server is busy: tool '{runtime.tool.name}' already has {tool_limit} "
                    "runs in progress, its limit; try again later")
        return None

    async def over_quota_already(self, runtime: ToolRuntime,
                                 admission: Admission | None) -> Refused | None:
        """The quota refusal the ledger already gives this call, read before
        a slot or a worker is taken; nothing is reserved. The reserve still
        decides for real: this only refuses what the ledger, as read, refuses
        (a missed reserve of another instance lets the call on to it), and a
        store that cannot be read leaves the answer to the reserve."""
        tool = runtime.tool
        if tool.quota is None and (admission is None or
                                   (admission.quota is None and admission.rate is None)):
            return None  # nothing to refuse: no read
        try:
            over = await asyncio.to_thread(self.ledger.over_quota, tool.name, tool.quota, 1,
                                           self.money_held(runtime, admission), admission)
        except (StoreError, LedgerUnusable):
            return None
        return None if over is None else self.refused_over(tool, over, admission)

    def refused_over(self, tool: Tool, over: OverQuota, admission: Admission | None) -> Refused:
        self.metrics.refused(tool.name, "rate" if over.scope == "rate" else "quota")
        return Refused("quota", quota_text(tool, over, admission))

    @staticmethod
    def money_held(runtime: ToolRuntime, admission: Admission | None) -> tuple[Money, ...]:
        """What a run holds until it settles: the worst case of its grant set."""
        if admission is None or admission.grants is None:
            return runtime.worst_case
        return worst_case(runtime.tool, admission.grants)

    async def reserve_and_run(self, runtime: ToolRuntime, values: dict[str, Any], once: Any,
                              call: Any, state: CallState, worker: Worker,
                              admitted: Admitted = LOCAL) -> CallOutcome:
        """Steps 5 to 7; the run reserved is the call's until its answer
        (or its failure: then settling in place may take it up)."""
        try:
            return await self._reserve_and_run(runtime, values, once, call, state, worker,
                                               admitted)
        finally:
            if state.run is not None:
                self.in_flight.let_go([state.run])

    async def _reserve_and_run(self, runtime: ToolRuntime, values: dict[str, Any], once: Any,
                               call: Any, state: CallState, worker: Worker,
                               admitted: Admitted) -> CallOutcome:
        tool = runtime.tool
        arguments = arguments_to_json(values)
        admission = admitted.admission(tool.name)
        result = await asyncio.to_thread(self._reserve_and_keep, runtime, once, arguments, state,
                                         admission)
        if isinstance(result, Existing):
            return self.answer_earlier(result.entry, once.args)
        if isinstance(result, Different):
            return self.answer_earlier(result.entry, "")
        if isinstance(result, OverQuota):
            return self.refused_over(tool, result, admission)
        files = self.files(tool.name, result.run)
        progress = increasing(state.progress)
        progress(0, f"run {result.run} started")
        final = await self.execute_with_recovery(tool, files, resume=False, progress=progress,
                                                 worker=worker, grants=admitted.grants(tool.name),
                                                 traceparent=state.traceparent)
        return await self.conclude(tool, files, final)

    def _reserve_and_keep(self, runtime: ToolRuntime, once: Any, arguments: dict,
                          state: CallState, admission: Admission | None) -> Any:
        """Steps 5 and 6a in one trip to a thread, each durable before the next:
        the reservation, then the arguments file."""
        tool = runtime.tool
        with self.in_flight.reserving() as hold:
            result = self.ledger.reserve_call(tool.name, tool.quota, 1,
                                              self.money_held(runtime, admission), once, admission)
            if isinstance(result, (Existing, Different, OverQuota)):
                return result
            hold(result.run)
            state.run = result.run
        kill_point("supervisor", "reserve")
        self.run_journals.keep_inputs(self.files(tool.name, result.run), arguments)
        kill_point("supervisor", "inputs")
        return result

    async def resume_run(self, files: RunFiles) -> CallOutcome:
        """Recovery at start: resume an unfinished or waiting run to its end
        (or to a stop), then settle it as a call would."""
        tool = self.manifest.tool(files.tool)
        entry = self.ledger.run(files.run)
        grants = None if entry is None else entry.grants  # the grant set it was reserved with
        final = await self.execute_with_recovery(tool, files, resume=True, grants=grants)
        return await self.conclude(tool, files, final)

    async def execute_with_recovery(self, tool: Tool, files: RunFiles, resume: bool,
                                    progress: Progress | None = None,
                                    worker: Worker | None = None,
                                    grants: str | None = None,
                                    traceparent: str | None = None) -> Ended | StoppedMsg | None:
        """A worker that dies mid-run is a crash at step 4: the run is
        resumed in a new worker, at most MAX_RESUMES times; then it fails as
        internal, or waits for an operator if an op is in doubt. So it does
        when no new worker is ready within the pool's wait. `worker`, if
        given, is the one the call took before its reservation."""
        deaths = 0
        how = ""
        while True:
            lent, worker = worker, None
            try:
                return await self.execute(tool, files, resume or deaths > 0, progress, lent, grants,
                                          traceparent)
            except NoWorker as none:
                if deaths == 0:
                    raise  # nothing was tried: a resume at start that cannot begin
                self.log("no_worker", level="error", run=files.run, tool=tool.name,
                         message=none.message, deaths=deaths)
                return await self.give_up(tool, files, deaths, f"{how}; then {none.message}")
            except WorkerLost as lost:
                deaths += 1
                how = lost.how
                limit = own_limit(lost.status)
                if limit is not None:
                    # Its own limit ended it: deterministic, so resuming it
                    # would only fail the same way again.
                    limits = self.limits(tool)
                    message = message_of(limit, limits.cpu_ms, limits.memory_mib)
                    self.log("worker_over_limit", level="warning", run=files.run, tool=tool.name,
                             pid=lost.pid, how=how, limit=limit)
                    return await asyncio.to_thread(over_limit, files, tuple(tool.grants), message,
                                                   self.run_journals)
                self.log("worker_lost", level="error", run=files.run, tool=tool.name,
                         pid=getattr(lost, "pid", None), how=how, deaths=deaths)
                if deaths > MAX_RESUMES:
                    return await self.give_up(tool, files, deaths, how)

    async def give_up(self, tool: Tool, files: RunFiles, deaths: int,
                      how: str) -> Ended | StoppedMsg | None:
        """Close the run its workers kept dying in. On a shared store another
        instance may have taken it over meanwhile (this one was paused past
        its lease): its closing record is then refused, and the run is cut
        off here as any refused record cuts it off (answered failed, not
        settled here)."""
        try:
            return await asyncio.to_thread(give_up, files, tuple(tool.grants), deaths, how,
                                           self.run_journals)
        except StaalError as exc:
            if exc.kind != "fenced":
                raise
            self.cut_off_run(files, exc)
            return None

    def cut_off_run(self, files: RunFiles, refused: StaalError) -> None:
        """A record of the run was refused: `conclude` answers it failed and
        this instance neither settles nor serves it further."""
        self.cut_off[files.run] = refused.message
        self.log("journal_refused", level="error", run=files.run, tool=files.tool,
                 kind=refused.kind, message=refused.message)

    def limits(self, tool: Tool) -> Limits:
        """The limits the tool's runs run under, as its workers set them."""
        return from_tool(self.manifest, tool).limits

    async def execute(self, tool: Tool, files: RunFiles, resume: bool,
                      progress: Progress | None = None,
                      worker: Worker | None = None,
                      grants: str | None = None,
                      traceparent: str | None = None) -> Ended | StoppedMsg:
        """Run (or resume) in `worker`, or in one checked out now, with the
        tool's grant set `grants` (None: its own), its spans under the call's
        `traceparent` (None: none recorded); `WorkerLost` if the worker
        died, `NoWorker` if none was ready."""
        worker = worker or await self.pool.checkout()
        message = Run(run=files.run, tool=tool.name, journal=str(files.journal),
                      inputs=str(files.inputs), resume=resume, grants=grants,
                      timed=self.metrics.timed, sink=self.run_journals.sink,
                      secrets=run_secrets(self.secret_names[config_key(tool.name, grants)]),
                      traceparent=traceparent)
        self.log("run_started", run=files.run, tool=tool.name, pid=worker.pid, resume=resume or None)

        def on_message(reply: Any) -> None:
            if isinstance(reply, PrintLine):
                self.log("print", run=reply.run, tool=tool.name, text=reply.text)
                self.run_log(files).append(log_file_line("print", text=reply.text))
            elif isinstance(reply, Started):
                self.run_log(files).append(log_file_line("started", pid=reply.pid))
            elif isinstance(reply, ProgressMsg) and progress is not None:
                progress(reply.op, reply.message)
            elif isinstance(reply, RunSpans) and traceparent is not None:
                self.tracing.worker_spans(reply, traceparent)

        final = await self.pool.run(worker, message, on_message,
                                    lambda append: self.commit_record(files, append))
        self.metrics.worker_reported(final.timings)
        return final

    async def commit_record(self, files: RunFiles, append: JournalAppend) -> str | None:
        """A worker's journal record on a shared store, committed before the
        worker goes on; else why not. A run with a refused record is cut
        off: this instance answers it as failed and neither settles nor
        serves it further (another instance owns it, or it is resumed from
        its rows at the next start)."""
        if append.run != files.run:
            return f"the record names run {append.run}, not the worker's run {files.run}"
        try:
            await asyncio.to_thread(self.run_journals.append, files, append.record)
        except StaalError as exc:
            self.cut_off_run(files, exc)
            return exc.message
        return None

    def run_log(self, files: RunFiles) -> list[bytes]:
        """The run's log lines, written beside its journal when it ends (or
        stops): one write per run instead of one per line."""
        return self.logs.setdefault(files.run, [])

    def _last_lines(self, files: RunFiles, ended: str, failure: Failure | None = None,
                    **said: str) -> bytes:
        """The run's log lines held until now, and the one saying how it ended."""
        lines = self.logs.pop(files.run, [])
        lines.append(log_file_line("ended", outcome=ended, **failure_fields(failure), **said))
        return b"".join(lines)

    def _flush_log(self, files: RunFiles, ended: str, failure: Failure | None = None) -> None:
        self.waiting.notes.log(files, self._last_lines(files, ended, failure))

    def recovered_lines(self, files: RunFiles, end: End) -> bytes:
        """The last log lines of a run recovery settles from its end: any
        its call of this process still held (its settle failed), and the
        one saying how it ended and was recovered."""
        return self._last_lines(files, end.outcome, end.failure, recovered="settled from its end")

    def _settle_and_clean_up(self, files: RunFiles, final: Ended) -> Exception | None:
        """Step 7's settle and, once it is durable, the clean-up, in one
        thread: one hop per call instead of two. The answer waits for both
        (a clean-up left running beside the answer measured slower:
        BENCHMARKS.md). A failed clean-up is returned, not raised: the run
        is settled and its outcome is still the answer."""
        self.ledger.settle(files.run, final.outcome, charged_of(final))
        kill_point("supervisor", "settle")
        try:
            self._clean_up(files, final)
        except Exception as exc:  # noqa: BLE001 - handed back to be logged
            return exc
        return None

    def _clean_up(self, files: RunFiles, final: Ended) -> None:
        """Once a run is settled: its log, its arguments file (a crash
        before this leaves it for the next start to remove) and any waiting
        record (on the shared store, one statement)."""
        self.waiting.notes.end(files, self._last_lines(files, final.outcome, final.failure))

    async def conclude(self, tool: Tool, files: RunFiles,
                       final: Ended | StoppedMsg | None) -> CallOutcome:
        """Step 7: a stopped run waits (no settle); any other is settled,
        its arguments removed, and answered from its outcome."""
        cut = self.cut_off.pop(files.run, None)
        if cut is not None:
            await asyncio.to_thread(self._flush_log, files, "cut off")
            message = (f"run {files.run} stopped on this instance: its journal record was "
                       f"refused ({cut}); nothing was performed after it, and the run is not "
                       "settled here")
            self.log("internal_error", level="error", run=files.run, tool=tool.name,
                     message=message)
            return Failed(files.run, "internal", message)
        if isinstance(final, StoppedMsg):
            await asyncio.to_thread(self._flush_log, files, "stopped")
            try:
                await asyncio.to_thread(self.waiting.record, tool.name, files, final.op,
                                        final.message)
            except StaalError as exc:  # taken over since its stop was journaled
                self.log("waiting_refused", level="error", run=files.run, tool=tool.name,
                         kind=exc.kind, message=exc.message)
                return Failed(files.run, "internal", f"run {files.run} stopped on this "
                              f"instance, but its waiting record was refused ({exc.message}); "
                              "the instance that owns it now answers for it")
            kill_point("supervisor", "waiting")
            self.log("run_waiting", level="warning", run=files.run, tool=tool.name, op=final.op,
                     message=final.message)
            return Stopped(files.run, final.op, final.message)
        if final is None:
            # No worker made its journal's header durable (they died, or none
            # came): it never started.
            await asyncio.to_thread(self.ledger.release, files.run)
            await asyncio.to_thread(remove_never_started, files)
            await asyncio.to_thread(self._flush_log, files, "never started")
            self.log("internal_error", level="error", run=files.run, tool=tool.name,
                     message="the run never started: no worker created its journal (see above)")
            return Failed(files.run, "internal", "the run never started: no worker created its journal")
        kill_point("supervisor", "ended")
        outcome = outcome_of_message(final)
        failed = await asyncio.to_thread(self._settle_and_clean_up, files, final)
        if failed is not None:
            # What is left is the next start's to remove (its arguments file).
            self.log("clean_up_failed", level="error", run=files.run, tool=tool.name,
                     error=f"{type(failed).__name__}: {failed}")
        self.log("run_ended", run=files.run, tool=tool.name, outcome=final.outcome,
                 kind=final.failure.kind if final.failure else None)
        if final.failure is not None and final.failure.traceback:
            # Where the program failed, for the operator; the client gets
            # only the kind and message.
            self.log("program_failed", level="warning", run=files.run, tool=tool.name,
                     **failure_fields(final.failure))
        if isinstance(outcome, Failed) and outcome.kind == "internal":
            self.log("internal_error", level="error", run=files.run, tool=tool.name,
                     message=final.failure.message)
        return outcome

    # -- an earlier call under the same key ----------------------------------

    def answer_earlier(self, entry: RunEntry, args_hash: str) -> CallOutcome:
        """Seed 000 section 5's table for a repeated once call."""
        if entry.once is not None and args_hash != entry.once.args:
            return Refused(
                "once_conflict",
                f"run {entry.run} already holds this call's once key with different arguments: "
                "it is a different operation under the same key, and is refused")
        files = self.files(entry.tool, entry.run)
        if entry.state == "unsettled":
            stopped = self.waiting.notes.waiting(files)
            if stopped is not None:
                return Stopped(entry.run, stopped["op"], stopped["message"])
            return Refused(
                "in_progress",
                f"this call is already in progress as run {entry.run}; follow it with "
                f"staal_run_status {{\"run\": \"{entry.run}\"}}")
        return answer_of_journal(entry, files, self.run_journals)

    # -- staal_run_status ------------------------------------------------------

    def run_status(self, run: str, admitted: Admitted = LOCAL) -> RunStatus:
        """How the caller's own run stands; another caller's is unknown (its
        existence is not revealed)."""
        entry = self.ledger.run(run)
        if entry is None or not admitted.owns(entry):
            return RunStatus(run, "unknown")
        return run_status(entry, self.files(entry.tool, run), self.waiting.notes,
                          self.run_journals)


Progress = Callable[[int, str], None]


def increasing(progress: Progress | None) -> Progress:
    """`progress`, told only values greater than the last (the protocol's
    rule; a run resumed after a worker's death begins again at an op the
    caller was already told of), or nothing at all."""
    last = -1

    def forward(value: int, message: str) -> None:
        nonlocal last
        if progress is not None and value > last:
            last = value
            progress(value, message)

    return forward


def failure_fields(failure: Failure | None) -> dict[str, Any]:
    """A failure as log fields: kind, message and the program's frames."""
    if failure is None:
        return {}
    fields: dict[str, Any] = {"kind": failure.kind, "message": failure.message}
    if failure.traceback:
        fields["traceback"] = [
            {"file": f.file, "line": f.line, "function": f.function, "source": f.source}
            for f in failure.traceback]
    return fields


def quota_text(tool: Tool, over: OverQuota, admission: Admission | None = None) -> str:
    import datetime

    whose = {"tool": f"tool '{tool.name}' is over its quota",
             "caller": f"this caller is over its quota on tool '{tool.name}'",
             "rate": "this caller is over its rate limit"}[over.scope]
    limit = tool.quota if admission is None or over.scope == "tool" else \
        (admission.rate if over.scope == "rate" else admission.quota)
    window = limit.window.text if limit is not None else "?"
    if over.frees_at_ms is None:
        when = "this call alone needs more than the whole quota"
    else:
        moment = datetime.datetime.fromtimestamp(over.frees_at_ms / 1000, tz=datetime.UTC)
        when = f"it frees up at {moment.strftime('%Y-%m-%d %H:%M:%S')} UTC"
    if over.which == "calls":
        used = f"{over.in_use} of {over.limit} calls per {window} are used"
    else:
        used = f"{over.in_use} of {over.limit} per {window} is held or spent"
    return f"{whose}: {used}; {when}"



