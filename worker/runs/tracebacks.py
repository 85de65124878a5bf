"""Where in the operator's program an exception that ended a run passed:
its frames in the program's own folder, most recent call last, with their
source lines, for the operator to debug with (seed 000 section 5: the
client gets the failure's kind and message, the details go to the operator).

staal's own frames and the standard library's are left out: the operator
can change neither, and the frame that called into them is the program's.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from pathlib import Path

import staal
import staal.worker
from staal.records.outcomes import Frame

# A run that recursed without end would otherwise journal a thousand frames.
MAX_FRAMES = 20

_STAAL_DIRS = tuple(os.path.realpath(p) for p in (*staal.__path__, *staal.worker.__path__))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def program_frames(error: BaseException, program_dir: Path,
                   redact: Callable[[str], str] = str) -> tuple[Frame, ...]:
    """The frames of `error`'s traceback that are the program's own."""
    folder = os.path.realpath(program_dir)
    frames = []
    for summary in traceback.extract_tb(error.__traceback__):
        path = os.path.realpath(summary.filename)
        if not _within(path, folder) or any(_within(path, d) for d in _STAAL_DIRS):
            continue
        frames.append(Frame(file=path, line=max(summary.lineno or 1, 1), function=summary.name,
                            source=redact((summary.line or "").strip())))
    return tuple(frames[-MAX_FRAMES:])
