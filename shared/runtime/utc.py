"""Times as text, in UTC: one format for people and one for machines.

Every time is kept as UTC milliseconds since 1970 (seed 000 section 6,
"Time"); these are the only ways the code writes one out. A person reads
`for_people` wherever staal shows a time (`staal journal show`, the
console, a quota refusal); a program reads `for_machines` (the caller's
journal resource, `staal-supervisor status --json`, the JSON log, whose
per-second cache in supervisor/telemetry/log.py writes the same format).
"""

from __future__ import annotations

import datetime


def _moment(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC)


def for_people(ms: int) -> str:
    """`2026-11-29 21:49:18.518 UTC`: to the millisecond, since the records
    of one run are often within one second of each other."""
    moment = _moment(ms)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{ms % 1000:03d} UTC"


def for_machines(ms: int, millis: bool = True) -> str:
    """ISO 8601 with a `Z`: `2026-11-29T21:49:18.518Z`, or without the
    milliseconds (`2026-11-29T21:49:18Z`, the status report's, which counts
    in seconds)."""
    moment = _moment(ms)
    whole = f"{moment:%Y-%m-%dT%H:%M:%S}"
    return f"{whole}.{ms % 1000:03d}Z" if millis else f"{whole}Z"
