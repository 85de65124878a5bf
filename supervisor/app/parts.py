"""Start-up, before anything is answered: what serving is made of, opened
and started in order, each step needing the ones before it.

Take the journal directory's lock, open the ledger (on a shared store this
registers the instance's lease, renewed from then on by the lease's keeper:
supervisor/recovery/lease_keeper.py), open the journal rows and notes on a
shared store, making this instance's copies of its unfinished runs whole,
plan recovery (any problem stops here), start the
worker pool (its zygote started early) and check every tool in a worker,
build the call pipeline and the resources, recover, and sweep by the
retention rules. `Startup.run` hands back the started `Parts`; a start-up
that fails stops the children it started (`Startup.abandon`).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import staal
from staal.manifest.model import Manifest
from staal.manifest.resources import is_hidden_tool
from staal.protocol.mcp.cursors import CursorSigner
from staal.protocol.mcp.resources import Collection, ResourceCatalogue
from staal.protocol.mcp.revisions import ServerInfo
from staal.protocol.mcp.tools import ToolDescriptor, describe_tool
from staal.records.fsio import make_private_dir
from staal.records.runconfig import config_key, from_tool, tool_of_key
from staal.runtime.budgets import CPU_GRACE_SECONDS
from staal.runtime.clock import SYSTEM_CLOCK
from staal.runtime.killpoints import lock_wait_s, pool_ahead
from staal.supervisor.app.startup import check_tools
from staal.supervisor.calls.in_flight import RunsInFlight
from staal.supervisor.calls.pipeline import Calls
from staal.supervisor.calls.resources import Resources, cursor_key, entry_problems
from staal.supervisor.calls.run_logs import RunLogs
from staal.supervisor.calls.tasks import Tasks
from staal.supervisor.calls.tool_runtime import ToolRuntime
from staal.supervisor.errors import SupervisorError
from staal.supervisor.recovery.at_start import plan_recovery
from staal.supervisor.recovery.lease import Lease, LeaseTiming
from staal.supervisor.recovery.lease_keeper import LeaseKeeper
from staal.supervisor.recovery.retention import Retention, sweep
from staal.supervisor.recovery.runner import Recovery
from staal.supervisor.recovery.waiting import Waiting
from staal.supervisor.store.choice import open_journals, open_ledger, open_notes
from staal.supervisor.store.files import RunFiles, make_run_folders
from staal.supervisor.store.journals import RunJournals
from staal.supervisor.store.ledger import Ledger
from staal.supervisor.store.lockfile import DEFAULT_WAIT_S, LOCK_FILE, ServerLock
from staal.supervisor.telemetry.log import Log
from staal.supervisor.telemetry.metrics import Observer
from staal.supervisor.telemetry.tracing import Tracing
from staal.supervisor.transport.readiness import ReadyState
from staal.supervisor.workers.pool import Pool
from staal.supervisor.workers.zygote import Spawned, runtime_dir, worker_environment


class StartupFailed(SupervisorError):
    kind = "startup"


@dataclass(frozen=True)
class Parts:
    """What start-up opened and started; closed in the reverse order."""

    lock: ServerLock
    ledger: Ledger
    run_journals: RunJournals
    waiting: Waiting
    runtime_dir: Path
    pool: Pool
    tools: dict[str, ToolRuntime]
    calls: Calls
    # The runs a call or recovery of this process holds, shared by the
    # pipeline and recovery (supervisor/calls/in_flight.py).
    in_flight: RunsInFlight
    resource_catalogue: ResourceCatalogue
    resources: Resources
    tasks: Tasks
    recovery: Recovery
    retention: Retention
    descriptors: list[ToolDescriptor]
    server_info: ServerInfo
    # The lease's keeper (it holds the readiness and the stopping event it
    # tells), renewing since the ledger opened, and its task.
    lease_keeper: LeaseKeeper
    keeping: asyncio.Future[None]

    async def close(self) -> None:
        await stop_keeping(self.keeping)  # before the ledger gives the lease up
        self.waiting.stopping.set()
        await self.pool.close()
        self.run_journals.close()
        self.ledger.close()
        self.lock.release()
        shutil.rmtree(self.runtime_dir, ignore_errors=True)


def warm_cpu_ceiling(manifest: Manifest) -> Callable[[str], float | None]:
    """The CPU seconds a warm worker's run of each grant set may use before
    the pool kills it (silence.CpuCeiling): its budget, the kernel's grace
    and a second more, as a one-run worker's hard limit; None for a tool
    whose workers serve one run (the kernel's limit holds there)."""
    ceilings: dict[str, float | None] = {}
    for tool in manifest.tools:
        warm = manifest.runs_per_worker(tool.name) > 1
        for grants in (None, *tool.profiles):
            limits = from_tool(manifest, tool, grants).limits
            ceilings[config_key(tool.name, grants)] = (
                limits.cpu_ms / 1000 + CPU_GRACE_SECONDS + 1 if warm else None)
    return lambda key: ceilings.get(key)


async def stop_keeping(keeping: asyncio.Future[None] | None) -> None:
    """The lease's keeper stops renewing (it may have ended already: lost),
    and is waited for, whatever it ended with: closing goes on after it."""
    if keeping is None:
        return
    keeping.cancel()
    await asyncio.wait([keeping])


class Startup:
    def __init__(self, manifest: Manifest, log: Log, early: Spawned | None,
                 tracing: Tracing, observer: Observer) -> None:
        self.manifest = manifest
        self.log = log
        self.early = early
        self.tracing = tracing
        self.observer = observer
        # What a load balancer's check reads, and what stops serving (the
        # keeper sets it when the lease is lost): made before start-up, since
        # the lease is kept from the moment the ledger opens.
        self.readiness = ReadyState(log)
        self.stopping = asyncio.Event()
        # The pool once started: it owns the zygote (the one started early) from then on.
        self.pool: Pool | None = None
        self.keeping: asyncio.Future[None] | None = None

    async def abandon(self) -> None:
        """After a failed start: the lease is no longer renewed (closing
        the ledger gives it up; a process that dies leaves it to run out),
        the workers and their zygote stop."""
        await stop_keeping(self.keeping)
        if self.pool is not None:
            await self.pool.close()
        elif self.early is not None:
            self.early.process.kill()

    async def run(self) -> Parts:
        server = self.manifest.server
        make_private_dir(server.journals)
        lock = await self.server_lock()
        ledger = await asyncio.to_thread(
            open_ledger, server, SYSTEM_CLOCK,
            lambda text: self.log("clock_behind", level="warning", message=text),
            on_forget=lambda entry: self.log("once_forgotten", run=entry.run, tool=entry.tool,
                                             by="staal-supervisor forget"))
        # The lease was registered as the ledger opened: renewed from now on,
        # through recovery, which may take longer than the lease, not only
        # once serving (issue 27 item 6; supervisor/recovery/lease.py says
        # why not register it after recovery instead).
        keeper = LeaseKeeper(Lease(ledger.renew_lease, LeaseTiming.of(server.store)),
                             self.readiness, self.stopping, self.log)
        self.keeping = asyncio.ensure_future(keeper.keep())
        run_journals = await asyncio.to_thread(open_journals, server, ledger)
        waiting = Waiting(open_notes(server, run_journals), server.notify, server.notify_env,
                          self.log)
        # On a shared store the rows are the journals: this instance's copies
        # of its unfinished runs' are made whole from them before recovery,
        # and waiting records an older version kept as files become rows.
        unfinished = [RunFiles(server.journals, e.tool, e.run) for e in ledger.mine()
                      if e.state == "unsettled"]
        await asyncio.to_thread(run_journals.restore, unfinished)
        await asyncio.to_thread(waiting.notes.adopt, unfinished)
        plan = await asyncio.to_thread(plan_recovery, self.manifest, ledger)
        if plan.problems:
            raise StartupFailed("; ".join(plan.problems))
        directory = self.early.runtime_dir if self.early else runtime_dir()
        manifest = self.manifest
        self.pool = pool = Pool(manifest.path, directory, worker_environment(manifest),
                                ahead=pool_ahead(min(2, server.max_concurrent_runs) + 1), log=self.log,
                                early=self.early,
                                reuse=lambda key: manifest.runs_per_worker(tool_of_key(key)),
                                max_idle=server.max_concurrent_runs,
                                cpu_ceiling=warm_cpu_ceiling(manifest))
        await pool.start()
        tools, problems = await check_tools(self.manifest, pool)
        if problems:
            raise StartupFailed("; ".join(problems))
        in_flight, logs = RunsInFlight(on_let_go=pool.cancels.done), RunLogs()
        calls = Calls(self.manifest, tools, ledger, pool, self.log, waiting,
                      tracing=self.tracing, metrics=self.observer, run_journals=run_journals,
                      logs=logs, in_flight=in_flight)
        catalogue = await self.resource_catalogue(tools)
        resources = Resources(ledger, waiting.notes, server.journals, calls.run_status,
                              calls.call_tool, catalogue, self.manifest.resources)
        await asyncio.to_thread(make_run_folders, server.journals,
                                [t.name for t in self.manifest.tools])
        recovery = Recovery(ledger, waiting.notes, logs, calls.resume_run, in_flight, self.log)
        await recovery.at_start(plan)
        retention = Retention(lambda: sweep(self.manifest, ledger), self.log)
        await retention.sweep_now()
        descriptors = [describe_tool(t.tool, t.schema) for t in tools.values()
                       if not is_hidden_tool(t.tool.name)]
        return Parts(lock, ledger, run_journals, waiting, directory, pool, tools, calls, in_flight,
                     catalogue, resources, Tasks(calls, catalogue.signer), recovery, retention,
                     descriptors, ServerInfo(server.name, staal.__version__), keeper,
                     self.keeping)

    async def server_lock(self) -> ServerLock:
        """The journal directory's lock, waited for (5 s) in a thread; a
        start interrupted meanwhile (Ctrl-C) stops that wait at once, so the
        process exits without waiting it out (asyncio waits for its threads)."""
        journals = self.manifest.server.journals
        stop = threading.Event()
        try:
            return await asyncio.to_thread(
                ServerLock.acquire, journals, lock_wait_s(DEFAULT_WAIT_S),
                lambda: self.log("waiting_for_lock", path=str(journals / LOCK_FILE)),
                stop=stop)
        except asyncio.CancelledError:
            stop.set()
            raise

    async def resource_catalogue(self, tools: dict[str, ToolRuntime]) -> ResourceCatalogue:
        """The resources served (supervisor/calls/resources.py): the runs, and each
        collection, whose entries must take what staal passes them."""
        problems = entry_problems(self.manifest.resources,
                                  {name: t.inputs for name, t in tools.items()})
        if problems:
            raise StartupFailed("; ".join(problems))
        server = self.manifest.server
        key = await asyncio.to_thread(cursor_key, server.journals)
        collections = [Collection(r.name, r.description, r.max_page_size, r.ids)
                       for r in self.manifest.resources]
        return ResourceCatalogue(server.name, collections, CursorSigner(key))
