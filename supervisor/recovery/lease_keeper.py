"""Renewing this instance's lease (supervisor/recovery/lease.py) from the
moment it is registered, through start-up, and while it serves: every third
of the lease, on the clock it is given. Start-up starts the keeper right
after the ledger opens (supervisor/app/parts.py), so a recovery at start
longer than the lease keeps the runs it resumes (issue 27 item 6); until
`serving`, a renewal only renews (the lease is starting: no takeover, no
settling in place) and the instance stays not ready. A renewal the
store does not answer leaves the lease to run down (not ready meanwhile) and
is tried again at the next; one that finds the instance's identity another
process's stops serving for good, since the runs this one would settle are
no longer its. After each renewal that holds, what the renewal leads to
(supervisor/recovery/takeover.py: takeover, settling in place).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from staal.errors import StaalError
from staal.runtime.clock import MONOTONIC, Monotonic
from staal.supervisor.recovery.lease import Lease, LeaseState
from staal.supervisor.telemetry.log import Log
from staal.supervisor.transport.readiness import ReadyState

AfterRenewal = Callable[[Lease], Awaitable[None]]


class LeaseKeeper:
    def __init__(self, lease: Lease, readiness: ReadyState, stopping: asyncio.Event, log: Log,
                 clock: Monotonic = MONOTONIC) -> None:
        self.lease = lease
        self.readiness = readiness
        # Set once the lease is lost: serving stops taking calls (or, lost
        # while starting, serving ends as soon as it begins).
        self.stopping = stopping
        # What a renewal of the serving lease leads to: set by `serving`.
        self.after_renewal: AfterRenewal | None = None
        self.log = log
        self.clock = clock
        # The last renewal found the store out of reach: said to readiness
        # once the instance is started (a starting one is not ready anyway).
        self.store_failed = False

    def serving(self, after_renewal: AfterRenewal) -> None:
        """Start-up is over: the lease becomes a serving one, each renewal
        that holds leads to `after_renewal`, and the instance is ready,
        unless its last renewal failed (ready at the next that holds) or it
        lost its lease while starting (fenced for good)."""
        self.after_renewal = after_renewal
        self.lease.started()
        self.readiness.note("started")
        if self.store_failed:
            self.readiness.note("store_failed")

    async def keep(self) -> None:
        """Renew until the lease is lost (or the task is cancelled: serving ended)."""
        while True:
            await self.clock.sleep(self.lease.timing.renew_every_s)
            if await self.renew() is LeaseState.LOST:
                return

    async def renew(self) -> LeaseState:
        """One renewal and what follows from it; the lease's state after it."""
        try:
            state = await asyncio.to_thread(self.lease.renew)
        except StaalError as exc:  # the store unreachable: the lease runs down, try again
            self.log("lease_renewal_failed", level="warning", kind=exc.kind, message=exc.message)
            self.store_failed = True
            self.readiness.note("store_failed")
            return self.lease.state
        self.store_failed = False
        if state is LeaseState.LOST:
            self.readiness.note("fenced")
            self.log("lease_lost", level="error", message=(
                "another process registered this instance (the same host and journal "
                "directory) in the shared store; this one stops serving"))
            self.stopping.set()
            return state
        self.readiness.note("renewed")
        if state is LeaseState.HELD and self.after_renewal is not None:
            try:
                await self.after_renewal(self.lease)
            except Exception as exc:  # noqa: BLE001 - a bug there must not end the renewals
                # (the lease would run out under the runs this instance still runs)
                self.log("after_renewal_failed", level="error",
                         error=f"{type(exc).__name__}: {exc}")
        return state
