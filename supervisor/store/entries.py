"""What the ledger answers in (supervisor/store/state.py holds the state):
a run's entry, the results of a reserve, a quota's use and refusal, a call's
once identity and a caller's share of a reservation, and what compaction
kept. Values only: frozen, with no I/O."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

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
