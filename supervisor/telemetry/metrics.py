"""Prometheus metrics (issue 17, item 2), served by `serve` on a listener of
their own (`server.metrics.listen`), never on the MCP endpoint.

What happens is counted as it happens, in the event loop: each call's
outcome (`Server.outcome_of`), each refusal for busy, quota or rate, each
worker's death (the pool), and what each worker timed (its actions and
fsyncs, which come back in its `ended` or `stopped` message, since a worker
serves one run and cannot be scraped). What is stored is read at each
scrape, from the live ledger: the runs waiting for an operator (an
unsettled run with a waiting record, as `status` decides) and each tool's
quota use (the ledger's own `quota_use`, which `status` shows), so both are
right from the first scrape after a restart.

This module is what the call path sees (no prometheus_client import: with
metrics off a server pays nothing for them); `metrics_http.py` serves them.

Labels are bounded by the manifest: tool names, capabilities, outcomes and
reasons from fixed lists; never a run id, a caller, an argument or a secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from staal.manifest.model import RUN_STATUS_TOOL, Manifest
from staal.protocol.mcp.results import CallOutcome, Done, Errored, Failed, Refused, RunStatus, Stopped
from staal.runtime.timings import ACTION_BUCKETS_S, FSYNC_BUCKETS_S, Histogram, TallyMismatch, Timings

OUTCOMES = ("done", "failed", "error", "waiting", "refused", "answered", "cancelled")
REASONS = ("busy", "quota", "rate")


class Observer(Protocol):
    """What the call path tells the metrics; `NO_METRICS` when they are off.
    `timed`: whether workers are asked for their timings."""

    timed: bool

    def call_answered(self, tool: str, outcome: CallOutcome | None) -> None: ...

    def refused(self, tool: str, reason: str) -> None: ...

    def worker_reported(self, timings: Timings | None) -> None: ...


class NoMetrics:
    """Metrics off (no `server.metrics`): every report is dropped at once."""

    timed = False

    def call_answered(self, tool: str, outcome: CallOutcome | None) -> None:
        pass

    def refused(self, tool: str, reason: str) -> None:
        pass

    def worker_reported(self, timings: Timings | None) -> None:
        pass


NO_METRICS = NoMetrics()


def outcome_label(outcome: CallOutcome | None) -> str:
    if outcome is None:
        return "cancelled"  # before anything was reserved
    return {Done: "done", Failed: "failed", Errored: "error", Stopped: "waiting",
            Refused: "refused", RunStatus: "answered"}[type(outcome)]


@dataclass
class Metrics:
    """The counts kept as things happen, in the event loop (metrics_http.py
    serves them, with what is stored)."""

    manifest: Manifest
    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    refusals: dict[tuple[str, str], int] = field(default_factory=dict)
    actions: dict[str, Histogram] = field(default_factory=dict)
    worker_fsync: Histogram = field(default_factory=lambda: Histogram(FSYNC_BUCKETS_S))
    timed: bool = True

    def __post_init__(self) -> None:
        # Every series exists from the start at 0, so a rate or an alert on
        # one needs no first event.
        tools = [tool.name for tool in self.manifest.tools]
        for tool in tools:
            self.calls.update({(tool, outcome): 0 for outcome in OUTCOMES if outcome != "answered"})
        self.calls[(RUN_STATUS_TOOL, "answered")] = 0
        for tool in tools:
            self.refusals.update({(tool, reason): 0 for reason in REASONS})
        caps = sorted({grant.cap for tool in self.manifest.tools for grant in tool.all_grants()})
        self.actions = {cap: Histogram(ACTION_BUCKETS_S) for cap in caps}

    def call_answered(self, tool: str, outcome: CallOutcome | None) -> None:
        label = outcome_label(outcome)
        self.calls[(tool, label)] = self.calls.get((tool, label), 0) + 1
        if isinstance(outcome, Refused) and outcome.kind == "busy":
            self.refused(tool, "busy")  # quota and rate are told by the ledger's decision

    def refused(self, tool: str, reason: str) -> None:
        self.refusals[(tool, reason)] = self.refusals.get((tool, reason), 0) + 1

    def worker_reported(self, timings: Timings | None) -> None:
        if timings is None:
            return
        try:
            for cap, tally in timings.actions.items():
                self.actions.setdefault(cap, Histogram(ACTION_BUCKETS_S)).add(tally)
            if timings.fsync is not None:
                self.worker_fsync.add(timings.fsync)
        except TallyMismatch:
            # One install writes both sides, so this cannot happen; if it
            # did, the run it came with has ended and must still be settled.
            pass
