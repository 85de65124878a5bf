"""staal.worker.processes.zygote: a zygote that stops kills every worker it forked,
one that has not yet made its own process group included (issue 12 item 3:
found as a worker left running, its parent gone, after a server stopped at
start on a loaded machine)."""

from __future__ import annotations

import os
import select
import subprocess
import sys

from staal.worker.processes.zygote import Zygote

BOUND_S = 20.0


def test_a_worker_not_yet_in_its_own_process_group_is_killed_by_pid_when_the_zygote_stops():
    # A fresh fork is still in the zygote's group until its first act; this
    # child stands for it: in the test's own group, so killpg(pid) misses it.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             stdin=subprocess.DEVNULL)
    report_r, report_w = os.pipe()
    exited = os.pidfd_open(child.pid)
    zygote = Zygote("ipc:///nowhere", report_w, ({}, {}, {}))
    try:
        assert os.getpgid(child.pid) != child.pid
        zygote.children.add(child.pid)
        zygote.reap = lambda: None  # this test's process reaps its own child
        zygote.kill_workers()
        ready, _, _ = select.select([exited], [], [], BOUND_S)
        assert ready, "the child outlived the zygote's kill"
        assert child.wait(BOUND_S) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for fd in (exited, report_r, report_w, zygote.wake_r, zygote.wake_w):
            os.close(fd)
