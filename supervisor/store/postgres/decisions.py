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
across instances. What it reads of a window is its sums (`SqlWindows`: one
aggregate a key over each run's `calls_used` and `money_used`, which the
statements writing its reserve and its end keep), not its runs: only a
refusal walks them, to say when it frees. The once key's holder is the
`staal_once` row (its primary key: one holder), read after its key's lock.

Time, per key: a reserve is stamped with the latest of the instance's clock,
the instance's own last stamp, and the last reserve of its tool (and of
its caller), read after its locks; so the reserves a decision orders never
go backwards in time, whatever the instances' clocks (seed 000 section 6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from staal.manifest.model import QuotaConfig
from staal.money import Money
from staal.records.ledger_records import Release, Reserve, Settle
from staal.supervisor.store.entries import (
    Admission,
    OnceRequest,
    QuotaKind,
    RunEntry,
    Use,
    WindowKey,
    WindowSums,
)
from staal.supervisor.store.postgres.connection import one_row
from staal.supervisor.store.postgres.events import entries_where
from staal.supervisor.store.postgres.schema import key_lock

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


def latest_of(entry: RunEntry) -> int:
    """The latest time among a run's events."""
    return max(entry.reserved_ms, entry.ended_ms or 0, entry.forgotten_ms or 0)


def once_holder(cur: Cursor[Any], tool: str, key: str) -> RunEntry | None:
    """The run `staal_once` names for the key (it may no longer hold it:
    `RunEntry.holds_key` says at a time)."""
    found = entries_where(cur, "r.run = (SELECT run FROM staal_once WHERE tool = %(tool)s "
                               "AND key = %(key)s)", {"tool": tool, "key": key})
    return found[0] if found else None


# Each window key's runs, by its index: a tool's (`staal_runs_tool_time`), a
# caller's (`staal_runs_caller_time`), a caller's of one tool (`..._caller_tool_time`).
KEY_RUNS = {1: "tool = %(key)s", 2: "caller = %(key)s",
            3: "caller = %(key)s AND tool = %(tool)s"}
# A window's sums for one quota: one aggregate over its runs' derived columns
# (each run's calls and money used, kept by the statements that write its
# reserve and its end: supervisor/store/postgres/ledger_sql.py), not its events.
SUMS = ("SELECT coalesce(sum(calls_used), 0), coalesce(sum(m) FILTER (WHERE NOT ended), 0), "
        "coalesce(sum(m) FILTER (WHERE ended), 0), count(*) FILTER (WHERE NOT ended), "
        "min(reserved_ms) FILTER (WHERE calls_used > 0), min(reserved_ms) FILTER (WHERE m > 0) "
        "FROM (SELECT calls_used, ended, reserved_ms, "
        "coalesce((money_used->>%(currency)s)::numeric, 0) AS m FROM staal_runs "
        "WHERE {key} AND reserved_ms >= %(from)s) AS w")
USES = ("SELECT reserved_ms, {amount} FROM staal_runs WHERE {key} AND reserved_ms >= %(from)s "
        "ORDER BY reserved_ms, seq")


class SqlWindows:
    """The windows a decision reads (`entries.Windows`), by query in the
    transaction of `cur`: its sums one aggregate statement per key, and its
    runs' uses (two numbers a run, oldest first) only for a refusal."""

    def __init__(self, cur: Cursor[Any]) -> None:
        self._cur = cur

    def sums(self, key: WindowKey, quota: QuotaConfig, now_ms: int) -> WindowSums:
        currency = quota.money.currency if quota.money is not None else None
        sql, params = _keyed(SUMS, key, quota, now_ms)
        self._cur.execute(sql, {**params, "currency": currency})
        calls, held, charged, unsettled, calls_from, money_from = one_row(self._cur)
        return WindowSums(int(calls), int(held), int(charged), int(unsettled),
                          _ms(calls_from), _ms(money_from))

    def uses(self, key: WindowKey, quota: QuotaConfig, now_ms: int,
             which: QuotaKind) -> list[Use]:
        amount = "calls_used" if which == "calls" else \
            "coalesce((money_used->>%(currency)s)::numeric, 0)"
        currency = quota.money.currency if quota.money is not None else None
        sql, params = _keyed(USES.replace("{amount}", amount), key, quota, now_ms)
        self._cur.execute(sql, {**params, "currency": currency})
        return [(int(ms), int(used)) for ms, used in self._cur.fetchall()]


def _keyed(sql: str, key: WindowKey, quota: QuotaConfig,
           now_ms: int) -> tuple[str, dict[str, object]]:
    """`sql` over `key`'s runs in `quota`'s window at `now_ms`."""
    parts = (key,) if isinstance(key, str) else key
    params: dict[str, object] = {"key": parts[0] if len(parts) == 1 else parts[1],
                                 "tool": parts[-1], "from": now_ms - quota.window.ms}
    return sql.replace("{key}", KEY_RUNS[len(parts)]), params


def _ms(value: Any) -> int | None:
    return None if value is None else int(value)


def money_map(event: Reserve | Settle | Release) -> dict[str, int]:
    """What a run counts of each currency, in minor units, once `event` is
    written, as its `money_used` column keeps it: a reserve's worst case, a
    settle's charges, a release's nothing (`RunEntry.money_used`)."""
    amounts: tuple[Money, ...] = () if isinstance(event, Release) else \
        event.money if isinstance(event, Reserve) else event.charged
    used: dict[str, int] = {}
    for amount in amounts:
        used[amount.currency] = used.get(amount.currency, 0) + amount.minor
    return used
