"""How the pool tells a runaway run from a crash when a worker goes silent
(supervisor/workers/silence.py; issue 24 item 6): read with a fake clock and a fake
reader of CPU time, then against real processes (one looping in C, one
stopped)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from staal.supervisor.workers.silence import (
    MIN_WINDOW_S,
    RUNAWAY_SHARE,
    SILENT_S,
    SUSPECT_S,
    CpuCeiling,
    Sample,
    Silence,
    SilenceWatch,
    Usage,
    judge,
    read_usage,
)

PID = 4242


class FakeProcess:
    """A clock and one process whose CPU time and state the test sets."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.usage: Usage | None = Usage(0.0, stopped=False)
        self.reads = 0

    def clock(self) -> float:
        return self.now

    def read(self, pid: int) -> Usage | None:
        assert pid == PID
        self.reads += 1
        return self.usage

    def spend(self, seconds: float, cpu_share: float) -> None:
        """`seconds` pass, during which the process uses `cpu_share` of a core."""
        self.now += seconds
        if self.usage is not None:
            self.usage = Usage(self.usage.cpu_s + seconds * cpu_share, self.usage.stopped)


@pytest.fixture
def fake() -> FakeProcess:
    return FakeProcess()


def silent_until_judged(watch: SilenceWatch, fake: FakeProcess, last_seen: float,
                        cpu_share: float) -> Iterator[object]:
    """The watch's answers, a second apart, while the process stays silent."""
    while True:
        answer = watch.look(PID, last_seen)
        yield answer
        fake.spend(1.0, cpu_share)


def first_verdict(watch: SilenceWatch, fake: FakeProcess, last_seen: float, cpu_share: float):
    for answer in silent_until_judged(watch, fake, last_seen, cpu_share):
        if answer is not None:
            return answer
    raise AssertionError("unreachable")


def test_a_worker_heard_within_the_suspect_time_is_neither_read_nor_judged(fake):
    watch = SilenceWatch(fake.clock, fake.read)
    fake.now += SUSPECT_S
    assert watch.look(PID, last_seen=1000.0) is None
    assert fake.reads == 0


def test_a_worker_silent_while_burning_cpu_is_judged_a_runaway_once_silent_for_the_bound(fake):
    watch = SilenceWatch(fake.clock, fake.read)
    verdict = first_verdict(watch, fake, last_seen=fake.now, cpu_share=0.9)
    assert verdict.silence is Silence.RUNAWAY and verdict.cpu_share == pytest.approx(0.9)
    assert fake.now - 1000.0 > SILENT_S and fake.reads == 2  # once suspect, once at the kill


def test_a_worker_on_a_loaded_machine_getting_a_small_share_is_still_a_runaway(fake):
    watch = SilenceWatch(fake.clock, fake.read)
    verdict = first_verdict(watch, fake, last_seen=fake.now, cpu_share=RUNAWAY_SHARE * 1.5)
    assert verdict.silence is Silence.RUNAWAY


def test_a_worker_silent_and_idle_is_judged_idle_a_crash(fake):
    watch = SilenceWatch(fake.clock, fake.read)
    verdict = first_verdict(watch, fake, last_seen=fake.now, cpu_share=0.001)
    assert verdict.silence is Silence.IDLE and verdict.cpu_share == pytest.approx(0.001)


def test_a_worker_stopped_at_the_kill_is_idle_whatever_it_computed_before(fake):
    watch = SilenceWatch(fake.clock, fake.read)
    fake.spend(SUSPECT_S + 1, 1.0)
    assert watch.look(PID, last_seen=1000.0) is None  # the first reading
    fake.spend(SILENT_S - SUSPECT_S, 1.0)
    fake.usage = Usage(fake.usage.cpu_s, stopped=True)  # SIGSTOPped just before the kill
    verdict = watch.look(PID, last_seen=1000.0)
    assert verdict.silence is Silence.IDLE and verdict.cpu_share == pytest.approx(1.0)


def test_a_heartbeat_after_the_first_reading_starts_the_measure_again(fake):
    watch = SilenceWatch(fake.clock, fake.read)
    fake.spend(SUSPECT_S + 1, 1.0)
    assert watch.look(PID, last_seen=1000.0) is None and PID in watch.samples
    heard = fake.now + 0.5
    fake.spend(1.0, 1.0)
    assert watch.look(PID, last_seen=heard) is None and PID not in watch.samples
    # The new silence is measured from a reading taken after that heartbeat.
    verdict = first_verdict(watch, fake, last_seen=heard, cpu_share=0.0)
    assert verdict.silence is Silence.IDLE and fake.now - heard > SILENT_S


def test_a_silence_the_watch_did_not_see_begin_is_measured_before_the_kill(fake):
    # The supervisor itself was paused: its first look finds the worker
    # silent past the bound. It reads now and judges MIN_WINDOW_S later.
    watch = SilenceWatch(fake.clock, fake.read)
    fake.spend(SILENT_S + 10, 0.0)
    assert watch.look(PID, last_seen=1000.0) is None
    read_at = fake.now
    verdict = first_verdict(watch, fake, last_seen=1000.0, cpu_share=1.0)
    assert verdict.silence is Silence.RUNAWAY and fake.now - read_at >= MIN_WINDOW_S


def test_a_process_gone_when_read_is_idle_unmeasured(fake):
    watch = SilenceWatch(fake.clock, fake.read)
    fake.usage = None
    verdict = first_verdict(watch, fake, last_seen=fake.now, cpu_share=0.0)
    assert (verdict.silence, verdict.cpu_share) == (Silence.IDLE, None)


def test_forgetting_a_worker_drops_its_reading(fake):
    watch = SilenceWatch(fake.clock, fake.read)
    fake.spend(SUSPECT_S + 1, 1.0)
    watch.look(PID, last_seen=1000.0)
    watch.forget(PID)
    assert watch.samples == {}


def test_judging_needs_two_readings_apart_in_time():
    usage = Usage(1.0, stopped=False)
    assert judge(Sample(5.0, usage), Sample(5.0, Usage(9.0, False))).silence is Silence.IDLE


# -- real processes ---------------------------------------------------------------------


@pytest.fixture
def child() -> Iterator[Callable[[str], subprocess.Popen]]:
    processes: list[subprocess.Popen] = []

    def start(code: str) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-c", code])
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.kill()
        process.wait()


def test_reading_a_stopped_process_says_it_is_stopped(child):
    process = child("import time; time.sleep(600)")
    os.kill(process.pid, signal.SIGSTOP)
    _, status = os.waitpid(process.pid, os.WUNTRACED)  # returns once it is stopped
    assert os.WIFSTOPPED(status)
    usage = read_usage(process.pid)
    assert usage is not None and usage.stopped


def test_reading_a_running_process_says_it_is_not_stopped(child):
    process = child("import time; time.sleep(600)")
    usage = read_usage(process.pid)
    assert usage is not None and not usage.stopped and usage.cpu_s >= 0


def test_reading_a_process_that_is_gone_gives_nothing(child):
    process = child("pass")
    process.wait()
    assert read_usage(process.pid) is None


def test_a_warm_runs_cpu_is_counted_from_its_first_look_and_only_past_its_ceiling_reported():
    cpu = {"s": 5.0}
    ceiling = CpuCeiling(lambda key: 2.0 if key == "t" else None,
                         read=lambda pid: Usage(cpu["s"], stopped=False))
    assert ceiling.over(1, "r1", "t") is None  # the run's start
    cpu["s"] = 7.0
    assert ceiling.over(1, "r1", "t") is None  # 2 s: not past it
    cpu["s"] = 7.5
    assert ceiling.over(1, "r1", "t") == 2.5
    assert ceiling.over(1, "r2", "t") is None  # the worker's next run starts over
    assert ceiling.over(1, "r1", "other") is None  # a grant set with no ceiling: never


def test_a_gone_process_has_no_cpu_to_report():
    ceiling = CpuCeiling(lambda key: 1.0, read=lambda pid: None)
    assert ceiling.over(1, "r", "t") is None and ceiling.starts == {}
