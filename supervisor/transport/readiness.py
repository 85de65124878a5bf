"""Whether this instance should be sent calls (issue 24 item 5), as a
state machine with its transitions as data; a load balancer reads it at
`GET /ready` (protocol/http/readiness.py).

Ready only while serving: not while starting, not while draining
(SIGTERM: calls in flight are answered, nothing new is taken; in both the
socket answers on its own, not_ready.py), not once fenced (another process took this instance's identity
in the shared store). On PostgreSQL, also not while the store is out of
reach: the lease's last renewal failed, so the lease may be running out
and every new call would fail closed anyway; the next renewal that
succeeds makes it ready again. The answer is read from this state, never
from the store, so a flood of checks costs the database nothing.
"""

from __future__ import annotations

import enum

from staal.runtime.transitions import advance
from staal.supervisor.telemetry.log import Log


class Readiness(enum.Enum):
    STARTING = "starting"
    SERVING = "serving"
    STORE_UNREACHABLE = "store_unreachable"
    DRAINING = "draining"
    FENCED = "fenced"


S = Readiness
# "renewed" and "store_failed": a renewal of the lease and its result;
# "fenced": a renewal found the identity another process's; "stopping":
# SIGTERM or the transport's end. Draining and fenced are for good. The
# lease is renewed while the instance starts too (recovery at start may
# outlast it: supervisor/recovery/lease_keeper.py), and a starting instance
# stays not ready whatever its renewals say: the keeper tells a failed last
# renewal when it tells "started". One that finds the identity another
# process's fences it for good, started or not.
TRANSITIONS = {
    (S.STARTING, "started"): S.SERVING,
    (S.STARTING, "stopping"): S.DRAINING,
    **{(S.STARTING, e): S.STARTING for e in ("renewed", "store_failed")},
    (S.STARTING, "fenced"): S.FENCED,
    (S.FENCED, "started"): S.FENCED,
    **{(s, "renewed"): S.SERVING for s in (S.SERVING, S.STORE_UNREACHABLE)},
    **{(s, "store_failed"): S.STORE_UNREACHABLE for s in (S.SERVING, S.STORE_UNREACHABLE)},
    **{(s, "fenced"): S.FENCED for s in (S.SERVING, S.STORE_UNREACHABLE, S.DRAINING)},
    **{(s, "stopping"): S.DRAINING for s in (S.SERVING, S.STORE_UNREACHABLE, S.DRAINING)},
    **{(S.DRAINING, e): S.DRAINING for e in ("renewed", "store_failed")},
    **{(S.FENCED, e): S.FENCED for e in ("renewed", "store_failed", "stopping", "fenced")},
}


class ReadyState:
    """This instance's readiness; each change is logged (`readiness`), so an
    operator sees why a balancer took the instance out."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.state = Readiness.STARTING

    @property
    def ready(self) -> bool:
        return self.state is Readiness.SERVING

    def note(self, event: str) -> Readiness:
        before = self.state
        self.state = advance(TRANSITIONS, before, event)
        if self.state is not before:
            unplanned = self.state is Readiness.STORE_UNREACHABLE
            self.log("readiness", level="warning" if unplanned else "info",
                     state=self.state.value, ready=self.ready)
        return self.state
