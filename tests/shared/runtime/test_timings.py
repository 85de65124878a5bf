"""Durations tallied as histograms in both processes (shared/runtime/timings.py),
and a worker's tallies as data in its messages (issue 17, metrics)."""

from __future__ import annotations

import os
import threading

import pytest

from staal.errors import RecordError
from staal.records.fsio import OsSync
from staal.records.messages import MESSAGES, Ended, StoppedMsg, pack, unpack
from staal.runtime.timings import (
    ACTION_BUCKETS_S,
    FSYNC_BUCKETS_S,
    TIMINGS,
    Histogram,
    RunTimings,
    Tally,
    TallyMismatch,
    Timings,
)

RUN = "ab" * 16


def test_a_duration_equal_to_a_bound_is_counted_in_that_bucket_and_one_past_the_last_in_inf():
    histogram = Histogram((0.001, 0.01))
    for elapsed_ns in (1_000_000, 1_000_001, 10_000_000, 10_000_001, 0):
        histogram.observe_ns(elapsed_ns)
    assert histogram.tally() == Tally(counts=(2, 2, 1), sum_ns=22_000_002)


def test_a_tally_with_more_buckets_than_ours_is_refused_and_changes_nothing():
    histogram = Histogram(FSYNC_BUCKETS_S)
    histogram.observe_ns(5)
    with pytest.raises(TallyMismatch) as refused:
        histogram.add(Tally(counts=(1,) * (len(FSYNC_BUCKETS_S) + 2), sum_ns=3))
    assert refused.value.kind == "tally"
    assert histogram.tally().count == 1


def test_a_tally_sent_without_its_trailing_empty_buckets_adds_up_the_same():
    worker = Histogram(FSYNC_BUCKETS_S)
    worker.observe_ns(300_000)  # the fourth bucket (le 0.0005)
    sent = worker.tally().trimmed()
    assert sent.counts == (0, 0, 1)
    supervisor = Histogram(FSYNC_BUCKETS_S)
    supervisor.add(sent)
    assert supervisor.tally() == worker.tally()


def test_tallies_added_from_many_threads_lose_nothing():
    histogram = Histogram(ACTION_BUCKETS_S)
    one = Tally(counts=(1,) + (0,) * len(ACTION_BUCKETS_S), sum_ns=7)

    def add() -> None:
        for _ in range(2000):
            histogram.add(one)
            histogram.observe_ns(1)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert histogram.tally().count == 16_000
    assert histogram.tally().sum_ns == 4 * 2000 * 8


def test_every_fsync_of_the_real_file_system_is_timed(tmp_path):
    before = TIMINGS.fsync.tally().count
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        OsSync().sync_file(fd)
    finally:
        os.close(fd)
    OsSync().sync_dir(tmp_path)
    assert TIMINGS.fsync.tally().count == before + 2


def test_a_reset_forgets_what_was_counted_before_the_run():
    timings = RunTimings()
    timings.action("net.http.get", 5)
    timings.fsync.observe_ns(5)
    timings.reset()
    assert timings.snapshot() == Timings(actions={}, fsync=None)
    timings.action("net.http.get", 5)
    assert timings.snapshot().actions["net.http.get"].count == 1


def test_a_workers_timings_cross_in_its_ended_and_stopped_messages():
    snapshot = RunTimings()
    snapshot.action("net.http.post", 2_000_000)
    snapshot.fsync.observe_ns(300_000)
    timings = snapshot.snapshot()
    for message in (Ended(run=RUN, outcome="done", result=1, timings=timings),
                    StoppedMsg(run=RUN, op=1, message="in doubt", timings=timings)):
        assert unpack(pack(message)) == message


def test_a_bad_tally_in_a_message_is_refused_naming_its_field():
    data = MESSAGES.encode(Ended(run=RUN, outcome="done", result=1))
    data["timings"] = {"actions": {"net.http.get": {"counts": [1, -1], "sum_ns": 3}}}
    with pytest.raises(RecordError) as refused:
        MESSAGES.decode(data)
    assert "timings.actions.net.http.get.counts[1]" in str(refused.value)
