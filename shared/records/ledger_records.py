"""Ledger events (seed 000 section 6): the ledger is the authority on which
runs exist and what they hold. Each run has exactly one reserve and at most
one settle or release, and a settled run at most one forget."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from staal.money import Money
from staal.records.outcomes import Outcome, check_one_per_currency
from staal.records.record import Count, Family, Record, RunId, Sha256, TimeMs


@dataclass(frozen=True, slots=True)
class OnceHold:
    """The `once` key a run holds, and the hash of the arguments it ran with,
    so a repeated key with different arguments is recognised."""

    key: Sha256
    args: Sha256
    # How long the key is kept after the run ends; None: for ever.
    keep_ms: Count | None = None


@dataclass(frozen=True, slots=True)
class Reserve(Record):
    TYPE: ClassVar[str] = "reserve"
    run: RunId
    tool: str
    time: TimeMs
    calls: Count
    # The run's worst-case spend, one amount per currency.
    money: tuple[Money, ...] = field(default_factory=tuple)
    once: OnceHold | None = None
    # Who called (issue 14): the SHA-256 of the caller's identity, never the
    # identity; its caller profile's name; the tool's grant set the run runs
    # with (None: the tool's own grants). All None for the local client.
    caller: Sha256 | None = None
    profile: str | None = None
    grants: str | None = None

    def __post_init__(self) -> None:
        check_one_per_currency(self.money, "money")


@dataclass(frozen=True, slots=True)
class Settle(Record):
    TYPE: ClassVar[str] = "settle"
    run: RunId
    time: TimeMs
    outcome: Outcome
    # What the run's broker actually spent, one amount per currency.
    charged: tuple[Money, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_one_per_currency(self.charged, "charged")


@dataclass(frozen=True, slots=True)
class Release(Record):
    """A reservation whose run never started."""

    TYPE: ClassVar[str] = "release"
    run: RunId
    time: TimeMs


@dataclass(frozen=True, slots=True)
class Forget(Record):
    """An operator released an ended run's once key (`staal-supervisor
    forget`): the next identical call starts a new run. The run stays
    settled, and what it spent still counts against its quota."""

    TYPE: ClassVar[str] = "forget"
    run: RunId
    time: TimeMs


LEDGER = Family(name="ledger", tag="event", version=1,
                types=(Reserve, Settle, Release, Forget))
