"""What the console shows, read as `status` reads it: the ledger and the
journals, without a lock and without writing anything.

The unfinished runs' states, the in-doubt wording, the resolve command and
the quota totals are `status`'s own (supervisor/views/status.py); this module adds
what a page needs beyond them: every run the ledger still holds, searchable,
and each tool's use spread over its window for a chart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from staal.manifest.model import Manifest
from staal.supervisor.errors import SupervisorError
from staal.supervisor.store.choice import read_state
from staal.supervisor.store.entries import RunEntry
from staal.supervisor.store.state import LedgerState
from staal.supervisor.views.status import collect, in_doubt, ledger_now_ms
from staal.supervisor.views.status_report import QuotaStatus, UnfinishedRun

# Runs listed on the overview, newest first: enough to find a recent one by
# eye, few enough that the page stays quick on a ledger of a busy month.
RUNS_SHOWN = 200
BUCKETS = 12
QUERY_LIMIT = 200


class BadQuery(SupervisorError, ValueError):
    """A search the console refuses, with the reason shown to the operator."""

    kind = "bad_query"


@dataclass(frozen=True)
class RunRow:
    run: str
    tool: str
    state: str
    reserved_ms: int
    ended_ms: int | None


@dataclass(frozen=True)
class WaitingRun:
    run: str
    tool: str
    in_doubt: str
    resolve: str


@dataclass(frozen=True)
class QuotaChart:
    """A tool's calls in its window, in BUCKETS equal spans ending at now
    (oldest first); `calls` is status's total, which the buckets add up to."""

    tool: str
    window_ms: int
    now_ms: int
    calls: int
    calls_limit: int | None
    buckets: tuple[int, ...]
    money: str | None


@dataclass(frozen=True)
class Overview:
    running: bool
    pid: int | None
    journals: Path
    waiting: tuple[WaitingRun, ...]
    quotas: tuple[QuotaChart, ...]
    runs: tuple[RunRow, ...]
    matched: int
    query: str
    now_ms: int


def check_query(query: str) -> str:
    query = query.strip()
    if len(query) > QUERY_LIMIT:
        raise BadQuery(f"a search is at most {QUERY_LIMIT} characters; this one has {len(query)}")
    if any(ord(c) < 32 for c in query):
        raise BadQuery("a search holds no control characters")
    return query


def overview(manifest: Manifest, query: str = "") -> Overview:
    """The overview page's data; `query` (a run id, tool or state, or part
    of one, any case) narrows the run list."""
    query = check_query(query)
    report = collect(manifest)
    state = read_state(manifest.server)
    unfinished = {run.run: run for run in report.runs}
    waiting = tuple(WaitingRun(run.run, run.tool, in_doubt(run.doubt), run.doubt.resolve)
                    for run in report.runs if run.doubt is not None)
    rows = [_row(entry, unfinished) for entry in state.runs()]
    rows.sort(key=lambda row: (row.reserved_ms, row.run), reverse=True)
    needle = query.lower()
    matched = [row for row in rows if not needle or needle in
               f"{row.run}\n{row.tool}\n{row.state}".lower()]
    now = ledger_now_ms(state)
    quotas = tuple(_chart(state, quota, now) for quota in report.quotas)
    server = report.server
    return Overview(server.running, server.pid, manifest.server.journals, waiting, quotas,
                    tuple(matched[:RUNS_SHOWN]), len(matched), query, now)


def find_run(manifest: Manifest, run_id: str) -> RunRow | None:
    """The ledger's run `run_id`, with status's state if it is unfinished."""
    state = read_state(manifest.server)
    entry = state.run(run_id)
    if entry is None:
        return None
    unfinished = {} if not entry.unsettled else {
        run.run: run for run in collect(manifest).runs}
    return _row(entry, unfinished)


def _row(entry: RunEntry, unfinished: Mapping[str, UnfinishedRun]) -> RunRow:
    state: str
    if entry.state == "settled":
        state = entry.outcome or "settled"
    elif entry.state == "released":
        state = "released: never started"
    else:
        run = unfinished.get(entry.run)
        state = "in_progress" if run is None else run.state
    return RunRow(entry.run, entry.tool, state, entry.reserved_ms, entry.ended_ms)


def _chart(state: LedgerState, quota: QuotaStatus, now: int) -> QuotaChart:
    window = quota.window_ms
    span = max(1, -(-window // BUCKETS))  # ceiling: the last bucket ends at now
    buckets = [0] * BUCKETS
    for entry in state.in_window(quota.tool, window, now):
        index = BUCKETS - 1 - min(BUCKETS - 1, (now - entry.reserved_ms) // span)
        buckets[index] += entry.calls_used()
    money = None
    if quota.money is not None:
        money = (f"money held {quota.money.held}, spent {quota.money.spent}, "
                 f"limit {quota.money.limit}")
    return QuotaChart(quota.tool, window, now, quota.calls, quota.calls_limit,
                      tuple(buckets), money)
