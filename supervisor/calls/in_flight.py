"""Which of this process's runs something in it is running now: the call
that reserved it, or recovery (at start, a takeover, or settling in place).
The one authority settling in place asks before it touches a run, so a run
in flight is never settled, released or resumed behind its call's back.

Each run is a state machine with its transitions as data: a run nothing
here holds is free; a reservation makes it its call's, and a claim makes
it recovery's; the holder lets it go when it is done with it (settled,
released, waiting, or failed and left for settling in place). A claim of
a held run is not taken: each run has one holder at a time.

The one race is a reservation's: the ledger commits a run before its call
can hold it, so a reading of the ledger may show a run that is in flight
but not yet held. `claim_unattended` (settling in place, which finds its
runs by reading the ledger) therefore waits until no reservation is under
way, and holds new ones back meanwhile: a run read as unsettled before
that moment was either held by its call by then, or is not in flight.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from staal.runtime.transitions import advance


class Holder(enum.Enum):
    FREE = "free"  # nothing in this process runs it
    CALL = "call"  # the call that reserved it
    RECOVERY = "recovery"  # recovery: at start, a takeover, or settling in place


TRANSITIONS = {
    (Holder.FREE, "reserved"): Holder.CALL,
    (Holder.FREE, "claimed"): Holder.RECOVERY,
    (Holder.CALL, "let_go"): Holder.FREE,
    (Holder.RECOVERY, "let_go"): Holder.FREE,
}


class RunsInFlight:
    """Used from the event loop and from the threads reservations run in."""

    def __init__(self, on_let_go: Callable[[str], None] = lambda run: None) -> None:
        self._held: dict[str, Holder] = {}
        # What else forgets a run once nothing here holds it (the pool's
        # note of a cancel asked: supervisor/workers/pool_states.py Cancels).
        self._on_let_go = on_let_go
        self._reserving = 0
        self._claiming = False
        self._changed = threading.Condition()

    def held(self) -> frozenset[str]:
        """Every run something here holds now."""
        with self._changed:
            return frozenset(self._held)

    def holder(self, run: str) -> Holder:
        with self._changed:
            return self._held.get(run, Holder.FREE)

    @contextmanager
    def reserving(self) -> Iterator[Callable[[str], None]]:
        """Around a reservation (in its thread): hands over the function its
        call holds the reserved run with, before this block ends."""
        with self._changed:
            self._changed.wait_for(lambda: not self._claiming)
            self._reserving += 1
        try:
            yield lambda run: self._move([run], "reserved")
        finally:
            with self._changed:
                self._reserving -= 1
                self._changed.notify_all()

    def claim(self, runs: Iterable[str]) -> list[str]:
        """The free ones of `runs`, now recovery's (runs this process never
        reserved: at start, or taken over from a dead instance)."""
        with self._changed:
            free = [run for run in runs if self._held.get(run, Holder.FREE) is Holder.FREE]
            self._move(free, "claimed")
            return free

    def claim_unattended(self, runs: Iterable[str], wait_s: float) -> list[str]:
        """`claim`, once no reservation is under way (blocking; new ones wait
        meanwhile); nothing if one is still under way after `wait_s`."""
        with self._changed:
            self._claiming = True
            try:
                if not self._changed.wait_for(lambda: self._reserving == 0, wait_s):
                    return []
                return self.claim(runs)
            finally:
                self._claiming = False
                self._changed.notify_all()

    def let_go(self, runs: Iterable[str]) -> None:
        runs = list(runs)
        self._move(runs, "let_go")
        for run in runs:
            self._on_let_go(run)

    def _move(self, runs: list[str], event: str) -> None:
        with self._changed:
            for run in runs:
                state = advance(TRANSITIONS, self._held.get(run, Holder.FREE), event)
                if state is Holder.FREE:
                    del self._held[run]
                else:
                    self._held[run] = state
