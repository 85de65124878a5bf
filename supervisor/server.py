"""`staal-supervisor serve`: start-up, then the serve loop.

Start-up, before anything is answered: protect the descriptors, read the
manifest (any problem stops here), take the journal directory's lock, open
the ledger, start the zygote and check every tool's program and config in a
worker. Then read the protocol stream until it ends, answering every call in
flight before exiting; a write that fails for good (the client is gone)
stops the reading, and running runs end as usual.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import traceback
from typing import Any

import orjson

import staal
from staal.clock import SYSTEM_CLOCK
from staal.errors import StaalError
from staal.fsio import make_private_dir
from staal.killpoints import kill_point
from staal.manifest import RUN_STATUS_TOOL, Manifest
from staal.protocol.connection import CallTool, Cancel, Connection, Send
from staal.protocol.results import Failed, Refused
from staal.protocol.revisions import ServerInfo
from staal.protocol.tools import describe_tool
from staal.supervisor.calls import Calls, CallState
from staal.supervisor.files import make_run_folders, remove_inputs, remove_never_started
from staal.supervisor.ledger import FileLedger
from staal.supervisor.lockfile import ServerLock
from staal.supervisor.log import Log
from staal.supervisor.outcomes import charged_of
from staal.supervisor.pool import Pool
from staal.supervisor.recovery import RecoveryPlan, plan_recovery
from staal.supervisor.retention import DAY_S, sweep
from staal.supervisor.startup import check_tools
from staal.supervisor.stdio import LineWriter, Stdio, read_chunks
from staal.supervisor.waiting import Waiting
from staal.supervisor.zygote import Spawned, runtime_dir, worker_environment


class StartupFailed(StaalError):
    kind = "startup"


class Server:
    def __init__(self, manifest: Manifest, stdio: Stdio, log: Log,
                 early: Spawned | None = None) -> None:
        self.manifest = manifest
        self.early = early
        self.stdio = stdio
        self.log = log
        self.writer = LineWriter(stdio.writer, self._client_gone)
        self.tasks: dict[Any, asyncio.Task] = {}
        self.states: dict[Any, CallState] = {}
        self.stop_reading = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- start-up ---------------------------------------------------------

    async def start(self) -> None:
        server = self.manifest.server
        make_private_dir(server.journals)
        self.lock = await asyncio.to_thread(
            ServerLock.acquire, server.journals, 5.0,
            lambda: self.log("waiting_for_lock", path=str(server.journals / "server.lock")))
        self.ledger = await asyncio.to_thread(
            FileLedger.open, server.journals / "server.ledger", SYSTEM_CLOCK,
            warn=lambda text: self.log("clock_behind", level="warning", message=text))
        self.waiting = Waiting(server.journals, server.notify, server.notify_env, self.log)
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
                           on_started=self._run_started)
        await asyncio.to_thread(make_run_folders, server.journals, [t.name for t in self.manifest.tools])
        await self.recover(plan)
        await self.keep_files()
        descriptors = [describe_tool(t.tool, t.schema) for t in tools.values()]
        self.connection = Connection(ServerInfo(server.name, staal.__version__), descriptors)
        self.pool.serving = True
        self.log("serving", server=server.name, tools=[t.name for t in self.manifest.tools],
                 journals=str(server.journals), ledger=str(server.journals / "server.ledger"),
                 version=staal.__version__)

    async def recover(self, plan: RecoveryPlan) -> None:
        """Recovery at start, before anything is answered (supervisor/recovery.py)."""
        for files in plan.release:
            await asyncio.to_thread(self.ledger.release, files.run)
            cut = await asyncio.to_thread(remove_never_started, files)
            self.log("recovered", rule="released: it never started", run=files.run, tool=files.tool,
                     removed="its journal, cut before its header was durable" if cut else None)
        for files, end in plan.settle:
            await asyncio.to_thread(self.ledger.settle, files.run, end.outcome, charged_of(end))
            await asyncio.to_thread(remove_inputs, files)
            self.waiting.remove(files)
            self.log("recovered", rule="settled from its end", run=files.run, tool=files.tool)
        for files in plan.remove_inputs:
            await asyncio.to_thread(remove_inputs, files)
            self.waiting.remove(files)
        for files in plan.resume:  # one after another, before anything is served
            self.log("recovered", rule="resuming", run=files.run, tool=files.tool)
            outcome = await self.calls.resume_run(files)
            await self.clean_up()
            self.log("recovered", rule="resumed", run=files.run, tool=files.tool,
                     outcome=type(outcome).__name__.lower())

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

    async def close(self) -> None:
        self.waiting.stopping.set()
        await self.pool.close()
        self.ledger.close()
        self.lock.release()
        shutil.rmtree(self.runtime_dir, ignore_errors=True)

    # -- serving ------------------------------------------------------------

    async def serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        # SIGTERM (an SDK letting go of its probe, `docker stop`) ends the
        # serving as the end of input does: calls in flight are answered,
        # and close() lets go of the lock and removes the runtime directory.
        self.loop.add_signal_handler(signal.SIGTERM, self._terminated)
        daily = asyncio.ensure_future(self.daily())
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        read_chunks(self.stdio.reader, lambda data: self.loop.call_soon_threadsafe(chunks.put_nowait, data))
        while not self.stop_reading.is_set():
            getter = asyncio.ensure_future(chunks.get())
            stopper = asyncio.ensure_future(self.stop_reading.wait())
            done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if getter not in done:
                getter.cancel()
                break
            data = getter.result()
            if data is None:
                break
            for event in self.connection.receive_data(data):
                self.dispatch(event)
        if self.tasks:
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        daily.cancel()

    def dispatch(self, event: Any) -> None:
        if isinstance(event, Send):
            self.send(event.message)
        elif isinstance(event, CallTool):
            self.start_call(event)
        elif isinstance(event, Cancel):
            state = self.states.get(event.request_id)
            if state is not None:
                state.cancelled = True

    def start_call(self, call: CallTool) -> None:
        bound = 4 * self.manifest.server.max_concurrent_runs + 16
        if len(self.tasks) >= bound:
            self.answer(call, Refused("busy", f"the server is busy: more than {bound} calls are "
                                               "in progress; try again later"))
            return
        state = CallState()
        self.states[call.request_id] = state
        task = asyncio.ensure_future(self.run_call(call, state))
        self.tasks[call.request_id] = task

    async def run_call(self, call: CallTool, state: CallState) -> None:
        try:
            if call.name == RUN_STATUS_TOOL:
                outcome = await asyncio.to_thread(self.calls.run_status, call.arguments["run"])
            else:
                outcome = await self.calls.call_tool(call, state)
            if outcome is not None:
                self.answer(call, outcome)
                kill_point("supervisor", "answer")
            await self.clean_up()
        except Exception as exc:  # noqa: BLE001 - a bug or a failing disk: nothing may escape the task
            self.call_failed(call, state, exc)
        finally:
            self.tasks.pop(call.request_id, None)
            self.states.pop(call.request_id, None)

    def call_failed(self, call: CallTool, state: CallState, error: Exception) -> None:
        """An unexpected error in a call: logged with its traceback, and, if
        the call is still unanswered, answered as an internal failure naming
        its run. Never "busy, try again": once reserved, the run may have
        acted, and a retried call without `once` would act again."""
        self.log("call_failed", level="error", tool=call.name, run=state.run,
                 error=f"{type(error).__name__}: {error}",
                 traceback="".join(traceback.format_exception(error)))
        if call not in self.connection.in_flight():
            return  # answered already (or the answer itself failed): the log has it
        try:
            self.answer(call, Failed(state.run, "internal", f"{type(error).__name__}: {error}"))
        except Exception as again:  # noqa: BLE001 - the log is all that is left
            self.log("answer_failed", level="error", tool=call.name, run=state.run,
                     error=f"{type(again).__name__}: {again}",
                     traceback="".join(traceback.format_exception(again)))

    async def clean_up(self) -> None:
        """What settled runs left to do once their calls were answered."""
        work, self.calls.after_answer[:] = list(self.calls.after_answer), []
        for job in work:
            await asyncio.to_thread(job)

    def answer(self, call: CallTool, outcome: Any) -> None:
        message = self.connection.answer_call(call, outcome)
        if message is not None:
            self.send(message)

    def _run_started(self, call: CallTool, run: str) -> None:
        message = self.connection.progress(call, f"run {run} started")
        if message is not None:
            self.send(message)

    def send(self, message: dict[str, Any]) -> None:
        self.writer.send(orjson.dumps(message) + b"\n")

    def _terminated(self) -> None:
        self.log("terminated", signal="SIGTERM")
        self.stop_reading.set()

    def _client_gone(self, error: OSError) -> None:
        self.log("client_gone", level="warning", error=str(error))
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.stop_reading.set)


async def serve(manifest: Manifest, stdio: Stdio, log: Log, early: Spawned | None = None) -> int:
    server = Server(manifest, stdio, log, early)
    try:
        await server.start()
    except StaalError as exc:
        log("startup_failed", level="error", kind=exc.kind, message=exc.message)
        if hasattr(server, "pool"):
            await server.pool.close()
        elif early is not None:
            early.process.kill()
        if early is not None:
            shutil.rmtree(early.runtime_dir, ignore_errors=True)
        return 2
    try:
        await server.serve()
    finally:
        await server.close()
    return 0
