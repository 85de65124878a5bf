"""The server's log on standard error: one JSON object per line (time,
level, event, run id, tool, and details), or text for people. Nothing
secret is ever logged: events carry run ids, tool names and messages that
the runtime has already redacted."""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

import orjson

from staal.records.fsio import write_all

# The last second formatted (staal.runtime.utc.for_machines's format, made
# here once a second): a call logs several lines, and a strftime for
# each was ~5% of the supervisor's Python per call. (second, its text), one
# tuple, so a thread reading it while another replaces it sees a whole one.
_second: tuple[int, str] = (-1, "")


def _now() -> str:
    global _second
    now = time.time()
    second = int(now)
    cached = _second
    if cached[0] != second:
        cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second)))
        _second = cached
    return f"{cached[1]}{int((now - second) * 1000):03d}Z"


class Log(Protocol):
    """What the supervisor's parts log an event with: the server's log
    (`StderrLog`), or a test's recorder. `fields` are the event's details;
    one that is None is left out."""

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None: ...


class StderrLog:
    """The server's log, written whole line by whole line to `fd`."""

    def __init__(self, fmt: str = "json", fd: int = 2) -> None:
        if fmt not in ("json", "text"):
            raise ValueError(f"log format is json or text, not {fmt!r}")
        self.fmt = fmt
        self.fd = fd
        self.lock = threading.Lock()

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        record = {"time": _now(), "level": level, "event": event}
        record.update({k: v for k, v in fields.items() if v is not None})
        if self.fmt == "json":
            line = orjson.dumps(record, default=str) + b"\n"
        else:
            details = " ".join(f"{k}={_text(v)}" for k, v in record.items()
                               if k not in ("time", "level", "event"))
            line = f"{record['time']} {level:<7} {event} {details}".rstrip().encode() + b"\n"
        with self.lock:
            try:
                write_all(self.fd, line)
            except OSError:
                pass  # nowhere left to say it


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return f'"{text}"' if " " in text else text


def log_file_line(event: str, **fields: Any) -> bytes:
    """One line of a run's own log (`<run id>.log.jsonl` beside its journal)."""
    return orjson.dumps({"time": _now(), "event": event, **fields}, default=str) + b"\n"


__all__ = ["Log", "StderrLog", "log_file_line"]
