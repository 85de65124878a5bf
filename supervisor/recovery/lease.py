"""An instance's lease on a shared store (issue 15 item 3, the part built):
a row the instance renews, so status can tell a live instance from a dead
one, and an instance whose identity another process took stops serving.

The lease is a state machine with its transitions as data. Renewing
succeeds while this process still holds its instance's fencing token; when
another process registered the same instance (a second server on the same
host and journal directory, or two hosts with one name), the renewal finds
the token changed and the lease is lost for good: the server stops taking
calls, since the runs it would settle are no longer its to settle (the
store refuses those writes already: `Fenced`). A renewal that fails for a
database error leaves the lease held and is tried again. As it renews its
own lease, a held one takes over the unfinished runs of instances whose
leases expired (supervisor/store/postgres/journal_rows.py), and the server resumes them
from their journal rows as recovery at start does.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from staal.manifest.model import DEFAULT_LEASE_MS, PostgresStore
from staal.runtime.transitions import advance

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """How long a lease lasts (`server.store.postgres.lease_s`) and how often
    it is renewed: every third of it, so an instance may miss two renewals
    (the store briefly out of reach) before its lease runs out. Another
    instance takes a dead one's runs over at its first renewal after the
    lease ran out: within `takeover_bound_s`."""

    lease_ms: int = DEFAULT_LEASE_MS

    @classmethod
    def of(cls, store: PostgresStore | None) -> LeaseTiming:
        """The store's lease (the file store's process holds none: the default)."""
        return cls() if store is None else cls(store.lease_ms)

    @property
    def renew_every_s(self) -> float:
        return self.lease_ms / 3 / 1000

    @property
    def takeover_bound_s(self) -> float:
        """From an instance's last renewal to its runs' takeover, at most
        (on time, on an idle machine)."""
        return self.lease_ms / 1000 + self.renew_every_s


DEFAULT_LEASE = LeaseTiming()


class LeaseState(enum.Enum):
    STARTING = "starting"  # held, renewed, while start-up runs: takes over nothing
    HELD = "held"  # held while serving: renewed, and takes over as it renews
    LOST = "lost"  # for good: the identity is another process's


# Closing the store gives the lease up (status: released); a process that
# dies leaves it to expire. Only a held lease takes over the runs of
# instances whose leases expired (checked as it renews its own): a process
# that lost its identity must not take anyone's runs, and one still
# starting takes none (above). A lease lost while starting stays lost when
# start-up ends.
TRANSITIONS = {
    (LeaseState.STARTING, "renewed"): LeaseState.STARTING,
    (LeaseState.STARTING, "lost"): LeaseState.LOST,
    (LeaseState.STARTING, "started"): LeaseState.HELD,
    (LeaseState.HELD, "renewed"): LeaseState.HELD,
    (LeaseState.HELD, "lost"): LeaseState.LOST,
    (LeaseState.HELD, "took_over"): LeaseState.HELD,
    (LeaseState.LOST, "started"): LeaseState.LOST,
}


class Lease:
    """This instance's lease, registered and starting; `renew` is the
    store's (True: still ours). A renewal runs in a thread while start-up
    may end on the event loop's: each change of state is made under a lock,
    so neither is lost."""

    def __init__(self, renew: Callable[[int], bool], timing: LeaseTiming = DEFAULT_LEASE) -> None:
        self._renew = renew
        self.timing = timing
        self.state = LeaseState.STARTING
        self._changing = threading.Lock()

    def _advance(self, event: str) -> LeaseState:
        with self._changing:
            self.state = advance(TRANSITIONS, self.state, event)
            return self.state

    def renew(self) -> LeaseState:
        """Extend the lease by its length; a database error propagates and
        leaves the state as it was."""
        held = self._renew(self.timing.lease_ms)
        return self._advance("renewed" if held else "lost")

    def started(self) -> LeaseState:
        """Start-up is over: from now on the lease takes over as it renews
        (a lost one stays lost)."""
        return self._advance("started")

    def take_over(self, take: Callable[[], T]) -> T:
        """Take over the runs of instances whose leases expired (`take`, the
        store's); `IllegalTransition` unless the lease is held and serving."""
        self._advance("took_over")
        return take()
