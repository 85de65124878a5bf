"""The exception base of `staal.supervisor`.

`SupervisorError` subclasses `StaalError` so one `except StaalError` at the
supervisor's edges (start-up, the console, a background task) still catches
what the shared core and the supervisor raise alike, and every error carries
a `kind` a log line or a test matches on. Errors that must keep a built-in
base a caller relies on (`ValueError` for an option's value) derive from both.
"""

from __future__ import annotations

from staal.errors import StaalError


class SupervisorError(StaalError):
    """Base of every error the supervisor raises on purpose."""

    kind = "supervisor"
