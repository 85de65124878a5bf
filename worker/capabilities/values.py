"""`clock.now` and `random.bytes`: values, journaled so a resumed run sees
the same time and the same bytes (DESIGN.md section 3, "Determinism")."""

from __future__ import annotations

import os

from staal.caps import Clock, Random
from staal.worker.capabilities import Bound

MAX_RANDOM_BYTES = 1024 * 1024


class ClockCapability(Bound, Clock):
    def now(self) -> int:
        now: int = self._ctx.value(self._state, self._services.clock.now_ms)  # ms, journaled
        return now


class RandomCapability(Bound, Random):
    def bytes(self, count: int) -> bytes:
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RANDOM_BYTES:
            self._ctx.refuse(f"random bytes are asked for 1 to {MAX_RANDOM_BYTES} at a time, not {count!r}")
        return bytes.fromhex(self._ctx.value(self._state, lambda: os.urandom(count).hex()))
