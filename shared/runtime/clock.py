"""Wall-clock time behind a small interface, so tests can control it.

Times are UTC milliseconds since 1970 (seed 000 section 6, "Time").
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


SYSTEM_CLOCK = SystemClock()


class FixedClock:
    """A clock that moves only when told to; for tests."""

    def __init__(self, now_ms: int) -> None:
        self.value = now_ms

    def now_ms(self) -> int:
        return self.value

    def advance(self, ms: int) -> None:
        self.value += ms
