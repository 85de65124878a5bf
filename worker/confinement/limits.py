"""The limits of the process that executes one run.

DESIGN.md section 4 ("Limits"): `max_steps` is counted in steps.py; a
CPU-time limit backs it up for work done inside C code, where line counting
sees nothing (`cpu_backstop`); the memory the run may allocate is bounded
(`memory_limit`, kind `budget`); and the time it spends outside its actions,
where no capability's timeout bounds a wait, is bounded by its deadline and
its `max_wait` (`WaitBound`, kind `deadline`). A limit that ends the process
before it can say so is read from how it died (`staal.runtime.budgets`).

These bound a process that runs once; a worker that serves several runs
splits them into limits per process and per run (warm_limits.py).
"""

from __future__ import annotations

import importlib
import math
import resource
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from staal.manifest.sizes import MIB
from staal.program import RunFailed
from staal.records.runconfig import Limits
from staal.runtime.budgets import CPU_GRACE_SECONDS, MEMORY_EXIT_CODE, cpu_message
from staal.worker.runs.refusal import broker_section, in_broker_section

if TYPE_CHECKING:
    pass


def _c_guard() -> Callable[[int, int], None] | None:
    """The C guard's `arm(probe_bytes, exit_code)`, if it was built."""
    try:
        from staal.worker._guard import arm
    except ImportError:  # built without a compiler: a crash at the memory limit is a crash
        return None
    return arm


_ARM_GUARD = _c_guard()

# The C module under `signal`: the same calls without the enum conversions
# `signal.signal` and `getsignal` make each time (a raised and caught
# ValueError for every handler that is a function), which a warm worker
# would pay several times per run.
RAW_SIGNAL: Any = importlib.import_module("_signal")


__all__ = ["CPU_GRACE_SECONDS", "WaitBound", "bound_process", "cpu_backstop", "memory_limit"]


# ---------------------------------------------------------------- CPU time



def cpu_backstop(seconds: float) -> None:
    """Limit the CPU time the rest of this process may use to `seconds`.

    At `seconds` (process CPU time, every thread's, from now), an ITIMER_PROF
    timer raises `RunFailed("budget", ...)` in the main thread, and again each
    further CPU second (`SIGPROF`), unless staal's own code is running there
    (a broker section: an action is never cut in half; the next signal, or
    the next action's check, comes after it). Python runs the handler
    between bytecodes, so a program stuck in one long C call (a loop inside a
    library called through ffi.c, `sum(range(10**15))`) cannot be
    interrupted: `CPU_GRACE_SECONDS` later, RLIMIT_CPU's soft limit makes the
    kernel end the process with SIGXCPU, which the supervisor reads as the
    run failing its CPU limit, not as a crash (`staal.runtime.budgets.own_limit`).
    The hard limit, one second later, is a SIGKILL for a program that set
    SIGXCPU aside; it is never raised above an existing hard limit. Core
    dumps are turned off: a process ended by its limit has nothing to show.

    Must be called from the main thread (signal handlers live there).
    """
    positive_cpu(seconds)
    soft = math.ceil(cpu_used() + seconds) + CPU_GRACE_SECONDS
    hard = capped(soft + 1, resource.RLIMIT_CPU)
    start_cpu_backstop(seconds, min(soft, hard), hard)


def positive_cpu(seconds: float) -> None:
    if not seconds > 0:
        raise ValueError(f"the CPU-time limit must be positive, not {seconds}")


def cpu_used() -> float:
    """The CPU time this process has used so far (every thread's, user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def capped(limit: int, which: int) -> int:
    """`limit`, lowered to the process's hard limit `which` if that is lower:
    an unprivileged process can never raise its hard limit again."""
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        return min(limit, current_hard)
    return limit


def start_cpu_backstop(seconds: float, soft: int, hard: int) -> None:
    """`cpu_backstop`'s mechanism, its limits given: the SIGPROF budget
    failure `seconds` of CPU time from now, RLIMIT_CPU (`soft`, `hard`),
    SIGXCPU at its default and no core dump."""
    failure = RunFailed("budget", cpu_message(round(seconds * 1000)))

    def on_sigprof(signum: int, frame: FrameType | None) -> None:
        if not in_broker_section():
            raise RunFailed(failure.kind, failure.message)

    RAW_SIGNAL.signal(signal.SIGPROF.value, on_sigprof)
    RAW_SIGNAL.signal(signal.SIGXCPU.value, signal.SIG_DFL.value)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    signal.setitimer(signal.ITIMER_PROF, seconds, 1.0)


# ---------------------------------------------------------------- memory


def data_bytes() -> int:
    """This process's private writable memory now (VmData), which RLIMIT_DATA
    counts: its heap and anonymous mappings, thread stacks, and the pages it
    shares copy-on-write with the zygote it was forked from."""
    with broker_section(), open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(b"VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("/proc/self/status has no VmData line")


def memory_limit(mib: int) -> int:
    """Let the rest of this process allocate at most `mib` MiB beyond what it
    holds now; returns the RLIMIT_DATA set, in bytes.

    RLIMIT_DATA rather than RLIMIT_AS: the address space counts what is only
    reserved (each thread's malloc arena reserves 64 MiB, a forked worker
    already maps about 190 MiB of which it uses 40), so an AS limit would
    refuse a thread long before a run used its memory; RLIMIT_DATA counts the
    private writable memory a program actually asks for. A refused
    allocation is a MemoryError in Python, which the run turns into a
    `budget` failure naming the limit; C code that crashes on the NULL it
    got instead is recognised by `staal.worker._guard` (a crash with less
    than an eighth of the limit left exits with MEMORY_EXIT_CODE), and the
    supervisor reads that as the run failing its memory limit. What the
    limit does not count: shared mappings (a file mapped, an anonymous
    `mmap` shared), and the machine's own memory pressure, which is the
    kernel's (its OOM killer is a kill from outside: the run is resumed).
    """
    if mib < 1:
        raise ValueError(f"the memory limit must be positive, not {mib} MiB")
    return set_data_limit(data_bytes() + mib * MIB, mib)


def set_data_limit(limit: int, mib: int) -> int:
    """`memory_limit`'s mechanism: RLIMIT_DATA at `limit` bytes (never above
    the hard limit there is), and the C guard armed for a run of `mib` MiB."""
    limit = capped(limit, resource.RLIMIT_DATA)
    if _ARM_GUARD is not None:
        _ARM_GUARD(max(MIB, mib * MIB // 8), MEMORY_EXIT_CODE)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return limit


def bound_process(limits: Limits) -> None:
    """The limits of a process that runs one run, set just before it runs:
    its CPU time and its memory (both counted from what it holds now)."""
    cpu_backstop(limits.cpu_ms / 1000)
    memory_limit(limits.memory_mib)


# ---------------------------------------------------------------- waiting


class WaitBound:
    """No wait without end (seed 000 section 3): bounds the wall-clock time a
    program spends outside its actions, where no capability's timeout
    reaches (`time.sleep`, a lock, an event, a queue, a select).

    Two bounds, whichever comes first: the run's deadline (`deadline_at_ms`
    on the run's clock, None for none), and `wait_ms` of time outside its
    actions (the time its actions took does not count; an action is bounded
    by its own timeout). At the bound a SIGALRM handler raises
    `RunFailed("deadline", ...)` in the main thread, where the program is
    waiting or computing: Python interrupts a sleep, a lock's or a
    condition's wait and a select for a signal handler that raises. It never
    raises inside a broker section (staal's own work: an action in progress,
    a journal write) nor while the run is still replaying journaled ops (a
    resumed run first gets back to where it was); it looks again a tenth of
    a second later. `on_expired` gets the failure first, so the run fails
    with it even if the program catches it.

    A cancel of the run's task (`cancelled`, told by `cut_short`) ends the
    wait at once, the same way: the run fails as `cancelled`.

    Must be started from the main thread (signal handlers live there).
    """

    RETRY_S = 0.1

    def __init__(self, wait_ms: int, deadline_ms: int | None, deadline_at_ms: int | None,
                 now_ms: Callable[[], int], on_expired: Callable[[RunFailed], None],
                 may_end: Callable[[], bool] = lambda: True,
                 cancelled: Callable[[], bool] = lambda: False) -> None:
        self.wait_ms = wait_ms
        self.deadline_ms = deadline_ms
        self.deadline_at_ms = deadline_at_ms
        self.now_ms = now_ms
        self.on_expired = on_expired
        self.may_end = may_end
        self.cancelled = cancelled
        self.armed = False
        self.began = 0.0
        self.in_actions = 0.0
        self.deadline_mono: float | None = None
        self._previous: Any = None

    def start(self) -> None:
        self.began = time.monotonic()
        if self.deadline_at_ms is not None:
            self.deadline_mono = self.began + (self.deadline_at_ms - self.now_ms()) / 1000
        self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        self.armed = True
        _ARMED[:] = [self]
        self._arm()

    def stop(self) -> None:
        if not self.armed:
            return
        self.armed = False
        _ARMED.clear()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)

    def acted(self, seconds: float) -> None:
        """An action took `seconds`: they do not count as time outside."""
        self.in_actions += seconds
        if self.armed:
            self._arm()

    def _ends(self) -> tuple[float, bool]:
        """When the bound comes, and whether it is the deadline."""
        outside = self.began + self.wait_ms / 1000 + self.in_actions
        if self.deadline_mono is not None and self.deadline_mono <= outside:
            return self.deadline_mono, True
        return outside, False

    def _arm(self, delay: float | None = None) -> None:
        if delay is None:  # a cancelled run's bound is now (its cancel may have come before)
            delay = 0.0 if self.cancelled() else self._ends()[0] - time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, max(delay, 0.001))

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if not self.armed:
            return
        ends, by_deadline = self._ends()
        cancelled = self.cancelled()
        if time.monotonic() < ends and not cancelled:
            self._arm()
            return
        if in_broker_section() or not self.may_end():
            self._arm(self.RETRY_S)
            return
        self.armed = False
        if cancelled:
            failure = RunFailed("cancelled", "the run's task was cancelled while it was outside "
                                "any action, waiting or computing")
        elif by_deadline:
            failure = RunFailed("deadline", f"the run's deadline ({self.deadline_ms} ms from its "
                                "start) passed while it was outside any action, waiting or computing")
        else:
            failure = RunFailed("deadline", f"the run spent more than {self.wait_ms / 1000:g} s "
                                "outside its actions, waiting or computing (max_wait)")
        self.on_expired(failure)
        raise failure


# The bound of the run whose program runs now (none between runs).
_ARMED: list[WaitBound] = []


def cut_short() -> None:
    """The run's task was cancelled (a signal handler, main thread): the
    bound looks at once, and ends a wait outside the run's actions."""
    for bound in _ARMED:
        bound._arm(0.0)
