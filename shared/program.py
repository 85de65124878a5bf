"""What a program sees of staal besides its capabilities (DESIGN.md section 3).

`fail(kind, message)` ends the run as failed. The exceptions that end a run
derive from `RunEnded`, a BaseException, so a program's `except Exception`
cannot swallow a refusal or a failure it asked for; an action that merely
went wrong (`ActionFailed`) is an ordinary Exception the program may handle.
"""

from __future__ import annotations

from typing import Annotated, Any, NoReturn, TypeGuard

from staal.records.outcomes import CANCELLED, FAILURE_KINDS, FailureKind


class _JsonMarker:
    def __repr__(self) -> str:
        return "staal.Json"


JSON_MARKER = _JsonMarker()
# Any JSON value, as an input or a result type.
Json = Annotated[Any, JSON_MARKER]


class RunEnded(BaseException):
    """Control flow that ends a run; never caught by `except Exception`."""


class RunFailed(RunEnded):
    """The run fails with `kind` and `message` (seed 000 section 5)."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class CapabilityRefused(RunFailed):
    """The broker or the confinement tripwire refused something."""

    def __init__(self, message: str) -> None:
        super().__init__("capability", message)


class ActionFailed(Exception):
    """An action was performed and failed (a refused connection, an HTTP
    error the capability treats as failure, a model provider that failed
    every attempt). A program may catch it; if it escapes, the run fails with
    its kind: `action`, or `provider`."""

    def __init__(self, message: str, kind: FailureKind = "action") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


def _is_failure_kind(kind: str) -> TypeGuard[FailureKind]:
    # A cancel is the caller's, never the program's to claim.
    return kind in FAILURE_KINDS and kind != CANCELLED


def fail(kind: str, message: str) -> NoReturn:
    """End the run as failed, with one of the failure kinds (a program's
    string, checked here)."""
    if not _is_failure_kind(kind):
        raise ValueError(f"{kind!r} is not a failure kind ({', '.join(FAILURE_KINDS)})")
    raise RunFailed(kind, str(message))
