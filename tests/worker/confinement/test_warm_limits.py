"""staal.worker.confinement.warm_limits: the limits of a worker that serves several runs
(issue 26 item 1, PLAN26.md (b)): hard limits bound once per worker, a CPU
budget armed per run and disarmed after it, and the checks that retire a
worker before a run would find less than its whole budget or memory.

Rlimits, timers and signal handlers belong to a whole process, so each
scenario runs in a fresh Python process that prints one JSON line (as
test_limits.py does). CPU is spent in a loop of C calls until getrusage says
enough was used: no clock, no sleep.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from staal.manifest.sizes import MIB
from staal.worker.confinement.warm_limits import MAX_SLACK_BYTES, slack_bytes

BOUND = 120.0  # seconds a scenario's process may take before the test fails

PRELUDE = """
import hashlib, json, math, resource, signal, sys
from staal.manifest.sizes import MIB
from staal.program import RunFailed
from staal.records.runconfig import Limits
from staal.worker.confinement.limits import cpu_backstop, cpu_used
from staal.worker.confinement.warm_limits import (
    arm_run_cpu, bind_process_limits, cpu_headroom_ok, disarm_run_cpu, memory_retained_ok)

BLOCK = bytes(1 << 20)

def spend_until(total):
    # CPU in C (hashing): what the step counter never sees, the backstop's case
    while cpu_used() < total:
        hashlib.sha256(BLOCK).digest()

def spend_past_the_budget():
    try:
        spend_until(math.inf)
    except RunFailed as failed:
        return [failed.kind, failed.message]

def cpu_limits():
    return list(resource.getrlimit(resource.RLIMIT_CPU))

def report(**values):
    print(json.dumps(values), flush=True)
"""

# getrusage as a fixed number, so a hard limit can be compared to the one
# cpu_backstop sets in another process, to the second
FIXED_USAGE = """
class Usage:
    ru_utime = 3.25
    ru_stime = 0.5
resource.getrusage = lambda who: Usage()
"""


def run(body: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-B", "-c", PRELUDE + textwrap.dedent(body)],
        check=False, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=BOUND,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def result(body: str) -> dict[str, Any]:
    proc = run(body)
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    return json.loads(lines[-1])


# ---------------------------------------------------------------- CPU per run


def test_a_run_armed_after_another_spent_cpu_still_gets_its_whole_budget():
    outcome = result(
        """
        limits = Limits(cpu_ms=2000)
        bind_process_limits(limits, 3)
        first = arm_run_cpu(limits)
        spend_until(cpu_used() + 1.5)  # the first run: most of its budget, not past it
        disarm_run_cpu()
        began = cpu_used()
        second = arm_run_cpu(limits)
        failure = spend_past_the_budget()
        disarm_run_cpu()
        report(first=first, second=second, began=began, spent=cpu_used() - began,
               failure=failure)
        """
    )
    assert outcome["failure"] == ["budget", "the run used more than 2 s of CPU time"]
    # the whole 2 s, not the half second a budget counted per process would leave
    # (at least 0.8 of it: the timer and getrusage read two kernel clocks)
    assert outcome["spent"] >= 1.6
    # the soft limit moved up by what the first run spent: its budget and grace from its start
    assert outcome["second"] >= outcome["first"] + 1
    assert outcome["second"] >= outcome["began"] + 2 + 2


def test_the_hard_cpu_limit_bound_once_stays_as_runs_are_armed_and_disarmed():
    outcome = result(
        """
        limits = Limits(cpu_ms=1000)
        bound = bind_process_limits(limits, 3)
        seen = [cpu_limits()]
        for _ in range(2):
            arm_run_cpu(limits)
            seen.append(cpu_limits())
            disarm_run_cpu()
            seen.append(cpu_limits())
        report(hard=bound.cpu_hard, seen=seen)
        """
    )
    assert {hard for _, hard in outcome["seen"]} == {outcome["hard"]}
    assert all(soft < hard for soft, hard in outcome["seen"])


def test_a_disarmed_worker_has_no_profiling_timer_and_ignores_sigprof_past_the_budget():
    outcome = result(
        """
        limits = Limits(cpu_ms=1000)
        bind_process_limits(limits, 2)
        arm_run_cpu(limits)
        armed = signal.getitimer(signal.ITIMER_PROF)
        disarm_run_cpu()
        timer = signal.getitimer(signal.ITIMER_PROF)
        ignored = signal.getsignal(signal.SIGPROF) == signal.SIG_IGN
        spend_until(cpu_used() + 1.5)  # past the budget: between runs nothing may fire
        report(armed=armed, timer=timer, ignored=ignored)
        """
    )
    assert outcome["armed"][0] > 0
    assert outcome["timer"] == [0.0, 0.0]
    assert outcome["ignored"] is True


def test_a_run_past_its_armed_budget_fails_as_budget_as_under_the_cpu_backstop():
    outcome = result(
        """
        limits = Limits(cpu_ms=1000)
        bind_process_limits(limits, 2)
        began = cpu_used()
        arm_run_cpu(limits)
        report(failure=spend_past_the_budget(), spent=cpu_used() - began)
        """
    )
    assert outcome["failure"] == ["budget", "the run used more than 1 s of CPU time"]
    assert outcome["spent"] >= 0.8


def test_a_later_run_stuck_in_one_c_call_is_ended_by_sigxcpu_or_fails_as_budget():
    proc = run(
        """
        limits = Limits(cpu_ms=1000)
        bind_process_limits(limits, 3)
        arm_run_cpu(limits)
        spend_until(cpu_used() + 0.5)
        disarm_run_cpu()
        arm_run_cpu(limits)
        try:
            sum(range(10**14))  # one C call that never checks for signals
            report(outcome="finished")
        except RunFailed as failed:
            report(outcome=[failed.kind, failed.message])
        """,
        check=False,
    )
    # SIGXCPU, never SIGKILL: the supervisor reads it as the run's own limit.
    if proc.returncode == -signal.SIGXCPU:
        assert proc.stdout == ""
    else:
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["outcome"] == ["budget",
                                                       "the run used more than 1 s of CPU time"]


@pytest.mark.parametrize(("bind", "hard"), [
    ("cpu_backstop(5)", 12),  # today's: ceil(3.75 + 5) + 2, and one more
    ("bind_process_limits(Limits(cpu_ms=5000), 1)", 12),
    ("bind_process_limits(Limits(cpu_ms=5000), 3)", 26),  # ceil(3.75 + 3 * (5 + 2)) + 1
])
def test_binding_for_one_run_sets_the_hard_cpu_limit_the_cpu_backstop_sets(bind, hard):
    outcome = result(FIXED_USAGE + f"\n{bind}\nreport(limits=cpu_limits())\n")
    assert outcome["limits"][1] == hard


@pytest.mark.parametrize(("runs", "headroom"), [(1, False), (2, True)])
def test_the_headroom_check_says_retire_once_the_hard_limit_has_no_room_for_another_run(
        runs, headroom):
    outcome = result(
        f"""
        limits = Limits(cpu_ms=1000)
        bound = bind_process_limits(limits, {runs})
        fresh = cpu_headroom_ok(limits)
        spend_until(cpu_used() + 1)  # one run's whole budget
        after = cpu_headroom_ok(limits)
        soft = arm_run_cpu(limits)  # armed anyway: the soft limit stays under the hard one
        disarm_run_cpu()
        report(fresh=fresh, after=after, limits=cpu_limits(), soft=soft, hard=bound.cpu_hard)
        """
    )
    assert outcome["fresh"] is True
    assert outcome["after"] is headroom
    assert outcome["limits"] == [outcome["soft"], outcome["hard"]]
    assert outcome["soft"] <= outcome["hard"]


# ---------------------------------------------------------------- memory per worker


def test_the_slack_is_a_quarter_of_the_runs_memory_and_at_most_64_mib():
    assert slack_bytes(64) == 16 * MIB
    assert slack_bytes(256) == 64 * MIB
    assert slack_bytes(4096) == MAX_SLACK_BYTES == 64 * MIB


def test_the_data_limit_is_bound_once_at_the_memory_held_plus_the_runs_memory_and_the_slack():
    outcome = result(
        """
        bound = bind_process_limits(Limits(memory_mib=64), 5)
        report(start=bound.data_start, slack=bound.slack, limit=bound.data_limit,
               set=list(resource.getrlimit(resource.RLIMIT_DATA)))
        """
    )
    assert outcome["slack"] == 16 * MIB
    assert outcome["limit"] == outcome["start"] + 64 * MIB + 16 * MIB
    assert outcome["set"] == [outcome["limit"], outcome["limit"]]


def test_memory_kept_past_the_slack_says_retire_and_within_it_a_run_still_gets_its_whole_memory():
    outcome = result(
        """
        bound = bind_process_limits(Limits(memory_mib=64), 5)
        kept = [bytearray(8 * MIB)]  # what earlier runs left behind, within the 16 MiB slack
        within = memory_retained_ok(bound)
        run = bytearray(64 * MIB)  # the next run's whole max_memory
        del run
        kept.append(bytearray(16 * MIB))  # 24 MiB kept: past the slack
        past = memory_retained_ok(bound)
        try:
            bytearray(64 * MIB)
            refused = False
        except MemoryError:
            refused = True
        report(within=within, past=past, refused=refused)
        """
    )
    assert outcome == {"within": True, "past": False, "refused": True}
