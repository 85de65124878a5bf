"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the one reader
and writer of a `traceparent`, shared by the protocol (a client's, from
`_meta` or an HTTP header), the supervisor (the call's, in a `run` message)
and the worker (which parents its spans on it without importing
OpenTelemetry). Plain stdlib: a worker pays nothing for it.

A malformed value is not an error for anyone: it is as if none was sent, and
the call starts a new trace (the specification's rule for a receiver).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# version-traceid-parentid-flags; a later version may append fields after a dash.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
# The specification's bound on a tracestate header; a longer one is dropped.
MAX_TRACESTATE = 512
MAX_MEMBERS = 32
# A tracestate list member, key=value (the specification's grammar, as the
# OpenTelemetry SDK reads it): a simple or a multi-tenant key.
_MEMBER = re.compile(
    r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A span to continue: its trace, its own id, and whether it is sampled."""

    trace_id: str
    span_id: str
    sampled: bool = True

    def header(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


def parse_traceparent(value: object) -> TraceParent | None:
    """The parent a `traceparent` value names, or None when it is not one
    (not a string, a bad field, the invalid all-zero ids, version ff, or
    version 00 with more fields)."""
    if not isinstance(value, str) or len(value) > 512:
        return None
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return TraceParent(trace_id, span_id, sampled=bool(int(flags, 16) & 1))


def tracestate_of(value: object) -> str | None:
    """A `tracestate` value to pass on as it came, or None: not a string,
    past the specification's length or number of members, or a member that
    is not `key=value` by its grammar (dropped whole, as the specification
    allows, so that nothing downstream has to complain about it)."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TRACESTATE:
        return None
    members = [m.strip() for m in value.split(",") if m.strip()]
    if not members or len(members) > MAX_MEMBERS:
        return None
    if not all(_MEMBER.fullmatch(m) for m in members):
        return None
    return ",".join(members)


def new_span_id() -> str:
    """A random, valid (non-zero) span id."""
    while True:
        span = os.urandom(8).hex()
        if span != _ZERO_SPAN:
            return span
