"""What the console shows, read as `status` reads it: the ledger and the
journals, without a lock and without writing anything.

The unfinished runs' states, the in-doubt wording, the resolve command and
the quota totals are `status`'s own (supervisor/views/status.py); this module adds
what a page needs beyond them: the runs the ledger still holds, searchable
(the newest RUNS_SHOWN listed, all counted), a run by its id, and each
tool's use spread over its window for a chart. All are asked of the
store's `LedgerView` (supervisor/store/reads/view.py), so on PostgreSQL a
page fetches what it shows, not the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from staal.manifest.model import Manifest
from staal.supervisor.errors import SupervisorError
from staal.supervisor.store.choice import read_ledger_view
from staal.supervisor.store.entries import RunEntry
from staal.supervisor.store.reads.view import LedgerView, ended_state, matches
from staal.supervisor.views.status import Beside, collect, in_doubt, ledger_now_ms
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
    """The overview page's data, in one snapshot of the ledger; `query` (a
    run id, tool or state, or part of one, any case) narrows the run list.
    The unfinished runs are status's; the ended ones the store finds, the
    newest RUNS_SHOWN of them and how many match."""
    query = check_query(query)
    needle = query.lower()
    with read_ledger_view(manifest.server) as view:
        report = collect(manifest, view)
        unfinished = {run.run: run for run in report.runs}
        found = [row for row in (_row(entry, unfinished) for entry in view.unsettled())
                 if matches(needle, row.run, row.tool, row.state)]
        ended = view.ended_runs(needle, RUNS_SHOWN)
        rows = found + [_row(entry, unfinished) for entry in ended.newest]
        now = ledger_now_ms(view)
        quotas = tuple(_chart(view, quota, now) for quota in report.quotas)
    rows.sort(key=lambda row: (row.reserved_ms, row.run), reverse=True)
    waiting = tuple(_waiting(run) for run in report.runs if run.doubt is not None)
    server = report.server
    return Overview(server.running, server.pid, manifest.server.journals, waiting, quotas,
                    tuple(rows[:RUNS_SHOWN]), ended.matched + len(found), query, now)


def run_detail(manifest: Manifest, run_id: str) -> tuple[RunRow, WaitingRun | None] | None:
    """The ledger's run `run_id`, read by its key, with status's state (and
    what it waits for) if it is unfinished."""
    with read_ledger_view(manifest.server) as view:
        entry = view.run(run_id)
        if entry is None:
            return None
        if not entry.unsettled:
            return _row(entry, {}), None
        run = Beside.of(manifest).unfinished(entry, view.owners())
    return _row(entry, {run.run: run}), None if run.doubt is None else _waiting(run)


def _waiting(run: UnfinishedRun) -> WaitingRun:
    assert run.doubt is not None
    return WaitingRun(run.run, run.tool, in_doubt(run.doubt), run.doubt.resolve)


def _row(entry: RunEntry, unfinished: Mapping[str, UnfinishedRun]) -> RunRow:
    if entry.unsettled:
        run = unfinished.get(entry.run)
        state = "in_progress" if run is None else run.state
    else:
        state = ended_state(entry)
    return RunRow(entry.run, entry.tool, state, entry.reserved_ms, entry.ended_ms)


def _chart(view: LedgerView, quota: QuotaStatus, now: int) -> QuotaChart:
    window = quota.window_ms
    span = max(1, -(-window // BUCKETS))  # ceiling: the last bucket ends at now
    buckets = [0] * BUCKETS
    for entry in view.in_window(quota.tool, window, now):
        index = BUCKETS - 1 - min(BUCKETS - 1, (now - entry.reserved_ms) // span)
        buckets[index] += entry.calls_used()
    money = None
    if quota.money is not None:
        money = (f"money held {quota.money.held}, spent {quota.money.spent}, "
                 f"limit {quota.money.limit}")
    return QuotaChart(quota.tool, window, now, quota.calls, quota.calls_limit,
                      tuple(buckets), money)
