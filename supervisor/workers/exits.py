"""How a child process ended, in the words the log and a lost run's error
use ("was killed by SIGKILL", "exited with code 3"): one reading of a wait
status for the worker pool's zygote and workers and for the verifier."""

from __future__ import annotations

import os
import signal

__all__ = ["describe_exit", "wait_status"]


def wait_status(returncode: int) -> int:
    """A wait status from a Popen return code (negative: killed by a signal),
    so a zygote's end reads as the zygote's reports of its workers' ends do."""
    return -returncode if returncode < 0 else returncode << 8


def describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"was killed by {name}"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"
