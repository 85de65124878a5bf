"""The worker pool's decisions in time (supervisor/workers/pool.py acts on
them), on the monotonic clock it is given, so tests move the clock instead
of waiting (tests/supervisor/workers/test_pool_timing.py):

- `ZygoteDeadlines`: by when the zygote owes an answer. A zygote just
  started owes its "ready" within ZYGOTE_BOOT_S; one that is up and was
  asked for forks owes a report within ZYGOTE_SILENT_S of its last answer
  (a fork takes a millisecond). One overdue is killed, and so replaced.
- `ForkPace`: when the next fork may be asked. While workers keep dying
  unused, each such death pushes it back by the backoff, so a loop killing
  them cannot make the pool spin.
"""

from __future__ import annotations

import math

from staal.runtime.backoff import Backoff
from staal.runtime.clock import Monotonic
from staal.supervisor.workers.pool_states import PoolState

# A fork takes a millisecond: a zygote that owes an answer this long is stuck.
ZYGOTE_SILENT_S = 3.0
ZYGOTE_BOOT_S = 60.0


class ZygoteDeadlines:
    def __init__(self, clock: Monotonic) -> None:
        self.clock = clock
        self.answer_due: float | None = None  # the zygote owes a report by then
        self.boot_due = math.inf              # ... its "ready" by then

    def started(self) -> None:
        """A zygote was started: it owes its "ready", and nothing else yet."""
        self.answer_due = None
        self.boot_due = self.clock.monotonic() + ZYGOTE_BOOT_S

    def up(self) -> None:
        self.boot_due = math.inf

    def answered(self, owes: bool) -> None:
        """The zygote answered something; `owes`: it is up and still owes
        forks, due within ZYGOTE_SILENT_S from now."""
        self.answer_due = self.clock.monotonic() + ZYGOTE_SILENT_S if owes else None

    def clear(self) -> None:
        """The zygote is gone (or killed): it owes nothing."""
        self.answer_due, self.boot_due = None, math.inf

    def overdue(self, state: PoolState) -> str | None:
        """Why the zygote must be killed now (it stopped answering), or None."""
        now = self.clock.monotonic()
        if state in (PoolState.NEW, PoolState.BOOTING) and now > self.boot_due:
            return f"it did not start within {ZYGOTE_BOOT_S:g} s"
        if state is PoolState.UP and self.answer_due is not None and now > self.answer_due:
            return f"it answered no fork request for {ZYGOTE_SILENT_S:g} s"
        return None


class ForkPace:
    def __init__(self, clock: Monotonic) -> None:
        self.clock = clock
        self.backoff = Backoff(first=0.05, cap=1.0, quiet=5.0)
        self.fork_at = 0.0  # no fork is asked before this (monotonic)
        self.unused_deaths = 0  # since workers were last ready

    def wait_s(self) -> float:
        """How long until a fork may be asked (0 or less: now)."""
        return self.fork_at - self.clock.monotonic()

    def died_unused(self) -> float:
        """A fork did no good: the next waits for the backoff, returned."""
        now = self.clock.monotonic()
        delay = self.backoff.strike(now)
        self.fork_at = max(self.fork_at, now + delay)
        self.unused_deaths += 1
        return delay

    def ready_again(self) -> int:
        """A worker said it is ready: the unused deaths before it, counted
        from none again."""
        deaths, self.unused_deaths = self.unused_deaths, 0
        return deaths
