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

from staal.errors import StaalError
from staal.inputs.arguments import arguments_to_json, check_arguments
from staal.inputs.types import InputError
from staal.manifest.model import Manifest, Tool
from staal.protocol.mcp.dispatch import CallTool
from staal.protocol.mcp.results import CallOutcome, Failed, Refused, RunStatus, Stopped
from staal.records.messages import Ended, PrintLine, Run, RunSpans, Started, StoppedMsg
from staal.records.messages import Progress as ProgressMsg
from staal.records.outcomes import CANCELLED
from staal.records.record import Json, Record
from staal.records.runconfig import config_key
from staal.runtime.killpoints import kill_point
from staal.supervisor.auth.callers import LOCAL, Admitted
from staal.supervisor.calls.in_flight import RunsInFlight
from staal.supervisor.calls.off_loop import off_loop
from staal.supervisor.calls.outcomes import (
    CANCELLED_UNSTARTED,
    answer_earlier,
    charged_of,
    outcome_of_message,
    release_unstarted,
    run_status,
)
from staal.supervisor.calls.quota_text import quota_text
from staal.supervisor.calls.run_crashes import Progress, RunCrashes, increasing
from staal.supervisor.calls.run_logs import RunLogs, failure_fields
from staal.supervisor.calls.tool_runtime import ToolRuntime, busy_text, money_held
from staal.supervisor.recovery.waiting import Waiting
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.journals import FILE_JOURNALS, RunJournals
from staal.supervisor.store.ledger import (
    Admission,
    Different,
    Existing,
    Ledger,
    LedgerUnusable,
    OnceRequest,
    OverQuota,
    ReserveResult,
    RunEntry,
    once_request,
)
from staal.supervisor.telemetry.log import Log, log_file_line
from staal.supervisor.telemetry.metrics import NO_METRICS, Observer
from staal.supervisor.telemetry.tracing import NO_TRACING, Tracing
from staal.supervisor.workers.pool import Pool
from staal.supervisor.workers.pool_states import Lease, NoWorker
from staal.supervisor.workers.zygote import run_secrets, secret_names


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
    # The call's span as a W3C traceparent, for its run's worker (None: not traced).
    traceparent: str | None = None
    # Told the run id and reserve time once the reserve and the arguments
    # are durable (a call asked as a task is answered then).
    reserved: Callable[[str, int], None] | None = None


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
    # Spans (supervisor/telemetry/tracing.py): the workers' are exported from here.
    tracing: Tracing = NO_TRACING
    # Where the runs' journals are durable (the worker's file, or the store's rows).
    run_journals: RunJournals = FILE_JOURNALS
    # Each run's log lines until it ends (supervisor/calls/run_logs.py);
    # recovery writes them too.
    logs: RunLogs = field(default_factory=RunLogs)
    # The runs a call or recovery of this process is running (settling in
    # place touches no other: supervisor/calls/in_flight.py).
    in_flight: RunsInFlight = field(default_factory=RunsInFlight)
    # Each tool's secrets by name: a run is handed the values of its own.
    secret_names: dict[str, tuple[str, ...]] = field(init=False)
    # What a run does when its execution stops short (a worker's death, a
    # refused record): supervisor/calls/run_crashes.py.
    crashes: RunCrashes = field(init=False)

    def __post_init__(self) -> None:
        self.secret_names = secret_names(self.manifest)
        self.crashes = RunCrashes(self.manifest, self.log, self.run_journals, self.execute)

    @property
    def journals(self) -> Path:
        return self.manifest.server.journals

    def files(self, tool: str, run: str) -> RunFiles:
        return RunFiles(self.journals, tool, run)

    # -- a call ---------------------------------------------------------

    async def call_tool(self, call: CallTool, state: CallState,
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
        busy = busy_text(self.manifest.server.max_concurrent_runs, self.running, runtime)
        if busy is not None:
            return Refused("busy", busy)
        if state.cancelled:
            return None  # cancelled before anything was reserved: nothing happens
        self.running += 1
        runtime.running += 1
        try:
            try:
                lease = await self.pool.checkout(config_key(call.name, admitted.grants(call.name)))
            except NoWorker as exc:
                # Before the reservation: nothing is held and nothing ran, so
                # trying again later is the truth.
                self.log("no_worker", level="warning", tool=call.name, message=exc.message)
                return Refused("busy", f"the server is busy: {exc.message}; try again later")
            try:
                if state.cancelled:
                    return None  # cancelled while it waited for a worker: nothing happens
                return await self.reserve_and_run(runtime, values, once, call, state, lease,
                                                  admitted)
            finally:
                self.pool.give_back(lease)  # a call that ended before its run was sent
        finally:
            self.running -= 1
            runtime.running -= 1

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
            over = await off_loop(self.ledger.over_quota, tool.name, tool.quota, 1,
                                  money_held(runtime, admission), admission)
        except (StoreError, LedgerUnusable):
            return None
        return None if over is None else self.refused_over(tool, over, admission)

    def refused_over(self, tool: Tool, over: OverQuota, admission: Admission | None) -> Refused:
        self.metrics.refused(tool.name, "rate" if over.scope == "rate" else "quota")
        return Refused("quota", quota_text(tool, over, admission))

    async def reserve_and_run(self, runtime: ToolRuntime, values: dict[str, object],
                              once: OnceRequest | None, call: CallTool, state: CallState,
                              lease: Lease,
                              admitted: Admitted = LOCAL) -> CallOutcome:
        """Steps 5 to 7; the run reserved is the call's until its answer
        (or its failure: then settling in place may take it up)."""
        try:
            return await self._reserve_and_run(runtime, values, once, call, state, lease,
                                               admitted)
        finally:
            if state.run is not None:
                self.in_flight.let_go([state.run])  # and the pool forgets its cancel (parts.py)

    async def _reserve_and_run(self, runtime: ToolRuntime, values: dict[str, object],
                               once: OnceRequest | None, call: CallTool, state: CallState,
                               lease: Lease,
                               admitted: Admitted) -> CallOutcome:
        tool = runtime.tool
        arguments = arguments_to_json(values)
        admission = admitted.admission(tool.name)
        result, files = await off_loop(self._reserve_and_keep, runtime, once, arguments, state,
                                       admission)
        if isinstance(result, Existing):
            assert once is not None  # only a call with a once key finds an earlier run
            return self.answer_earlier(result.entry, once.args)
        if isinstance(result, Different):
            return self.answer_earlier(result.entry, "")
        if isinstance(result, OverQuota):
            return self.refused_over(tool, result, admission)
        assert files is not None  # reserved: its arguments are kept there
        if state.reserved is not None:
            state.reserved(result.run, result.time)
        if self.pool.cancels.take(result.run):  # its task was cancelled: it is never sent
            return await self.conclude(tool, files, None)
        progress = increasing(state.progress)
        progress(0, f"run {result.run} started")
        final = await self.crashes.execute_with_recovery(
            tool, files, resume=False, progress=progress, lease=lease,
            grants=admitted.grants(tool.name), traceparent=state.traceparent)
        return await self.conclude(tool, files, final)

    def _reserve_and_keep(self, runtime: ToolRuntime, once: OnceRequest | None,
                          arguments: dict[str, Json], state: CallState,
                          admission: Admission | None) -> tuple[ReserveResult, RunFiles | None]:
        """Steps 5 and 6a in one trip to a thread, each durable before the next:
        the reservation, then the arguments file; and the run's files (None: none)."""
        tool = runtime.tool
        with self.in_flight.reserving() as hold:
            result = self.ledger.reserve_call(tool.name, tool.quota, 1,
                                              money_held(runtime, admission), once, admission)
            if isinstance(result, (Existing, Different, OverQuota)):
                return result, None
            hold(result.run)
            state.run = result.run
        kill_point("supervisor", "reserve")
        files = self.files(tool.name, result.run)
        self.run_journals.keep_inputs(files, arguments)
        kill_point("supervisor", "inputs")
        return result, files

    async def resume_run(self, files: RunFiles) -> CallOutcome:
        """Recovery at start: resume an unfinished or waiting run to its end
        (or to a stop), then settle it as a call would."""
        tool = self.manifest.tool(files.tool)
        assert tool is not None  # recovery resumes only a run whose tool is still there (what_changed)
        entry = self.ledger.run(files.run)
        grants = None if entry is None else entry.grants  # the grant set it was reserved with
        if await off_loop(self.waiting.notes.cancelled, files):
            self.pool.cancel(files.run)  # resumed cancelled: what it did replays, nothing new starts
        # Recovery holds the run: letting it go drops its cancel (parts.py).
        final = await self.crashes.execute_with_recovery(tool, files, resume=True, grants=grants)
        return await self.conclude(tool, files, final)

    async def execute(self, tool: Tool, files: RunFiles, resume: bool,
                      progress: Progress | None = None, lease: Lease | None = None,
                      grants: str | None = None,
                      traceparent: str | None = None) -> Ended | StoppedMsg:
        """Run (or resume) in the worker `lease` lends, or in one lent now, with the
        tool's grant set `grants` (None: its own), its spans under the call's
        `traceparent` (None: none recorded); `WorkerLost` if the worker
        died, `NoWorker` if none was ready."""
        key = config_key(tool.name, grants)
        lease = lease or await self.pool.checkout(key)
        message = Run(run=files.run, tool=tool.name, journal=str(files.journal),
                      inputs=str(files.inputs), resume=resume, grants=grants,
                      timed=self.metrics.timed, sink=self.run_journals.sink,
                      secrets=run_secrets(self.secret_names[key]), traceparent=traceparent)
        self.log("run_started", run=files.run, tool=tool.name, pid=lease.worker.pid,
                 resume=resume or None)

        def on_message(reply: Record) -> None:
            if isinstance(reply, PrintLine):
                self.log("print", run=reply.run, tool=tool.name, text=reply.text)
                self.logs.of(files).append(log_file_line("print", text=reply.text))
            elif isinstance(reply, Started):
                self.logs.of(files).append(log_file_line("started", pid=reply.pid))
            elif isinstance(reply, ProgressMsg) and progress is not None:
                progress(reply.op, reply.message)
            elif isinstance(reply, RunSpans) and traceparent is not None:
                self.tracing.worker_spans(reply, traceparent)

        final = await self.pool.run(lease, message, on_message,
                                    lambda append: self.crashes.commit_record(files, append))
        self.metrics.worker_reported(final.timings)
        return final

    def _settle_and_clean_up(self, files: RunFiles, final: Ended) -> Exception | None:
        """Step 7's settle and, once it is durable, the clean-up, in one thread (a
        clean-up beside the answer measured slower: BENCHMARKS.md). A failed clean-up
        is returned, not raised: the run is settled and its outcome is the answer."""
        self.ledger.settle(files.run, final.outcome, charged_of(final))
        kill_point("supervisor", "settle")
        try:
            self._clean_up(files, final)
        except Exception as exc:  # noqa: BLE001 - handed back to be logged
            return exc
        return None

    def _flush_log(self, files: RunFiles, ended: str) -> None:
        self.waiting.notes.log(files, self.logs.last_lines(files, ended))

    def _clean_up(self, files: RunFiles, final: Ended) -> None:
        """Once a run is settled: its log, its arguments file (a crash
        before this leaves it for the next start to remove) and any waiting
        record (on the shared store, one statement)."""
        self.waiting.notes.end(files, self.logs.last_lines(files, final.outcome, final.failure))

    async def conclude(self, tool: Tool, files: RunFiles,
                       final: Ended | StoppedMsg | None) -> CallOutcome:
        """Step 7: a stopped run waits (no settle); any other is settled,
        its arguments removed, and answered from its outcome."""
        cut = self.crashes.cut_off.pop(files.run, None)
        if cut is not None:
            await off_loop(self._flush_log, files, "cut off")
            message = (f"run {files.run} stopped on this instance: its journal record was "
                       f"refused ({cut}); nothing was performed after it, and the run is not "
                       "settled here")
            self.log("internal_error", level="error", run=files.run, tool=tool.name,
                     message=message)
            return Failed(files.run, "internal", message)
        if isinstance(final, StoppedMsg):
            await off_loop(self._flush_log, files, "stopped")
            try:
                await off_loop(self.waiting.record, tool.name, files, final.op, final.message)
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
            # came), or its task was cancelled before it was sent: it never started.
            cancelled = self.pool.cancels.take(files.run)
            ended = "cancelled before it started" if cancelled else "never started"
            await off_loop(release_unstarted, self.ledger, self.waiting.notes, files,
                           self.logs.last_lines(files, ended))
            if cancelled:
                self.log("run_ended", run=files.run, tool=tool.name, outcome="released", kind=CANCELLED)
                return Failed(files.run, CANCELLED, CANCELLED_UNSTARTED)
            self.log("internal_error", level="error", run=files.run, tool=tool.name,
                     message="the run never started: no worker created its journal (see above)")
            return Failed(files.run, "internal", "the run never started: no worker created its journal")
        kill_point("supervisor", "ended")
        outcome = outcome_of_message(final)
        failed = await off_loop(self._settle_and_clean_up, files, final)
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
            assert final.failure is not None  # it failed: its end carries how
            self.log("internal_error", level="error", run=files.run, tool=tool.name,
                     message=final.failure.message)
        return outcome

    # -- an earlier call under the same key ----------------------------------

    def answer_earlier(self, entry: RunEntry, args_hash: str) -> CallOutcome:
        return answer_earlier(entry, args_hash, self.files(entry.tool, entry.run),
                              self.waiting.notes, self.run_journals)

    def run_status(self, run: str, admitted: Admitted = LOCAL) -> RunStatus:
        """How the caller's own run stands; another caller's is unknown (its
        existence is not revealed)."""
        entry = self.ledger.run(run)
        if entry is None or not admitted.owns(entry):
            return RunStatus(run, "unknown")
        return run_status(entry, self.files(entry.tool, run), self.waiting.notes,
                          self.run_journals)
