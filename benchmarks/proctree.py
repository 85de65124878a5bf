"""The CPU time (user + system) a process tree has used, for
`server.py`.

A snapshot of a tree (`tree_cpu`) sums, over every process in it that is
alive or not yet reaped (psutil's `children(recursive=True)` of the root,
and the root):

- its own CPU time, every thread's, exited threads included: the kernel's
  per-process CPU clock (`clock_getcpuclockid`, nanoseconds), or for a
  zombie its `/proc/<pid>/stat` utime + stime (clock ticks);
- the CPU time of the children it has reaped (`/proc/<pid>/stat` cutime +
  cstime, clock ticks of 1/SC_CLK_TCK s): the kernel adds a child's own and
  its reaped children's times there when its parent waits for it, so a
  staal worker that ran and was reaped by the zygote is counted in the
  zygote's, and nothing is counted twice.

So the difference of two snapshots is all the CPU the tree used between
them, workers that were forked, ran and exited in between included. What
escapes: a process that leaves the tree without being waited for by a
process of the tree (orphaned and reaped by init), and a process that exits
and is reaped during the snapshot's own reading (it is then counted in both
or in neither: one worker's CPU at most, against a phase of hundreds of
calls). The reaped part is read in clock ticks (10 ms); the rest to the
nanosecond.

`children_cpu` is this process's own RUSAGE_CHILDREN: once a server's whole
tree has exited and been waited for, the difference across its session is
the kernel's own total for that tree, start to exit, in microseconds; the
benchmark compares it with the last snapshot to check the accounting.
"""

from __future__ import annotations

import ctypes
import os
import resource
import time

import psutil

TICK = os.sysconf("SC_CLK_TCK")
_libc = ctypes.CDLL(None, use_errno=True)


def _stat(pid: int) -> tuple[float, float]:
    """Own and reaped children's CPU seconds, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


def _own(pid: int) -> float | None:
    """A process's own CPU seconds from its kernel CPU clock, or None (a zombie, gone)."""
    clock = ctypes.c_int()
    if _libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
        return None
    try:
        return time.clock_gettime(clock.value)
    except OSError:
        return None


def process_cpu(pid: int) -> tuple[float, float]:
    """A process's own CPU seconds, and those of the children it has reaped."""
    stat_own, reaped = _stat(pid)
    own = _own(pid)
    return (stat_own if own is None else own), reaped


def tree_cpu(root: int) -> float:
    """CPU seconds the tree under `root` (included) has used since it started."""
    try:
        pids = [root] + [p.pid for p in psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for pid in pids:
        try:
            own, reaped = process_cpu(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone, and reaped: its parent's reaped time holds it
        total += own + reaped
    return total


def root_cpu(root: int) -> float:
    """CPU seconds `root` alone has used, all its threads, without any child:
    for staal the supervisor's own, apart from its zygote and workers."""
    try:
        return process_cpu(root)[0]
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def children_cpu() -> float:
    """CPU seconds of this process's children it has waited for (microseconds)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    """This process's CPU seconds, all its threads (nanoseconds)."""
    return time.process_time()
