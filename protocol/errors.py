"""The exception base of `staal.protocol`.

`ProtocolError` subclasses `StaalError`: the protocol is a library the
supervisor drives, and an error it raises crosses into the supervisor with
the same `kind` and `to_data()` as the shared core's. The sans-I/O state
machines never raise for what a peer sends (a bad message becomes a refusal,
as data): these are the checks a value makes on the code that builds it.
Each subclass also derives from the built-in error the check raised before
the tree existed, so a caller's `except ValueError` still holds.
"""

from __future__ import annotations

from staal.errors import StaalError


class ProtocolError(StaalError):
    """Base of every error `staal.protocol` raises on purpose."""

    kind = "protocol"


class BadValue(ProtocolError, ValueError):
    """A protocol value built wrong: a result kind, a tool list, a cursor key."""

    kind = "protocol_value"


class NotAnOutcome(ProtocolError, TypeError):
    """An object handed over as a call's outcome that is none (a bug in the
    caller, not a message from a peer)."""

    kind = "not_an_outcome"
