"""A cancel of the run this worker serves (DESIGN.md section 8, "Tasks").

The supervisor asks for it with CANCEL_SIGNAL (supervisor/workers/pool_states.py).
It works as the deadline does: the action in progress, if any, goes on (a
system call the signal interrupts is resumed, PEP 475); the engine looks at
the note before each new action (worker/runs/engine.py); a program waiting
or computing outside its actions is stopped there by the run's WaitBound
(worker/confinement/limits.py), never inside a broker section. The note is
reset as each run begins, so a cancel that came between runs never reaches
the next one (the supervisor retires a worker it sent a cancel to, anyway).
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
    before it was some earlier run's."""
    _asked[0] = cancelled


def asked() -> bool:
    """Whether the run this worker serves was cancelled."""
    return _asked[0]
