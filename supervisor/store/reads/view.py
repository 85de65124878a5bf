"""The ledger as `staal-supervisor status` and the console read it (issue 27
item 1): the questions they ask, not the whole ledger.

`LedgerView` is the one interface both read through, beside the servers,
without a lock and without writing. On the file store it is `StateView`, the
ledger file read whole into a `LedgerState` and asked in memory (one process
owns that ledger; it was always read so). On PostgreSQL it is
`supervisor/store/postgres/view.py`'s: each question one query in one
snapshot, counts by aggregate, lists by index and limited, a run by its
key, so what a reader fetches does not grow with the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from staal.manifest.model import QuotaConfig
from staal.supervisor.store.entries import QuotaUse, RunEntry, WindowKey, WindowSums, window_use
from staal.supervisor.store.state import LedgerState

RELEASED = "released: never started"


@dataclass(frozen=True, slots=True)
class Instance:
    """One instance as the shared store knows it."""

    instance: str
    fence: int
    started_ms: int
    lease_until_ms: int | None
    version: str


@dataclass(frozen=True, slots=True)
class CallerCount:
    """An authenticated caller's runs in the ledger (by its identity's hash),
    and its profile as of its latest run."""

    caller: str
    profile: str | None
    runs: int
    unsettled: int


@dataclass(frozen=True, slots=True)
class EndedRuns:
    """The ended runs a search matches: how many, and the newest of them,
    newest first (by reserve time, then run id)."""

    matched: int
    newest: tuple[RunEntry, ...] = field(default_factory=tuple)


def ended_state(entry: RunEntry) -> str:
    """An ended run's state as a reader shows it and a search matches it:
    its outcome, or that it never started. (The PostgreSQL view's SQL says
    the same: `postgres/view.py`, `ENDED_STATE`.)"""
    if entry.state == "released":
        return RELEASED
    return entry.outcome or "settled"


def matches(needle: str, run: str, tool: str, state: str) -> bool:
    """Whether a search's `needle` (already lower case; empty: every run)
    is in a run's id, tool or state, in any case."""
    return not needle or needle in f"{run}\n{tool}\n{state}".lower()


class LedgerView(Protocol):
    """What a reader asks of a ledger, all in one snapshot."""

    def latest_reserve_ms(self) -> int:
        """The latest reserve's time (0: none)."""
        ...

    def run(self, run_id: str) -> RunEntry | None: ...

    def unsettled(self) -> tuple[RunEntry, ...]:
        """The unfinished runs, in the ledger's order."""
        ...

    def owners(self) -> Mapping[str, str]:
        """The owning instance of each unfinished run (empty on the file
        store, where this one server owns every run)."""
        ...

    def instances(self) -> tuple[Instance, ...]:
        """The instances sharing the store (none on the file store)."""
        ...

    def in_window(self, key: WindowKey, window_ms: int, now_ms: int) -> list[RunEntry]:
        """The runs of `key` (a tool, or a caller's key: `state.window_keys`)
        reserved at or after `now_ms - window_ms`, oldest first."""
        ...

    def sums(self, key: WindowKey, quota: QuotaConfig, now_ms: int) -> WindowSums:
        """What `key`'s window for `quota` at `now_ms` counts, summed
        (`entries.Windows`)."""
        ...

    def callers(self) -> tuple[CallerCount, ...]:
        """Each caller the ledger holds runs of, in the order of its first."""
        ...

    def forgotten(self) -> tuple[RunEntry, ...]:
        """The ended runs whose once key an operator forgot, in the ledger's order."""
        ...

    def ended_runs(self, needle: str, limit: int) -> EndedRuns:
        """The ended runs `matches` `needle` with their `ended_state`."""
        ...


def quota_use(view: LedgerView, key: WindowKey, quota: QuotaConfig, now_ms: int) -> QuotaUse:
    """`key`'s use of `quota` over its window ending at `now_ms`, from the
    window's sums, as the ledger's own `quota_use` reports it."""
    tool = key if isinstance(key, str) else key[-1]
    return window_use(view.sums(key, quota, now_ms), tool, quota, now_ms)


class StateView:
    """The file store's view: its ledger read whole, asked in memory."""

    def __init__(self, state: LedgerState) -> None:
        self.state = state

    def latest_reserve_ms(self) -> int:
        return max((e.reserved_ms for e in self.state.runs()), default=0)

    def run(self, run_id: str) -> RunEntry | None:
        return self.state.run(run_id)

    def unsettled(self) -> tuple[RunEntry, ...]:
        return self.state.unsettled()

    def owners(self) -> Mapping[str, str]:
        return {}

    def instances(self) -> tuple[Instance, ...]:
        return ()

    def in_window(self, key: WindowKey, window_ms: int, now_ms: int) -> list[RunEntry]:
        return self.state.in_window(key, window_ms, now_ms)

    def sums(self, key: WindowKey, quota: QuotaConfig, now_ms: int) -> WindowSums:
        return self.state.sums(key, quota, now_ms)

    def callers(self) -> tuple[CallerCount, ...]:
        counts: dict[str, CallerCount] = {}
        for entry in self.state.runs():
            if entry.caller is None:
                continue
            was = counts.get(entry.caller) or CallerCount(entry.caller, None, 0, 0)
            counts[entry.caller] = CallerCount(entry.caller, entry.profile, was.runs + 1,
                                               was.unsettled + entry.unsettled)
        return tuple(counts.values())

    def forgotten(self) -> tuple[RunEntry, ...]:
        return tuple(e for e in self.state.runs() if e.forgotten_ms is not None)

    def ended_runs(self, needle: str, limit: int) -> EndedRuns:
        found = [e for e in self.state.runs()
                 if not e.unsettled and matches(needle, e.run, e.tool, ended_state(e))]
        found.sort(key=lambda e: (e.reserved_ms, e.run), reverse=True)
        return EndedRuns(len(found), tuple(found[:limit]))
