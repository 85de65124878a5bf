"""One long-lived child that is started again when it dies: the zygote
(supervisor/workers/pool.py) and the provider verifier
(supervisor/auth/verifier.py) each hold one.

Its lifecycle is data (`CHILD_TRANSITIONS`, moved through with
`staal.runtime.transitions.advance`): new, up, replacing after a death,
booting, failed (the first never came up), closed. A restart waits for the
owner's `Backoff` (none after the first death, then doubling while they keep
dying), on the scheduler it is given: the event loop, or a fake clock in the
tests. A start that fails (an OSError from `start`) is a death like any
other, handed to the owner's `lost` with how it failed.

What the child is, how it is started, watched and killed, and what is
logged, stay the owner's: this class decides only when a start is due.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Protocol

from staal.runtime.backoff import Backoff
from staal.runtime.transitions import advance


class ChildState(Enum):
    NEW = "new"              # the first child is starting: nothing has proved it can come up
    BOOTING = "booting"      # a replacement is starting
    UP = "up"                # it said it is ready
    REPLACING = "replacing"  # it is gone; a new one starts after a backoff
    FAILED = "failed"        # the first died before it was up: none will come
    CLOSED = "closed"


CHILD_TRANSITIONS: Mapping[tuple[ChildState, str], ChildState] = {
    (ChildState.NEW, "up"): ChildState.UP,
    # A first child that never came up is a program that kills it on load
    # (or a broken install): starting it again would only repeat that.
    (ChildState.NEW, "died"): ChildState.FAILED,
    (ChildState.BOOTING, "up"): ChildState.UP,
    (ChildState.BOOTING, "died"): ChildState.REPLACING,
    (ChildState.UP, "died"): ChildState.REPLACING,
    (ChildState.REPLACING, "spawn"): ChildState.BOOTING,
    **{(state, "close"): ChildState.CLOSED for state in ChildState},
    (ChildState.CLOSED, "died"): ChildState.CLOSED,
}


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """The part of an event loop a restart needs: its monotonic clock and
    its timers."""

    def time(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable: ...


class LoopScheduler:
    """The running event loop's clock and timers."""

    def time(self) -> float:
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay, callback)


class Restarting:
    """When one long-lived child is started again. The owner starts the
    first itself, and tells this class what happens: `move("up")` when it
    is ready, `died()` when it ended, `close()` when the server stops."""

    def __init__(self, start: Callable[[], None], lost: Callable[[str], None], backoff: Backoff,
                 moved: Callable[[ChildState], None] = lambda state: None,
                 scheduler: Scheduler | None = None) -> None:
        self.start = start        # starts a replacement; OSError if it could not
        self.lost = lost          # the owner's handling of a death, given how it ended
        self.backoff = backoff
        self.moved = moved        # told every new state
        self.scheduler = scheduler or LoopScheduler()
        self.state = ChildState.NEW
        self.pending: Cancellable | None = None  # the restart that is due

    def move(self, event: str) -> ChildState:
        self.state = advance(CHILD_TRANSITIONS, self.state, event)
        if self.state is ChildState.CLOSED and self.pending is not None:
            self.pending.cancel()  # closed: a restart that is due never comes
            self.pending = None
        self.moved(self.state)
        return self.state

    def died(self) -> float | None:
        """The child ended: the seconds until its replacement starts, or
        None if none will (the first never came up, or it is closing)."""
        if self.move("died") is not ChildState.REPLACING:
            return None
        delay = self.backoff.strike(self.scheduler.time())
        self.pending = self.scheduler.call_later(delay, self._restart)
        return delay

    def close(self) -> None:
        self.move("close")

    def _restart(self) -> None:
        self.pending = None
        if self.state is not ChildState.REPLACING:
            return  # closed meanwhile
        self.move("spawn")
        try:
            self.start()
        except OSError as exc:
            self.lost(f"could not be started: {exc}")
