"""A run's resource limits as both processes word and recognise them.

The worker fails a run as `budget` when it passes its CPU time or its memory
limit (`staal.worker.confinement.limits`); when the limit ends the process before it can
say so (stuck in one C call, or C code that crashed on a refused
allocation), its way of dying says it instead, and the supervisor reads that
here (`own_limit`). Only the worker's own limit can die that way: SIGXCPU is
what the kernel sends at RLIMIT_CPU's soft limit, and MEMORY_EXIT_CODE is an
exit the worker makes itself. A SIGKILL is read as a limit only when the
supervisor sent it to a worker it found computing while silent (its run
held the interpreter inside C code: a runaway, supervisor/workers/silence.py);
any other, whoever sent it, is a crash, and the run is resumed.

A runaway ends as `budget`, never as `deadline`, even past the run's
deadline: the kill ends a computation, and computation is bounded by the
budget (the seed's deadline bounds when actions start; staal's wait bound,
waiting outside them). The same C loop ended by RLIMIT_CPU first is
`budget` too, so which bound ends it, on a loaded machine or not, does not
change how the run ends.
"""

from __future__ import annotations

import os
import signal
from typing import Literal

from staal.manifest.sizes import show_mib

# The exit code of a worker whose C code crashed with its memory at the limit.
MEMORY_EXIT_CODE = 86
# Seconds of CPU time past a run's budget before the kernel ends its process
# (RLIMIT_CPU's soft limit, worker/confinement/limits.py), and what the pool
# allows a warm worker's run past it (supervisor/workers/silence.py).
CPU_GRACE_SECONDS = 2

Limit = Literal["cpu", "memory", "runaway"]


def own_limit(status: int | None, runaway: bool = False) -> Limit | None:
    """Which of its own limits ended a worker with this wait status; None
    for any other end (a kill from outside, a crash, a clean exit).
    `runaway`: the supervisor killed it for computing while silent."""
    if status is None:
        return None
    if runaway and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "runaway"
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return "cpu"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == MEMORY_EXIT_CODE:
        return "memory"
    return None


def cpu_message(cpu_ms: int) -> str:
    return f"the run used more than {cpu_ms / 1000:g} s of CPU time"


def memory_message(memory_mib: int) -> str:
    return f"the run needed more than {show_mib(memory_mib)} of memory, its limit"


def runaway_message(silent_s: float) -> str:
    return (f"the run computed for more than {silent_s:g} s inside code that never let the "
            "interpreter run (C code holding it), and was ended as a runaway computation")


def message_of(limit: Limit, cpu_ms: int, memory_mib: int, silent_s: float) -> str:
    """The failure's message; `silent_s`: how long a runaway was silent before its kill."""
    if limit == "runaway":
        return runaway_message(silent_s)
    return cpu_message(cpu_ms) if limit == "cpu" else memory_message(memory_mib)
