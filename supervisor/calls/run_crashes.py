"""What a call does when its run's execution stops short: its worker dies
(resumed in a new one, at most MAX_RESUMES times, then given up), it meets
its own limit or is killed as a runaway (failed as budget, not resumed), or
the shared store refuses one of its journal records (cut off: answered
failed, neither settled nor served further here). A run resumed in a new
worker tells its caller only progress past what it was told (`increasing`).
Kept apart from `Calls` so the seven steps read straight through; `Calls`
holds one, given how to run once in a worker (`Calls.execute`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from staal.errors import StaalError
from staal.manifest.model import Manifest, Tool
from staal.records.messages import Ended, JournalAppend, StoppedMsg
from staal.records.runconfig import Limits, from_tool
from staal.runtime.budgets import message_of, own_limit
from staal.supervisor.calls.off_loop import off_loop
from staal.supervisor.calls.outcomes import give_up, over_limit
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.journals import RunJournals
from staal.supervisor.telemetry.log import Log
from staal.supervisor.workers.pool_states import Lease, NoWorker, RecordRefused, WorkerLost
from staal.supervisor.workers.silence import SILENT_S

# A run whose worker dies is resumed in a new worker at most this many times.
MAX_RESUMES = 3

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


class Execute(Protocol):
    """Run (or resume) once in a worker: `Calls.execute`."""

    async def __call__(self, tool: Tool, files: RunFiles, resume: bool,
                       progress: Progress | None = None, lease: Lease | None = None,
                       grants: str | None = None,
                       traceparent: str | None = None) -> Ended | StoppedMsg: ...


class RunCrashes:
    """The crash handling of the call pipeline (supervisor/calls/pipeline.py)."""

    def __init__(self, manifest: Manifest, log: Log, run_journals: RunJournals,
                 execute: Execute) -> None:
        self.manifest = manifest
        self.log = log
        self.run_journals = run_journals
        self.execute = execute
        # Runs whose journal record the store refused, and why
        # (`commit_record`); the pipeline answers each failed (`Calls.conclude`).
        self.cut_off: dict[str, str] = {}

    async def execute_with_recovery(self, tool: Tool, files: RunFiles, resume: bool,
                                    progress: Progress | None = None,
                                    lease: Lease | None = None,
                                    grants: str | None = None,
                                    traceparent: str | None = None) -> Ended | StoppedMsg | None:
        """A worker that dies mid-run is a crash at step 4: the run is
        resumed in a new worker, at most MAX_RESUMES times; then it fails as
        internal, or waits for an operator if an op is in doubt. So it does
        when no new worker is ready within the pool's wait. `lease`, if
        given, lends the worker the call took before its reservation."""
        deaths = 0
        how = ""
        while True:
            lent, lease = lease, None
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
                limit = own_limit(lost.status, lost.runaway)
                if limit is not None:
                    # Its own limit ended it, or the pool killed it computing
                    # while silent: deterministic, so resuming it would only
                    # fail the same way again.
                    limits = self.limits(tool)
                    message = message_of(limit, limits.cpu_ms, limits.memory_mib, SILENT_S)
                    self.log("worker_over_limit", level="warning", run=files.run, tool=tool.name,
                             pid=lost.pid, how=how, limit=limit)
                    return await off_loop(over_limit, files, tuple(tool.grants), message,
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
            return await off_loop(give_up, files, tuple(tool.grants), deaths, how,
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

    async def commit_record(self, files: RunFiles, append: JournalAppend) -> RecordRefused | None:
        """A worker's journal record on a shared store, committed before the
        worker goes on; else why not. A run with a refused record is cut
        off: this instance answers it as failed and neither settles nor
        serves it further (another instance owns it, or it is resumed from
        its rows at the next start)."""
        if append.run != files.run:
            return RecordRefused("wrong_run", f"the record names run {append.run}, not the "
                                 f"worker's run {files.run}")
        try:
            await off_loop(self.run_journals.append, files, append.record)
        except StaalError as exc:
            self.cut_off_run(files, exc)
            return RecordRefused(exc.kind, exc.message)
        return None
