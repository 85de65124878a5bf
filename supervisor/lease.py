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
database error leaves the lease held and is tried again. Takeover of a dead
instance's runs is not built: their journals are on its disk.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from staal.transitions import advance

LEASE_MS = 15_000
RENEW_EVERY_S = 5.0


class LeaseState(enum.Enum):
    HELD = "held"
    LOST = "lost"  # for good: the identity is another process's


# Closing the store gives the lease up (status: released); a process that
# dies leaves it to expire.
TRANSITIONS = {
    (LeaseState.HELD, "renewed"): LeaseState.HELD,
    (LeaseState.HELD, "lost"): LeaseState.LOST,
}


class Lease:
    """This instance's lease; `renew` is the store's (True: still ours)."""

    def __init__(self, renew: Callable[[int], bool]) -> None:
        self._renew = renew
        self.state = LeaseState.HELD

    def renew(self) -> LeaseState:
        """Extend the lease by LEASE_MS; a database error propagates and
        leaves the state as it was."""
        held = self._renew(LEASE_MS)
        self.state = advance(TRANSITIONS, self.state, "renewed" if held else "lost")
        return self.state
