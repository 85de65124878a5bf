"""The status report as typed records (`staal-supervisor status`, the
console's overview): what `status.collect` gathers, and `to_json`, the
`status --json` form scripts read. Each `to_json` writes its keys in the
order, and leaves out the keys, that form always has; a field that is None
is written as null only where the form says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from staal.records.record import Json

WAITING = "waiting_for_operator"


@dataclass(frozen=True, slots=True)
class ServerStatus:
    running: bool
    pid: int | None
    journals: str
    # Where the ledger is (never the DSN).
    store: str

    def to_json(self) -> dict[str, Json]:
        return {"running": self.running, "pid": self.pid, "journals": self.journals,
                "store": self.store}


@dataclass(frozen=True, slots=True)
class Doubt:
    """The op an unfinished run waits at, and how to answer it. `op` and
    `message` are None when only the waiting record says it waits."""

    op: int | None
    message: str | None
    resolve: str
    # Another instance's run: when its waiting record was written, and by whom.
    since: str | None = None
    recorded_by: str | None = None


@dataclass(frozen=True, slots=True)
class UnfinishedRun:
    """A run the ledger holds unsettled. This instance's has its `journal`
    (and a `problem` if it could not be read); another's has its `owner`."""

    run: str
    tool: str
    reserved: str | None
    state: str
    journal: str | None = None
    problem: str | None = None
    owner: str | None = None
    # Set when `state` is waiting_for_operator.
    doubt: Doubt | None = None

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"run": self.run, "tool": self.tool, "reserved": self.reserved}
        if self.owner is None:
            out["journal"] = self.journal
            if self.problem is not None:
                out["problem"] = self.problem
            out["state"] = self.state
        else:
            out.update(state=self.state, owner=self.owner)
        if self.doubt is not None:
            out.update(op=self.doubt.op, message=self.doubt.message, resolve=self.doubt.resolve)
            if self.owner is not None:
                out.update(waiting_since=self.doubt.since, recorded_by=self.doubt.recorded_by)
        return out


@dataclass(frozen=True, slots=True)
class MoneyUse:
    held: str
    spent: str
    limit: str
    frees_at: str | None


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    """A quota's use over its window ending now (a tool's, or a caller's own)."""

    tool: str
    window_ms: int
    calls: int
    calls_limit: int | None
    calls_frees_at: str | None
    unsettled_runs: int
    money: MoneyUse | None = None

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "tool": self.tool, "window_ms": self.window_ms, "calls": self.calls,
            "calls_limit": self.calls_limit, "calls_frees_at": self.calls_frees_at,
            "unsettled_runs": self.unsettled_runs}
        if self.money is not None:
            out.update(money_held=self.money.held, money_spent=self.money.spent,
                       money_limit=self.money.limit, money_frees_at=self.money.frees_at)
        return out


@dataclass(frozen=True, slots=True)
class RateStatus:
    calls: int
    calls_limit: int | None
    window_ms: int
    calls_frees_at: str | None

    def to_json(self) -> dict[str, Json]:
        return {"calls": self.calls, "calls_limit": self.calls_limit,
                "window_ms": self.window_ms, "calls_frees_at": self.calls_frees_at}


@dataclass(frozen=True, slots=True)
class CallerStatus:
    """An authenticated caller, by the SHA-256 of its identity: its profile
    as of its latest run, its runs, and (when the profile is the manifest's)
    its rate and quotas."""

    caller: str
    runs: int
    unsettled_runs: int
    profile: str | None
    rate: RateStatus | None = None
    # None: its profile is not in the manifest, so it has no quotas to show.
    quotas: tuple[QuotaStatus, ...] | None = None

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"caller": self.caller, "runs": self.runs,
                                "unsettled_runs": self.unsettled_runs, "profile": self.profile}
        if self.rate is not None:
            out["rate"] = self.rate.to_json()
        if self.quotas is not None:
            out["quotas"] = [quota.to_json() for quota in self.quotas]
        return out


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    """An instance of a shared store; its lease is live while it renews it."""

    instance: str
    this: bool
    fence: int
    started: str | None
    version: str
    lease_until: str | None
    lease: Literal["released", "live", "expired"]
    unsettled_runs: int

    def to_json(self) -> dict[str, Json]:
        return {"instance": self.instance, "this": self.this, "fence": self.fence,
                "started": self.started, "version": self.version,
                "lease_until": self.lease_until, "lease": self.lease,
                "unsettled_runs": self.unsettled_runs}


@dataclass(frozen=True, slots=True)
class ForgottenRun:
    """An ended run whose once key an operator released, still in the ledger."""

    run: str
    tool: str
    outcome: str | None
    ended: str | None
    forgotten: str | None

    def to_json(self) -> dict[str, Json]:
        return {"run": self.run, "tool": self.tool, "outcome": self.outcome,
                "ended": self.ended, "forgotten": self.forgotten}


@dataclass(frozen=True, slots=True)
class StatusReport:
    server: ServerStatus
    runs: tuple[UnfinishedRun, ...]
    quotas: tuple[QuotaStatus, ...]
    callers: tuple[CallerStatus, ...]
    forgotten: tuple[ForgottenRun, ...]
    # A shared store's instances; None on a file store.
    instances: tuple[InstanceStatus, ...] | None = None

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "server": self.server.to_json(), "runs": [run.to_json() for run in self.runs],
            "quotas": [quota.to_json() for quota in self.quotas],
            "callers": [caller.to_json() for caller in self.callers],
            "forgotten": [run.to_json() for run in self.forgotten]}
        if self.instances is not None:
            out["instances"] = [instance.to_json() for instance in self.instances]
        return out
