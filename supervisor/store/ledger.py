"""The ledger (seed 000 section 6): which runs exist and what they hold.

The server reaches it only through `Ledger`, so a PostgreSQL ledger can take
the place of the file one (DESIGN.md section 8; `ledger_postgres.py`). `FileLedger` is
the embedded implementation (`file_ledger.py`): `<journals>/server.ledger`, an `AppendLog` of
`LEDGER` events, read whole at open into a `LedgerState` (`quota.py`).

Every event is durable before the call that wrote it returns, and every
answer is given only once the events it was decided on are durable. Writers
share fsyncs (group commit): events are appended in the order they were
decided, and whichever waiting caller finds no flush under way writes all
that are pending with one fsync and wakes the rest.

Only one process may write the ledger: the caller holds `ServerLock` first.
`read_ledger` reads it beside a running server without locking or changing it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from staal.errors import LogDamaged, RecordError
from staal.manifest.model import QuotaConfig
from staal.money import Money
from staal.records.appendlog import read_log
from staal.records.ledger_records import LEDGER, Release, Reserve, Settle
from staal.records.outcomes import Outcome
from staal.runtime.clock import Clock
from staal.runtime.ids import new_run_id
from staal.supervisor.store.caller_runs import CallerRuns
from staal.supervisor.store.entries import (
    Admission,
    Compaction,
    Different,
    Existing,
    FilesKept,
    LedgerBug,
    OnceRequest,
    OverQuota,
    QuotaUse,
    Reserved,
    ReserveResult,
    RunEntry,
    Windows,
    once_request,
    window_refusal,
)
from staal.supervisor.store.group_commit import LedgerUnusable
from staal.supervisor.store.state import Event, LedgerState, admission_refusal

__all__ = [
    "LEDGER_FILE",
    "Admission",
    "Compaction",
    "Different",
    "Existing",
    "FilesKept",
    "Ledger",
    "LedgerBug",
    "LedgerState",
    "LedgerUnusable",
    "OnceRequest",
    "OverQuota",
    "QuotaUse",
    "ReserveResult",
    "Reserved",
    "RunEntry",
    "once_request",
    "read_ledger",
]

LEDGER_FILE = "server.ledger"

Warn = Callable[[str], None]
T = TypeVar("T")


class Ledger(Protocol):
    """The one interface the server uses; every write is durable on return."""

    def now_ms(self) -> int:
        """Ledger time: the later of the clock and the last event's time."""
        ...

    def reserve_call(self, tool: str, quota: QuotaConfig | None, calls: int,
                     money: tuple[Money, ...], once: OnceRequest | None,
                     admission: Admission | None = None) -> ReserveResult: ...

    def settle(self, run: str, outcome: Outcome, charged: tuple[Money, ...]) -> RunEntry: ...

    def release(self, run: str) -> RunEntry: ...

    def run(self, run_id: str) -> RunEntry | None: ...

    def once_holder(self, tool: str, key: str) -> RunEntry | None: ...

    def runs(self) -> tuple[RunEntry, ...]: ...

    def unsettled(self) -> tuple[RunEntry, ...]: ...

    def caller_runs(self, which: CallerRuns) -> tuple[RunEntry, ...]:
        """A page of one caller's runs, newest first (supervisor/store/caller_runs.py):
        on a shared store, read without reading the other runs."""
        ...

    def quota_use(self, tool: str, quota: QuotaConfig, now: int | None = None) -> QuotaUse: ...

    def over_quota(self, tool: str, quota: QuotaConfig | None, calls: int,
                   money: tuple[Money, ...], admission: Admission | None = None) -> OverQuota | None:
        """The quota a reservation would exceed as the ledger stands now, or
        None; it reserves nothing. `reserve_call` still decides: a reading
        that misses another instance's reserves only lets a call on to it."""
        ...

    def compact(self, files_kept: FilesKept, windows: Mapping[str, int]) -> Compaction: ...

    def mine(self) -> tuple[RunEntry, ...]:
        """The runs whose journals this server's journal directory holds, so
        its recovery at start resumes them: every run of a file ledger; on a
        shared store, the runs this instance reserved."""
        ...

    def mine_unsettled(self) -> tuple[RunEntry, ...]:
        """The unsettled runs of `mine`, as the store says now: on a shared
        store another instance may have taken some over since this one
        read them (a takeover changes a run's owner, not its events)."""
        ...

    def renew_lease(self, lease_ms: int) -> bool:
        """Extend this instance's lease by `lease_ms`; False once another
        process holds the instance's identity (supervisor/recovery/lease.py)."""
        ...

    def close(self) -> None: ...


def read_ledger(path: str | os.PathLike[str]) -> LedgerState:
    """The ledger at `path`, read without locking or changing anything (for
    `staal-supervisor status` beside a running server). A missing file is an
    empty ledger; a last line still being written is left out."""
    try:
        read = read_log(path, LEDGER.decode)
    except FileNotFoundError:
        return LedgerState()
    return build_state(read.records, os.fspath(path))


def build_state(records: Iterable[Event], name: str) -> LedgerState:
    """Apply every event in order; one that breaks an invariant is damage
    naming its line."""
    state = LedgerState()
    for line, event in enumerate(records, start=1):
        try:
            state.apply(event)
        except LedgerBug as exc:
            raise LogDamaged(name, line, exc.message) from None
    return state


def warn_on_stderr(message: str) -> None:
    print(f"staal-supervisor: warning: {message}", file=sys.stderr, flush=True)


class Stamper:
    """Ledger time (seed 000 section 6): the later of the clock and the last
    event's time, so no quota window is shortened and no event reordered
    when a clock steps back. A clock behind is reported once each time it
    falls behind. Both stores stamp through it."""

    def __init__(self, clock: Clock, warn: Warn, name: str) -> None:
        self._clock = clock
        self._warn = warn
        self._name = name
        self._behind = False

    def stamp(self, last: int) -> int:
        now = self._clock.now_ms()
        if now >= last:
            self._behind = False
            return now
        if not self._behind:
            self._behind = True
            self._warn(
                f"the clock ({now} ms since 1970) is {last - now} ms behind the ledger "
                f"{self._name}; events are stamped with the ledger's time until it catches up, "
                "so no quota window is shortened and no event reordered")
        return last


def decide(state: LedgerState, tool: str, quota: QuotaConfig | None, calls: int,
           money: tuple[Money, ...], once: OnceRequest | None, admission: Admission | None,
           now: int) -> Existing | Different | OverQuota | None:
    """What a reserve finds at `now`: the run already holding `once`'s key
    (with the same arguments or not), a quota it would exceed (the tool's,
    then the caller's own), or None: reserve a new run."""
    if once is not None:
        found = once_found(state.once_holder(tool, once.key, now), once)
        if found is not None:
            return found
    return quota_refusal(state, tool, quota, calls, money, admission, now)


def once_found(holder: RunEntry | None, once: OnceRequest) -> Existing | Different | None:
    """What a reserve with `once` finds in the key's holder (None: no run
    holds the key now)."""
    if holder is None:
        return None
    assert holder.once is not None
    return Existing(holder) if holder.once.args == once.args else Different(holder)


def quota_refusal(windows: Windows, tool: str, quota: QuotaConfig | None, calls: int,
                  money: tuple[Money, ...], admission: Admission | None,
                  now: int) -> OverQuota | None:
    """The quota a reservation at `now` would exceed (the tool's, then the
    caller's own), or None: the quota half of `decide`, which the call path
    also asks before it takes a worker (`Ledger.over_quota`). `windows` is a
    state (the file store's) or the PostgreSQL store's sums by query."""
    if quota is not None:
        over = window_refusal(windows, tool, quota, calls, tuple(money), now)
        if over is not None:
            return over
    if admission is not None:
        return admission_refusal(windows, tool, admission, calls, tuple(money), now)
    return None


def new_reserve(tool: str, now: int, calls: int, money: tuple[Money, ...],
                once: OnceRequest | None, admission: Admission | None) -> Reserve:
    """The reserve event of a new run."""
    return Reserve(run=new_run_id(), tool=tool, time=now, calls=calls, money=tuple(money),
                   once=once, **_recorded(admission))


def checked_encoding(event: Event) -> dict[str, Any]:
    """`event` encoded, checked as a restart would read it back."""
    encoded = LEDGER.encode(event)
    try:
        LEDGER.decode(encoded)
    except RecordError as exc:
        raise LedgerBug(f"a {event.TYPE} event the ledger could not read back: "
                        f"{exc.message}") from None
    return encoded


class EndsRuns:
    """A run's two ends, the same on every store: each store's `_end` stamps,
    checks and writes the event `make` builds at the time it stamps."""

    def settle(self, run: str, outcome: Outcome, charged: tuple[Money, ...]) -> RunEntry:
        """Record what the run actually charged and how it ended."""
        check_held(0, charged, "charged")
        return self._end(lambda now: Settle(run=run, time=now, outcome=outcome,
                                            charged=tuple(charged)))

    def release(self, run: str) -> RunEntry:
        """Give back the reservation of a run that never started."""
        return self._end(lambda now: Release(run=run, time=now))

    def _end(self, make: Callable[[int], Settle | Release]) -> RunEntry:
        raise NotImplementedError


def _recorded(admission: Admission | None) -> dict[str, str | None]:
    """What a reserve records of its caller: who (a hash), its profile, its grant set."""
    if admission is None:
        return {}
    return {"caller": admission.caller, "profile": admission.profile, "grants": admission.grants}


def check_held(calls: int, money: tuple[Money, ...], what: str) -> None:
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 0:
        raise LedgerBug(f"calls must be a whole number of at least 0, not {calls!r}")
    for amount in money:
        if not isinstance(amount, Money) or amount.minor < 0:
            raise LedgerBug(f"{what} must be amounts of at least zero, not {amount!r}")
