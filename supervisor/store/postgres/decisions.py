"""A reserve's decision on the PostgreSQL store, per key (issue 27): which
keys it locks, the time it stamps, and what it decides on, read by indexed
queries in its own transaction.

A reserve locks only the keys its decision reads: its tool's quota, its
caller's rate, its caller's quota on the tool, its once key (transaction
advisory locks, taken in one order so two reserves never deadlock). Calls
of other tools and callers take other keys and never wait for it. Once a
key is locked, every run that counts in it was committed before (a reserve
of that key commits before it lets the key go), so reading the window
after the lock sees exactly what the decision must count: quotas are exact
across instances. The once key's holder is the `staal_once` row (its
primary key: one holder), read after its key's lock.

Time, per key: a reserve is stamped with the latest of the instance's clock,
the instance's own last stamp, and the last reserve of its tool (and of
its caller), read after its locks; so the reserves a decision orders never
go backwards in time, whatever the instances' clocks (seed 000 section 6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from staal.manifest.model import QuotaConfig
from staal.supervisor.store.entries import Admission, OnceRequest, RunEntry
from staal.supervisor.store.postgres.events import entries_where
from staal.supervisor.store.postgres.schema import key_lock
from staal.supervisor.store.state import LedgerState

if TYPE_CHECKING:
    from psycopg import Cursor

# The last reserve of a tool, and of a caller, each an index's last row.
LATEST = ("SELECT greatest(0, (SELECT max(reserved_ms) FROM staal_runs WHERE tool = %(tool)s), "
          "(SELECT max(reserved_ms) FROM staal_runs WHERE caller = %(caller)s))")


def decision_keys(tool: str, quota: QuotaConfig | None, once: OnceRequest | None,
                  admission: Admission | None) -> list[str]:
    """The keys a reserve decides on, in the one order every reserve locks them."""
    keys = []
    if quota is not None:
        keys.append(f"quota:{tool}")
    if admission is not None and admission.rate is not None:
        keys.append(f"rate:{admission.caller}")
    if admission is not None and admission.quota is not None:
        keys.append(f"caller:{admission.caller}:{tool}")
    if once is not None:
        keys.append(f"once:{tool}:{once.key}")
    return sorted(keys)


def lock_keys(cur: Cursor[Any], keys: list[str]) -> None:
    """Lock `keys` until the transaction ends, in order, in one statement."""
    if keys:
        params = {f"k{i}": key for i, key in enumerate(keys)}
        cur.execute("SELECT " + ", ".join(key_lock(name) for name in params), params)


def latest(cur: Cursor[Any], tool: str, caller: str | None) -> int:
    """The time of the last reserve of `tool` and of `caller` (0: none)."""
    cur.execute(LATEST, {"tool": tool, "caller": caller})
    row = cur.fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def once_holder(cur: Cursor[Any], tool: str, key: str) -> RunEntry | None:
    """The run `staal_once` names for the key (it may no longer hold it:
    `RunEntry.holds_key` says at a time)."""
    found = entries_where(cur, "r.run = (SELECT run FROM staal_once WHERE tool = %(tool)s "
                               "AND key = %(key)s)", {"tool": tool, "key": key})
    return found[0] if found else None


def window(cur: Cursor[Any], tool: str, quota: QuotaConfig | None,
           admission: Admission | None, now: int) -> LedgerState:
    """A state of the runs that count in the windows of the tool's quota and
    the caller's rate and quota at `now`: what `quota_refusal` and
    `quota_use` read, and no more."""
    clauses: list[str] = []
    params: dict[str, object] = {"tool": tool,
                                 "caller": admission.caller if admission else None}
    if quota is not None:
        clauses.append("r.tool = %(tool)s AND r.reserved_ms >= %(tool_from)s")
        params["tool_from"] = now - quota.window.ms
    if admission is not None and admission.rate is not None:
        clauses.append("r.caller = %(caller)s AND r.reserved_ms >= %(rate_from)s")
        params["rate_from"] = now - admission.rate.window.ms
    if admission is not None and admission.quota is not None:
        clauses.append("r.caller = %(caller)s AND r.tool = %(tool)s "
                       "AND r.reserved_ms >= %(caller_from)s")
        params["caller_from"] = now - admission.quota.window.ms
    if not clauses:
        return LedgerState()
    where = " OR ".join(f"({clause})" for clause in clauses)
    return LedgerState.holding(entries_where(cur, where, params, "r.reserved_ms, r.seq"))
