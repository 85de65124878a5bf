"""A run's journal: the one writer, used by both processes (DESIGN.md
section 5): each record durable before `write` returns, unless the run
context says it may wait for the next synced one; and the last word of a
journal whose run cannot go on (`close_unfinished`). journal.py reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from staal.journal.reader import read_journal
from staal.journal.records import (
    JOURNAL,
    End,
    Header,
    Stopped,
)
from staal.records.appendlog import AppendLog
from staal.records.outcomes import Failure, FailureKind
from staal.records.record import Record
from staal.records.waiting import resolve_on_this_machine
from staal.runtime.clock import SYSTEM_CLOCK, Clock
from staal.runtime.killpoints import kill_point


def resolve_hint(path: str | Path, op: int) -> str:
    """What an operator does about an op in doubt, for a stop's message."""
    return "find out from the service, then run: " + resolve_on_this_machine(path, op)


def close_unfinished(path: str | Path, params: Iterable[str], reason: str,
                     kind: FailureKind = "internal",
                     reopen: Callable[[], JournalWriter] | None = None,
                     cause: str | None = None) -> End | Stopped:
    """The last word of a journal whose run cannot go on (its workers keep
    dying, its worker failed, or its worker was ended by its own limit),
    durable when this returns: the end it has already; else a stop at the
    first op in doubt, since it may have happened and only an operator can
    say (seed 000 invariant 5); else its stop if one still stands; else an
    end failed as `kind` (internal, or budget for a limit) with `reason`,
    and the usage the journal records (`params`: the run's capability
    parameters). `reopen` gives the writer to append with (default: the
    file at `path`; a journal whose records are a store's rows, the
    sink that commits them); `cause`, the kind of the error behind `reason`."""
    journal = read_journal(path)
    if journal.end is not None:
        return journal.end
    doubt = journal.in_doubt()
    if not doubt and journal.stopped is not None:
        return journal.stopped
    with (reopen or (lambda: JournalWriter.reopen(path)))() as writer:
        if doubt:
            message = f"op {doubt[0]} may or may not have happened: {reason}; " + resolve_hint(
                path, doubt[0])
            record: End | Stopped = Stopped(op=doubt[0], message=message, time=writer.now())
        else:
            record = End(outcome="failed", time=writer.now(),
                         failure=Failure(kind, reason, cause=cause), usage=journal.usage(params))
        writer.write(record)
    return record


class JournalSink(Protocol):
    """Where a journal's records go (issue 15): durable when `append` returns
    (unless `sync` is False). The file sink is the journal file itself
    (`AppendLog`); on a shared store the worker's sink sends each record to
    its supervisor, which commits it as a row before it answers
    (worker/runs/journal_sink.py)."""

    # The journal file an operator names to `staal resolve` (on a shared
    # store, the instance's copy).
    @property
    def path(self) -> Path: ...

    def append(self, record: Mapping[str, Any], sync: bool = True) -> None: ...

    def close(self) -> None: ...


class JournalWriter:
    """Appends journal records, each durable before `write` returns unless
    the caller says it may wait for the next synced one."""

    def __init__(self, log: JournalSink, clock: Clock = SYSTEM_CLOCK) -> None:
        self.log = log
        self.clock = clock

    @classmethod
    def create(cls, path: str | Path, header: Header, clock: Clock = SYSTEM_CLOCK) -> JournalWriter:
        log = AppendLog.create(path, first=JOURNAL.encode(header),
                               created=lambda: kill_point("worker", "journal_file"))
        kill_point("worker", "journal")
        return cls(log, clock)

    @classmethod
    def begin(cls, sink: JournalSink, header: Header, clock: Clock = SYSTEM_CLOCK) -> JournalWriter:
        """A new journal on `sink`: its header durable, then the `journal`
        kill point, as for a file (DESIGN.md section 7). `journal_file` comes
        first, as where the file exists with nothing durable in it."""
        kill_point("worker", "journal_file")
        sink.append(JOURNAL.encode(header))
        kill_point("worker", "journal")
        return cls(sink, clock)

    @classmethod
    def reopen(cls, path: str | Path, clock: Clock = SYSTEM_CLOCK) -> JournalWriter:
        log, _ = AppendLog.open(path, decode=JOURNAL.decode)
        return cls(log, clock)

    def now(self) -> int:
        return self.clock.now_ms()

    def write(self, record: Record, sync: bool = True) -> None:
        """Append a record, durable before this returns unless `sync` is
        False: then it becomes durable with the next synced record (the run
        context says which records may wait)."""
        self.log.append(JOURNAL.encode(record), sync=sync)

    def close(self) -> None:
        self.log.close()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
