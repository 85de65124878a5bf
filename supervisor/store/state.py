"""What the ledger holds, in memory (runs, their once keys and quota use),
and the answers it gives.

Pure state with no I/O (seed 000 section 6). `LedgerState.apply` is the one
place an event changes it, and it enforces the ledger's invariants: each run
has exactly one reserve, first, at most one settle or release after it and,
once settled with a once key, at most one forget (an operator's: the key is
released), and the ledger's time never goes backwards. The file ledger builds a state by
applying every event it reads, and checks each event it is about to write
the same way, so what is written is what a restart reads back.

Windows are closed: a reservation made at `r` counts in a window of `w` ms
ending at `now` while `now - w <= r`, and ages out at `r + w + 1`. A once
key held by a settled run is held while `now < end + keep`, unless an
operator forgot it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from staal.manifest.model import QuotaConfig
from staal.money import Money
from staal.records.ledger_records import LEDGER, Forget, Release, Reserve, Settle
from staal.supervisor.store.entries import (
    Admission,
    FilesKept,
    LedgerBug,
    OverQuota,
    QuotaKind,
    QuotaScope,
    QuotaUse,
    RunEntry,
    Use,
    WindowKey,
    Windows,
    WindowSums,
    window_refusal,
    window_use,
)


@dataclass
class LedgerState:
    """Every run the ledger holds, indexed for once lookups and windows."""

    last_ms: int = 0
    events: int = 0
    _runs: dict[str, RunEntry] = field(default_factory=dict)
    # Where each run's events came in the ledger: (reserve, end, forget) positions.
    _order: dict[str, tuple[int, int | None, int | None]] = field(default_factory=dict)
    # (tool, once key) -> the latest run reserved with that key.
    _keys: dict[tuple[str, str], str] = field(default_factory=dict)
    # Window key -> its runs' reserve times and ids, in ledger order (so
    # sorted). A tool's key is its name; a caller's `("caller", hash)`; a
    # caller's on one tool `("caller", hash, tool)`.
    _times: dict[WindowKey, list[int]] = field(default_factory=dict)
    _ids: dict[WindowKey, list[str]] = field(default_factory=dict)

    # -- changing it ------------------------------------------------------

    def apply(self, event: Event) -> RunEntry:
        """Apply one event, or raise `LedgerBug` (nothing changed) if it
        breaks an invariant."""
        self.check(event)
        if isinstance(event, Reserve):
            entry = entry_of(event)
            self._order[event.run] = (self.events, None, None)
            for key in window_keys(event.tool, event.caller):
                self._times.setdefault(key, []).append(event.time)
                self._ids.setdefault(key, []).append(event.run)
            if event.once is not None:
                self._keys[(event.tool, event.once.key)] = event.run
        elif isinstance(event, Forget):
            entry = replace(self._runs[event.run], forgotten_ms=event.time)
            self._order[event.run] = (*self._order[event.run][:2], self.events)
        else:
            entry = _ended(self._runs[event.run], event)
            self._order[event.run] = (self._order[event.run][0], self.events, None)
        self._runs[event.run] = entry
        self.last_ms = event.time
        self.events += 1
        return entry

    def check(self, event: Event) -> None:
        if event.time < self.last_ms:
            raise LedgerBug(
                f"event time {event.time} is before the ledger's last time {self.last_ms}: "
                "ledger time never goes backwards")
        entry = self._runs.get(event.run)
        name = event.TYPE
        if isinstance(event, Reserve):
            if entry is not None:
                raise LedgerBug(f"a second reserve for run {event.run}")
            return
        if entry is None:
            raise LedgerBug(f"a {name} for run {event.run}, which has no reserve")
        if isinstance(event, Forget):
            _check_forget(entry)
        elif entry.state != "unsettled":
            raise LedgerBug(
                f"a {name} for run {event.run}, which was already {entry.state}")

    @classmethod
    def holding(cls, entries: Iterable[RunEntry]) -> LedgerState:
        """A state of just these runs, for the quota answers (`sums`,
        `quota_use`): status reads a window's runs this way on a PostgreSQL
        store older than schema version 9, which keeps no sums. `entries`
        come in the ledger's order; a window's runs are put in reserve-time order."""
        state = cls()
        for entry in sorted(entries, key=lambda e: e.reserved_ms):
            state._runs[entry.run] = entry
            for key in window_keys(entry.tool, entry.caller):
                state._times.setdefault(key, []).append(entry.reserved_ms)
                state._ids.setdefault(key, []).append(entry.run)
            state.last_ms = max(state.last_ms, entry.reserved_ms)
        return state

    # -- reading it -------------------------------------------------------

    def run(self, run_id: str) -> RunEntry | None:
        return self._runs.get(run_id)

    def runs(self) -> tuple[RunEntry, ...]:
        """Every run, in the order of their reserves."""
        return tuple(self._runs.values())

    def unsettled(self) -> tuple[RunEntry, ...]:
        return tuple(e for e in self._runs.values() if e.state == "unsettled")

    def once_holder(self, tool: str, key: str, now_ms: int) -> RunEntry | None:
        """The run holding `tool`'s once `key` at `now_ms`, if one does."""
        run_id = self._keys.get((tool, key))
        entry = self._runs.get(run_id) if run_id is not None else None
        return entry if entry is not None and entry.holds_key(now_ms) else None

    def in_window(self, key: WindowKey, window_ms: int, now_ms: int) -> list[RunEntry]:
        """The runs of `key` (a tool's name, or a caller's key: `window_keys`)
        reserved at or after `now_ms - window_ms`, oldest first."""
        times = self._times.get(key, [])
        start = bisect.bisect_left(times, now_ms - window_ms)
        return [self._runs[r] for r in self._ids[key][start:]] if times else []

    def sums(self, key: WindowKey, quota: QuotaConfig, now_ms: int) -> WindowSums:
        """`key`'s window for `quota` at `now_ms`, summed (`Windows`)."""
        entries = self.in_window(key, quota.window.ms, now_ms)
        currency = quota.money.currency if quota.money is not None else None
        money = [(e, 0 if currency is None else e.money_used(currency)) for e in entries]
        return WindowSums(
            calls=sum(e.calls_used() for e in entries),
            held=sum(m for e, m in money if e.unsettled),
            charged=sum(m for e, m in money if not e.unsettled),
            unsettled=sum(1 for e in entries if e.unsettled),
            calls_from=next((e.reserved_ms for e in entries if e.calls_used() > 0), None),
            money_from=next((e.reserved_ms for e, m in money if m > 0), None))

    def uses(self, key: WindowKey, quota: QuotaConfig, now_ms: int,
             which: QuotaKind) -> list[Use]:
        """`key`'s window's uses of `which`, oldest first (`Windows`)."""
        entries = self.in_window(key, quota.window.ms, now_ms)
        if which == "calls" or quota.money is None:
            return [(e.reserved_ms, e.calls_used() if which == "calls" else 0) for e in entries]
        return [(e.reserved_ms, e.money_used(quota.money.currency)) for e in entries]

    def over_quota(self, key: WindowKey, quota: QuotaConfig, calls: int, money: tuple[Money, ...],
                   now_ms: int, scope: QuotaScope = "tool") -> OverQuota | None:
        """Why reserving `calls` and `money` now would exceed `quota` over
        the runs of `key`, or None (`window_refusal`, on this state)."""
        return window_refusal(self, key, quota, calls, money, now_ms, scope)

    def over_admission(self, tool: str, admission: Admission, calls: int,
                       money: tuple[Money, ...], now_ms: int) -> OverQuota | None:
        return admission_refusal(self, tool, admission, calls, money, now_ms)

    def quota_use(self, key: WindowKey, quota: QuotaConfig, now_ms: int) -> QuotaUse:
        tool = key if isinstance(key, str) else key[-1]
        return window_use(self.sums(key, quota, now_ms), tool, quota, now_ms)

    # -- compaction ---------------------------------------------------------

    def keeps(self, entry: RunEntry, files_kept: FilesKept, windows: Mapping[str, int],
              now_ms: int) -> bool:
        """Whether compaction keeps `entry` (seed 000 section 6): unsettled, its
        files still kept, reserved within its tool's window, or holding an
        unexpired once key. Released runs never started and hold nothing."""
        if entry.state == "released":
            return False
        if entry.state == "unsettled" or entry.holds_key(now_ms):
            return True
        window = windows.get(entry.tool)
        if window is not None and now_ms - window <= entry.reserved_ms:
            return True
        return files_kept(entry) if callable(files_kept) else entry.run in files_kept

    def events_of(self, run_ids: Iterable[str]) -> list[Event]:
        """Every event of these runs, in the order the ledger holds them (a
        forgotten run's forget too, so a compacted ledger never holds its
        key again)."""
        placed: list[tuple[int, Event]] = []
        for run_id in run_ids:
            entry = self._runs[run_id]
            reserve_at, end_at, forget_at = self._order[run_id]
            placed.append((reserve_at, _reserve_of(entry)))
            if end_at is not None:
                placed.append((end_at, _end_of(entry)))
            if forget_at is not None and entry.forgotten_ms is not None:
                placed.append((forget_at, Forget(run=run_id, time=entry.forgotten_ms)))
        placed.sort(key=lambda p: p[0])
        return [event for _, event in placed]


Event = Reserve | Settle | Release | Forget


def decode_event(data: object) -> Event:
    """A ledger event from its JSON form. LEDGER decodes only these types
    (a `RecordError` for anything else); its Family does not say so to the
    type checker."""
    event = LEDGER.decode(data)
    assert isinstance(event, Reserve | Settle | Release | Forget)
    return event


def entry_of(reserve: Reserve, end: Settle | Release | None = None,
             forget: Forget | None = None) -> RunEntry:
    """A run's entry made of its own events (a shared store reads a run's
    rows, not the whole ledger)."""
    entry = RunEntry(reserve.run, reserve.tool, reserve.time, reserve.calls, reserve.money,
                     reserve.once, caller=reserve.caller, profile=reserve.profile,
                     grants=reserve.grants)
    if end is not None:
        entry = _ended(entry, end)
    if forget is not None:
        entry = replace(entry, forgotten_ms=forget.time)
    return entry


def _check_forget(entry: RunEntry) -> None:
    """Only a settled run's once key can be forgotten, once: an unsettled
    run still acts on it, a released one never held it."""
    if entry.state != "settled":
        raise LedgerBug(f"a forget for run {entry.run}, which is {entry.state}, not settled")
    if entry.once is None:
        raise LedgerBug(f"a forget for run {entry.run}, which holds no once key")
    if entry.forgotten_ms is not None:
        raise LedgerBug(f"a second forget for run {entry.run}")


def _ended(entry: RunEntry, event: Settle | Release) -> RunEntry:
    if isinstance(event, Settle):
        return replace(entry, state="settled", ended_ms=event.time, outcome=event.outcome,
                       charged=event.charged)
    return replace(entry, state="released", ended_ms=event.time)


def _reserve_of(entry: RunEntry) -> Reserve:
    return Reserve(run=entry.run, tool=entry.tool, time=entry.reserved_ms, calls=entry.calls,
                   money=entry.money, once=entry.once, caller=entry.caller,
                   profile=entry.profile, grants=entry.grants)


def caller_key(caller: str, tool: str | None = None) -> WindowKey:
    """The window key of a caller's runs, or of its runs of one tool."""
    return ("caller", caller) if tool is None else ("caller", caller, tool)


def admission_refusal(windows: Windows, tool: str, admission: Admission, calls: int,
                      money: tuple[Money, ...], now_ms: int) -> OverQuota | None:
    """Why the caller's own limits refuse this reservation: its rate over
    all its calls, then its quota on this tool; or None."""
    if admission.rate is not None:
        refused = window_refusal(windows, caller_key(admission.caller), admission.rate, calls,
                                 (), now_ms, "rate")
        if refused is not None:
            return refused
    if admission.quota is not None:
        return window_refusal(windows, caller_key(admission.caller, tool), admission.quota,
                              calls, money, now_ms, "caller")
    return None


def window_keys(tool: str, caller: str | None) -> tuple[WindowKey, ...]:
    """Every window a run counts in: its tool's, and its caller's (all its
    calls, and its calls of that tool)."""
    if caller is None:
        return (tool,)
    return (tool, caller_key(caller), caller_key(caller, tool))


def _end_of(entry: RunEntry) -> Settle | Release:
    assert entry.ended_ms is not None
    if entry.state == "released":
        return Release(run=entry.run, time=entry.ended_ms)
    assert entry.outcome is not None
    return Settle(run=entry.run, time=entry.ended_ms, outcome=entry.outcome,
                  charged=entry.charged)
