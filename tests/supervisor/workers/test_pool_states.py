"""The pool's cancels (supervisor/workers/pool_states.py `Cancels`): a run's
cancel signals the worker running it once; a run not running yet is sent
cancelled, and again after a worker's death; and nothing of it is kept once
the call (or the recovery) that held the run let it go."""

from __future__ import annotations

import subprocess
import sys

from staal.records.messages import CANCEL_SIGNAL
from staal.supervisor.workers.pool_states import Cancels, Worker, WorkerState
from tests.helpers.recorder import WAIT

RUN = "c" * 32


def test_a_cancel_of_a_run_not_yet_sent_is_kept_for_each_sending_and_forgotten_when_its_call_ends():
    cancels = Cancels()
    idle = Worker(pid=1, identity=b"w1", state=WorkerState.IDLE)
    assert cancels.ask([idle], RUN) is True
    assert cancels.ask([idle], RUN) is False  # asked once
    assert not idle.cancelled  # it runs no such run: nothing is signalled
    assert cancels.take(RUN) and cancels.take(RUN)  # sent cancelled, and again after a death
    cancels.done(RUN)
    assert not cancels.take(RUN) and cancels.asked == set()


def test_a_cancel_signals_the_worker_running_the_run_and_marks_it():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = Worker(pid=sleeper.pid, identity=b"w2", state=WorkerState.RUNNING, run=RUN)
        other = Worker(pid=1, identity=b"w3", state=WorkerState.RUNNING, run="d" * 32)
        assert Cancels().ask([other, running], RUN) is True
        assert sleeper.wait(WAIT) == -CANCEL_SIGNAL  # its default action: the signal arrived
        assert running.cancelled and not other.cancelled  # it serves no other run
    finally:
        sleeper.kill()
        sleeper.wait()
