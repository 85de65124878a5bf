"""The invariants (issue 27 item 4), each a function of one state, and the
liveness goal. None reads a rule of the code: they read the rows, the
processes and the ghosts (`Run.actions`, `ends`, `fenced_writes`,
`stolen`), so a broken rule shows up as a state one of them refuses."""

from __future__ import annotations

from collections.abc import Callable

from tests.lease_model.actions import fenced
from tests.lease_model.state import HELD, UP, Config, Proc, State

Invariant = Callable[[State, Config], str | None]


def one_owner(s: State, c: Config) -> str | None:
    """At most one owner per run at a time: of the processes holding a run
    (running or paused), at most one could still have a write of it accepted."""
    for run in range(len(s.runs)):
        owners = [f"instance {i} ({which})"
                  for i in range(c.instances)
                  for which, p in (("cur", s.procs[i]), ("stale", s.stale[i]))
                  if p is not None and any(h[0] == run for h in p.held)
                  and _accepted(s, c, i, p, run)]
        if len(owners) > 1:
            return f"run {run} has owners {owners}"
    return None


def _accepted(s: State, c: Config, i: int, p: Proc, run: int) -> bool:
    return c.variant.skip_append_fence or not fenced(s, i, p, run)


def no_fenced_record(s: State, c: Config) -> str | None:
    """No record (journal row, waiting record, settle or release) accepted
    from a process that was fenced off the run when it wrote."""
    for run, r in enumerate(s.runs):
        if r.fenced_writes:
            return f"run {run}: {r.fenced_writes} rows accepted from a fenced process"
    return None


def one_end(s: State, c: Config) -> str | None:
    """One reserve (a run is created once, by one reserve) and at most one
    settle or release per run."""
    for run, r in enumerate(s.runs):
        if r.ends > 1:
            return f"run {run} ended {r.ends} times"
    return None


def no_resume_without_answer(s: State, c: Config) -> str | None:
    """A run that stopped at an op in doubt is never resumed past it without
    an operator's answer: the op's action happens at most once."""
    for run, r in enumerate(s.runs):
        if r.actions > 1:
            return f"run {run}'s op in doubt ran {r.actions} times (journal {r.journal})"
    return None


def live_keeps_runs(s: State, c: Config) -> str | None:
    """Not one of the issue's five: a live instance renewing on time keeps
    its runs (no takeover of an instance whose lease runs by its own clock),
    and so does one still starting (issue 27 item 6)."""
    for run, r in enumerate(s.runs):
        if r.stolen:
            return (f"run {run} was taken over from an instance alive and renewing on time "
                    "(or still starting)")
    return None


SAFETY: dict[str, Invariant] = {
    "one owner per run": one_owner,
    "no record from a fenced process": no_fenced_record,
    "one reserve, at most one settle or release": one_end,
    "no waiting run resumed without an answer": no_resume_without_answer,
    "a live instance keeps its runs": live_keeps_runs,
}

LIVENESS = "every unfinished run eventually owned by a live instance"


def owned_by_live(s: State, c: Config) -> bool:
    """The liveness goal: every unended run's owner has a process that runs,
    holds its lease and its instance's token."""
    for r in s.runs:
        if r.end:
            continue
        p = s.procs[r.owner]
        if p is None or p.status != UP or p.lease != HELD or not p.token_current:
            return False
    return True
