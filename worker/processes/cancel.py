"""A cancel of the run this worker serves (DESIGN.md section 8, "Tasks").

The supervisor asks for it with CANCEL_SIGNAL (supervisor/workers/pool_states.py).
It works as the deadline does: the action in progress, if any, goes on (a
system call the signal interrupts is resumed, PEP 475); the engine looks at
the note before each new action (worker/runs/engine.py); a program waiting
or computing outside its actions is stopped there by the run's WaitBound
(worker/confinement/limits.py), never inside a broker section. The note is
cleared as each run ends, not as the next begins: the supervisor signals a
worker as soon as it has lent it the run, so the signal can come before the
worker has read the run it is for (a reset at the run's start lost it), and
a worker it signalled never serves another run (supervisor/workers/resting.py).
"""

from __future__ import annotations

import signal
from types import FrameType

from staal.records.messages import CANCEL_SIGNAL
from staal.worker.confinement.limits import cut_short

_asked = [False]


def _note(signum: int, frame: FrameType | None) -> None:
    _asked[0] = True
    cut_short()  # a program waiting outside its actions stops waiting


def listen() -> None:
    """Take cancels from now on (main thread, before the first run)."""
    signal.signal(CANCEL_SIGNAL, _note)


def begin(cancelled: bool) -> None:
    """A run begins, cancelled before it was sent or not: a cancel noted
    since the last run ended is this run's (it was signalled for it)."""
    _asked[0] = _asked[0] or cancelled


def end() -> None:
    """The run ended: the next one starts uncancelled."""
    _asked[0] = False


def asked() -> bool:
    """Whether the run this worker serves was cancelled."""
    return _asked[0]
