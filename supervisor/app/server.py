"""`staal-supervisor serve`: start-up, then serving over one transport.

Start-up, before anything is answered (supervisor/app/parts.py): take the
journal directory's lock, open the ledger (the lease's keeper renews from
then on), start the zygote and check every tool's program and config in a
worker, recover. `Server` then holds the started parts, builds what keeps
going while it serves (takeover and settling in place after each renewal
of the lease: supervisor/recovery/) and answers what
every transport asks. A transport serves the calls: stdio (`stdio_serving`:
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
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager

import staal
from staal.errors import StaalError
from staal.manifest.model import RUN_STATUS_TOOL, Manifest
from staal.protocol.mcp.dispatch import CallTool
from staal.protocol.mcp.jsonrpc import INTERNAL_ERROR, RpcError
from staal.protocol.mcp.resources import ReadAnswer, ReadResource
from staal.protocol.mcp.results import CallOutcome, Failed
from staal.protocol.mcp.tasks import TaskAnswer, TaskRequest, TaskView
from staal.supervisor.app.parts import Parts, Startup, StartupFailed
from staal.supervisor.auth.callers import LOCAL, Admitted
from staal.supervisor.calls.busy_bound import BusyBound
from staal.supervisor.calls.pipeline import CallState
from staal.supervisor.recovery.at_start import plan_taken
from staal.supervisor.recovery.takeover import Takeover
from staal.supervisor.store.choice import describe_store
from staal.supervisor.telemetry.log import Log
from staal.supervisor.telemetry.metrics import NO_METRICS, Metrics, Observer
from staal.supervisor.telemetry.tracing import Tracing, tracing_for
from staal.supervisor.transport.application import Transport
from staal.supervisor.workers.zygote import STOP_SIGNALS, Spawned


class Server:
    """The composition root: given the started parts (supervisor/app/parts.py),
    it builds the ones that keep going while it serves (takeover and settling
    in place, after each renewal of the lease) and is what a transport serves calls
    through."""

    def __init__(self, manifest: Manifest, log: Log, parts: Parts, tracing: Tracing,
                 metrics: Metrics | None = None) -> None:
        self.manifest = manifest
        self.log = log
        self.parts = parts
        self.tracing = tracing
        # What the transports and the metrics read of the parts.
        self.calls, self.pool, self.ledger, self.waiting = (parts.calls, parts.pool,
                                                            parts.ledger, parts.waiting)
        self.tools, self.descriptors, self.server_info = (parts.tools, parts.descriptors,
                                                          parts.server_info)
        self.resource_catalogue = parts.resource_catalogue
        self.tasks = parts.tasks
        # Set by SIGTERM or SIGINT (or the transport's own end, or the lease
        # lost): serving stops taking calls, answers those in flight, and the
        # server closes. Made by start-up, as the lease's keeper was.
        self.lease_keeper = parts.lease_keeper
        self.stopping = parts.lease_keeper.stopping
        self.tasks.stopping = self.stopping  # a waiting tasks/result lets serving end
        self.terminated_by: signal.Signals | None = None
        # What a load balancer's check reads (GET /ready over HTTP).
        self.readiness = parts.lease_keeper.readiness
        # Counted only with a `server.metrics` section; else reports are dropped.
        self.metrics = metrics
        self.observer: Observer = metrics or NO_METRICS
        # What a transport asks before a call reaches the pipeline.
        self.busy = BusyBound(manifest.server.max_concurrent_runs, self.observer).refuse
        store = manifest.server.store
        self.takeover = Takeover(
            manifest.server.journals, parts.ledger, parts.run_journals, parts.waiting.notes,
            parts.in_flight, lambda files: plan_taken(manifest, parts.ledger, files),
            parts.recovery, log, shared=store is not None, cancel=parts.pool.cancel)

    def started(self) -> None:
        """Start-up is over: a checkout waits for a worker only as long as a
        call may (pool.CALL_WAIT_S), the lease takes over as it renews, and
        the instance is ready and says so."""
        server = self.manifest.server
        self.pool.serving = True
        self.lease_keeper.serving(self.takeover.after_renewal)
        self.log("serving", server=server.name, tools=[t.name for t in self.manifest.tools],
                 journals=str(server.journals), ledger=describe_store(server),
                 version=staal.__version__)

    async def read_resource(self, read: ReadResource, admitted: Admitted,
                            state: CallState) -> ReadAnswer:
        """A resources/read's answer; an unexpected error is logged and
        answered as an internal error, naming the run if one was reserved."""
        try:
            return await self.parts.resources.read(read, admitted, state)
        except Exception as exc:  # noqa: BLE001 - a bug or a failing disk: nothing may escape
            self.log("read_failed", level="error", run=state.run,
                     error=f"{type(exc).__name__}: {exc}",
                     traceback="".join(traceback.format_exception(exc)))
            where = f" in run {state.run}" if state.run else ""
            return RpcError(INTERNAL_ERROR, f"an internal error happened{where}; the details are in "
                            "the server's log, for the operator")

    async def close(self) -> None:
        await self.parts.close()
        await asyncio.to_thread(self.tracing.close)  # the last spans out, bounded by the exporter

    # -- what every transport does with a call ---------------------------------

    async def outcome_of(self, call: CallTool, state: CallState,
                         admitted: Admitted = LOCAL) -> CallOutcome | None:
        """A call's outcome through the one pipeline (supervisor/calls/pipeline.py), as the
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
            if state.run is not None:
                self.tasks.changed(state.run)  # a tasks/result waiting for it reads it now
            return outcome

    async def answer_task(self, request: TaskRequest, admitted: Admitted = LOCAL) -> TaskAnswer:
        """A tasks/* request's answer, as the caller `admitted` sees its tasks."""
        return await self.tasks.answer(request, admitted)

    def created_task(self, run: str, reserved_ms: int) -> TaskView:
        return self.tasks.created(run, reserved_ms)

    async def task_view(self, run: str, admitted: Admitted = LOCAL) -> TaskView | None:
        return await asyncio.to_thread(self.tasks.view, run, admitted)

    async def task_views(self, task_ids: Sequence[str], admitted: Admitted) -> list[TaskView]:
        def read() -> list[TaskView]:
            return [view for task_id in task_ids
                    if (view := self.tasks.view(task_id, admitted)) is not None]
        return await asyncio.to_thread(read)

    def follow_task(self, view: TaskView, admitted: Admitted) -> AsyncIterator[TaskView]:
        return self.tasks.follow(view, admitted)

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


WhileStarting = Callable[[], AbstractAsyncContextManager[None]]


async def serve(manifest: Manifest, transport: Transport, log: Log,
                early: Spawned | None = None, tracing: Tracing | None = None,
                while_starting: WhileStarting | None = None) -> int:
    """Start the server, serve with `transport` until it ends, close.
    `while_starting`: what the transport does until the server is started
    (over HTTP: answer that it is not ready yet). `tracing` None: decided
    from server.traces and the OTEL_* variables."""
    tracing = tracing or tracing_for(manifest.server.traces, os.environ, log)
    metrics = Metrics(manifest) if manifest.server.metrics is not None else None
    startup = Startup(manifest, log, early, tracing, metrics or NO_METRICS)
    metrics_sock = None
    try:
        metrics_sock = listen_for_metrics(manifest)
        async with contextlib.nullcontext() if while_starting is None else while_starting():
            server = Server(manifest, log, await startup.run(), tracing, metrics)
            server.started()
    except StaalError as exc:
        log("startup_failed", level="error", kind=exc.kind, message=exc.message)
        tracing.close()
        await startup.abandon()
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
    daily = asyncio.ensure_future(server.parts.retention.daily())
    metrics_listener = MetricsListener(server, metrics_sock)
    try:
        await transport(server)
    finally:
        daily.cancel()
        await metrics_listener.close()
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
            from staal.supervisor.telemetry.metrics_http import Observed, metrics_url, serve_metrics

            # Said before the transport answers anything: the socket already
            # accepts (connections wait in its backlog until uvicorn runs).
            server.log("serving_metrics", url=metrics_url(sock))
            self.task = asyncio.ensure_future(serve_metrics(
                Observed(server.tools, server.pool.deaths, server.manifest, server.ledger,
                         server.waiting.notes), server.metrics, sock, self.done))

    async def close(self) -> None:
        self.done.set()
        if self.task is None:
            return
        try:
            await self.task
        except Exception as exc:  # noqa: BLE001 - the metrics must never keep the server from closing
            self.log("metrics_failed", level="error", error=f"{type(exc).__name__}: {exc}")
