"""Time behind small interfaces, so tests can control it: the wall clock
(`Clock`: UTC milliseconds since 1970, seed 000 section 6, "Time") and the
monotonic one (`Monotonic`: seconds, for deadlines and waits).
"""

from __future__ import annotations

import asyncio
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


class Monotonic(Protocol):
    """Seconds on a clock that never goes back, and waiting on it: what
    deadlines, backoffs and periodic work read, so tests run them on a
    clock they move (`FakeMonotonic`) instead of waiting."""

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemMonotonic:
    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


MONOTONIC = SystemMonotonic()


class FakeMonotonic:
    """A monotonic clock that moves only when told to, or by the time a
    sleep asks for (at once: the sleeper only yields to the loop); for tests."""

    def __init__(self, now: float = 1000.0) -> None:
        self.value = now

    def monotonic(self) -> float:
        return self.value

    def advance(self, seconds: float) -> None:
        self.value += seconds

    async def sleep(self, seconds: float) -> None:
        self.value += seconds
        await asyncio.sleep(0)
