"""`staal-supervisor serve`: start-up, then serving over one transport.

Start-up, before anything is answered: protect the descriptors, read the
manifest (any problem stops here), take the journal directory's lock, open
the ledger, start the zygote and check every tool's program and config in a
worker, recover. Then a transport serves the calls: stdio (`stdio_serving`:
the protocol stream until it ends) or Streamable HTTP (`http_serving`:
until SIGTERM). Either way a call runs through the same pipeline
(`outcome_of`), every call in flight is answered before exiting, and nothing
about a run depends on the transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import traceback
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import staal
from staal.errors import StaalError
from staal.manifest.model import RUN_STATUS_TOOL, Manifest
from staal.manifest.resources import is_hidden_tool
from staal.protocol.cursors import CursorSigner
from staal.protocol.dispatch import CallTool
from staal.protocol.jsonrpc import INTERNAL_ERROR, RpcError
from staal.protocol.resources import Collection, ReadAnswer, ReadResource, ResourceCatalogue
from staal.protocol.results import CallOutcome, Failed, Refused
from staal.protocol.revisions import ServerInfo
from staal.protocol.tools import describe_tool
from staal.records.fsio import make_private_dir
from staal.records.journal import discard_unstarted
from staal.runtime.clock import SYSTEM_CLOCK
from staal.supervisor.app.lockfile import ServerLock
from staal.supervisor.app.log import Log
from staal.supervisor.app.startup import check_tools
from staal.supervisor.app.tool_runtime import ToolRuntime
from staal.supervisor.auth.callers import LOCAL, Admitted
from staal.supervisor.calls.in_flight import Holder
from staal.supervisor.calls.outcomes import charged_of
from staal.supervisor.calls.pipeline import Calls, CallState
from staal.supervisor.errors import SupervisorError
from staal.supervisor.recovery.at_start import RecoveryPlan, plan_recovery, plan_taken
from staal.supervisor.recovery.lease import Lease, LeaseState, LeaseTiming
from staal.supervisor.recovery.retention import DAY_S, sweep
from staal.supervisor.recovery.waiting import Waiting
from staal.supervisor.store.choice import describe_store, open_journals, open_ledger, open_notes
from staal.supervisor.store.files import RunFiles, make_run_folders
from staal.supervisor.store.journals import FILE_JOURNALS, RunJournals
from staal.supervisor.telemetry.metrics import NO_METRICS, Metrics, Observer
from staal.supervisor.telemetry.tracing import Tracing, tracing_for
from staal.supervisor.transport.readiness import ReadyState
from staal.supervisor.views.resources import Resources, cursor_key, entry_problems
from staal.supervisor.workers.pool import Pool
from staal.supervisor.workers.zygote import STOP_SIGNALS, Spawned, runtime_dir, worker_environment

# How long settling in place waits for the reservations under way to end
# (new ones wait meanwhile) before it leaves its runs to the next renewal.
CLAIM_WAIT_S = 1.0


class StartupFailed(SupervisorError):
    kind = "startup"


class Server:
    def __init__(self, manifest: Manifest, log: Log, early: Spawned | None = None,
                 tracing: Tracing | None = None) -> None:
        self.manifest = manifest
        self.early = early
        self.log = log
        # None: decided at start from server.traces and the OTEL_* variables.
        self.tracing: Tracing = tracing or tracing_for(manifest.server.traces, os.environ, log)
        # Set by SIGTERM or SIGINT (or the transport's own end): serving stops taking
        # calls, answers those in flight, and the server closes.
        self.stopping = asyncio.Event()
        self.terminated_by: signal.Signals | None = None
        # What a load balancer's check reads (GET /ready over HTTP).
        self.readiness = ReadyState(log)
        self.run_journals: RunJournals = FILE_JOURNALS
        # Runs taken over from dead instances, being resumed (`take_over`).
        self.resuming: set[asyncio.Future[None]] = set()
        # A takeover and settling in place each find their runs and claim
        # them (`RunsInFlight`) under this lock, never interleaved.
        self.claiming = asyncio.Lock()
        # Settling in place (`settle_in_place`), while it runs; and the runs
        # it leaves as they are until the next start (a problem: its program
        # changed, its journal is damaged).
        self.settling: asyncio.Future[None] | None = None
        self.left_alone: set[str] = set()
        # Counted only with a `server.metrics` section; else reports are dropped.
        self.metrics = Metrics(manifest) if manifest.server.metrics is not None else None
        self.observer: Observer = self.metrics or NO_METRICS

    # -- start-up ---------------------------------------------------------

    async def start(self) -> None:
        server = self.manifest.server
        make_private_dir(server.journals)
        self.lock = await asyncio.to_thread(
            ServerLock.acquire, server.journals, 5.0,
            lambda: self.log("waiting_for_lock", path=str(server.journals / "server.lock")))
        self.ledger = await asyncio.to_thread(
            open_ledger, server, SYSTEM_CLOCK,
            lambda text: self.log("clock_behind", level="warning", message=text),
            on_forget=lambda entry: self.log("once_forgotten", run=entry.run, tool=entry.tool,
                                             by="staal-supervisor forget"))
        self.run_journals = await asyncio.to_thread(open_journals, server, self.ledger)
        self.waiting = Waiting(open_notes(server, self.run_journals), server.notify,
                               server.notify_env, self.log)
        # On a shared store the rows are the journals: this instance's copies
        # of its unfinished runs' are made whole from them before recovery,
        # and waiting records an older version kept as files become rows.
        unfinished = [RunFiles(server.journals, e.tool, e.run) for e in self.ledger.mine()
                      if e.state == "unsettled"]
        await asyncio.to_thread(self.run_journals.restore, unfinished)
        await asyncio.to_thread(self.waiting.notes.adopt, unfinished)
        plan = await asyncio.to_thread(plan_recovery, self.manifest, self.ledger)
        if plan.problems:
            raise StartupFailed("; ".join(plan.problems))
        self.runtime_dir = self.early.runtime_dir if self.early else runtime_dir()
        self.pool = Pool(self.manifest.path, self.runtime_dir, worker_environment(self.manifest),
                         ahead=min(2, server.max_concurrent_runs) + 1, log=self.log,
                         early=self.early)
        await self.pool.start()
        tools, problems = await check_tools(self.manifest, self.pool)
        if problems:
            raise StartupFailed("; ".join(problems))
        self.calls = Calls(self.manifest, tools, self.ledger, self.pool, self.log, self.waiting,
                           tracing=self.tracing, metrics=self.observer,
                           run_journals=self.run_journals)
        await self.serve_resources(tools)
        await asyncio.to_thread(make_run_folders, server.journals, [t.name for t in self.manifest.tools])
        held = self.calls.in_flight.claim(plan.planned())
        try:
            await self.recover(plan)
        finally:
            self.calls.in_flight.let_go(held)
        await self.keep_files()
        self.descriptors = [describe_tool(t.tool, t.schema) for t in tools.values()
                            if not is_hidden_tool(t.tool.name)]
        self.server_info = ServerInfo(server.name, staal.__version__)
        self.pool.serving = True
        self.readiness.note("started")
        self.log("serving", server=server.name, tools=[t.name for t in self.manifest.tools],
                 journals=str(server.journals), ledger=describe_store(server),
                 version=staal.__version__)

    async def serve_resources(self, tools: dict[str, ToolRuntime]) -> None:
        """The resources served (supervisor/views/resources.py): the runs, and each
        collection, whose entries must take what staal passes them."""
        problems = entry_problems(self.manifest.resources,
                                  {name: t.inputs for name, t in tools.items()})
        if problems:
            raise StartupFailed("; ".join(problems))
        server = self.manifest.server
        key = await asyncio.to_thread(cursor_key, server.journals)
        collections = [Collection(r.name, r.description, r.max_page_size)
                       for r in self.manifest.resources]
        self.resource_catalogue = ResourceCatalogue(server.name, collections, CursorSigner(key))
        self.resources = Resources(self.calls, self.resource_catalogue, self.manifest.resources)

    async def read_resource(self, read: ReadResource, admitted: Admitted,
                            state: CallState) -> ReadAnswer:
        """A resources/read's answer; an unexpected error is logged and
        answered as an internal error, naming the run if one was reserved."""
        try:
            return await self.resources.read(read, admitted, state)
        except Exception as exc:  # noqa: BLE001 - a bug or a failing disk: nothing may escape
            self.log("read_failed", level="error", run=state.run,
                     error=f"{type(exc).__name__}: {exc}",
                     traceback="".join(traceback.format_exception(exc)))
            where = f" in run {state.run}" if state.run else ""
            return RpcError(INTERNAL_ERROR, f"an internal error happened{where}; the details are in "
                            "the server's log, for the operator")

    async def recover(self, plan: RecoveryPlan) -> None:
        """Recovery at start, before anything is answered (supervisor/recovery/at_start.py)."""
        for files in plan.release:
            await asyncio.to_thread(self.ledger.release, files.run)
            cut = await asyncio.to_thread(discard_unstarted, files.journal)
            await asyncio.to_thread(self.waiting.notes.end, files, self.calls.logs.last_lines(
                files, "never started", recovered="released: it never started"))
            self.log("recovered", rule="released: it never started", run=files.run, tool=files.tool,
                     removed="its journal, cut before its header was durable" if cut else None)
        for files, end in plan.settle:
            await asyncio.to_thread(self.ledger.settle, files.run, end.outcome, charged_of(end))
            # As a run's end: its kept arguments (on a shared store, their
            # row too) and any waiting record go, its log says so.
            await asyncio.to_thread(self.waiting.notes.end, files,
                                    self.calls.logs.recovered(files, end))
            self.log("recovered", rule="settled from its end", run=files.run, tool=files.tool)
        for files in plan.remove_inputs:
            await asyncio.to_thread(self.waiting.notes.end, files, b"")
        for files in plan.resume:  # one after another, before anything is served
            self.log("recovered", rule="resuming", run=files.run, tool=files.tool)
            outcome = await self.calls.resume_run(files)
            self.log("recovered", rule="resumed", run=files.run, tool=files.tool,
                     outcome=type(outcome).__name__.lower())

    async def recover_held(self, plan: RecoveryPlan, held: list[str], failed: str) -> None:
        """Recover by `plan` the runs `held` (claimed), then let them go."""
        try:
            await self.recover(plan)
        except Exception as exc:  # noqa: BLE001 - the runs stay this instance's: settled in place later
            self.log(failed, level="error", error=f"{type(exc).__name__}: {exc}",
                     traceback="".join(traceback.format_exception(exc)))
        finally:
            self.calls.in_flight.let_go(held)

    async def keep_files(self) -> None:
        result = await asyncio.to_thread(sweep, self.manifest, self.ledger)
        self.log("retention", deleted=len(result.deleted), kept=len(result.compaction.kept),
                 dropped=len(result.compaction.dropped))

    async def daily(self) -> None:
        while True:
            await asyncio.sleep(DAY_S)
            try:
                await self.keep_files()
            except StaalError as exc:
                self.log("retention_failed", level="error", kind=exc.kind, message=exc.message)

    async def keep_lease(self) -> None:
        """Renew this instance's lease (supervisor/recovery/lease.py) until serving
        ends; once another process holds the instance's identity, stop
        taking calls: the runs this one would settle are no longer its."""
        lease = Lease(self.ledger.renew_lease, LeaseTiming.of(self.manifest.server.store))
        while True:
            await asyncio.sleep(lease.timing.renew_every_s)
            try:
                state = await asyncio.to_thread(lease.renew)
            except StaalError as exc:  # the store unreachable: the lease runs down, try again
                self.log("lease_renewal_failed", level="warning", kind=exc.kind,
                         message=exc.message)
                self.readiness.note("store_failed")
                continue
            if state is LeaseState.LOST:
                self.readiness.note("fenced")
                self.log("lease_lost", level="error", message=(
                    "another process registered this instance (the same host and journal "
                    "directory) in the shared store; this one stops serving"))
                self.stopping.set()
                return
            self.readiness.note("renewed")
            await self.take_over(lease)
            if self.manifest.server.store is not None and (
                    self.settling is None or self.settling.done()):
                self.settling = asyncio.ensure_future(self.settle_in_place())

    async def take_over(self, lease: Lease) -> None:
        """The unfinished runs of instances whose leases expired become this
        one's, and are resumed from their journal rows as at start, off the
        lease's path (a waiting run stops at its op in doubt again)."""
        try:
            async with self.claiming:
                now = await asyncio.to_thread(self.ledger.now_ms)
                taken = await asyncio.to_thread(lease.take_over,
                                                lambda: self.run_journals.take_over(now))
                held = self.calls.in_flight.claim(files.run for files, _ in taken)
        except StaalError as exc:
            self.log("takeover_failed", level="warning", kind=exc.kind, message=exc.message)
            return
        if not taken:
            return
        for files, dead in taken:
            self.log("taken_over", level="warning", run=files.run, tool=files.tool, instance=dead)
        try:
            plan = await asyncio.to_thread(plan_taken, self.manifest, self.ledger,
                                           [files for files, _ in taken if files.run in held])
        except Exception as exc:  # noqa: BLE001 - raised, it would end the lease's loop
            # The runs are this instance's now: settled in place after a
            # later renewal, and the lease goes on being renewed.
            self.calls.in_flight.let_go(held)
            self.log("takeover_failed", level="error", error=f"{type(exc).__name__}: {exc}")
            return
        except BaseException:
            self.calls.in_flight.let_go(held)
            raise
        for problem in plan.problems:
            self.log("takeover_problem", level="error", message=problem)
        task = asyncio.ensure_future(self.recover_held(plan, held, "takeover_failed"))
        self.resuming.add(task)
        task.add_done_callback(self.resuming.discard)

    async def settle_in_place(self) -> None:
        """This instance's own runs that a failure of the store left
        unsettled (a settle, a release or a journal record that could not be
        committed), neither in flight here nor waiting, are settled,
        released or resumed as recovery at start would, once the store
        answers again (after each renewal of the lease: the store answered
        it). A waiting run stays waiting until an operator answers it; a run
        with a problem (its program changed) is logged once and left for the
        next start."""
        held: list[str] = []
        try:
            async with self.claiming:
                entries = await asyncio.to_thread(self.ledger.mine_unsettled)
                # A run with a waiting record waits for its answer; once an
                # operator answered (`staal-supervisor resolve` removes the
                # record), it is resumed here as at a start.
                waiting = await asyncio.to_thread(self.waiting.notes.all_waiting) if entries else {}
                left = {e.run: e for e in entries if e.run not in self.left_alone
                        and e.run not in waiting
                        and self.calls.in_flight.holder(e.run) is Holder.FREE}
                if left:
                    held = await asyncio.to_thread(self.calls.in_flight.claim_unattended, left,
                                                   CLAIM_WAIT_S)
                    if not held:
                        self.log("settle_in_place_deferred", runs=len(left), message=(
                            f"reservations stayed under way for {CLAIM_WAIT_S} s; the runs "
                            "left unsettled are looked at again after the next renewal"))
            if not held:
                return
            files = [RunFiles(self.manifest.server.journals, left[run].tool, run) for run in held]
            await asyncio.to_thread(self.run_journals.restore, files)
            plan = await asyncio.to_thread(plan_taken, self.manifest, self.ledger, files)
        except Exception as exc:  # noqa: BLE001 - the store failed again: tried at the next renewal
            self.calls.in_flight.let_go(held)
            self.log("settle_in_place_failed", level="warning", error=f"{type(exc).__name__}: {exc}")
            return
        for problem in plan.problems:
            self.log("settle_in_place_problem", level="error", message=problem)
        self.left_alone.update(f.run for f in files if f.run not in plan.planned())
        await self.recover_held(plan, held, "settle_in_place_failed")

    async def close(self) -> None:
        self.waiting.stopping.set()
        await self.pool.close()
        self.run_journals.close()
        self.ledger.close()
        self.lock.release()
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
        await asyncio.to_thread(self.tracing.close)  # the last spans out, bounded by the exporter

    # -- what every transport does with a call ---------------------------------

    def busy(self, in_progress: int, tool: str | None = None) -> Refused | None:
        """Seed 000 section 5: with more than 4 x max_concurrent_runs + 16
        calls in progress (being checked or running), a call is busy at once.
        `tool`: the call's, counted in the metrics (None: a resource read)."""
        bound = 4 * self.manifest.server.max_concurrent_runs + 16
        if in_progress < bound:
            return None
        refused = Refused("busy", f"the server is busy: more than {bound} calls are in progress; "
                                  "try again later")
        if tool is not None:
            self.observer.call_answered(tool, refused)
        return refused

    async def outcome_of(self, call: CallTool, state: CallState,
                         admitted: Admitted = LOCAL) -> CallOutcome | None:
        """A call's outcome through the one pipeline (calls.py), as the
        caller `admitted` (stdio: the local client); None if it was
        cancelled before anything was reserved. Its span (when traced) is
        the parent of its run's."""
        with self.tracing.call(call, admitted.identity) as span:
            state.traceparent = span.traceparent
            outcome: CallOutcome | None
            if call.name == RUN_STATUS_TOOL:
                outcome = await asyncio.to_thread(self.calls.run_status, call.arguments["run"],
                                                  admitted)
            else:
                outcome = await self.calls.call_tool(call, state, admitted)
            span.ended(outcome, state.run)
            self.observer.call_answered(call.name, outcome)
            return outcome

    def internal_failure(self, call: CallTool, state: CallState, error: Exception) -> Failed:
        """An unexpected error in a call, logged with its traceback; the
        answer it gets if it is still unanswered: an internal failure naming
        its run. Never "busy, try again": once reserved, the run may have
        acted, and a retried call without `once` would act again."""
        self.log("call_failed", level="error", tool=call.name, run=state.run,
                 error=f"{type(error).__name__}: {error}",
                 traceback="".join(traceback.format_exception(error)))
        failed = Failed(state.run, "internal", f"{type(error).__name__}: {error}")
        self.observer.call_answered(call.name, failed)
        return failed

    def answer_failed(self, call: CallTool, state: CallState, error: Exception) -> None:
        self.log("answer_failed", level="error", tool=call.name, run=state.run,
                 error=f"{type(error).__name__}: {error}",
                 traceback="".join(traceback.format_exception(error)))

    def terminated(self, number: signal.Signals) -> None:
        """SIGTERM or SIGINT: stop as the end of input does. Said once: a
        second Ctrl-C while calls in flight end changes nothing."""
        if self.terminated_by is None:
            self.terminated_by = number
            self.log("terminated", signal=number.name)
            self.readiness.note("stopping")
        self.stopping.set()


Transport = Callable[[Server], Awaitable[None]]
WhileStarting = Callable[[], AbstractAsyncContextManager[None]]


async def serve(manifest: Manifest, transport: Transport, log: Log,
                early: Spawned | None = None, tracing: Tracing | None = None,
                while_starting: WhileStarting | None = None) -> int:
    """Start the server, serve with `transport` until it ends, close.
    `while_starting`: what the transport does until the server is started
    (over HTTP: answer that it is not ready yet)."""
    server = Server(manifest, log, early, tracing)
    metrics_sock = None
    try:
        metrics_sock = listen_for_metrics(manifest)
        async with contextlib.nullcontext() if while_starting is None else while_starting():
            await server.start()
    except StaalError as exc:
        log("startup_failed", level="error", kind=exc.kind, message=exc.message)
        server.tracing.close()
        if hasattr(server, "pool"):
            await server.pool.close()
        elif early is not None:
            early.process.kill()
        if early is not None:
            shutil.rmtree(early.runtime_dir, ignore_errors=True)
        if metrics_sock is not None:
            metrics_sock.close()
        return 2
    loop = asyncio.get_running_loop()
    # SIGTERM (an SDK letting go of its probe, `docker stop`) and SIGINT
    # (Ctrl-C, sent by a terminal to the whole process group: the children
    # ignore it) end serving as the end of input does: calls in flight are
    # answered, and close() stops the children, lets go of the lock and
    # removes the runtime directory. This replaces asyncio's SIGINT handling,
    # which would cancel everything with a KeyboardInterrupt.
    for number in STOP_SIGNALS:
        loop.add_signal_handler(number, server.terminated, number)
    daily = asyncio.ensure_future(server.daily())
    metrics = MetricsListener(server, metrics_sock)
    lease = asyncio.ensure_future(server.keep_lease())
    try:
        await transport(server)
    finally:
        daily.cancel()
        lease.cancel()
        await metrics.close()
        await server.close()
    return 0


def listen_for_metrics(manifest: Manifest) -> socket.socket | None:
    """The metrics listener's socket, bound before start-up: an address in
    use stops the server before it recovers or serves anything."""
    config = manifest.server.metrics
    if config is None:
        return None
    from staal.supervisor.transport.listeners import bind  # uvicorn: only with metrics on

    try:
        return bind(config.host, config.port, backlog=64)
    except OSError as exc:
        raise StartupFailed(f"server.metrics.listen {config.host}:{config.port}: cannot listen "
                            f"there: {exc.strerror or exc}") from None


class MetricsListener:
    """Serves /metrics (metrics_http.py) beside the transport, until closed."""

    def __init__(self, server: Server, sock: socket.socket | None) -> None:
        self.log = server.log
        self.done = asyncio.Event()
        self.task: asyncio.Future[None] | None = None
        if sock is not None and server.metrics is not None:
            from staal.supervisor.telemetry.metrics_http import metrics_url, serve_metrics

            # Said before the transport answers anything: the socket already
            # accepts (connections wait in its backlog until uvicorn runs).
            server.log("serving_metrics", url=metrics_url(sock))
            self.task = asyncio.ensure_future(serve_metrics(server, server.metrics, sock, self.done))

    async def close(self) -> None:
        self.done.set()
        if self.task is None:
            return
        try:
            await self.task
        except Exception as exc:  # noqa: BLE001 - the metrics must never keep the server from closing
            self.log("metrics_failed", level="error", error=f"{type(exc).__name__}: {exc}")
