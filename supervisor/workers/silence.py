"""Why a worker went silent, told apart before the pool kills it (DESIGN.md
section 6: "a worker silent while burning CPU is a runaway run (budget),
not a crash").

A worker's heartbeats come from a Python thread, so they stop when its run
holds the interpreter inside C code (`collections.deque(itertools.count(),
maxlen=0)`, a C library that loops), and equally when the process is
stopped (SIGSTOP), blocked in C code holding the interpreter, or starved.
Only the first burns CPU: a stopped or blocked process uses none, and one
that computes gets its share of a core even on a loaded machine. So once a
worker has been silent for SUSPECT_S the watch reads its CPU time once, and
at the kill (silent for SILENT_S) again: a process that used at least
RUNAWAY_SHARE of a core in between, and is not stopped now, is a runaway
computation; any other silent one is idle, and its death a crash.

The watch takes a clock and a reader of a process's CPU time, so the rule is
tested with fakes (tests/supervisor/workers/test_silence.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import psutil

# A worker silent this long is killed (heartbeats come each second).
SILENT_S = 15.0
# Silent this long (three missed heartbeats), its CPU time is read.
SUSPECT_S = 3.0
# The kill waits until the two readings are this far apart, so a silence the
# watch did not see begin (the supervisor was paused) is measured too.
MIN_WINDOW_S = 2.0
# A twentieth of one core: a stopped or blocked process uses none (its
# ZeroMQ thread sleeps too), one computing gets its share of a core, a
# fifth or more with ten processes running on two cores.
RUNAWAY_SHARE = 0.05


class Silence(Enum):
    RUNAWAY = "runaway"  # computing without letting the interpreter run
    IDLE = "idle"        # stopped, blocked, gone, or not measured


@dataclass(frozen=True, slots=True)
class Usage:
    """A process's CPU time (user and system, all its threads), and whether
    it is stopped (SIGSTOP, or a debugger's stop)."""

    cpu_s: float
    stopped: bool


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    usage: Usage | None  # None: the process was gone


@dataclass(frozen=True, slots=True)
class Verdict:
    silence: Silence
    cpu_share: float | None  # of one core over the window; None if not measured


ReadUsage = Callable[[int], Usage | None]


def read_usage(pid: int) -> Usage | None:
    """The process's CPU time and whether it is stopped; None if it is gone."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            times = process.cpu_times()
            status = process.status()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return Usage(times.user + times.system,
                 status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP))


def judge(first: Sample, last: Sample) -> Verdict:
    """What the silence between two readings of one process was."""
    if first.usage is None or last.usage is None or last.at <= first.at:
        return Verdict(Silence.IDLE, None)
    share = max(0.0, last.usage.cpu_s - first.usage.cpu_s) / (last.at - first.at)
    if last.usage.stopped:
        # Stopped now, whatever it did before: a stop from outside is no
        # computation of the run's, and its death is a crash.
        return Verdict(Silence.IDLE, share)
    return Verdict(Silence.RUNAWAY if share >= RUNAWAY_SHARE else Silence.IDLE, share)


class SilenceWatch:
    """The pool's watch asks `look` about each worker each second; the
    answer is None (not silent long enough to kill), or the verdict its
    kill is made with."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 read: ReadUsage = read_usage, silent_s: float = SILENT_S) -> None:
        self.clock = clock
        self.read = read
        self.silent_s = silent_s
        self.samples: dict[int, Sample] = {}  # by pid: the reading once it looked silent

    def look(self, pid: int, last_seen: float) -> Verdict | None:
        """`last_seen`: when the worker was last heard, on the same clock."""
        now = self.clock()
        silent = now - last_seen
        first = self.samples.get(pid)
        if first is not None and first.at < last_seen:
            first = None  # heard since: that silence ended
            del self.samples[pid]
        if silent <= SUSPECT_S:
            return None
        if first is None:
            self.samples[pid] = Sample(now, self.read(pid))
            return None
        if silent <= self.silent_s or now - first.at < MIN_WINDOW_S:
            return None
        del self.samples[pid]
        return judge(first, Sample(now, self.read(pid)))

    def forget(self, pid: int) -> None:
        """The worker is gone: its reading goes with it."""
        self.samples.pop(pid, None)


class CpuCeiling:
    """A warm worker's run may not outspend its CPU budget by much.

    A worker of one run has RLIMIT_CPU's hard limit a second past its
    budget: a program that sets SIGXCPU and the budget's timer aside is
    killed there. A warm worker's hard limit leaves room for all the runs it
    may serve (worker/confinement/warm_limits.py), so the pool keeps that
    promise from outside: each look reads a running warm worker's CPU time,
    counted from the first look of its run, and one past its grant set's
    ceiling (`ceiling_of`; None: not watched) is killed as a runaway (its
    run ends as budget)."""

    def __init__(self, ceiling_of: Callable[[str], float | None] | None = None,
                 read: ReadUsage = read_usage) -> None:
        self.ceiling_of = ceiling_of
        self.read = read
        self.starts: dict[int, tuple[str, float]] = {}  # by pid: (run, CPU time at its first look)

    def over(self, pid: int, run: str | None, key: str | None) -> float | None:
        """The CPU seconds the run spent, once past its ceiling; else None."""
        if self.ceiling_of is None or run is None:
            return None
        ceiling_s = self.ceiling_of(key or "")
        if ceiling_s is None:
            return None
        usage = self.read(pid)
        if usage is None:
            return None
        seen = self.starts.get(pid)
        if seen is None or seen[0] != run:
            self.starts[pid] = (run, usage.cpu_s)
            return None
        spent = usage.cpu_s - seen[1]
        return spent if spent > ceiling_s else None

    def forget(self, pid: int) -> None:
        self.starts.pop(pid, None)
