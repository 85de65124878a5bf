"""The limits of a worker that serves several runs (a warm worker, issue 26).

`limits.bound_process` bounds a process that runs once: its CPU time and its
memory are counted from when it is called, and both hard limits sit just
above that one run. A warm worker cannot do that per run, because an
unprivileged process never raises a hard limit again and RLIMIT_CPU counts
the process's CPU time since it began. So the limits split (PLAN26.md (b)):

- once per worker, `bind_process_limits` sets the hard limits for all the
  runs it may serve: RLIMIT_CPU's hard limit leaves room for `runs` full
  budgets and their grace, RLIMIT_DATA is the memory it holds then plus one
  run's `max_memory` plus a slack;
- per run, `arm_run_cpu` gives the run its own CPU budget, counted from the
  CPU time the process has used when the run starts (the SIGPROF timer and
  RLIMIT_CPU's soft limit, as `cpu_backstop` sets them), and
  `disarm_run_cpu` takes the timer away after it, so an idle worker never
  gets the budget's signal;
- before each further run, the worker retires (exits, and the pool starts a
  fresh one) unless `cpu_headroom_ok` and `memory_retained_ok`: a run must
  always have its whole CPU budget and its whole `max_memory`.

Nothing uses this yet; `bound_process` still bounds every worker's only run.
"""

from __future__ import annotations

import math
import resource
import signal
from dataclasses import dataclass

from staal.manifest.sizes import MIB
from staal.records.runconfig import Limits
from staal.worker.confinement.limits import (
    CPU_GRACE_SECONDS,
    RAW_SIGNAL,
    capped,
    cpu_used,
    data_bytes,
    positive_cpu,
    set_data_limit,
    start_cpu_backstop,
)
from staal.worker.runs.refusal import broker_section

__all__ = ["MAX_SLACK_BYTES", "ProcessBound", "arm_run_cpu", "bind_process_limits",
           "cpu_headroom_ok", "disarm_run_cpu", "memory_retained_ok", "slack_bytes"]

# The most memory a warm worker may keep from its runs before it retires.
MAX_SLACK_BYTES = 64 * MIB


@dataclass(frozen=True, slots=True)
class ProcessBound:
    """What `bind_process_limits` set, which the worker's retire rules read."""

    data_start: int  # VmData (bytes) when the limits were bound
    slack: int  # bytes of retained growth the worker may keep and still give a run all its memory
    data_limit: int  # RLIMIT_DATA (bytes)
    cpu_hard: int  # RLIMIT_CPU's hard limit (seconds)


def slack_bytes(memory_mib: int) -> int:
    """A quarter of the run's memory, at most MAX_SLACK_BYTES: what runs may
    leave behind (caches, fragmented heap) before the worker retires."""
    return min(memory_mib * MIB // 4, MAX_SLACK_BYTES)


def bind_process_limits(limits: Limits, runs: int) -> ProcessBound:
    """Set this worker's hard limits once, for at most `runs` runs of `limits`.

    RLIMIT_CPU's hard limit: the CPU time used now plus `runs` budgets, each
    with its grace, up to the next second, plus one (for `runs=1`, the hard
    limit `cpu_backstop` sets). Until the first `arm_run_cpu` the soft limit
    is one second under it, so the kernel's end is still SIGXCPU. RLIMIT_DATA
    (and the C guard, as `memory_limit` arms it): the memory held now, the
    run's `max_memory` and the slack. Neither is raised above a hard limit
    already there.
    """
    if runs < 1:
        raise ValueError(f"a worker serves at least one run, not {runs}")
    seconds = limits.cpu_ms / 1000
    positive_cpu(seconds)
    hard = capped(math.ceil(cpu_used() + runs * (seconds + CPU_GRACE_SECONDS)) + 1,
                  resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (max(hard - 1, 0), hard))
    mib = limits.memory_mib
    if mib < 1:
        raise ValueError(f"the memory limit must be positive, not {mib} MiB")
    start = data_bytes()
    slack = slack_bytes(mib)
    limit = set_data_limit(start + mib * MIB + slack, mib)
    return ProcessBound(data_start=start, slack=slack, data_limit=limit, cpu_hard=hard)


def arm_run_cpu(limits: Limits) -> int:
    """Give the run about to start its CPU budget, counted from now; returns
    RLIMIT_CPU's soft limit set.

    As `cpu_backstop`: the SIGPROF budget failure at `cpu_ms` of CPU time
    from now, and RLIMIT_CPU's soft limit (SIGXCPU) `CPU_GRACE_SECONDS`
    after, up to the next second. The hard limit `bind_process_limits` set
    stays; the soft limit never passes it (`cpu_headroom_ok` retires the
    worker before a run would find it there). Main thread only.
    """
    seconds = limits.cpu_ms / 1000
    positive_cpu(seconds)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = capped(math.ceil(cpu_used() + seconds) + CPU_GRACE_SECONDS, resource.RLIMIT_CPU)
    start_cpu_backstop(seconds, soft, hard)
    return soft


def disarm_run_cpu() -> None:
    """After a run: the profiling timer off and SIGPROF ignored, so the
    budget's signal cannot reach the worker between runs (waiting for the
    next one, where SIGPROF's default would end it). RLIMIT_CPU's soft limit
    stays where the run's arm put it: a worker between runs spends almost no
    CPU, and the next arm moves it. Main thread only.

    Inside a broker section: a SIGPROF caught just before the timer stopped
    still runs the budget's handler (Python runs it at its next check, at
    the latest when the handler is changed), which must not fail a run that
    has ended.
    """
    with broker_section():
        signal.setitimer(signal.ITIMER_PROF, 0)
        RAW_SIGNAL.signal(signal.SIGPROF.value, signal.SIG_IGN.value)


def cpu_headroom_ok(limits: Limits) -> bool:
    """Whether the hard limit leaves room for one more run with its whole
    budget: the soft limit `arm_run_cpu` would set, and the second between
    it and the hard limit that keeps the kernel's end a SIGXCPU."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard == resource.RLIM_INFINITY:
        return True
    soft = math.ceil(cpu_used() + limits.cpu_ms / 1000) + CPU_GRACE_SECONDS
    return soft + 1 <= hard


def memory_retained_ok(bound: ProcessBound) -> bool:
    """Whether the memory the worker kept from its runs is within the slack,
    so the next run can still allocate its whole `max_memory`."""
    return data_bytes() - bound.data_start <= bound.slack
