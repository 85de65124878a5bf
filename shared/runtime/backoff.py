"""How long to wait before the next attempt while attempts keep failing:
the one backoff. The pool paces its forks with it (supervisor/workers/pool.py),
the restarting supervisor its zygotes' and verifiers' restarts
(supervisor/workers/restarting.py), a worker its re-sends of a keyed request
(worker/runs/resend.py) and its model calls' retries
(worker/capabilities/model.py), the server its polls of a held lock
(supervisor/store/lockfile.py) and the notify command's retries
(supervisor/recovery/waiting.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Backoff:
    """How long to wait before the next attempt while attempts keep failing:
    none after the first `at_once` failures in a row, then `first`, doubling
    up to `cap`. A failure after `quiet` seconds without one starts again
    from none."""

    first: float
    cap: float
    quiet: float = math.inf
    at_once: int = 1
    strikes: int = 0
    last: float = -math.inf

    def strike(self, now: float) -> float:
        """Count a failure at `now`; the delay before the next attempt."""
        if now - self.last > self.quiet:
            self.strikes = 0
        self.strikes += 1
        self.last = now
        return self.delay

    @property
    def delay(self) -> float:
        return self.after(self.strikes)

    def after(self, failures: int) -> float:
        """The delay before the next attempt after `failures` in a row."""
        if failures <= self.at_once:
            return 0.0
        return min(self.cap, self.first * 2.0 ** (failures - self.at_once - 1))
