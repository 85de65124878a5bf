"""How long to wait before the next attempt while attempts keep failing.
The pool paces its forks and zygotes with it (supervisor/workers/pool.py), the
verifier its restarts, and a worker its re-sends of a keyed request
(worker/runs/resend.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Backoff:
    """How long to wait before the next attempt while attempts keep failing:
    none after the first failure, then `first`, doubling up to `cap`. A
    failure after `quiet` seconds without one starts again from none."""

    first: float
    cap: float
    quiet: float
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
        if self.strikes <= 1:
            return 0.0
        return min(self.cap, self.first * 2.0 ** (self.strikes - 2))
