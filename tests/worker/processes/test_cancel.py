"""staal.worker.processes.cancel: the worker's note of a cancel of the run it
serves. The supervisor signals a worker as soon as it has lent it the run,
so the signal may come before the worker has read the run (CI hit it: the
note was reset as the run began and the cancelled task ran on)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from staal.records.messages import CANCEL_SIGNAL
from staal.worker.processes import cancel


@pytest.fixture
def listening() -> Iterator[None]:
    previous = signal.getsignal(CANCEL_SIGNAL)
    cancel.listen()
    cancel.end()
    try:
        yield
    finally:
        cancel.end()
        signal.signal(CANCEL_SIGNAL, previous)


def test_a_cancel_signalled_before_the_worker_reads_its_run_is_kept_when_the_run_begins(listening):
    os.kill(os.getpid(), CANCEL_SIGNAL)  # handled before kill returns to Python (main thread)
    cancel.begin(False)
    assert cancel.asked()


def test_a_run_sent_cancelled_begins_cancelled_and_the_next_run_begins_uncancelled(listening):
    cancel.begin(True)
    assert cancel.asked()
    cancel.end()
    cancel.begin(False)
    assert not cancel.asked()


def test_a_run_not_cancelled_is_not_asked_to_stop(listening):
    cancel.begin(False)
    assert not cancel.asked()
