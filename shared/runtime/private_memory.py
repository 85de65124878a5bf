"""Keeping a process's memory from the other processes of its user.

The supervisor holds every tool's secrets and a worker its own tool's. On
Linux, another process of the same user may open `/proc/<pid>/mem` (or call
`process_vm_readv`) on a process unless the kernel forbids it: Yama's
`ptrace_scope`, where it is on, or the process being not "dumpable". So the
supervisor and the zygote each make themselves not dumpable at start; the
setting survives `fork` (every worker inherits it) and is reset by `exec`
(the zygote and the notify command start dumpable again; the zygote sets
it for itself). Only a process with CAP_SYS_PTRACE (root, usually) can
still read them, and no core dump of them is written.

This is a wall the tripwire is not: it holds against a program that gets
past the tripwire on purpose.

Not dumpable is not enough for the environment: measured on Linux 6.18, a
process of the same user without CAP_SYS_PTRACE is refused a not-dumpable
process's `/proc/<pid>/mem` but may still read its `/proc/<pid>/environ`,
the block it was exec'd with, which for the supervisor holds every secret.
So the supervisor also forgets that block (`forget_first_environment`).
"""

from __future__ import annotations

import os
import sys

PR_SET_DUMPABLE = 4


def keep_memory_private() -> bool:
    """Make this process (and what it forks from now on) not dumpable.
    False where the platform has no such setting."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        done: int = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        return done == 0
    except (OSError, AttributeError):
        return False


def forget_first_environment() -> bool:
    """Zero the environment block this process was exec'd with, which
    `/proc/<pid>/environ` shows, after copying every variable into the C
    library's own heap (`setenv`, through `os.putenv`), so `os.environ`,
    `getenv` and child processes see the same variables as before. False
    where this cannot be done (not Linux, no /proc)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as stat:
            # Fields after the command's closing parenthesis start at field 3;
            # env_start and env_end are fields 50 and 51 (proc(5)).
            fields = stat.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return False
    for name, value in os.environ.items():
        os.putenv(name, value)  # a copy on the heap; the block's string is no longer used
    if end > start:
        ctypes.memset(start, 0, end - start)
    return True
