"""A page of one caller's runs, newest first (the runs resources of issue 16
and tasks/list): which runs it lists and where a cursor leaves off, as a
value. The file ledger pages its state in memory (`page_in`, one process
owns it); the PostgreSQL store asks for the page alone, by index
(supervisor/store/postgres/caller_runs.py), and answers the same."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from staal.supervisor.store.entries import RunEntry


@dataclass(frozen=True, slots=True)
class CallerRuns:
    """Up to `limit` of the runs `caller` reserved (its identity hash; None:
    the local client), newest first, past the cursor position `after`
    ("<reserved ms>:<run>"); with `started`, only runs that started (a
    released run never did)."""

    caller: str | None
    started: bool
    limit: int
    after: str | None = None

    def holds(self, entry: RunEntry) -> bool:
        """Whether run `entry` is one this page chooses among."""
        if self.started and entry.state == "released":
            return False
        return entry.caller == self.caller

    def position(self) -> tuple[int, str] | None:
        """The cursor's reserve time and run; a time that is not a number is
        0 (nothing is before it)."""
        if self.after is None:
            return None
        ms, _, run = self.after.partition(":")
        return (int(ms) if ms.isdigit() else 0), run


def page_in(newest_first: Iterable[RunEntry], which: CallerRuns) -> tuple[RunEntry, ...]:
    """`which`'s page of runs given newest first (a whole ledger's)."""
    entries = [e for e in newest_first if which.holds(e)]
    position = which.position()
    if position is not None:
        entries = runs_after(entries, position)
    return tuple(entries[:which.limit])


def runs_after(entries: list[RunEntry], position: tuple[int, str]) -> list[RunEntry]:
    """The entries past a cursor's position: after its run, or, if that run
    is not among them (retention dropped it since), after its time."""
    reserved, run = position
    for i, entry in enumerate(entries):
        if entry.run == run:
            return entries[i + 1:]
    return [e for e in entries if e.reserved_ms < reserved]
