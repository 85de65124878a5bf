"""Cutting known values out of text: a run's secrets out of what it writes
(worker/runs/engine.py) and of a database's errors (worker/capabilities/postgres.py),
a request's credential values out of what the server logs of it
(protocol/http/credentials.py). One rule for all: every non-empty
value, wherever it occurs, longest first so a value that holds another is
cut out whole."""

from __future__ import annotations

from collections.abc import Iterable

REDACTED = "[redacted]"


def redact(text: str, values: Iterable[str]) -> str:
    """`text` with every (non-empty) value replaced."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text
