"""Durations tallied as histograms, the same way in both processes (issue 17,
metrics).

A worker times each action of its run (per capability) and each fsync it
makes; the supervisor times its own fsyncs (the ledger's, the arguments
files', the waiting records'). A worker serves one run and then exits, so it
cannot be scraped: it sends its tallies to the supervisor as data, in the
`ended` or `stopped` message (`Timings`), and the supervisor adds them up and
serves them on its metrics listener. The bucket bounds are fixed here so
both sides count into the same buckets; a tally of another length is refused.

Timing costs two clock reads and a lock per fsync or action, both of which
take far longer themselves, so it is always on: nothing to switch.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from staal.errors import StaalError
from staal.records.record import Count

# Upper bounds in seconds, Prometheus' `le` (an +Inf bucket follows them).
# An fsync takes from tens of microseconds (a cache with a battery) to
# seconds (a disk that is failing): that tail is what an operator alerts on.
FSYNC_BUCKETS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)
# An action is a request to a service, a query or a model completion.
ACTION_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


class TallyMismatch(StaalError):
    """A tally whose buckets are not the ones this staal counts into."""

    kind = "tally"


@dataclass(frozen=True, slots=True)
class Tally:
    """A histogram as data: how many durations fell in each bucket (not
    cumulative; the last is +Inf) and their sum in nanoseconds. A tally sent
    in a message leaves out its trailing empty buckets (most durations fall
    in the first few, and each count costs the reader a check)."""

    counts: tuple[Count, ...]
    sum_ns: Count = 0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def trimmed(self) -> Tally:
        counts = list(self.counts)
        while counts and counts[-1] == 0:
            counts.pop()
        return Tally(counts=tuple(counts), sum_ns=self.sum_ns)


@dataclass(frozen=True, slots=True)
class Timings:
    """What a worker timed during its run: each capability's actions, and
    its fsyncs (the journal's)."""

    actions: Mapping[str, Tally] = field(default_factory=dict)
    fsync: Tally | None = None


class Histogram:
    """A running tally over fixed `bounds`, safe to add to from any thread."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds_ns = tuple(int(b * 1e9) for b in bounds)
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum_ns = 0
        self._lock = threading.Lock()

    def observe_ns(self, elapsed_ns: int) -> None:
        # bisect_left: a duration equal to a bound is counted in it (le).
        i = bisect.bisect_left(self.bounds_ns, elapsed_ns)
        with self._lock:
            self._counts[i] += 1
            self._sum_ns += elapsed_ns

    def add(self, tally: Tally) -> None:
        if len(tally.counts) > len(self._counts):
            raise TallyMismatch(f"a tally of {len(tally.counts)} buckets where this staal counts "
                                f"{len(self._counts)}")
        with self._lock:
            for i, n in enumerate(tally.counts):
                self._counts[i] += n
            self._sum_ns += tally.sum_ns

    def tally(self) -> Tally:
        with self._lock:
            return Tally(counts=tuple(self._counts), sum_ns=self._sum_ns)


class RunTimings:
    """One process's tallies: its fsyncs and, in a worker, its actions."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start counting afresh (a forked worker, about to serve its run: what
        the zygote counted before the fork is not the run's)."""
        self.fsync = Histogram(FSYNC_BUCKETS_S)
        self.actions: dict[str, Histogram] = {}

    def action(self, cap: str, elapsed_ns: int) -> None:
        histogram = self.actions.get(cap)
        if histogram is None:
            histogram = self.actions.setdefault(cap, Histogram(ACTION_BUCKETS_S))
        histogram.observe_ns(elapsed_ns)

    def snapshot(self) -> Timings:
        """What was counted, as a message carries it (trailing empty buckets left out)."""
        fsync = self.fsync.tally()
        return Timings(actions={cap: h.tally().trimmed() for cap, h in sorted(self.actions.items())},
                       fsync=fsync.trimmed() if fsync.count else None)


# This process's tallies: `staal.records.fsio` counts every fsync into `fsync`, the
# run engine every action into `actions`.
TIMINGS = RunTimings()
