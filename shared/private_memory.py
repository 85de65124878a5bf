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
"""

from __future__ import annotations

import sys

PR_SET_DUMPABLE = 4


def keep_memory_private() -> bool:
    """Make this process (and what it forks from now on) not dumpable.
    False where the platform has no such setting."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
