"""A run's timeline, drawn from its journal (read with shared/journal/reader.py,
the one reader): each op from its intent to its outcome, the prints, a stop,
an operator's answer and the end, in the journal's order.

What a page may show is the `OPERATOR` row of staal.journal.disclosure's
table: no argument values (the journal holds only their hash), no results
(a result may repeat an argument or a secret a service echoed), an action's
failure by its kind alone; the stop and the end with their messages, the
program's frames, prints as printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from staal.errors import LogDamaged
from staal.journal.disclosure import NoDisclosureRule, row
from staal.journal.reader import read_journal
from staal.journal.records import End, Intent, OutcomeRecord, Print, Resolved, Stopped, Value
from staal.records.record import Record
from staal.supervisor.views.disclosure import OPERATOR, action_failure, end_failure, end_frames, printed

EventKind = Literal["op", "value", "print", "stop", "answer", "end"]


@dataclass(frozen=True)
class Event:
    """One row of the timeline: `start_ms` and `end_ms` count from the run's
    start; `end_ms` is None for an op with no outcome yet (in doubt) and
    equals `start_ms` for an instant (a print, a stop, the end)."""

    kind: EventKind
    label: str
    detail: str
    start_ms: int
    end_ms: int | None
    op: int | None = None
    ok: bool | None = None
    # Where the program failed, for the end of a run it ended: its own frames
    # as Python prints them, secrets already redacted in the journal.
    traceback: tuple[str, ...] = ()


@dataclass(frozen=True)
class Timeline:
    run: str
    tool: str
    started_ms: int
    events: tuple[Event, ...]
    # Why there is no timeline, when there is none (no journal, or damaged).
    problem: str | None = None

    @property
    def span_ms(self) -> int:
        ends = [e.end_ms if e.end_ms is not None else e.start_ms for e in self.events]
        return max(ends, default=0)


def timeline(journal: Path, run: str, tool: str) -> Timeline:
    if not journal.exists():
        return Timeline(run, tool, 0, (), "no journal: the run never started, or retention "
                                          "deleted it")
    try:
        state = read_journal(journal)
    except (LogDamaged, OSError) as exc:
        return Timeline(run, tool, 0, (), f"the journal cannot be read: {exc}")
    start = state.header.time
    events: list[Event] = []
    ops: dict[int, int] = {}  # op -> its current event's index, to close it at its outcome
    for record in state.history:
        event = _event(record, start, run)
        if isinstance(record, OutcomeRecord) and record.op in ops:
            opened = events[ops[record.op]]
            events[ops[record.op]] = _closed(opened, record, start)
            continue
        if isinstance(record, Resolved) and record.op in ops:
            # The op's bar ends at the answer: the operator said what the journal could not.
            opened = events[ops[record.op]]
            said = "answered: it happened" if record.happened else "answered: it did not happen"
            events[ops[record.op]] = Event("op", opened.label, opened.detail.replace(
                "no outcome yet", said), opened.start_ms, record.time - start, op=opened.op,
                ok=record.happened)
        if event is None:
            continue
        if isinstance(record, Intent):
            ops[record.op] = len(events)
        events.append(event)
    return Timeline(run, tool, start, tuple(events))


def _event(record: Record, start: int, run: str) -> Event | None:
    """The record's row of the timeline (None: an outcome, which closes its
    op's row); `NoDisclosureRule` for a kind the table has no row for."""
    row(record, OPERATOR)
    if isinstance(record, Intent):
        read = ", a read" if record.read else ""
        return Event("op", f"op {record.op}: {record.action} via {record.param!r}",
                     f"{record.cap}{read}; no outcome yet", record.time - start, None,
                     op=record.op)
    if isinstance(record, Value):
        return Event("value", f"op {record.op}: {record.cap}", "a value, journaled",
                     record.time - start, record.time - start, op=record.op, ok=True)
    if isinstance(record, Print):
        return Event("print", f"print {record.seq}", printed(record, OPERATOR) or "",
                     record.time - start, record.time - start)
    if isinstance(record, Stopped):
        return Event("stop", f"stopped at op {record.op}", record.message, record.time - start,
                     record.time - start, op=record.op)
    if isinstance(record, Resolved):
        said = "it happened" if record.happened else "it did not happen"
        return Event("answer", f"operator's answer for op {record.op}", said,
                     record.time - start, record.time - start, op=record.op, ok=record.happened)
    if isinstance(record, End):
        failure = end_failure(record, run, OPERATOR)
        detail = "" if failure is None else f"{failure[0]}: {failure[1]}"
        return Event("end", f"end: {record.outcome}", detail, record.time - start,
                     record.time - start, ok=record.outcome == "done",
                     traceback=end_frames(record, OPERATOR))
    if isinstance(record, OutcomeRecord):
        return None
    raise NoDisclosureRule(f"the console's timeline has no form for {record.TYPE} records")


def _closed(opened: Event, outcome: OutcomeRecord, start: int) -> Event:
    if outcome.ok:
        detail = opened.detail.replace("no outcome yet", "done")
    else:
        # The kind only (disclosure.py): an action's message may quote its URL
        # or the service's answer; the run's end says what it told the caller.
        kind = action_failure(outcome, OPERATOR)
        said = f"failed: {kind}" if kind else "failed"
        detail = opened.detail.replace("no outcome yet", said)
    return Event("op", opened.label, detail, opened.start_ms, outcome.time - start,
                 op=opened.op, ok=outcome.ok)
