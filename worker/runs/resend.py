"""Sending a keyed request again until its answer is known (seed 000
sections 4 and 5; docs/operators.md "When a run waits for an operator").

Under an idempotency key a request sent again is answered from the first
(Stripe keeps a key's answer for 24 hours, and answers 409
`idempotency_key_in_use` while the first is still being processed), so a
keyed request whose answer says nothing of whether it happened is not in
doubt yet: it is sent again, under the same key, after a backoff, until an
answer settles it. The run stops for an operator only when no answer can:

- an answer that sending again cannot change: a 500 the service saved under
  the key and replays, a success whose body cannot be read, or a 401 or 403
  after an attempt that may have happened (the secret does not change
  during a run); or
- no further attempt may start: the run's deadline passed (without one, it
  was sent again for the run's `max_wait`), or the key's window
  (RESEND_WINDOW_MS from its intent) closed. Each attempt is bounded by the
  tool's `net` timeouts, so the last may end one timeout past the bound.

An attempt is one call of the capability's `perform`: it returns the
settled answer (`Performed`: a result, or a failure the service gave for
the key), or raises `InDoubt` (it may have happened) or `NotSent` (it did
not: no connection, or refused before the service looked at the key). With
no earlier attempt that may have happened, a `NotSent` is the action's
failure at once, as for any request that never left, except a 429, which is
sent again until the bound (`NEXT` holds every rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from staal.runtime.backoff import Backoff
from staal.runtime.clock import Clock
from staal.worker.errors import WorkerError

# How long a service keeps an idempotency key (Stripe: 24 hours); a keyed
# request in doubt for longer could be performed twice if sent again.
RESEND_WINDOW_MS = 24 * 3_600_000
# The waits between attempts: none, then 0.2 s doubling to 2 s, so a request
# held a few seconds at the service is answered soon after it is done.
FIRST_WAIT_S = 0.2
MAX_WAIT_S = 2.0

Sleep = Callable[[float], None]
T = TypeVar("T")


class InDoubt(WorkerError):
    """An action may or may not have happened (the answer was lost)."""

    kind = "in_doubt"

    def __init__(self, message: str, resendable: bool = True) -> None:
        super().__init__(message)
        # Whether sending it again under its key may settle it.
        self.resendable = resendable


class Attempted(Enum):
    LOST = "may have happened; sending again may settle it"
    STUCK = "may have happened; sending again cannot settle it"
    NOT_SENT = "did not happen (no connection); another attempt may get through"
    THROTTLED = "did not happen: the service asks for it later (429)"
    REFUSED = "did not happen; another attempt would be refused the same (401, 403, a bad URL)"


class NotSent(WorkerError):
    """This attempt did not happen: it never left, or the service refused
    it before it looked at the key (401, 403, 429)."""

    kind = "not_sent"

    def __init__(self, message: str, attempted: Attempted = Attempted.NOT_SENT) -> None:
        super().__init__(message)
        self.attempted = attempted


class Step(Enum):
    AGAIN = "send it again after the backoff, if the bound allows"
    FAIL = "the action failed: nothing happened"
    STOP = "in doubt: the run waits for an operator"


# (an earlier attempt may have happened, what this one did) -> what follows.
NEXT: dict[tuple[bool, Attempted], Step] = {
    (False, Attempted.LOST): Step.AGAIN,
    (True, Attempted.LOST): Step.AGAIN,
    (False, Attempted.STUCK): Step.STOP,
    (True, Attempted.STUCK): Step.STOP,
    (False, Attempted.NOT_SENT): Step.FAIL,
    (True, Attempted.NOT_SENT): Step.AGAIN,
    (False, Attempted.THROTTLED): Step.AGAIN,
    (True, Attempted.THROTTLED): Step.AGAIN,
    (False, Attempted.REFUSED): Step.FAIL,
    (True, Attempted.REFUSED): Step.STOP,
}


@dataclass(frozen=True)
class ResendBound:
    """When no further attempt may start (on the run's clock), and why."""

    until_ms: int
    why: str


def resend_bound(now_ms: int, key_since_ms: int, deadline_at_ms: int | None,
                 deadline_ms: int | None, wait_ms: int) -> ResendBound:
    """The earliest of the key's window, the run's deadline and, without a
    deadline, `wait_ms` (the run's max_wait) from now."""
    bounds = [ResendBound(key_since_ms + RESEND_WINDOW_MS,
                          "the idempotency key's 24-hour window closed")]
    if deadline_at_ms is not None:
        bounds.append(ResendBound(deadline_at_ms, f"the run's deadline ({deadline_ms} ms from "
                                                  "its start) passed"))
    else:
        bounds.append(ResendBound(now_ms + wait_ms, f"the run's max_wait ({wait_ms / 1000:g} s) "
                                                    "of sending it again passed"))
    return min(bounds, key=lambda bound: bound.until_ms)


def send_keyed(attempt: Callable[[], T], doubt: str | None, bound: ResendBound,
               clock: Clock, sleep: Sleep) -> T:
    """`attempt` until an answer settles it: what it returned; its NotSent,
    raised again, if nothing happened; or InDoubt (not resendable) if it may
    have happened and cannot be settled. `doubt` says why an attempt before
    the run stopped may have happened; None if none was sent."""
    backoff = Backoff(first=FIRST_WAIT_S, cap=MAX_WAIT_S, quiet=math.inf)
    sent = 0
    while True:
        sent += 1
        try:
            return attempt()
        except InDoubt as exc:
            what = Attempted.LOST if exc.resendable else Attempted.STUCK
            reason = str(exc)
        except NotSent as exc:
            what, reason, unsent = exc.attempted, str(exc), exc
        step = NEXT[(doubt is not None, what)]
        if what in (Attempted.LOST, Attempted.STUCK):
            doubt = reason
        if step is Step.FAIL:
            raise unsent
        if step is Step.STOP:
            raise InDoubt(_story(doubt, reason, "sending it again cannot settle it"), False)
        wait = backoff.strike(clock.now_ms() / 1000)
        if clock.now_ms() + wait * 1000 >= bound.until_ms:
            if doubt is None:
                raise unsent  # throttled to the end: nothing happened
            times = "once" if sent == 1 else f"{sent} times"
            raise InDoubt(_story(doubt, reason, f"sent {times}; no further attempt may start: "
                                                f"{bound.why}"), False)
        sleep(wait)


def _story(doubt: str | None, last: str, why: str) -> str:
    told = doubt or last
    if last != told:
        told += f"; then {last}"
    return f"{told} ({why})"
