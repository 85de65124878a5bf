"""After each renewal of the lease (supervisor/recovery/lease_keeper.py), on
a shared store: the unfinished runs of instances whose leases expired
become this one's (takeover), and this instance's own runs that a failure
of the store left unsettled are settled, released or resumed (settling in
place), each as recovery at start would (supervisor/recovery/runner.py).
And the runs this instance runs whose tasks a client cancelled through
another instance (which recorded the cancel in the store) are told to stop.

Both find their runs and claim them (`RunsInFlight`) under one lock, never
interleaved, so a run is recovered by one of them once; neither touches a
run a call of this process holds, and settling in place never looks at a
waiting run (resumed, it would only stop at its op in doubt again) until an
operator answered it (`staal-supervisor resolve` removes its record).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from staal.errors import StaalError
from staal.supervisor.calls.in_flight import Holder, RunsInFlight
from staal.supervisor.recovery.at_start import RecoveryPlan
from staal.supervisor.recovery.lease import Lease
from staal.supervisor.recovery.runner import Recovery
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.journals import RunJournals
from staal.supervisor.store.ledger import Ledger
from staal.supervisor.store.notes import RunNotes
from staal.supervisor.telemetry.log import Log

# How long settling in place waits for the reservations under way to end
# (new ones wait meanwhile) before it leaves its runs to the next renewal.
CLAIM_WAIT_S = 1.0

# The plan for runs taken over or left unsettled here, their local copies
# restored from their rows (`plan_taken` over the manifest and the ledger).
PlanTaken = Callable[[list[RunFiles]], RecoveryPlan]


class Takeover:
    def __init__(self, journals: Path, ledger: Ledger, run_journals: RunJournals,
                 notes: RunNotes, in_flight: RunsInFlight, plan: PlanTaken,
                 recovery: Recovery, log: Log, shared: bool = True,
                 claim_wait_s: float = CLAIM_WAIT_S,
                 cancel: Callable[[str], bool] = lambda run: False) -> None:
        self.journals = journals
        # Only a shared store refuses a write and answers again while this
        # instance serves: settling in place is for it alone.
        self.shared = shared
        self.ledger = ledger
        self.run_journals = run_journals
        self.notes = notes
        self.in_flight = in_flight
        self.plan = plan
        self.recovery = recovery
        self.log = log
        self.claim_wait_s = claim_wait_s
        # Stop a run of this process as its task's cancel asks (the pool's:
        # True the first time it is asked for the run).
        self.cancel = cancel
        # A takeover and settling in place each find their runs and claim
        # them under this lock, never interleaved.
        self.claiming = asyncio.Lock()
        # Runs taken over from dead instances, being resumed.
        self.resuming: set[asyncio.Future[None]] = set()
        # Settling in place, while it runs; and the runs it leaves as they
        # are until the next start (a problem: its program changed, its
        # journal is damaged).
        self.settling: asyncio.Future[None] | None = None
        self.left_alone: set[str] = set()

    async def after_renewal(self, lease: Lease) -> None:
        """What a renewal of the held lease leads to: a takeover, then
        settling in place on a shared store, unless it still runs (the
        store answered: it may take the writes it refused)."""
        await self.take_over(lease)
        if self.shared:
            await self.pass_on_cancels()
        if self.shared and (self.settling is None or self.settling.done()):
            self.settling = asyncio.ensure_future(self.settle_in_place())

    async def take_over(self, lease: Lease) -> None:
        """The unfinished runs of instances whose leases expired become this
        one's, and are resumed from their journal rows as at start, off the
        lease's path (a waiting run stops at its op in doubt again)."""
        try:
            async with self.claiming:
                now = await asyncio.to_thread(self.ledger.now_ms)
                running = self.in_flight.held()  # never taken back from under them
                taken = await asyncio.to_thread(
                    lease.take_over, lambda: self.run_journals.take_over(now, running))
                held = self.in_flight.claim(files.run for files, _ in taken)
        except StaalError as exc:
            self.log("takeover_failed", level="warning", kind=exc.kind, message=exc.message)
            return
        if not taken:
            return
        for files, dead in taken:
            self.log("taken_over", level="warning", run=files.run, tool=files.tool, instance=dead)
        try:
            plan = await asyncio.to_thread(self.plan,
                                           [files for files, _ in taken if files.run in held])
        except Exception as exc:  # noqa: BLE001 - raised, it would end the lease's loop
            # The runs are this instance's now: settled in place after a
            # later renewal, and the lease goes on being renewed.
            self.in_flight.let_go(held)
            self.log("takeover_failed", level="error", error=f"{type(exc).__name__}: {exc}")
            return
        except BaseException:
            self.in_flight.let_go(held)
            raise
        for problem in plan.problems:
            self.log("takeover_problem", level="error", message=problem)
        task = asyncio.ensure_future(self.recovery.held(plan, held, "takeover_failed"))
        self.resuming.add(task)
        task.add_done_callback(self.resuming.discard)

    async def pass_on_cancels(self) -> None:
        """The runs held here whose tasks were cancelled (recorded in the
        store by whichever instance the client asked) stop before their next
        action, as if asked here; a store that does not answer is asked
        again at the next renewal."""
        held = self.in_flight.held()
        if not held:
            return
        try:
            cancelled = await asyncio.to_thread(self.notes.cancelled_among, held)
        except StaalError as exc:
            self.log("cancels_unread", level="warning", kind=exc.kind, message=exc.message)
            return
        for run in sorted(cancelled):
            if self.in_flight.holder(run) is not Holder.FREE and self.cancel(run):
                self.log("run_cancel_learned", run=run)

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
                left = await self._unattended()
                if left:
                    held = await asyncio.to_thread(self.in_flight.claim_unattended, left,
                                                   self.claim_wait_s)
                    if not held:
                        self.log("settle_in_place_deferred", runs=len(left), message=(
                            f"reservations stayed under way for {self.claim_wait_s} s; the runs "
                            "left unsettled are looked at again after the next renewal"))
            if not held:
                return
            files = [RunFiles(self.journals, left[run], run) for run in held]
            await asyncio.to_thread(self.run_journals.restore, files)
            plan = await asyncio.to_thread(self.plan, files)
        except Exception as exc:  # noqa: BLE001 - the store failed again: tried at the next renewal
            self.in_flight.let_go(held)
            self.log("settle_in_place_failed", level="warning", error=f"{type(exc).__name__}: {exc}")
            return
        for problem in plan.problems:
            self.log("settle_in_place_problem", level="error", message=problem)
        self.left_alone.update(f.run for f in files if f.run not in plan.planned())
        await self.recovery.held(plan, held, "settle_in_place_failed")

    async def _unattended(self) -> dict[str, str]:
        """This instance's unsettled runs settling in place may take up, each
        with its tool: none left alone, waiting, or held here."""
        entries = await asyncio.to_thread(self.ledger.mine_unsettled)
        # A run with a waiting record waits for its answer; once an
        # operator answered (`staal-supervisor resolve` removes the
        # record), it is resumed here as at a start.
        waiting = await asyncio.to_thread(self.notes.all_waiting) if entries else {}
        return {e.run: e.tool for e in entries if e.run not in self.left_alone
                and e.run not in waiting and self.in_flight.holder(e.run) is Holder.FREE}
