"""Carrying out a recovery plan (supervisor/recovery/at_start.py plans it):
at start, before anything is answered, and for the runs a takeover or
settling in place claimed (supervisor/recovery/takeover.py). Each run the
plan names is released, settled from its end, or resumed (one after
another) through the call pipeline, as a call would end it; inputs files
left by settled runs are removed.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable

from staal.protocol.mcp.results import CallOutcome
from staal.supervisor.calls.in_flight import RunsInFlight
from staal.supervisor.calls.outcomes import charged_of, release_unstarted
from staal.supervisor.calls.run_logs import RunLogs
from staal.supervisor.recovery.at_start import RecoveryPlan
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import Ledger
from staal.supervisor.store.notes import RunNotes
from staal.supervisor.telemetry.log import Log

# Resume a run to its end (or to a stop) and settle it as a call would:
# `Calls.resume_run`.
Resume = Callable[[RunFiles], Awaitable[CallOutcome]]


class Recovery:
    def __init__(self, ledger: Ledger, notes: RunNotes, logs: RunLogs, resume: Resume,
                 in_flight: RunsInFlight, log: Log) -> None:
        self.ledger = ledger
        self.notes = notes
        self.logs = logs
        self.resume = resume
        self.in_flight = in_flight
        self.log = log

    async def at_start(self, plan: RecoveryPlan) -> None:
        """Recovery at start: the runs planned are held (as a call holds its
        run) while they are recovered, then let go."""
        held = self.in_flight.claim(plan.planned())
        try:
            await self.carry_out(plan)
        finally:
            self.in_flight.let_go(held)

    async def held(self, plan: RecoveryPlan, held: list[str], failed: str) -> None:
        """Recover by `plan` the runs `held` (claimed), then let them go; a
        failure is logged as `failed`, and the runs stay this instance's
        (settled in place later)."""
        try:
            await self.carry_out(plan)
        except Exception as exc:  # noqa: BLE001 - the runs stay this instance's: settled in place later
            self.log(failed, level="error", error=f"{type(exc).__name__}: {exc}",
                     traceback="".join(traceback.format_exception(exc)))
        finally:
            self.in_flight.let_go(held)

    async def carry_out(self, plan: RecoveryPlan) -> None:
        for files in plan.release:
            cut = await asyncio.to_thread(release_unstarted, self.ledger, self.notes, files,
                                          self.logs.last_lines(files, "never started",
                                                               recovered="released: it never started"))
            self.log("recovered", rule="released: it never started", run=files.run, tool=files.tool,
                     removed="its journal, cut before its header was durable" if cut else None)
        for files, end in plan.settle:
            await asyncio.to_thread(self.ledger.settle, files.run, end.outcome, charged_of(end))
            # As a run's end: its kept arguments (on a shared store, their
            # row too) and any waiting record go, its log says so.
            await asyncio.to_thread(self.notes.end, files, self.logs.recovered(files, end))
            self.log("recovered", rule="settled from its end", run=files.run, tool=files.tool)
        for files in plan.remove_inputs:
            await asyncio.to_thread(self.notes.end, files, b"")
        for files in plan.resume:  # one after another, before anything is served
            self.log("recovered", rule="resuming", run=files.run, tool=files.tool)
            outcome = await self.resume(files)
            self.log("recovered", rule="resumed", run=files.run, tool=files.tool,
                     outcome=type(outcome).__name__.lower())
