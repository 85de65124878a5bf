"""What the ledger answers in (supervisor/store/state.py holds the state):
a run's entry, the results of a reserve, a quota's use and refusal, a call's
once identity and a caller's share of a reservation, and what compaction
kept. Values only: frozen, with no I/O."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from staal.manifest.model import QuotaConfig, Tool
from staal.money import Money
from staal.records.canonical import arguments_hash, canonical_json, once_key, sha256_hex
from staal.records.ledger_records import OnceHold
from staal.records.outcomes import Outcome
from staal.supervisor.errors import SupervisorError

RunState = Literal["unsettled", "settled", "released"]
QuotaKind = Literal["calls", "money"]
# Whose limit: the tool's own quota, the caller's quota on the tool, or the
# caller's rate over all its calls.
QuotaScope = Literal["tool", "caller", "rate"]


class LedgerBug(SupervisorError):
    """An event the ledger refuses to commit: a second reserve, settle or
    release for a run, or a settle or release for a run it does not hold.
    Writing it would break the ledger's invariants, so nothing is written."""

    kind = "bug"


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One run as the ledger knows it: its reserve and how it ended, if it has."""

    run: str
    tool: str
    reserved_ms: int
    calls: int
    money: tuple[Money, ...] = ()
    once: OnceHold | None = None
    state: RunState = "unsettled"
    ended_ms: int | None = None
    outcome: Outcome | None = None
    charged: tuple[Money, ...] = ()
    caller: str | None = None
    profile: str | None = None
    grants: str | None = None
    # When an operator released its once key (a forget event); None: never.
    forgotten_ms: int | None = None

    @property
    def unsettled(self) -> bool:
        return self.state == "unsettled"

    def holds_key(self, now_ms: int) -> bool:
        """Whether this run still holds its once key at `now_ms`: while it is
        unsettled, and after it settles for `keep` (None: for ever) unless
        an operator forgot it. A released run never started and holds nothing."""
        if self.once is None or self.state == "released" or self.forgotten_ms is not None:
            return False
        if self.state == "unsettled" or self.once.keep_ms is None:
            return True
        assert self.ended_ms is not None
        return now_ms < self.ended_ms + self.once.keep_ms

    def calls_used(self) -> int:
        """The calls this run counts against its tool's quota."""
        return 0 if self.state == "released" else self.calls

    def money_used(self, currency: str) -> int:
        """Minor units of `currency` this run counts: its worst case until it
        settles, then what it actually charged; nothing once released."""
        if self.state == "released":
            return 0
        amounts = self.charged if self.state == "settled" else self.money
        return sum(m.minor for m in amounts if m.currency == currency)


@dataclass(frozen=True, slots=True)
class OverQuota:
    """A reservation refused: `which` quota it would exceed, its `limit`, what
    the window already holds (`in_use`), what this call asked for (`needed`)
    and when enough ages out for it to fit (None: it never fits, because the
    call alone asks for more than the limit)."""

    which: QuotaKind
    limit: int | Money
    in_use: int | Money
    needed: int | Money
    frees_at_ms: int | None
    scope: QuotaScope = "tool"


@dataclass(frozen=True, slots=True)
class QuotaUse:
    """A tool's use of its quota over the window ending at `now_ms`, for status.

    `money_held` is what unsettled runs hold (their worst case), `money_charged`
    what settled runs spent, each in the quota's currency (None without a
    money limit). `*_frees_at_ms` is when the next bit of that use ages out.
    """

    tool: str
    window_ms: int
    now_ms: int
    calls: int
    calls_limit: int | None
    calls_frees_at_ms: int | None
    money_held: Money | None
    money_charged: Money | None
    money_limit: Money | None
    money_frees_at_ms: int | None
    unsettled: int

    @property
    def money(self) -> Money | None:
        if self.money_held is None or self.money_charged is None:
            return None
        return self.money_held + self.money_charged


@dataclass(frozen=True, slots=True)
class Reserved:
    """A new run, durable in the ledger: it may start."""

    run: str
    time: int
    entry: RunEntry


@dataclass(frozen=True, slots=True)
class Existing:
    """The call's once key is held by `entry`, with the same arguments:
    answer from that run; nothing new runs."""

    entry: RunEntry


@dataclass(frozen=True, slots=True)
class Different:
    """The call's once key is held by `entry`, with different arguments: a
    different operation pretending to be the same one; refused."""

    entry: RunEntry


@dataclass(frozen=True, slots=True)
class Compaction:
    """The runs compaction kept and the ones whose events it dropped."""

    kept: tuple[str, ...]
    dropped: tuple[str, ...]


# What a call's once identity is: the key, the arguments hash and how long
# the key is kept after the run ends (None: for ever); the shape the reserve
# event records.
OnceRequest = OnceHold


def once_request(tool: Tool, arguments: Mapping[str, Any],
                 caller: str | None = None) -> OnceRequest | None:
    """A call's once identity, from the arguments as the runtime read them
    (defaults filled in), or None for a tool without once. The key is the
    caller's own (`caller`: its identity's SHA-256): the same order from two
    callers is two operations; None (the local client) keys as version 1 did."""
    if tool.once is None:
        return None
    keep = tool.once.keep
    key = once_key(tool.name, arguments, tool.once.by)
    if caller is not None:
        key = sha256_hex(canonical_json([caller, key]))
    return OnceHold(key=key, args=arguments_hash(arguments),
                    keep_ms=None if keep is None else keep.ms)


@dataclass(frozen=True, slots=True)
class Admission:
    """A caller's share of a reservation (issue 14): who it is (the SHA-256
    of its identity), its profile and the grant set the run runs with, which
    the reserve records; its quota on the tool and its rate, which it must fit."""

    caller: str
    profile: str | None = None
    grants: str | None = None
    quota: QuotaConfig | None = None
    rate: QuotaConfig | None = None


ReserveResult = Reserved | Existing | Different | OverQuota
FilesKept = Collection[str] | Callable[[RunEntry], bool]


# -- quota decisions, on sums ---------------------------------------------------

# A window's key: a tool's name; a caller's `("caller", hash)`; a caller's on
# one tool `("caller", hash, tool)` (supervisor/store/state.py `window_keys`).
WindowKey = str | tuple[str, ...]
# One run's use in a window: its reserve time and what it counts (calls, or
# minor units of the quota's currency).
Use = tuple[int, int]


@dataclass(frozen=True, slots=True)
class WindowSums:
    """What a window's runs count against one quota, summed: calls; minor
    units of the quota's currency held by unsettled runs (their worst case)
    and counted by ended ones (a settle's charges, a release's nothing);
    unsettled runs; and the reserve time of the oldest run counting calls,
    and money (None: none does). A store computes them as it can (in memory,
    or one SQL aggregate); every decision is made of them by the code below."""

    calls: int
    held: int
    charged: int
    unsettled: int
    calls_from: int | None
    money_from: int | None


class Windows(Protocol):
    """Where quota decisions read windows: the sums of a key's window for a
    quota at `now_ms`, and, only to say when a refused call would fit, the
    window's uses oldest first (`which`: calls, or money in the quota's currency)."""

    def sums(self, key: WindowKey, quota: QuotaConfig, now_ms: int) -> WindowSums: ...

    def uses(self, key: WindowKey, quota: QuotaConfig, now_ms: int,
             which: QuotaKind) -> Iterable[Use]: ...


def window_refusal(windows: Windows, key: WindowKey, quota: QuotaConfig, calls: int,
                   money: tuple[Money, ...], now_ms: int,
                   scope: QuotaScope = "tool") -> OverQuota | None:
    """Why reserving `calls` and `money` now would exceed `quota` over the
    runs of `key`, or None. Read from the window's sums; its runs are walked
    only for a refusal, to say when it frees."""
    window = quota.window.ms
    sums = windows.sums(key, quota, now_ms)

    def walk(which: QuotaKind) -> Callable[[], Iterable[Use]]:
        return lambda: windows.uses(key, quota, now_ms, which)

    if quota.calls is not None:
        refused = refusal(sums.calls, walk("calls"), calls, quota.calls, window)
        if refused is not None:
            return OverQuota("calls", quota.calls, refused[0], calls, refused[1], scope)
    if quota.money is not None:
        currency = quota.money.currency
        need = sum(m.minor for m in money if m.currency == currency)
        refused = refusal(sums.held + sums.charged, walk("money"), need, quota.money.minor,
                          window)
        if refused is not None:
            return OverQuota("money", quota.money, Money.from_minor(refused[0], currency),
                             Money.from_minor(need, currency), refused[1], scope)
    return None


def window_use(sums: WindowSums, tool: str, quota: QuotaConfig, now_ms: int) -> QuotaUse:
    """A window's use of `quota` for status and metrics, from its sums."""
    window = quota.window.ms
    currency = quota.money.currency if quota.money is not None else None
    return QuotaUse(
        tool=tool, window_ms=window, now_ms=now_ms,
        calls=sums.calls, calls_limit=quota.calls,
        calls_frees_at_ms=None if sums.calls_from is None else sums.calls_from + window + 1,
        money_held=None if currency is None else Money.from_minor(sums.held, currency),
        money_charged=None if currency is None else Money.from_minor(sums.charged, currency),
        money_limit=quota.money,
        money_frees_at_ms=(None if currency is None or sums.money_from is None
                           else sums.money_from + window + 1),
        unsettled=sums.unsettled,
    )


def refusal(in_use: int, walk: Callable[[], Iterable[Use]], need: int, limit: int,
            window_ms: int) -> tuple[int, int | None] | None:
    """(in use, when it frees) if `need` more would pass `limit`, else None.

    `walk` gives the window's uses oldest first, asked only for a refusal:
    the oldest use ages out first, so walk it until enough has gone for
    `need` to fit."""
    excess = in_use + need - limit
    if excess <= 0:
        return None
    if need > limit:
        return in_use, None
    freed = 0
    for reserved_ms, amount in walk():
        freed += amount
        if freed >= excess:
            return in_use, reserved_ms + window_ms + 1
    return in_use, None  # only when the limit itself is negative
