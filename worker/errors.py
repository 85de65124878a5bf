"""The exception base of `staal.worker`.

`WorkerError` subclasses `StaalError`: the worker shares the core's records
and checks, and its edges (`staal journal ...`, the start-up check, a run's
last word) catch both with one `except StaalError`. None of these crosses
the process boundary as an object: what the supervisor must know travels as
data with its kind (a `Failure`, a refusal). The exceptions that end a run
(`staal.program.RunEnded`) are not in this tree: they are control flow a
program must not catch, so they derive from `BaseException`.
"""

from __future__ import annotations

from staal.errors import StaalError


class WorkerError(StaalError):
    """Base of every error the worker raises on purpose."""

    kind = "worker"
